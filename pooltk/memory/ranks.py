"""The memory model at the rank: the rings a rank keeps when its stages share them, in bytes.

[Note: bytes per rank]
A rank runs one stage under 1F1B and GPipe, several under the multi-stage schedules. What it
holds is the sum over its stages for every per-stage variant (stock, the per-stage rings, the
per-stage live sets). Under ``sharing="rank"`` the pool keeps one ring per (rank,
direction, boundary tensors) instead ([Note: rank-shared rings] in
:mod:`pooltk.analysis.sharing`): stages of one rank whose receives have the same tensors (shapes
and dtypes; boundaries that differ, such as Kimi-K3's widening ones, get a ring each) share a
ring of ``K = live + slack`` slots, where ``live`` is the peak overlap of all their receive
lifetimes on the rank. Its bytes are ``K x`` the set bytes of those tensors (:class:`RingMemory`).

Per stage, a shared ring has no honest share: a slot serves whichever of the rank's stages
receives next, so the model gives rank-shared rings at the rank only (variants
:data:`RANK_VARIANTS`), never split over stages. The per-stage ``pooled`` column is the
per-stage ring (what ``sharing="stage"`` keeps); the rank's ``pooled`` follows
the model's ``sharing``. A ring with one stage (every single-stage schedule, or a boundary only one
of the rank's stages has) is that stage's per-stage ring, so for 1F1B both views agree.

A (stage, direction) fed by a same-rank handoff (the V schedules' turn) receives nothing and
joins no ring.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk.analysis.lifetimes import DIRECTIONS, Direction
from pooltk.memory.tensors import Boundary, TensorSpec

if TYPE_CHECKING:  # pragma: no cover
    from pooltk.config import PoolConfig
    from pooltk.memory.results import DirectionMemory
    from pooltk.memory.shape import PipelineShape

__all__ = ["RANK_VARIANTS", "RingMemory", "boundary_key", "rank_rings_for"]

RANK_VARIANTS: tuple[str, ...] = ("shared", "rank_live")
"""Rank-level variants: ``shared`` the rank-shared rings (``K = live + slack`` per ring),
``rank_live`` the rank's live set (the peak overlap of each ring's receives: no shared pool can hold
fewer)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RingMemory:
    """One ring a rank keeps for one direction and one set of boundary tensors.
    See [Note: bytes per rank]."""

    rank: int
    """Rank that holds the ring."""
    direction: Direction
    """``"forward"`` (activations) or ``"grad"`` (gradients)."""
    stages: tuple[int, ...]
    """The rank's stages that receive into it, ascending."""
    set_bytes: int
    """Bytes of one set: every tensor one microbatch receives over these stages' boundary."""
    tensors: tuple[tuple[tuple[int, ...], str], ...]
    """(shape, dtype) of each tensor in a set: the key stages share a ring by."""
    live: int
    """Peak overlap of the stages' receive lifetimes on the rank (per-stage live set for one
    stage)."""
    receives: int
    """Receives into the ring in one step."""
    size: int
    """K: sets the ring keeps under the config."""
    shared: bool
    """True when the ring serves several stages (coloured slots); False: one stage's own ring."""

    @property
    def bytes(self) -> int:
        """``size x set_bytes``."""
        return self.size * self.set_bytes

    @property
    def live_bytes(self) -> int:
        """``live x set_bytes``."""
        return self.live * self.set_bytes


def boundary_key(tensors: Sequence[TensorSpec]) -> tuple[tuple[tuple[int, ...], str], ...]:
    """What decides whether two receives may share a ring: each tensor's shape and dtype (names do
    not matter)."""
    return tuple((tuple(t.shape), t.dtype) for t in tensors)


def _tensors(bounds: Sequence[Boundary], stage: int, direction: str) -> tuple[TensorSpec, ...]:
    """The tensors (stage, direction) receives: boundary ``stage - 1`` forward, boundary ``stage``
    grads."""
    return bounds[stage - 1].activations if direction == "forward" else bounds[stage].grad_tensors


def rank_rings_for(
    shape: PipelineShape,
    bounds: Sequence[Boundary],
    config: PoolConfig,
    rows: Sequence[DirectionMemory],
    analysed: Callable[[PipelineShape], tuple[Any, Any]] | None,
) -> tuple[RingMemory, ...]:
    """Every rank's rings under rank sharing, sorted by (rank, direction, first stage).

    ``rows`` are the model's per-(stage, direction) rows; ``analysed`` gives the program and
    lifetimes of a multi-stage shape (``None`` for single-stage schedules, whose rings are the
    rows' own per-stage rings, with no schedule walk).
    """
    if analysed is None:
        return _stage_rings(shape, bounds, rows)
    return _shared_rings(shape, bounds, config, rows, analysed)


def _stage_rings(
    shape: PipelineShape, bounds: Sequence[Boundary], rows: Sequence[DirectionMemory]
) -> tuple[RingMemory, ...]:
    """A single-stage schedule's rings: each row's own ring (rows without receives have none)."""
    out = [
        RingMemory(
            rank=r.rank,
            direction=r.direction,
            stages=(r.stage,),
            set_bytes=r.set_bytes,
            tensors=boundary_key(_tensors(bounds, r.stage, r.direction)),
            live=r.live_sets,
            receives=shape.n_microbatches,
            size=r.pooled_sets,
            shared=False,
        )
        for r in rows
        if r.stock_sets and r.set_bytes
    ]
    return tuple(out)


def _shared_rings(
    shape: PipelineShape,
    bounds: Sequence[Boundary],
    config: PoolConfig,
    rows: Sequence[DirectionMemory],
    analysed: Callable[[PipelineShape], tuple[Any, Any]],
) -> tuple[RingMemory, ...]:
    """A multi-stage schedule's rings, from the schedule walk: a rank's stages whose boundaries
    carry the same tensors share one ring per direction."""
    from functools import partial

    from pooltk.analysis.sharing import rank_rings
    from pooltk.pool.ring import ring_size

    n = shape.num_stages
    prog, spans = analysed(shape)
    groups = {
        (i, d): boundary_key(_tensors(bounds, i, d))
        for i in range(n)
        for d in DIRECTIONS
        if (d == "forward" and i > 0) or (d == "grad" and i < n - 1)
    }
    by_key = {(r.stage, r.direction): r for r in rows}
    out = []
    for ring in rank_rings(prog, spans, partial(ring_size, config=config), groups=groups):
        first = by_key[(ring.stages[0], ring.direction)]
        out.append(
            RingMemory(
                rank=ring.rank,
                direction=ring.direction,
                stages=tuple(ring.stages),
                set_bytes=first.set_bytes,
                tensors=groups[(ring.stages[0], ring.direction)],
                live=ring.live,
                receives=ring.receives,
                size=ring.size,
                shared=len(ring.stages) > 1,
            )
        )
    out.sort(key=lambda g: (g.rank, DIRECTIONS.index(g.direction), g.stages))
    return tuple(out)
