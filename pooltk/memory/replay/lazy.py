"""torch 2.15's receive buffers on torch 2.11-2.14, for the replay's stock-lazy column.

[Note: emulating lazy receive buffers]
The stock-lazy column replays [Note: per-receive buffers] (pooltk/pool/torch_compat/
per_receive.py) on the installed torch, bound on each stage *object*:

1. the setup calls that fill the receive infos (``_prepare_forward_infra`` /
   ``_prepare_backward_infra``) run with the log skipping their allocations, and afterwards every
   buffer they made becomes a ``meta`` placeholder (2.15 makes none of them). The skipped storages
   must then be gone; a survivor is an error, not a silent undercount;
2. before each receive, each placeholder of the chunk becomes a new buffer on the stage's device
   (charged to the ``post`` phase: a receive buffer);
3. after the compute that consumes them (the forward, the backward, a split backward's weight
   pass) the stage's own reference goes back to a placeholder: the buffer lives exactly as long as
   something else holds it (the forward's graph, the schedule's kept loss, a local of the step).

What stays torch 2.13's: the schedule's step itself, so the locals that hold the previous receive
op (a one-buffer excess 2.15 also measured on 1F1B) are the installed torch's. 2.15's other changes
(sent activations released early, ``max_outstanding_sends``) are not emulated.
"""

from __future__ import annotations

import functools
from typing import Any

from pooltk.memory.errors import MemoryModelError
from pooltk.memory.replay.tracker import StorageLog
from pooltk.pool.torch_compat.bind import Hooks, bind
from pooltk.pool.torch_compat.per_receive import drop_buffers, per_receive_hooks
from pooltk.pool.torch_compat.stage_api import INFRA_METHODS, RECV_INFO_ATTRS, Call, recv_infos


def emulate_lazy(stage: Any, log: StorageLog) -> None:
    """Bind [Note: emulating lazy receive buffers]'s hooks on ``stage`` (a torch stage object)."""
    lacking = [n for n in (*INFRA_METHODS, *RECV_INFO_ATTRS.values()) if not hasattr(stage, n)]
    if lacking:
        raise MemoryModelError(
            "stock-lazy replay",
            found=f"this torch's stage has no {', '.join(lacking)}",
            required="torch 2.11-2.14's receive infos (the emulation of torch 2.15 needs them)",
            fix="leave stock_lazy out of the variants on this torch (on 2.15 stock is lazy).",
        )
    hooks = per_receive_hooks(drop_after_use=True)
    for name, direction in zip(INFRA_METHODS, RECV_INFO_ATTRS):
        hooks[name] = Hooks(
            raw=functools.partial(_setup_made_nothing, log=log, direction=direction)
        )
    bind(stage, hooks, tag="pooltk-lazy")


def _setup_made_nothing(stage: Any, call: Call, proceed: Any, *, log: Any, direction: str) -> Any:
    """Step 1: torch's setup runs unlogged, and what it made becomes placeholders."""
    previous, log.skip_phase, log.skipped = log.context.phase, "setup", []
    log.context.phase = "setup"
    try:
        out = proceed()
        for chunk in list(recv_infos(stage, direction)):
            drop_buffers(stage, direction, chunk)
    finally:
        log.context.phase, log.skip_phase = previous, None
    alive = sum(ref() is not None for ref in log.skipped)
    if alive:
        raise MemoryModelError(
            "stock-lazy replay",
            found=f"{alive} buffer(s) made at stage {stage.stage_index}'s setup still held after "
            "the emulation dropped them",
            required="no holder but the receive infos",
            fix="report this: the installed torch keeps setup buffers elsewhere, so the emulation "
            "would undercount.",
        )
    return out
