"""``fresh``: stock torch with every receive landing in a newly allocated buffer (torch 2.15's semantics).

The reference pooltk is judged against besides stock. Stock torch <= 2.14 hands microbatch
``c`` the same receive buffer in every step, so what a model keeps of its received input
(a hook on it, a tensor kept across a step) sees that reuse; torch 2.15 allocates each
receive buffer just before its receive, so nothing a model holds is ever overwritten. A
pool that is right gives what a fresh buffer per receive gives.

[Note: fresh buffers]
``fresh_stage(stage)`` binds two wrappers on the stage *object* (never on torch's classes,
so it composes with nothing and ``unfresh_stage`` restores the stage exactly):

- ``get_fwd_recv_ops(c)`` / ``get_bwd_recv_ops(c)``: before torch builds the receive ops of
  chunk ``c``, every non-root ``_RecvInfo`` buffer of that chunk is replaced by
  ``torch.empty_like`` of itself (same shape, dtype, strides, device and ``requires_grad``
  flag; a new storage, no hooks, no ``.grad``). The old buffer stays with whoever holds it
  (the autograd graph, a list, a hook) and is never written again. The ``_RecvInfo`` objects
  themselves are kept (torch reads ``args_recv_info[0]`` for sends and validation).
- ``set_local_bwd_input`` (V schedules, same-rank handoff): where torch would ``zero_()``
  the existing buffer for a ``None`` gradient, the buffer is first replaced the same way, so
  the zeroing lands in a new buffer too.

Per layout family (:func:`pooltk.pool.adapters.detect`, by feature):

- ``prepare-infra`` (torch <= 2.11) and ``setup-recv-info`` (2.12-2.14): buffers are made at
  setup, one per microbatch, and reused every step: the wrappers above apply (stage-0 inputs
  are ``_RootArgPlaceholder`` objects without a buffer on <= 2.11 and ``is_root_arg`` infos
  on 2.12+; both are skipped);
- ``lazy`` (2.15): torch already allocates every receive buffer right before its receive and
  hands it to the computation when consumed, so stock *is* fresh: nothing is bound and the
  report says so.

Unknown layouts: :class:`FreshError` naming what was found (a reference must never be a
silent no-op). Cost: one allocation per receive, like torch 2.15; the memory of a buffer
lives as long as its holders (the ``_RecvInfo`` keeps the last one until the chunk's next
receive).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from pooltk.pool.adapters.stage_api import call_arg

__all__ = ["FreshError", "FreshStage", "fresh_stage", "is_fresh", "unfresh_stage"]

_WRAPPED = ("get_fwd_recv_ops", "get_bwd_recv_ops", "set_local_bwd_input")
_MARK = "_pooltk_fresh"


class FreshError(RuntimeError):
    """pooltk could not make this stage's receives land in fresh buffers (found / required / fix)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FreshStage:
    """What :func:`fresh_stage` did to one stage."""

    stage: int
    """The stage's index."""
    layout: str
    """The torch layout family found (``prepare-infra``, ``setup-recv-info``, ``lazy``)."""
    bound: bool
    """True when wrappers were bound (eager families); False on ``lazy``, where stock already is fresh."""
    note: str
    """One line saying why."""


def _swap_buffers(infos: Any, posted: list | None = None, direction: str = "forward") -> None:
    """Give every non-root receive buffer of one chunk a new storage (see [Note: fresh buffers])."""
    for info in infos or ():
        if getattr(info, "is_root_arg", False):
            continue
        buf = getattr(info, "buffer", None)
        if isinstance(buf, torch.Tensor) and not buf.is_meta:
            info.buffer = torch.empty_like(buf.detach()).requires_grad_(buf.requires_grad)
            if posted is not None:
                posted.append((direction, info.buffer))


