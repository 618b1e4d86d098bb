"""After a last-stage microbatch's backward, let what the schedule keeps drop its autograd graph.

[Note: releasing what the schedule keeps]
torch's schedules keep every microbatch's loss (the schedule's ``_internal_losses``) and the last
stage keeps every output (``stage.output_chunks``) until the step ends, to hand them to the user
(``step(losses=...)`` and the merged output). After a microbatch's backward its autograd graph is
still alive through them: saved tensors are freed, the nodes are not, and the graph's
``AccumulateGrad`` node for the received input holds that input, so its storage. On the last
stage that keeps every received input of the step alive:

- on eager layouts (torch <= 2.14) copy on conflict ([Note: copy on conflict] in ring.py) rightly
  sees someone else holding a slot's storage and re-homes it: the last stage held the ring plus
  about (M - K) / 2 re-homed sets per step, and no slot kept its address;
- on the lazy layout (torch 2.15) the last stage keeps all M forward buffers until step end, where
  every other stage holds only its live set.

So right after a chunk's full backward (for a split backward, after its weight pass: the graph is
still needed until then) the pool replaces the schedule's entry for that loss, and the stage's
entry for that output, by the same tensors without their graph (``detach()``: same storage, same
bits, no ``grad_fn``). The graph and the received input go as soon as nothing else holds them.
What the user gets is bit for bit the same values; the losses from ``step(losses=...)`` and the
merged output carry no graph (``requires_grad`` False), which nothing could use anyway: the graph's
saved tensors were already freed by the backward. Outputs are replaced in
``output_chunks``, never detached in place, so an output the user's own code kept (stored by the
model) keeps its graph: that is a real holder, and copy on conflict re-homes the slot it holds, as
before. The loss object itself is detached in place (``detach_()``, as torch detaches the last
stage's outputs): besides the schedule's list, the step's own local variable holds it until the
next backward, which with a one-slot ring is after the next receive is posted (measured: every
re-post re-homed at slack 0 while only the list entry was replaced). A loss that is a view cannot
be detached in place; it is replaced in the schedule's list where the schedule was seen at setup
(eager layouts; the lazy layout never reads the call stack, since reading a running frame's locals
pins them until it returns, measured as one more live buffer per stage).

The graph is kept (and the reason logged once) only for a loss that is a view with no schedule to
find it in. Turning the release off: ``PoolConfig(release=False)``.
"""

from __future__ import annotations

from typing import Any

import torch

from pooltk.pool.adapters.stage_api import output_chunks, schedule_losses
from pooltk.pool.events import emit, kept_graph_event, released_event
from pooltk.pool.state import StageState

__all__ = ["detached", "release_chunk", "start"]


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
        return type(value)((k, detached(v)) for k, v in value.items())
    return value


def start(stage: Any, state: StageState, layout: str | None) -> None:
    """Turn the release on for a last stage with a backward (logged once per stage)."""
    state.release = True
    if ("released",) not in state.said:
        state.said.add(("released",))
        emit(state.report.events if state.report is not None else None,
             released_event(stage.stage_index, layout))


def _replace_by_identity(kept: list | None, old: Any, new: Any) -> bool:
    if kept is None:
        return False
    for i in range(len(kept) - 1, -1, -1):
        if kept[i] is old:
            kept[i] = new
            return True
    return False


def _keep(stage: Any, state: StageState, reason: str) -> None:
    state.kept_graphs += 1
    key = ("kept-graph", reason)
    if key not in state.said:
        state.said.add(key)
        emit(state.report.events if state.report is not None else None, kept_graph_event(stage.stage_index, reason))


def release_chunk(stage: Any, state: StageState, chunk: int, loss: Any) -> None:
    """``chunk``'s backward is complete: drop the graph of its kept loss and kept output."""
    output = state.outputs.pop(chunk, None)
    if output is not None:
        _replace_by_identity(output_chunks(stage), output, detached(output))
    if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
        state.released += 1
        return
    if not loss._is_view():  # the object itself: the schedule's list and its step's local both hold it
        loss.detach_()
        state.released += 1
        return
    schedule = state.observed() if state.observed is not None else None
    losses = schedule_losses(schedule) if schedule is not None else None
    if losses is not None and _replace_by_identity(losses, loss, loss.detach()):
        state.released += 1
        return
    _keep(stage, state, "the loss is a view (it cannot be detached in place) and the schedule that keeps it was not "
                        "seen, so its graph holds the received input until the step ends (copy on conflict re-homes "
                        "the slot). Fix: return a loss that is not a view from loss_fn (e.g. .sum() or .mean())")
