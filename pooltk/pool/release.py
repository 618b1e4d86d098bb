"""What the schedule keeps to the step's end, let go of its graph once nothing needs it.

[Note: releasing what the schedule keeps]
torch's schedules keep every microbatch's loss (``_internal_losses``) and the last stage every
output (``output_chunks``) until the step ends; their graphs' ``AccumulateGrad`` nodes hold the
received input (all M inputs on torch 2.15, re-homed slots on a ring). Right after a chunk's
backward (its weight pass, if split) the kept loss and output become the same values without
their graph. The loss is detached in place, or replaced in the schedule's list if it is a view
(else kept, the reason logged once); outputs are replaced in ``output_chunks``, so an output the
model itself kept keeps its graph (a real holder). ``PoolConfig(release=False)`` turns it off.

[Note: forward-only steps]
``schedule.eval()`` outside ``no_grad`` still builds every microbatch's graph, and torch keeps it
to the step's end: each stage's ``fwd_cache`` entry (no backward pops it), the last stage's
``output_chunks`` and losses. Those graphs hold the received inputs, so every post re-homed and
the ring saved nothing (measured, 1F1B pp4 M8: in an eval step stages 1-3 received into 8
storages each, as many as stock, against rings of 5, 4 and 3). Nothing runs backward through
them, so on every pooled stage (unless ``PoolConfig(release=False)``), right after a chunk's
forward, the output the schedule gets, the one ``fwd_cache`` keeps and the last stage's
``output_chunks`` entry become the same values without the graph. Values, sends, losses and
merged outputs are unchanged.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from pooltk.pool.events import say
from pooltk.pool.torch_compat.tensor_counts import is_view
from pooltk.pool.torch_compat.stage_api import (
    keep_forward,
    output_chunks,
    replace_by_identity,
    schedule_losses,
)

_VIEW_LOSS = (
    "the loss is a view, and pooltk cannot replace it where the schedule keeps it (the schedule "
    "was not seen at setup, or its list does not hold this loss), so its graph holds the received "
    "input until the step ends (copy on conflict re-homes the slot); fix: return a loss that is "
    "not a view from loss_fn (e.g. .sum() or .mean())"
)


def detached(value: Any) -> Any:
    """``value`` with every tensor in it (tuples, lists, dicts) replaced by ``t.detach()``."""
    if isinstance(value, torch.Tensor):
        return value.detach() if value.grad_fn is not None or value.requires_grad else value
    if isinstance(value, tuple):
        items = [detached(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [detached(v) for v in value]
    if isinstance(value, dict):
        out = copy.copy(value)  # its own type and extras (a defaultdict's factory)
        for k, v in value.items():
            out[k] = detached(v)
        return out
    return value


def start_release(stage: Any, state: Any, layout: str | None) -> None:
    """Turn the release on for a last stage with a backward (said once per stage)."""
    state.release = True
    say(state, "released", stage=stage.stage_index, layout=layout)


def release_chunk(stage: Any, state: Any, chunk: int, loss: Any) -> None:
    """``chunk``'s backward is complete: its kept loss and output let go of their graph."""
    output = state.outputs.pop(chunk, None)
    if output is not None:
        replace_by_identity(output_chunks(stage), output, detached(output))
    if isinstance(loss, torch.Tensor) and loss.grad_fn is not None:
        if not is_view(loss):  # the object itself: the schedule's list and its step both hold it
            loss.detach_()
        else:
            schedule = state.decision.schedule_object() if state.decision is not None else None
            if not replace_by_identity(schedule_losses(schedule), loss, loss.detach()):
                say(state, "kept-graph", stage=stage.stage_index, reason=_VIEW_LOSS)


def forward_only(stage: Any, chunk: int, cached: tuple[tuple, list] | None, output: Any) -> Any:
    """A forward-only step ran ``chunk``: its output without the graph, to hand the schedule, and
    its ``fwd_cache`` entry ``cached`` likewise ([Note: forward-only steps])."""
    if cached is not None:
        keep_forward(stage, chunk, (detached(cached[0]), cached[1]))
    values = detached(output)
    if stage.is_last:
        replace_by_identity(output_chunks(stage), output, values)
    return values
