"""Rank-shared rings: one ring per (rank, direction, boundary) over every stage a rank holds.

[Note: rank-shared rings]
A rank that runs several virtual stages (Interleaved1F1B, looped, zero-bubble and V schedules)
receives into each of them, but never needs more buffers at once than the receive lifetimes of
*all* its stages overlap ([Note: buffer lifetime] in lifetimes.py; intervals are positions in the
rank's one action order, so the stages' intervals compare directly). Stages whose receives have
the same tensors (shapes, dtypes, devices: the ``groups`` key) can therefore share one ring per
direction, sized by the rank's live set, not by the sum of the stages' live sets.

Slots are *coloured* from the schedule's own action order, not ``c mod K``: walking the rank's
receive posts in order, each receive takes the free slot that was freed longest ago (its
previous owner's release precedes this post); with ``K = live + slack`` a free slot always
exists, and the slack lengthens the distance between two uses of one slot. The colouring is
a pure function of the action order, so every step of a run (and the memory model) uses the
same map. An undersized ring (``forward_shortfall``, negative controls only) takes the slot
assigned longest ago when none is free, and the guard's ownership reports the overrun.

A group holding one stage (every single-stage schedule, or a boundary shape only one of the
rank's stages has) keeps the per-stage ring of [Note: auto rings] (plans.py): size from the
smallest safe ``c mod K`` ring plus slack, slot ``c mod K``. So a rank-shared plan differs from
a per-stage plan only where a rank really shares.

A (stage, direction) fed by a same-rank handoff (the V schedules' turn) has no receives, so it
joins no ring; the pool gives it no receive buffers at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pooltk.analysis.lifetimes import (
    DIRECTIONS,
    BufferLifetime,
    Direction,
    min_safe_ring,
    peak_overlap,
)

if TYPE_CHECKING:
    from pooltk.analysis.programs import Program

__all__ = ["RankRing", "colour", "rank_rings"]


@dataclass(frozen=True, slots=True)
class RankRing:
    """One ring a rank keeps for one direction and one boundary key. See [Note: rank-shared
    rings]."""

    rank: int
    """Rank that holds the ring."""
    direction: Direction
    """``"forward"`` (activations) or ``"grad"`` (gradients)."""
    stages: tuple[int, ...]
    """The rank's stages that receive into this ring, ascending."""
    live: int
    """Peak overlap of these stages' receive lifetimes on the rank (the fewest slots that can be
    safe)."""
    receives: int
    """Receives into this ring in one step (sum over its stages of their microbatches)."""
    size: int
    """K: the slots kept (the caller's ``size(live, receives, direction)``; for one stage, its
    smallest safe ``c mod K`` ring and ``M`` receives)."""
    slots: Mapping[tuple[int, int], int]
    """(stage, microbatch) -> slot."""
    shared: bool
    """True when the ring is coloured across several stages; False: one stage's ``c mod K`` ring."""

    def slot_of(self, stage: int, microbatch: int) -> int:
        """The slot (stage, microbatch) receives into."""
        return self.slots[(stage, microbatch)]


def colour(spans: Sequence[BufferLifetime], size: int) -> dict[tuple[int, int], int]:
    """Slot per (stage, microbatch) for one rank's receives into one ring of ``size`` slots.

    Receives are taken in post order; each gets the free slot freed longest ago (an unused
    slot first, lowest index). With ``size`` at least the peak overlap of the spans a free
    slot always exists and no two overlapping lifetimes share a slot. Below that (negative
    controls) the slot assigned longest ago is taken, which the guard reports as an overrun.
    """
    if size < 1:
        raise ValueError(f"colour: found size {size}; required at least 1 slot.")
    freed_at = [-1] * size  # release position of the slot's last owner (-1: never used)
    assigned_at = [-1] * size
    busy_until = [-1] * size  # the current owner's release position
    out: dict[tuple[int, int], int] = {}
    for b in sorted(spans, key=lambda s: (s.post, s.stage, s.microbatch)):
        free = [s for s in range(size) if busy_until[s] < b.post]
        if free:
            slot = min(free, key=lambda s: (freed_at[s], s))
        else:
            slot = min(range(size), key=lambda s: (assigned_at[s], s))
        out[(b.stage, b.microbatch)] = slot
        assigned_at[slot] = b.post
        busy_until[slot] = b.release
        freed_at[slot] = b.release
    return out


def rank_rings(
    prog: Program,
    spans: Sequence[BufferLifetime],
    size: Callable[[int, int, str], int],
    *,
    groups: Mapping[tuple[int, Direction], Hashable] | None = None,
) -> list[RankRing]:
    """The rings every rank keeps under ``sharing="rank"``. See [Note: rank-shared rings].

    Args:
        prog, spans: from :func:`pooltk.analysis.lifetimes.analyse`.
        size: ``size(live, receives, direction)`` -> K, the caller's slack rule (the pool's is
            :func:`pooltk.pool.ring.ring_size`); ``receives`` is M for a one-stage ring, else the
            receives into the shared ring.
        groups: (stage, direction) -> boundary key; a rank's stages share a ring only where their
            keys are equal. Default: every stage of a rank shares, per direction.

    Returns:
        One :class:`RankRing` per (rank, direction, key) that receives anything, sorted by
        (rank, direction, first stage).
    """
    by_ring: dict[tuple[int, Direction, Hashable], list[BufferLifetime]] = defaultdict(list)
    for b in spans:
        key = None if groups is None else groups.get((b.stage, b.direction))
        by_ring[(b.rank, b.direction, key)].append(b)
    out = [
        _ring(rank, direction, group, size, prog.n_microbatches)
        for (rank, direction, _key), group in by_ring.items()
    ]
    out.sort(key=lambda r: (r.rank, DIRECTIONS.index(r.direction), r.stages))
    return out


def _ring(
    rank: int,
    direction: Direction,
    group: list[BufferLifetime],
    size: Callable[[int, int, str], int],
    n_microbatches: int,
) -> RankRing:
    """The ring ``group``'s receives share: one stage's ``c mod K`` ring sized from its smallest
    safe ring, or several stages' ring sized from their peak overlap and coloured."""
    stages = tuple(sorted({b.stage for b in group}))
    live = peak_overlap((b.post, b.release) for b in group)
    shared = len(stages) > 1
    if shared:
        k = size(live, len(group), direction)
        slots = colour(group, k)
    else:
        k = size(
            min_safe_ring(group, stages[0], direction, n_microbatches), n_microbatches, direction
        )
        slots = {(b.stage, b.microbatch): b.microbatch % k for b in group}
    return RankRing(
        rank=rank,
        direction=direction,
        stages=stages,
        live=live,
        receives=len(group),
        size=k,
        slots=slots,
        shared=shared,
    )
