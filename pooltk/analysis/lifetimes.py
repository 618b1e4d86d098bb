"""Receive-buffer lifetimes and live sets, derived from a torch schedule's own action order.

For every stage, direction and microbatch, :func:`lifetimes` gives the interval during
which that microbatch's receive buffer is in use on its rank: from the receive post to the
last compute action that may still read it. :func:`live_sets` gives the peak number of
such intervals that overlap per (stage, direction): the smallest ring that never
overwrites a buffer still in use. :func:`live_table` is the tidy per-stage table,
:func:`lifetime_frame` the per-microbatch intervals for a timeline plot,
:func:`overwrites` what a ring of a given size would clobber, and :func:`shared_slots`
the slot counts when a rank's stages (or directions) share one pool.

The action order comes from :mod:`pooltk.analysis.programs` (the only module that touches
torch internals): ``pipeline_order_with_comms`` for multi-stage runtime schedules, a
recording of ``_step_microbatches`` for 1F1B and GPipe.

[Note: buffer lifetime]
Within one rank's action order (positions ``t = 0, 1, ...``):

- ``post``: the ``RECV_F`` (activation) / ``RECV_B`` (gradient) of (stage, microbatch).
  From here the buffer may be written by the in-flight receive.
- ``consume``: the first compute action that reads it: ``F`` for an activation, ``B``
  (full backward) or ``I`` (backward-input) for a gradient.
- ``release``: the last action after which torch no longer holds or reads it.
  Activations are the autograd leaves of the stage's forward (torch 2.11-2.14 keep the
  buffer itself in ``fwd_cache``), so they are held until ``B``; under an I/W split
  they stay in ``backward_state`` until ``W``, which computes the weight gradient of the
  first layer from them. Gradients are held until ``B``; under an I/W split torch keeps
  them in ``backward_state`` until ``W`` as well (stage 0's ``W`` reruns the full
  backward from them; other stages only hold the reference). In a forward-only step an
  activation is released at its ``F`` and there are no gradient receives.

Two lifetimes of one (stage, direction) overlap when ``post_a <= release_b`` and
``post_b <= release_a``; the live set at ``t`` is the number of intervals containing
``t``, and the live peak is its maximum. A ring of ``K`` buffers that gives microbatch
``c`` slot ``c mod K`` is safe exactly when no two microbatches with the same slot have
overlapping lifetimes; :func:`overwrites` lists the violations. ``K >= live peak`` is
necessary; it is also sufficient when a stage posts and releases its buffers in
microbatch order, which :func:`live_table` checks (column ``ring_min``).

A stage whose neighbour runs on the same rank (the V schedules' turn) gets its input from
a local handoff, not a receive: it has no lifetimes in that direction and is left alone.
The first stage has no activation receives and the last none for gradients.
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pooltk._validate import check_choice, check_int
from pooltk.analysis.programs import (
    Event,
    Program,
    ScheduleAnalysisError,
    ScheduleShape,
    analysable_schedules,
    as_shape,
    program_of,
    resolve_schedule,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "BufferLifetime",
    "ScheduleShape",
    "analyse",
    "Direction",
    "DIRECTIONS",
    "Overwrite",
    "ScheduleAnalysisError",
    "SharedSlots",
    "analysable_schedules",
    "lifetime_frame",
    "lifetimes",
    "lifetimes_of",
    "live_rows",
    "live_sets",
    "live_sets_of",
    "live_table",
    "min_safe_ring",
    "overwrites",
    "peak_overlap",
    "resolve_schedule",
    "shared_slots",
    "sweep_rows",
    "sweep_table",
]

Direction = Literal["forward", "grad"]
DIRECTIONS: tuple[Direction, Direction] = ("forward", "grad")


@dataclass(frozen=True, slots=True)
class BufferLifetime:
    """One microbatch's receive buffer on one stage and direction. See [Note: buffer lifetime]."""

    stage: int
    """Pipeline stage index."""
    rank: int
    """Rank that runs the stage."""
    direction: Direction
    """``"forward"`` (activation receive) or ``"grad"`` (gradient receive)."""
    microbatch: int
    """Microbatch index."""
    post: int
    """Position in the rank's action order where the receive is posted."""
    consume: int
    """Position of the compute action that first reads the buffer (F; B or I)."""
    release: int
    """Position after which the buffer is no longer held or read (B or W; F when forward-only)."""