def _bind(stage: Any, posted: list | None) -> None:
    cls = type(stage)
    get_fwd = cls.get_fwd_recv_ops
    get_bwd = cls.get_bwd_recv_ops

    @functools.wraps(get_fwd)
    def get_fwd_recv_ops(*args: Any, **kwargs: Any) -> Any:
        chunk = call_arg("get_fwd_recv_ops", "fwd_chunk_id", args, kwargs)
        _swap_buffers(stage.args_recv_info.get(chunk), posted, "forward")
        return get_fwd(stage, *args, **kwargs)

    @functools.wraps(get_bwd)
    def get_bwd_recv_ops(*args: Any, **kwargs: Any) -> Any:
        if stage.has_backward and not stage.is_last:
            chunk = call_arg("get_bwd_recv_ops", "bwd_chunk_id", args, kwargs)
            _swap_buffers(stage.grad_recv_info.get(chunk), posted, "grad")
        return get_bwd(stage, *args, **kwargs)

    bound = {"get_fwd_recv_ops": get_fwd_recv_ops, "get_bwd_recv_ops": get_bwd_recv_ops}
    set_local = getattr(cls, "set_local_bwd_input", None)
    if callable(set_local):

        @functools.wraps(set_local)
        def set_local_bwd_input(
            next_stage_bwd_outputs: Any, mb_index: int, *args: Any, **kwargs: Any
        ) -> Any:
            infos = stage.grad_recv_info.get(mb_index, ())
            for info, tensor in zip(infos, next_stage_bwd_outputs or ()):
                if tensor is None:
                    _swap_buffers((info,))
            return set_local(stage, next_stage_bwd_outputs, mb_index, *args, **kwargs)

        bound["set_local_bwd_input"] = set_local_bwd_input
    for name, fn in bound.items():
        stage.__dict__[name] = fn
    stage.__dict__[_MARK] = tuple(bound)


def fresh_stage(stage: Any, *, posted: list | None = None) -> FreshStage:
    """Make every receive of ``stage`` land in a newly allocated buffer; see [Note: fresh buffers].

    Call it on a built ``PipelineStage`` (or a tracing-frontend stage) before its schedule's
    first step, with pooltk not installed (fresh is a stock reference, not a pool).
    ``posted``: a list that receives ``(direction, buffer)`` for every buffer handed to a
    receive (for checks: it keeps them all alive, so memory grows with every receive).

    Raises:
        FreshError: the torch layout is unknown, the stage is pooled, or it is already fresh.
    """
    from pooltk.pool.adapters import detect

    found = detect()
    index = getattr(stage, "stage_index", None)
    if found.layout is None:
        raise FreshError(
            f"pooltk fresh: stage {index}: found no known receive-buffer layout in this torch "
            f"({found.reason}); required prepare-infra, setup-recv-info or lazy. "
            "Fix: run the fresh reference on a torch pooltk knows (`pooltk probe`)."
        )
    if _MARK in stage.__dict__:
        raise FreshError(
            f"pooltk fresh: stage {index}: found it already fresh; required a stock stage. "
            "Fix: call fresh_stage once per stage."
        )
    from pooltk.pool.state import stage_state

    pool_state = stage_state(stage)
    if pool_state is not None and pool_state.rings():
        raise FreshError(
            f"pooltk fresh: stage {index}: found a pooltk ring on it; required a stock stage "
            "(fresh is the reference a pool is judged against). Fix: pooltk.uninstall() first."
        )
    layout = found.layout
    if getattr(layout, "per_receive", False):
        return FreshStage(
            stage=index,
            layout=layout.name,
            bound=False,
            note=f"layout {layout.name!r}: torch already allocates each receive buffer right before "
            "its receive, so stock is fresh; nothing bound",
        )
    missing = [
        m for m in ("get_fwd_recv_ops", "get_bwd_recv_ops") if not callable(getattr(stage, m, None))
    ]
    if missing or not hasattr(stage, "args_recv_info"):
        raise FreshError(
            f"pooltk fresh: stage {index}: found no {', '.join(missing) or 'args_recv_info'} on "
            f"{type(stage).__name__}; required a torch.distributed.pipelining stage. "
            "Fix: pass the PipelineStage object the schedule drives."
        )
    _bind(stage, posted)
    return FreshStage(
        stage=index,
        layout=layout.name,
        bound=True,
        note=f"layout {layout.name!r}: every receive post gets a new buffer (empty_like), "
        "the previous one stays with its holders",
    )


def is_fresh(stage: Any) -> bool:
    """True when :func:`fresh_stage` bound its wrappers on ``stage``."""
    return _MARK in getattr(stage, "__dict__", {})


def unfresh_stage(stage: Any) -> bool:
    """Remove the wrappers :func:`fresh_stage` bound; True if there were any."""
    names = stage.__dict__.pop(_MARK, None)
    if names is None:
        return False
    for name in names:
        stage.__dict__.pop(name, None)
    return True
