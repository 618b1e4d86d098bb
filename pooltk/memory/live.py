"""A pipeline shape's receive-buffer records, asked of the one source (:func:`pooltk.analysis.stage_sets.receive_sets`).

[Note: live-set sources]
``"schedule"`` (the default) walks the schedule's own action order: nothing is assumed about the
schedule; the walk is cached per (schedule, N, M, vpp) and costs about a second cold at N=16,
M=256. ``"formula"`` uses the closed forms the walk reproduces (1F1B: forward ``W = min(M, N - i)``,
grad 1; GPipe: forward ``M``, grad 1; :func:`pooltk.analysis.stage_sets.formula_live`) for sweeps
over thousands of shapes. ``tests/memory`` checks that both sources agree on a grid of shapes.
This module only turns a :class:`~pooltk.memory.shape.PipelineShape` into that call and a refusal
into a :class:`~pooltk.memory.errors.MemoryModelError`; it computes nothing itself.
"""

from __future__ import annotations

from pooltk._validate import InputError
from pooltk.analysis.catalog import ScheduleAnalysisError
from pooltk.analysis.stage_sets import LIVE_SOURCES, LiveSource, ReceiveSets, receive_sets
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.shape import PipelineShape

__all__ = ["LIVE_SOURCES", "LiveSource", "ReceiveSets", "live_sets_for", "receive_rows"]


def receive_rows(shape: PipelineShape, source: LiveSource = "schedule") -> tuple[ReceiveSets, ...]:
    """The :class:`~pooltk.analysis.stage_sets.ReceiveSets` of every (stage, direction) of ``shape``.

    See [Note: live-set sources]. A shape torch's schedule refuses, an unknown source, or the
    closed forms asked of a multi-stage schedule is a :class:`MemoryModelError` naming the reason.
    """
    try:
        return receive_sets(
            shape.schedule_name,
            pp=shape.pp,
            n_microbatches=shape.n_microbatches,
            stages_per_rank=int(shape.stages_per_rank or 1),
            source=source,
        )
    except ScheduleAnalysisError as exc:
        raise MemoryModelError(
            f"shape under {shape.schedule_name}",
            found=shape.describe(),
            required=f"a shape torch's schedule accepts ({exc})",
            fix="change the microbatches or stages per rank as the reason says.",
        ) from exc
    except InputError as exc:
        raise MemoryModelError(
            "live_source", found=exc.found, required=exc.required, fix=exc.fix or ""
        ) from None


def live_sets_for(
    shape: PipelineShape, source: LiveSource = "schedule"
) -> tuple[tuple[int, int], ...]:
    """Per stage ``(forward, grad)`` live sets of ``shape``: a view of :func:`receive_rows`."""
    rows = receive_rows(shape, source)
    return tuple((rows[2 * i].live, rows[2 * i + 1].live) for i in range(len(rows) // 2))