class Overwrite(NamedTuple):
    """A ring slot reused while its previous microbatch's buffer was still live.

    A named tuple, so ``for stage, direction, microbatch, by in overwrites(...)`` works.
    """

    stage: int
    """Pipeline stage index."""
    direction: Direction
    """Direction of the ring."""
    microbatch: int
    """The microbatch whose live buffer would be overwritten."""
    overwritten_by: int
    """The microbatch whose receive, posted into the same slot, overwrites it."""


# --------------------------------------------------------------------------- lifetimes


def _direction_of_recv(kind: str) -> Direction:
    return "forward" if kind == "RECV_F" else "grad"


def lifetimes_of(prog: Program) -> list[BufferLifetime]:
    """Lifetimes from an already-built :class:`~pooltk.analysis.programs.Program`.

    Raises:
        ScheduleAnalysisError: a receive posted twice, a compute action that reads a buffer
            never posted, or a buffer never consumed or released.
    """
    out: list[BufferLifetime] = []
    for rank in sorted(prog.events):
        post, consume, release = _rank_steps(prog, rank)
        for key, p in post.items():
            stage, direction, mb = key
            if key not in consume or key not in release:
                raise ScheduleAnalysisError(
                    f"{prog.schedule}: rank {rank}: the {direction} buffer of stage {stage} "
                    f"microbatch {mb} is posted but never consumed or released; the action list is "
                    "not one pooltk understands."
                )
            out.append(
                BufferLifetime(
                    stage=stage,
                    rank=rank,
                    direction=direction,
                    microbatch=mb,
                    post=p,
                    consume=consume[key],
                    release=release[key],
                )
            )
    out.sort(key=lambda b: (b.stage, DIRECTIONS.index(b.direction), b.microbatch))
    return out


_Steps = dict[tuple[int, Direction, int], int]
"""(stage, direction, microbatch) -> the step of one rank's action list."""


def _rank_steps(prog: Program, rank: int) -> tuple[_Steps, _Steps, _Steps]:
    """Where each receive buffer of ``rank`` is posted, first consumed and released."""
    post: _Steps = {}
    consume: _Steps = {}
    release: _Steps = {}
    for e in prog.events[rank]:
        key_f = (e.stage, "forward", e.microbatch)
        key_g = (e.stage, "grad", e.microbatch)
        if e.kind in ("RECV_F", "RECV_B"):
            key = (e.stage, _direction_of_recv(e.kind), e.microbatch)
            if key in post:
                raise _failed(prog, rank, e, f"receive {e.kind} for {_whose(e)} posted twice")
            post[key] = e.step
        elif e.kind == "F":
            if key_f in post:
                consume.setdefault(key_f, e.step)
                if prog.forward_only:
                    release[key_f] = e.step
            elif not _local(prog, rank, e.stage - 1):
                raise _failed(prog, rank, e, f"F for {_whose(e)} runs before its receive")
        elif e.kind in ("B", "I", "W"):
            if e.kind in ("B", "I"):
                if key_g in post:
                    consume.setdefault(key_g, e.step)
                elif not _local(prog, rank, e.stage + 1):
                    why = f"{e.kind} for {_whose(e)} runs before its gradient receive"
                    raise _failed(prog, rank, e, why)
            if e.kind in ("B", "W"):  # I alone keeps both buffers held until W
                for key in (key_f, key_g):
                    if key in post:
                        release[key] = e.step
    return post, consume, release


def _local(prog: Program, rank: int, neighbour: int) -> bool:
    """A neighbour stage outside the pipeline, or on ``rank``: nothing is received from it."""
    return not 0 <= neighbour < prog.num_stages or prog.stage_to_rank.get(neighbour) == rank


def _whose(e: Event) -> str:
    return f"stage {e.stage} microbatch {e.microbatch}"


def _failed(prog: Program, rank: int, e: Event, why: str) -> ScheduleAnalysisError:
    return ScheduleAnalysisError(f"{prog.schedule}: rank {rank} step {e.step}: {why}")


def _analyse(shape: ScheduleShape) -> tuple[Program, tuple[BufferLifetime, ...]]:
    prog = program_of(shape)
    return prog, tuple(lifetimes_of(prog))


_analyse_cached = functools.lru_cache(maxsize=512)(_analyse)


