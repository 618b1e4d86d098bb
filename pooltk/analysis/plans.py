"""Live sets for a running schedule object, from its own action order
(``install(schedule="auto")``).

[Note: auto rings]
A schedule outside the allowlist is pooled when pooltk can analyse it: the receive lifetimes of its
lowered action order (:mod:`pooltk.analysis.lifetimes`) give, per (stage, direction), the smallest
ring K whose ``c mod K`` slots never overwrite a live buffer; the pool's ring is that plus slack (at
most M, :func:`pooltk.pool.ring.ring_size`, [Note: ring sizes]). The analysis runs for the
schedule's class and shape, then is checked against the object's own ``pipeline_order_with_comms``
where it has one, so an object whose order was replaced (a CSV, a hand-edited list) is refused. A
(stage, direction) fed by a same-rank handoff gets no buffers at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pooltk.analysis.catalog import ScheduleAnalysisError, resolve_schedule
from pooltk.analysis.lifetimes import DIRECTIONS, ScheduleShape, analyse, min_safe_ring
from pooltk.analysis.programs import rank_events

__all__ = ["RingPlan", "plan_rings"]


@dataclass(frozen=True, slots=True)
class RingPlan:
    """What every stage of one schedule shape needs, derived from its action order (the pool sizes K
    from it)."""

    schedule: str
    n_microbatches: int
    min_safe: dict
    """Smallest safe ``c mod K`` ring per (stage, direction) (0: no receives, the direction stays
    stock): the live set K is sized from (:func:`pooltk.pool.ring.ring_size`)."""
    handoff: frozenset = frozenset()
    """(stage, direction) pairs fed by a same-rank handoff (V schedules): no receive buffers at
    all."""
    program: Any = field(default=None, compare=False, repr=False)
    """The analysed :class:`~pooltk.analysis.programs.Program` (for rank-shared rings)."""
    spans: tuple = field(default=(), compare=False, repr=False)
    """Its receive lifetimes."""


def plan_rings(schedule: object) -> RingPlan:
    """Analyse the schedule object driving a setup. See [Note: auto rings].

    Raises:
        ScheduleAnalysisError: the schedule cannot be analysed (the message says why).
    """
    cls = type(schedule)
    resolve_schedule(cls)  # refuses custom runtime (CSV) schedules, base classes, step overrides
    n_mb = int(schedule._n_microbatches)
    num_stages = int(schedule._num_stages)
    pp = int(getattr(schedule, "pp_group_size", num_stages))
    forward_only = not bool(getattr(schedule, "_has_backward", True))
    prog, spans = analyse(
        ScheduleShape(
            schedule=cls,
            pp=pp,
            n_microbatches=n_mb,
            stages_per_rank=num_stages // pp,
            forward_only=forward_only,
            defer_pp_recv=bool(getattr(schedule, "_defer_pp_recv", False)),
        )
    )
    order = getattr(schedule, "pipeline_order_with_comms", None)
    if isinstance(order, dict) and order:
        rank = int(getattr(schedule, "rank", 0))
        mine = rank_events(cls.__name__, rank, order.get(rank, []), forward_only=forward_only)
        if _actions(mine) != _actions(prog.events.get(rank, ())):
            raise ScheduleAnalysisError(
                f"{cls.__name__}: found an action order on rank {rank} that differs from the one "
                "torch builds for its class and shape (a custom or loaded list?); required torch's "
                "own order to vouch for it."
            )
    safe, handoff = _stage_needs(prog, spans, forward_only)
    return RingPlan(
        schedule=cls.__name__,
        n_microbatches=n_mb,
        min_safe=safe,
        handoff=handoff,
        program=prog,
        spans=tuple(spans),
    )


def _stage_needs(prog: Any, spans: tuple, forward_only: bool) -> tuple[dict, frozenset]:
    """Per (stage, direction): its smallest safe ring; and which are fed by a same-rank handoff
    (a neighbour stage on the same rank; none for gradients in a forward-only step)."""
    safe, handoff = {}, set()
    s2r = prog.stage_to_rank
    for stage in range(prog.num_stages):
        for direction in DIRECTIONS:
            safe[(stage, direction)] = min_safe_ring(spans, stage, direction, prog.n_microbatches)
            neighbour = stage - 1 if direction == "forward" else stage + 1
            if (
                neighbour in s2r
                and s2r[neighbour] == s2r[stage]
                and not (forward_only and direction == "grad")
            ):
                handoff.add((stage, direction))
    return safe, frozenset(handoff)


def _actions(events: tuple) -> list[tuple[str, int, int]]:
    """What a rank does, in order, without the step positions (sub-actions share one)."""
    return [(e.kind, e.stage, e.microbatch) for e in events]
