"""Live sets for the memory model: walked from the schedule or from the closed forms, and what torch's
lazy receive buffers hold on top of them."""

from __future__ import annotations

import functools
from typing import Literal

from pooltk.analysis.lazy import lazy_holds
from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.shape import PipelineShape
from pooltk.pool.sizing import live_set_1f1b

__all__ = ["LIVE_SOURCES", "LiveSource", "lazy_sets_for", "live_sets_for"]


LiveSource = Literal["schedule", "formula"]
LIVE_SOURCES: tuple[str, ...] = ("schedule", "formula")
"""Where the live-set column comes from. See [Note: live-set sources]."""


@functools.lru_cache(maxsize=1024)
def _walked_live_sets(schedule: str, pp: int, n_microbatches: int, stages_per_rank: int = 1) -> tuple[tuple[int, int], ...]:
    """Per stage (forward, grad) live sets, walked once per (schedule, N, M, vpp) and cached."""
    from pooltk.analysis import lifetimes as schedules

    table = schedules.live_sets(schedule, pp=pp, n_microbatches=n_microbatches, stages_per_rank=stages_per_rank)
    n = pp * stages_per_rank
    return tuple((int(table.get((i, "forward"), 0)), int(table.get((i, "grad"), 0))) for i in range(n))


def _formula_live_sets(schedule: str, pp: int, n_microbatches: int) -> tuple[tuple[int, int], ...]:
    """The closed forms of [Note: live-set sources]."""
    if schedule == "1f1b":
        sets = (live_set_1f1b(pp, i, n_microbatches) for i in range(pp))
        return tuple((s.forward, s.grad) for s in sets)
    return tuple((0 if i == 0 else n_microbatches, 0 if i == pp - 1 else 1) for i in range(pp))


def live_sets_for(shape: PipelineShape, source: LiveSource = "schedule") -> tuple[tuple[int, int], ...]:
    """Per stage ``(forward, grad)`` live sets of ``shape`` from ``source``.

    [Note: live-set sources]
    ``"schedule"`` (the default) walks the schedule's own action order with
    :func:`pooltk.analysis.lifetimes.live_sets`: nothing is assumed about the schedule; the walk is
    cached per (schedule, N, M) but costs ~1 s cold at N=16, M=256 on a laptop-class CPU.
    ``"formula"`` uses the closed forms the walk reproduces -- 1F1B: forward
    ``W = min(M, N - i)`` (0 on stage 0), grad 1 (0 on the last stage)
    (:func:`pooltk.pool.sizing.live_set_1f1b`); GPipe: forward ``M``, grad 1 -- for sweeps over
    thousands of shapes. ``tests/memory`` checks that both sources agree on a grid of shapes.
    """
    if source not in LIVE_SOURCES:
        raise MemoryModelError(
            "live_source", found=repr(source), required=f"one of {', '.join(LIVE_SOURCES)}", fix="use 'schedule' (default)."
        )
    if source == "schedule":
        return _walked_live_sets(shape.schedule, shape.pp, shape.n_microbatches, int(shape.stages_per_rank or 1))
    if shape.multi_stage:
        raise MemoryModelError(
            "live_source", found=f"'formula' for {shape.schedule_name}",
            required="'schedule' for a multi-stage schedule (the closed forms cover 1F1B and GPipe only)",
            fix="use live_source='schedule' (default).",
        )
    return _formula_live_sets(shape.schedule, shape.pp, shape.n_microbatches)


def lazy_sets_for(
    shape: PipelineShape, live: tuple[tuple[int, int], ...], *, released: bool
) -> tuple[tuple[int, int], ...]:
    """Per stage ``(forward, grad)`` sets torch >= 2.15 holds given the live sets ``live``.

    ``released=False``: stock (the last stage keeps all ``M`` forward); ``True``: with pooltk's
    last-stage release (the live set). See [Note: lazy receive buffers] in :mod:`pooltk.analysis.lazy`.
    """
    n = shape.num_stages
    by_key = {(i, d): live[i][j] for i in range(n) for j, d in enumerate(DIRECTIONS)}
    held = lazy_holds(by_key, n, shape.n_microbatches, released=released)
    return tuple((held[(i, "forward")], held[(i, "grad")]) for i in range(n))