def analyse(shape: ScheduleShape) -> tuple[Program, tuple[BufferLifetime, ...]]:
    """Program and lifetimes of one shape, memoised per shape (a widget asks for the same shape
    often).

    The cached Program is shared: callers treat it as read-only. Refusals are not cached.
    """
    try:
        hash(shape)
    except TypeError:  # unhashable schedule kwargs: analyse without the cache
        return _analyse(shape)
    return _analyse_cached(shape)


analyse.cache_clear = _analyse_cached.cache_clear  # type: ignore[attr-defined]


def lifetimes(schedule: str | type | ScheduleShape, /, **shape: Any) -> list[BufferLifetime]:
    """Every receive buffer's (post, consume, release) for one step of ``schedule``.

    Args:
        schedule: a :class:`ScheduleShape`, or torch's name as ``get_schedule_class`` matches
            it (case-insensitive; the names of :data:`~pooltk.analysis.programs.CATALOG`) or
            the schedule class, with the shape's fields as keywords (``pp=``,
            ``n_microbatches=``, optional ``stages_per_rank=``, ``style=``, ``forward_only=``,
            ``defer_pp_recv=``); other keywords go to the schedule constructor.

    Returns:
        Lifetimes sorted by (stage, direction, microbatch). See [Note: buffer lifetime].

    Raises:
        ScheduleAnalysisError: the schedule or shape cannot be analysed; the message says why.
    """
    _, spans = analyse(as_shape(schedule, **shape))
    return list(spans)


# --------------------------------------------------------------------------- live sets


def peak_overlap(intervals: Iterable[tuple[int, int]]) -> int:
    """Most closed intervals ``[start, end]`` that contain one point (0 for none).

    This is also the number of colours an optimal interval colouring needs, i.e. the
    slots a pool needs when any free slot may be handed to the next receive.
    """
    points: list[tuple[int, int]] = []
    for start, end in intervals:
        if end < start:
            raise ValueError(
                f"interval [{start}, {end}]: found end < start; required start <= end."
            )
        points.append((start, 0))  # opens sort before closes at the same point: closed intervals
        points.append((end, 1))
    points.sort()
    live = peak = 0
    for _, closing in points:
        if closing:
            live -= 1
        else:
            live += 1
            peak = max(peak, live)
    return peak


def live_sets_of(
    prog: Program, spans: Sequence[BufferLifetime] | None = None
) -> dict[tuple[int, Direction], int]:
    """Peak live buffers for every (stage, direction) of ``prog`` (0 where nothing is received)."""
    spans = lifetimes_of(prog) if spans is None else spans
    grouped: dict[tuple[int, Direction], list[tuple[int, int]]] = defaultdict(list)
    for b in spans:
        grouped[(b.stage, b.direction)].append((b.post, b.release))
    return {
        (stage, d): peak_overlap(grouped.get((stage, d), ()))
        for stage in range(prog.num_stages)
        for d in DIRECTIONS
    }


def live_sets(
    schedule: str | type | ScheduleShape, /, **shape: Any
) -> dict[tuple[int, Direction], int]:
    """Peak number of live receive buffers per (stage, direction).

    Every stage appears with both directions; 0 means that (stage, direction) posts no
    receives (first stage forward, last stage grad, a V-schedule local handoff, grads in a
    forward-only step). Arguments as for :func:`lifetimes`.
    """
    prog, spans = analyse(as_shape(schedule, **shape))
    return live_sets_of(prog, spans)


# --------------------------------------------------------------------------- rings


def _ring_of(
    ring_size: int | Mapping[tuple[int, Direction], int], stage: int, direction: Direction
) -> int:
    k = ring_size if isinstance(ring_size, int) else ring_size.get((stage, direction))
    if k is None:
        raise ValueError(
            f"ring_size: no entry for (stage {stage}, {direction!r}); required one per (stage, "
            "direction)."
        )
    return check_int(f"ring_size for (stage {stage}, {direction!r})", k, low=1)


