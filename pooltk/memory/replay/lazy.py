"""torch 2.15's receive buffers on torch 2.11-2.14: a fresh buffer per receive, dropped when the stage consumes it.

[Note: emulating lazy receive buffers]
torch 2.15 allocates each receive buffer just before its receive is posted and hands it to the
stage when the chunk's compute consumes it; the stage keeps no reference of its own
(``_recv_buffers.py``: ``allocate_buffer`` in ``_get_recv_ops``, ``take_buffer`` when retrieved;
``../shared/reference/torch-layouts.md``). The stock-lazy column replays that on the installed
torch by binding wrappers on each stage *object*:

1. the setup calls that fill the receive infos (``_prepare_forward_infra`` /
   ``_prepare_backward_infra``) run with the log skipping their allocations, and afterwards
   every buffer they made is replaced by a ``meta`` placeholder of the same shape, dtype and
   ``requires_grad`` (no memory). The skipped storages must then be gone; a survivor is an error,
   not a silent undercount. 2.15 makes none of these buffers, so none is counted;
2. ``get_fwd_recv_ops(c)`` / ``get_bwd_recv_ops(c)``: before torch builds chunk ``c``'s receive ops,
   each placeholder of that chunk becomes a new buffer on the stage's device (charged to the
   ``post`` phase: a receive buffer);
3. after ``forward_one_chunk(c)`` (forward buffers) and after ``backward_one_chunk(c)`` (gradient
   buffers; after ``backward_weight_one_chunk(c)`` too, for a split backward) the stage's own
   reference goes back to a placeholder. The buffer lives on exactly as long as something else
   holds it: the forward's autograd graph, the schedule's kept loss, a local in torch's step.

What stays torch 2.13's: the schedule's step itself, so the locals that hold the previous
receive op (the one-buffer excess 2.15 measured on 1F1B, [Note: lazy receive buffers] in
:mod:`pooltk.analysis.lazy`) are the installed torch's. 2.15's other changes (sent activations
released early, ``max_outstanding_sends``) are not emulated.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from pooltk.memory.errors import MemoryModelError
from pooltk.memory.replay import seams
from pooltk.memory.replay.tracker import StorageLog

__all__ = ["emulate_lazy"]


def _placeholder(buf: torch.Tensor) -> torch.Tensor:
    return torch.empty(buf.shape, dtype=buf.dtype, device="meta").requires_grad_(buf.requires_grad)


def _infos(stage: Any, direction: str, chunk: int) -> tuple[Any, ...]:
    return tuple(getattr(stage, seams.RECV_INFOS[direction]).get(chunk, ()))


def _to_placeholders(stage: Any, direction: str, chunk: int) -> None:
    for info in _infos(stage, direction, chunk):
        if (
            not seams.is_root_info(info)
            and isinstance(info.buffer, torch.Tensor)
            and info.buffer.device.type != "meta"
        ):
            info.buffer = _placeholder(info.buffer)


def _fresh(stage: Any, direction: str, chunk: int) -> None:
    device = torch.device(stage.device)
    for info in _infos(stage, direction, chunk):
        if (
            not seams.is_root_info(info)
            and isinstance(info.buffer, torch.Tensor)
            and info.buffer.device.type == "meta"
        ):
            ph = info.buffer
            info.buffer = torch.empty(ph.shape, dtype=ph.dtype, device=device).requires_grad_(
                ph.requires_grad
            )


def emulate_lazy(stage: Any, log: StorageLog) -> None:
    """Bind [Note: emulating lazy receive buffers]'s wrappers on ``stage`` (an object of torch's stage classes)."""
    lacking = seams.missing(stage, lazy=True)
    if lacking:
        raise MemoryModelError(
            "stock-lazy replay",
            found=f"this torch's stage has no {', '.join(lacking)}",
            required="torch 2.11-2.14's receive infos (the emulation of torch 2.15 needs them)",
            fix="leave stock_lazy out of the variants on this torch (on 2.15 the stock replay is lazy).",
        )

    def setup(name: str, direction: str) -> None:
        original = getattr(stage, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            previous, log.skip_phase, log.skipped = log.context.phase, "setup", []
            log.context.phase = "setup"
            try:
                out = original(*args, **kwargs)
                for chunk in list(getattr(stage, seams.RECV_INFOS[direction])):
                    _to_placeholders(stage, direction, chunk)
            finally:
                log.context.phase, log.skip_phase = previous, None
            alive = sum(ref() is not None for ref in log.skipped)
            if alive:
                raise MemoryModelError(
                    "stock-lazy replay",
                    found=f"{alive} buffer(s) made at stage {stage.stage_index}'s setup still held "
                    "after the emulation dropped them",
                    required="no holder but the receive infos",
                    fix="report this: the installed torch keeps setup buffers elsewhere, so the emulation would undercount.",
                )
            return out

        setattr(stage, name, wrapper)

    setup(seams.SETUP_METHODS[0], "forward")
    setup(seams.SETUP_METHODS[1], "grad")

    def before(name: str, direction: str) -> None:
        original = getattr(stage, name)

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _fresh(stage, direction, seams.chunk_of(args, kwargs))
            return original(*args, **kwargs)

        setattr(stage, name, wrapper)

    before("get_fwd_recv_ops", "forward")
    before("get_bwd_recv_ops", "grad")

    def after(name: str, direction: str) -> None:
        original = getattr(stage, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            _to_placeholders(stage, direction, seams.chunk_of(args, kwargs))
            return out

        setattr(stage, name, wrapper)

    after("forward_one_chunk", "forward")
    after("backward_one_chunk", "grad")
    after("backward_weight_one_chunk", "grad")
