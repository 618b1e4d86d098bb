"""Receive-buffer sets per (stage, direction): the one record, and the one way of getting live sets.

[Note: one source of live sets]
Every number of receive-buffer *sets* pooltk shows comes from :func:`receive_sets`, which returns
one :class:`ReceiveSets` per (stage, direction), stage-major, forward before grad:

- ``stock``: what torch 2.11-2.14 pre-allocates (:func:`stock_count`);
- ``live``: the most receive buffers live at once, walked from the schedule's own action order
  (:func:`pooltk.analysis.lifetimes.live_sets_of`), or from the closed forms the walk reproduces
  (``source="formula"``: 1F1B forward ``W = min(M, N - i)`` (0 on stage 0), grad 1 (0 on the last
  stage); GPipe forward ``M``, grad 1) for sweeps over thousands of shapes;
- ``ring_min``: the smallest safe ``c mod K`` ring (:func:`pooltk.analysis.lifetimes.min_safe_ring`;
  the live set wherever buffers are posted and released in microbatch order, as under 1F1B);
- ``stock_lazy`` / ``lazy_released``: what torch 2.15's per-receive buffers hold, without and
  with pooltk's last-stage release (:func:`lazy_holds`, [Note: lazy receive buffers]).

The ring a pool keeps is :func:`pooltk.pool.ring.ring_size` of ``ring_min``; bytes are
sets times the set bytes of the boundary (the memory model, :mod:`pooltk.memory.model`, and the
whole-stage replay, :mod:`pooltk.memory.replay`, both read these records). It lives here, below the
pool, so the pool, the memory model and the analysis tables all ask one function.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from pooltk._validate import InputError, check_choice, check_int
from pooltk.analysis.lifetimes import DIRECTIONS, Direction, analyse, live_sets_of, min_safe_ring
from pooltk.analysis.programs import ScheduleShape

if TYPE_CHECKING:
    from pooltk.analysis.lifetimes import BufferLifetime
    from pooltk.analysis.programs import Program

__all__ = [
    "LIVE_SOURCES",
    "lazy_holds",
    "LiveSource",
    "ReceiveSets",
    "cache_clear",
    "formula_live",
    "receive_sets",
    "stock_count",
]

LiveSource = Literal["schedule", "formula"]
LIVE_SOURCES: tuple[str, ...] = ("schedule", "formula")
"""Where ``live`` and ``ring_min`` come from: the walked action order, or the closed forms (1F1B,
GPipe)."""

_FORMULA_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiveSets:
    """Receive-buffer sets of one stage in one direction. See [Note: one source of live sets]."""

    stage: int
    """Stage index ``i`` in ``[0, stages)``."""
    direction: Direction
    """``"forward"`` (activations received) or ``"grad"`` (gradients received)."""
    rank: int
    """Rank that runs the stage."""
    handoff: bool
    """True where a same-rank handoff (the V schedules' turn) feeds this direction: nothing is
    received."""
    stock: int
    """Sets torch 2.11-2.14 pre-allocates: ``M``, or 0 where nothing is received (a handoff
    included: stock still allocates)."""
    live: int
    """Most sets live at once (0 where nothing is received)."""
    ring_min: int
    """Smallest safe ``c mod K`` ring (0 where nothing is received)."""
    stock_lazy: int
    """Sets torch >= 2.15 holds at its peak: the live set, but all ``M`` forward on the last
    stage."""
    lazy_released: int
    """Sets torch >= 2.15 holds with pooltk's last-stage release: the live set."""


def stock_count(
    num_stages: int,
    stage_index: int,
    direction: Direction | str,
    n_microbatches: int,
    *,
    forward_only: bool = False,
) -> int:
    """Sets stock torch 2.11-2.14 pre-allocates for a (stage, direction): ``M``, or 0 where nothing
    is received.

    Stage 0 receives no activations (its inputs are the root arguments), the last stage no
    gradients (it computes them from the loss), and a forward-only step no gradients at all.
    """
    if direction == "forward":
        return 0 if stage_index == 0 else n_microbatches
    return 0 if (forward_only or stage_index == num_stages - 1) else n_microbatches


def formula_live(
    num_stages: int,
    stage: int,
    direction: Direction | str,
    n_microbatches: int,
    *,
    gpipe: bool = False,
) -> int:
    """The closed form of the live set of one (stage, direction): 1F1B (``gpipe=False``) or GPipe.

    1F1B forward ``W = min(M, N - i)`` (0 on stage 0), grad 1 (0 on the last stage); GPipe forward
    ``M``. ``tests/schedules`` and ``tests/memory`` check it against the walk on a grid of shapes.
    """
    check_int("num_stages", num_stages, low=1)
    check_int("n_microbatches", n_microbatches, low=1)
    check_int(
        "stage",
        stage,
        low=0,
        high=num_stages - 1,
        fix=f"stages of a {num_stages}-stage pipeline are 0..{num_stages - 1}.",
    )
    if direction == "forward":
        if stage == 0:
            return 0
        return n_microbatches if gpipe else min(n_microbatches, num_stages - stage)
    return 0 if stage == num_stages - 1 else 1


# [Note: lazy receive buffers]
# From torch 2.15 each receive buffer is allocated right before its receive and let go once the
# stage consumed it ([Note: per-receive buffers] in pooltk/pool/torch_compat/per_receive.py), so
# stock torch holds only the receive live set, except on the last stage's forward direction,
# which holds all M: the schedule keeps every microbatch's loss (``_internal_losses``) until the
# step ends, and the loss's graph keeps the ``AccumulateGrad`` node of the received leaf, and so
# its storage. pooltk's last-stage release leaves the live set everywhere. The live set is a lower
# bound by at most one buffer: torch's step binds each ``get_*_recv_ops`` result to a local that
# still holds the previous op while the next buffer is made (tests/schedules/
# test_lazy_step_holder.py reproduces it on the installed torch). Measured on torch 2.15.0 with
# the compat matrix's counter (tools/compat_matrix/live_buffers.py, docs/torch-compat.md): 1F1B
# pp4 M8 forward 3, 2, 8 on stages 1..3 (live 3, 2, 1) and gradient 2, 2, 1 on stages 0..2.


def lazy_holds(
    live: Mapping[tuple[int, Direction], int],
    num_stages: int,
    n_microbatches: int,
    *,
    released: bool = False,
) -> dict[tuple[int, Direction], int]:
    """Receive buffers torch 2.15 holds per (stage, direction), from the live sets; ``released``:
    with pooltk's last-stage release. See [Note: lazy receive buffers]."""
    last = num_stages - 1
    return {
        (stage, d): (
            n_microbatches if (d == "forward" and stage == last and k and not released) else k
        )
        for (stage, d), k in live.items()
    }


def receive_sets(
    schedule: str,
    *,
    pp: int,
    n_microbatches: int,
    stages_per_rank: int = 1,
    source: LiveSource = "schedule",
) -> tuple[ReceiveSets, ...]:
    """One :class:`ReceiveSets` per (stage, direction), stage-major, forward before grad.

    Args:
        schedule: torch's name as ``get_schedule_class`` matches it (``"1F1B"``,
            ``"Interleaved1F1B"``).
        pp: pipeline-parallel ranks.
        n_microbatches: microbatches per step ``M``.
        stages_per_rank: stages each rank runs (1 for single-stage schedules).
        source: ``"schedule"`` (walk the action order; cached per shape) or ``"formula"`` (1F1B and
            GPipe only).

    Raises:
        ScheduleAnalysisError: the schedule or shape cannot be analysed (the message says why).
        InputError: an unknown ``source``, or ``"formula"`` for a schedule without closed forms.
    """
    check_choice("live source", source, LIVE_SOURCES, fix="use 'schedule' (the default).")
    key = str(schedule).strip().lower()
    if source == "formula":
        if key not in _FORMULA_SCHEDULES or stages_per_rank != 1:
            raise InputError(
                "live source",
                found=f"'formula' for {schedule} with {stages_per_rank} stage(s) per rank",
                required="'schedule' for a multi-stage schedule (the closed forms cover 1F1B and "
                "GPipe only)",
                fix="use source='schedule' (the default).",
            )
        return _formula_sets(_FORMULA_SCHEDULES[key], pp, n_microbatches)
    return _walked_sets(str(schedule), pp, n_microbatches, stages_per_rank)


def _records(
    n: int,
    m: int,
    stage_to_rank: dict[int, int],
    live: dict[tuple[int, Direction], int],
    ring_min: dict[tuple[int, Direction], int],
    handoff: dict[tuple[int, Direction], bool],
    forward_only: bool = False,
) -> tuple[ReceiveSets, ...]:
    lazy = lazy_holds(live, n, m)
    released = lazy_holds(live, n, m, released=True)
    return tuple(
        ReceiveSets(
            stage=i,
            direction=d,
            rank=stage_to_rank[i],
            handoff=handoff[(i, d)],
            stock=stock_count(n, i, d, m, forward_only=forward_only),
            live=live[(i, d)],
            ring_min=ring_min[(i, d)],
            stock_lazy=lazy[(i, d)],
            lazy_released=released[(i, d)],
        )
        for i in range(n)
        for d in DIRECTIONS
    )


@functools.lru_cache(maxsize=1024)
def _formula_sets(name: str, pp: int, m: int) -> tuple[ReceiveSets, ...]:
    gpipe = name == "GPipe"
    keys = [(i, d) for i in range(pp) for d in DIRECTIONS]
    live = {(i, d): formula_live(pp, i, d, m, gpipe=gpipe) for i, d in keys}
    return _records(pp, m, {i: i for i in range(pp)}, live, dict(live), dict.fromkeys(keys, False))


@functools.lru_cache(maxsize=1024)
def _walked_sets(schedule: str, pp: int, m: int, vpp: int) -> tuple[ReceiveSets, ...]:
    prog, spans = analyse(
        ScheduleShape(schedule=schedule, pp=pp, n_microbatches=m, stages_per_rank=vpp)
    )
    return from_program(prog, spans)


def from_program(prog: Program, spans: tuple[BufferLifetime, ...]) -> tuple[ReceiveSets, ...]:
    """The records of an already-walked program (what :func:`receive_sets` walks and caches)."""
    n, m, s2r = prog.num_stages, prog.n_microbatches, prog.stage_to_rank
    live = live_sets_of(prog, spans)
    by_key: dict[tuple[int, Direction], list[BufferLifetime]] = {k: [] for k in live}
    for b in spans:
        by_key[(b.stage, b.direction)].append(b)
    ring_min = {k: min_safe_ring(group, k[0], k[1], m) for k, group in by_key.items()}
    handoff = {
        (i, d): (i - 1 if d == "forward" else i + 1) in s2r
        and s2r[i - 1 if d == "forward" else i + 1] == s2r[i]
        for i in range(n)
        for d in DIRECTIONS
    }
    return _records(n, m, s2r, live, ring_min, handoff, prog.forward_only)


def cache_clear() -> None:
    """Forget every walked and closed-form record (benchmarks time a cold walk)."""
    _walked_sets.cache_clear()
    _formula_sets.cache_clear()
    analyse.cache_clear()  # type: ignore[attr-defined]