def overwrites(
    spans: Iterable[BufferLifetime], ring_size: int | Mapping[tuple[int, Direction], int]
) -> list[Overwrite]:
    """What a ring that maps microbatch ``c`` to slot ``c mod K`` would overwrite.

    Args:
        spans: lifetimes, e.g. from :func:`lifetimes`.
        ring_size: one ``K`` for every (stage, direction), or a mapping per (stage, direction).

    Returns:
        One :class:`Overwrite` per pair (earlier microbatch, later microbatch in the same slot)
        whose lifetimes overlap: the later receive is posted while the earlier buffer is live.
        Empty when the ring is safe.
    """
    grouped: dict[tuple[int, Direction], list[BufferLifetime]] = defaultdict(list)
    for b in spans:
        grouped[(b.stage, b.direction)].append(b)
    found: list[Overwrite] = []
    for (stage, direction), group in sorted(
        grouped.items(), key=lambda kv: (kv[0][0], DIRECTIONS.index(kv[0][1]))
    ):
        k = _ring_of(ring_size, stage, direction)
        by_slot: dict[int, list[BufferLifetime]] = defaultdict(list)
        for b in group:
            by_slot[b.microbatch % k].append(b)
        for slot_group in by_slot.values():
            slot_group.sort(key=lambda b: b.post)
            for i, a in enumerate(slot_group):
                for later in slot_group[i + 1 :]:
                    if later.post <= a.release:
                        found.append(Overwrite(stage, direction, a.microbatch, later.microbatch))
    found.sort(
        key=lambda o: (o.stage, DIRECTIONS.index(o.direction), o.microbatch, o.overwritten_by)
    )
    return found


def min_safe_ring(
    spans: Sequence[BufferLifetime], stage: int, direction: Direction, n_microbatches: int
) -> int:
    """Smallest ``K`` for which the ``c mod K`` ring of (stage, direction) overwrites nothing (0: no
    receives). ``n_microbatches`` below what the spans hold (K = M would no longer be safe) is an
    :class:`InputError`, as is a direction that is not one of :data:`DIRECTIONS`."""
    check_choice("min_safe_ring direction", direction, DIRECTIONS)
    group = [b for b in spans if b.stage == stage and b.direction == direction]
    held = max((b.microbatch for b in group), default=0) + 1
    fix = "the shape's microbatch count (the spans' n_microbatches)."
    check_int("min_safe_ring n_microbatches", n_microbatches, low=held, fix=fix)
    if not group:
        return 0
    for k in range(max(1, peak_overlap((b.post, b.release) for b in group)), n_microbatches + 1):
        if not overwrites(group, k):
            return k
    return n_microbatches  # unreachable: K = M gives every microbatch its own slot


# --------------------------------------------------------------------------- shared pools


@dataclass(frozen=True, slots=True)
class SharedSlots:
    """Buffer slots a pipeline needs under three pool granularities (summed over ranks)."""

    per_stage_direction: int
    """One pool per (stage, direction): the sum of live peaks."""
    per_rank_direction: int
    """One pool per direction shared by a rank's stages (shapes must match): the sum over
    (rank, direction) of the peak overlap of all that rank's intervals in that direction."""
    per_rank: int
    """One pool per rank shared by both directions and all its stages (forward and grad
    shapes must match too)."""


def shared_slots(spans: Sequence[BufferLifetime]) -> SharedSlots:
    """Slot counts by interval colouring (optimal colouring = peak overlap) per pool granularity.

    Intervals are positions in one rank's action order, so only intervals of the same rank
    are ever compared. A shared pool hands out any free slot (not ``c mod K``).
    """
    by_sd: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    by_rd: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    by_r: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for b in spans:
        iv = (b.post, b.release)
        by_sd[(b.stage, b.direction)].append(iv)
        by_rd[(b.rank, b.direction)].append(iv)
        by_r[b.rank].append(iv)
    return SharedSlots(
        per_stage_direction=sum(peak_overlap(v) for v in by_sd.values()),
        per_rank_direction=sum(peak_overlap(v) for v in by_rd.values()),
        per_rank=sum(peak_overlap(v) for v in by_r.values()),
    )


# --------------------------------------------------------------------------- tables


def lifetime_frame(spans: Iterable[BufferLifetime]) -> pd.DataFrame:
    """Tidy per-microbatch lifetimes for a timeline plot (one row per buffer)."""
    import pandas as pd

    cols = ["stage", "rank", "direction", "microbatch", "post", "consume", "release"]
    return pd.DataFrame([[getattr(b, c) for c in cols] for b in spans], columns=cols)


def live_table(schedule: str | type | ScheduleShape, /, **shape: Any) -> pd.DataFrame:
    """Tidy per-stage table for one schedule shape, one row per (stage, direction).

    Columns: schedule, pp, vpp, n_microbatches, defer_pp_recv, forward_only, stage, rank, direction,
    stock_buffers (what stock torch 2.11-2.14 allocates), lazy_buffers (what stock torch >= 2.15
    holds: :func:`pooltk.analysis.stage_sets.lazy_holds`, measured for training steps), live_peak
    (peak live buffers), ring_min (smallest safe ``c mod K`` ring; equals live_peak when receives
    are posted and released in microbatch order), handoff (True where the input arrives by a
    same-rank V-schedule handoff, not a receive). Arguments as for :func:`lifetimes`.
    """
    import pandas as pd

    return pd.DataFrame(live_rows(schedule, **shape))


def live_rows(schedule: str | type | ScheduleShape, /, **shape: Any) -> list[dict[str, Any]]:
    """:func:`live_table`'s rows as plain records (no pandas: the command line's tables), from
    :func:`pooltk.analysis.stage_sets.receive_sets`'s records of the same walk."""
    from pooltk.analysis.stage_sets import from_program

    prog, spans = analyse(as_shape(schedule, **shape))
    head = {
        "schedule": prog.schedule,
        "pp": prog.pp,
        "vpp": prog.stages_per_rank,
        "n_microbatches": prog.n_microbatches,
        "defer_pp_recv": prog.defer_pp_recv,
        "forward_only": prog.forward_only,
    }
    return [
        head
        | {
            "stage": sets.stage,
            "rank": sets.rank,
            "direction": sets.direction,
            "stock_buffers": sets.stock,
            "lazy_buffers": sets.stock_lazy,
            "live_peak": sets.live,
            "ring_min": sets.ring_min,
            "handoff": sets.handoff,
        }
        for sets in from_program(prog, spans)
    ]


def _shapes_of(
    name: str, cls: type, vpps: Sequence[int], defers: Sequence[bool]
) -> tuple[list[int], list[bool]]:
    """The (vpp, defer) values of a grid that are shapes of this schedule at all.

    Single-stage schedules run one stage per rank and have no receive actions to defer;
    the V schedules run exactly two stages per rank. Other values are skipped, not refused.
    """
    from pooltk.analysis.programs import is_single_stage, v_schedules

    if is_single_stage(cls):
        return [1], [False]
    if name in v_schedules():
        return [2], sorted(set(defers))
    return sorted(set(vpps)), sorted(set(defers))


def sweep_table(
    schedules: Sequence[str | type],
    *,
    pps: Sequence[int],
    vpps: Sequence[int] = (1,),
    microbatches: Sequence[int],
    defer_pp_recv: Sequence[bool] = (False,),
    forward_only: bool = False,
) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """:func:`live_table` over a grid; shapes a schedule refuses are listed, not raised.

    Returns:
        (the concatenated table, one ``{"schedule", "pp", "vpp", "n_microbatches",
        "defer_pp_recv", "reason"}`` record per refused combination).
    """
    import pandas as pd

    rows, refused = sweep_rows(
        schedules,
        pps=pps,
        vpps=vpps,
        microbatches=microbatches,
        defer_pp_recv=defer_pp_recv,
        forward_only=forward_only,
    )
    return (pd.DataFrame(rows) if rows else pd.DataFrame()), refused


def sweep_rows(
    schedules: Sequence[str | type],
    *,
    pps: Sequence[int],
    vpps: Sequence[int] = (1,),
    microbatches: Sequence[int],
    defer_pp_recv: Sequence[bool] = (False,),
    forward_only: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """:func:`sweep_table` as plain records: (:func:`live_rows` of every shape, the refusals)."""
    rows: list[dict[str, Any]] = []
    refused: list[dict[str, Any]] = []
    resolved = [resolve_schedule(s) for s in schedules]  # unknown names fail before the sweep
    for name, cls in resolved:
        own_vpps, defers = _shapes_of(name, cls, vpps, defer_pp_recv)
        for pp, vpp, m, defer in itertools.product(pps, own_vpps, microbatches, defers):
            shape = {"pp": pp, "vpp": vpp, "n_microbatches": m, "defer_pp_recv": defer}
            try:
                shape_rows = live_rows(
                    cls,
                    pp=pp,
                    n_microbatches=m,
                    stages_per_rank=vpp,
                    forward_only=forward_only,
                    defer_pp_recv=defer,
                )
            except ScheduleAnalysisError as exc:
                refused.append({"schedule": name, **shape, "reason": str(exc)})
                continue
            rows += [{**row, "schedule": name} for row in shape_rows]
    return rows, refused
