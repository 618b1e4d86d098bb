"""How the ring works, computed from torch's own schedule order (notebook 00).

Everything here is derived from :mod:`pooltk.analysis` (the recorded action order of a torch
schedule, its receive-buffer lifetimes, the one slack rule :func:`pooltk.pool.ring.ring_size`);
nothing is drawn by hand, and nothing reaches into the pool's internals:

- :func:`replay` puts one step of a schedule on a common clock (:class:`Replay`), :func:`phases`
  reads its warmup / steady / cooldown phases off the order;
- :func:`rings_for` is the ring the pool keeps per (stage, direction), :func:`one_short` the
  negative control's ring one set short; :func:`ring_slot` is the slot a receive lands in
  (``c mod K``, as the pool's one-stage ring places it) and :func:`receiving_rings` the checked
  ring of every (stage, direction) a replay receives into: every figure and table here reads
  slots from these two;
- :func:`overwritten_receives` counts overwrites the one way every notebook counts them
  ([Note: counting overwrites]); :func:`slot_table` lists every receive with its slot;
- :func:`guard_replay` replays the guard's rule (a post claims slot ``c mod K``; a post into a slot
  another microbatch still owns stops the step) over the order; notebook 02 runs the real guard;
- :func:`sets_by_version` is what torch <= 2.14, torch 2.15 and pooltk keep per stage;
- :func:`layout_families` is the torch layout table (:mod:`pooltk.nb.layouts`);
- :func:`explore` / :func:`render_explorer` / :func:`explorer_controls`: the notebook's explorer,
  recording what it computed in a :class:`MechanismState`.

The figures are in :mod:`pooltk.nb.timelines`, what slack buys in :mod:`pooltk.nb.slack`, the PR's
two lifetime facts in :mod:`pooltk.nb.lifetime_facts`.

[Note: unit-time replay]
The analysis gives each rank's actions in order, not when they run. :func:`replay` gives every
compute action a duration (forward 1 tick, backward 2, each half of a split backward 1) and starts
it as soon as its rank is free and its input exists: ``F`` of stage ``s`` after ``F`` of stage
``s - 1`` (same microbatch), ``B`` / ``I`` of stage ``s`` after ``B`` / ``I`` of stage ``s + 1``.
A receive is posted when its rank reaches it in its order (the rank's clock then); sends take no
time. The clock only draws the order on a shared axis; which buffers overlap comes from the
lifetimes.

[Note: counting overwrites]
An overwrite is a receive posted into a ring slot whose previous buffer is still held: that
receive writes over data autograd will still read. Each such receive counts once (however many
earlier buffers of the slot are still held), and it is named by the microbatch posting it and the
previous occupant of the slot. Every notebook counts this way (the slot charts, the tables, the
explorer's line, the guard's first stop). :func:`pooltk.analysis.lifetimes.overwrites` lists
every overlapping *pair* instead, which counts a receive once per earlier buffer it lands on.

Imports pandas / ipywidgets inside the functions that need them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_int
from pooltk.analysis.lifetimes import (
    DIRECTIONS,
    BufferLifetime,
    Direction,
    Overwrite,
    lifetimes_of,
    live_sets,
)
from pooltk.analysis.programs import Program, ScheduleAnalysisError, program
from pooltk import PoolConfig
from pooltk.pool.ring import ring_size

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "RECEIVED",
    "GuardReplay",
    "GuardStop",
    "MechanismState",
    "Replay",
    "explore",
    "explorer_controls",
    "guard_replay",
    "inflight_depth",
    "layout_families",
    "one_short",
    "ordinal",
    "overwritten_receives",
    "phases",
    "receiving_rings",
    "render_explorer",
    "replay",
    "ring_slot",
    "ring_summary",
    "rings_for",
    "sets_by_version",
    "slot_table",
]

RingSizes = Mapping[tuple[int, Direction], int]

RECEIVED = {"forward": "activation", "grad": "gradient"}
"""What a receive of each direction carries, as every line and figure says it."""

_TICKS = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0}
"""Each compute action's duration ([Note: unit-time replay]): a split backward's halves 1 each."""


# --------------------------------------------------------------------------- replay


@dataclass(frozen=True, slots=True)
class Replay:
    """One step of a schedule on a shared clock. See [Note: unit-time replay]."""

    program: Program
    """The analysed action order (from :func:`pooltk.analysis.programs.program`)."""
    spans: tuple[BufferLifetime, ...]
    """Every receive buffer's lifetime (positions in its rank's order)."""
    start: dict[tuple[int, int], float]
    """``(rank, position) -> time`` an event starts (a receive: when it is posted)."""
    end: dict[tuple[int, int], float]
    """``(rank, position) -> time`` an event ends (receives and sends: same as start)."""

    @property
    def makespan(self) -> float:
        """Time the last action ends."""
        return max(self.end.values(), default=0.0)

    def compute_frame(self) -> pd.DataFrame:
        """One row per compute action: rank, stage, kind, microbatch, position, start, end."""
        import pandas as pd

        rows = []
        for rank, events in self.program.events.items():
            for e in events:
                if e.kind in ("F", "B", "I", "W"):
                    rows.append(
                        {
                            "rank": rank,
                            "stage": e.stage,
                            "kind": e.kind,
                            "microbatch": e.microbatch,
                            "position": e.step,
                            "start": self.start[(rank, e.step)],
                            "end": self.end[(rank, e.step)],
                        }
                    )
        return pd.DataFrame(rows)

    def time_of_post(self, b: BufferLifetime) -> float:
        return self.start[(b.rank, b.post)]

    def time_of_consume(self, b: BufferLifetime) -> float:
        return self.start[(b.rank, b.consume)]

    def time_of_release(self, b: BufferLifetime) -> float:
        return self.end[(b.rank, b.release)]


def _ready_time(
    done: dict[tuple[str, int, int], float], last: int, kind: str, stage: int, mb: int
) -> float | None:
    """When the action ``kind`` of (stage, microbatch) may start: its input's end, else ``None``.

    ``done`` maps (kind, stage, microbatch) to the end time of actions already run; ``last`` is
    the last stage. A forward waits on the previous stage's forward, a backward (or its input
    half) on the next stage's, the last stage's on its own forward, a weight step on its input
    half.
    """
    if kind == "F":
        return 0.0 if stage == 0 else done.get(("F", stage - 1, mb))
    if kind in ("B", "I"):
        if stage == last:
            return done.get(("F", stage, mb))
        return done.get(("B", stage + 1, mb), done.get(("I", stage + 1, mb)))
    return done.get(("I", stage, mb), done.get(("B", stage, mb)))  # W after its I


def _stuck(prog: Program, pointer: dict[int, int]) -> ScheduleAnalysisError:
    """The error of a replay where every rank waits: each rank's next action, named."""
    stuck = {r: prog.events[r][pointer[r]] for r in prog.events if pointer[r] < len(prog.events[r])}
    return ScheduleAnalysisError(
        f"{prog.schedule}: the unit-time replay cannot make progress; "
        f"ranks wait on {stuck}. "
        "The action order is not one pooltk can draw."
    )


def _clock(prog: Program) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
    """Every event's start and end, ``(rank, position) -> time``: each rank runs its order as soon
    as each action's input is ready ([Note: unit-time replay])."""
    last = prog.num_stages - 1
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, microbatch) -> end time
    start: dict[tuple[int, int], float] = {}
    end: dict[tuple[int, int], float] = {}
    pointer = {r: 0 for r in prog.events}
    clock = {r: 0.0 for r in prog.events}
    while any(pointer[r] < len(prog.events[r]) for r in prog.events):
        progressed = False
        for r, events in prog.events.items():
            while pointer[r] < len(events):
                e = events[pointer[r]]
                if e.kind in _TICKS:
                    ready = _ready_time(done, last, e.kind, e.stage, e.microbatch)
                    if ready is None:
                        break
                    t0 = max(clock[r], ready)
                    clock[r] = t0 + _TICKS[e.kind]
                    done[(e.kind, e.stage, e.microbatch)] = clock[r]
                    start[(r, e.step)], end[(r, e.step)] = t0, clock[r]
                else:  # receive posts and sends: at the rank's clock, no duration
                    start.setdefault((r, e.step), clock[r])
                    end.setdefault((r, e.step), clock[r])
                pointer[r] += 1
                progressed = True
        if not progressed:
            raise _stuck(prog, pointer)
    return start, end


def replay(
    schedule: str,
    *,
    pp: int,
    n_microbatches: int,
    stages_per_rank: int = 1,
) -> Replay:
    """Analyse ``schedule`` (torch's name) and put its step on a clock. See [Note: unit-time
    replay].

    ``stages_per_rank`` is the shape's stages per rank (2 for the interleaved and V schedules'
    usual shape); the clock is the same for every schedule.

    Raises:
        ScheduleAnalysisError: the schedule or shape cannot be analysed (torch's reason quoted).
    """
    prog = program(schedule, pp=pp, n_microbatches=n_microbatches, stages_per_rank=stages_per_rank)
    spans = tuple(lifetimes_of(prog))
    start, end = _clock(prog)
    return Replay(program=prog, spans=spans, start=start, end=end)


def phases(rp: Replay) -> dict[int, dict[str, tuple[int, int]]]:
    """Per stage, the compute phases as ``(first, last)`` positions in the stage's compute order.

    ``warmup``: forwards before the stage's first backward; ``cooldown``: backwards after its
    last forward; ``steady``: the rest (one forward, one backward, ...). A phase with no actions
    is left out (GPipe has no steady phase).
    """
    out: dict[int, dict[str, tuple[int, int]]] = {}
    by_stage: dict[int, list[str]] = {}
    for events in rp.program.events.values():
        for e in events:
            if e.kind in ("F", "B", "I"):
                by_stage.setdefault(e.stage, []).append(e.kind)
    for stage, kinds in sorted(by_stage.items()):
        first_b = next((i for i, k in enumerate(kinds) if k != "F"), len(kinds))
        last_f = max((i for i, k in enumerate(kinds) if k == "F"), default=-1)
        spans = {
            "warmup": (0, first_b - 1),
            "steady": (first_b, last_f),
            "cooldown": (max(last_f + 1, first_b), len(kinds) - 1),
        }
        out[stage] = {name: (a, b) for name, (a, b) in spans.items() if b >= a}
    return out


# --------------------------------------------------------------------------- rings


def inflight_depth(pp: int, stage: int, n_microbatches: int) -> int:
    """``W = min(M, N - i)``: forwards stage ``i`` of ``N`` runs before its first backward under
    1F1B."""
    check_int("pp", pp, low=1)
    check_int("stage", stage, low=0, high=pp - 1)
    check_int("n_microbatches", n_microbatches, low=1)
    return min(n_microbatches, pp - stage)


def rings_for(pp: int, n_microbatches: int, config: PoolConfig) -> dict[tuple[int, Direction], int]:
    """The ring the pool keeps per (stage, direction) under ``config`` (0: the stage receives
    nothing).

    Sized for 1F1B from its walked live sets through :func:`pooltk.pool.ring.ring_size`
    (the one slack rule the pool uses), whatever schedule it is then run under: that is what
    ``force=True`` does.
    """
    live = live_sets("1F1B", pp=pp, n_microbatches=n_microbatches)
    return {key: ring_size(k, n_microbatches, key[1], config) for key, k in live.items()}


def one_short(rings: RingSizes) -> dict[tuple[int, Direction], int]:
    """The negative control: every forward ring one set smaller (never below 1); grad rings as they
    are."""
    return {(s, d): (max(1, k - 1) if d == "forward" and k else k) for (s, d), k in rings.items()}


def ring_summary(rings: RingSizes) -> str:
    """``act [- 3 2 1] grad [1 1 1 -]``: ring per stage, ``-`` where a stage has no receives."""
    stages = range(1 + max(s for s, _ in rings))
    fwd = " ".join(str(rings.get((s, "forward")) or "-") for s in stages)
    grad = " ".join(str(rings.get((s, "grad")) or "-") for s in stages)
    return f"act [{fwd}] grad [{grad}]"


def _ring_k(rings: RingSizes, stage: int, direction: Direction) -> int:
    k = rings.get((stage, direction))
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        found = "no ring" if k is None else f"a ring of {k!r}"
        raise ValueError(
            f"rings: found {found} for stage {stage} {direction}; required an integer >= 1 per "
            "receiving (stage, direction). Fix: build them with rings_for(pp, M, PoolConfig(...))."
        )
    return k


def ring_slot(rings: RingSizes, stage: int, direction: Direction, microbatch: int) -> int:
    """The slot ``microbatch``'s receive lands in: ``microbatch mod K`` of its (stage, direction)
    ring, as the pool's one-stage ring places it (:meth:`pooltk.pool.ring.Ring.slot_of` without a
    slot map).

    Raises:
        ValueError: ``rings`` has no ring (or a ring of 0) for that (stage, direction).
    """
    return microbatch % _ring_k(rings, stage, direction)


def receiving_rings(rp: Replay, rings: RingSizes) -> dict[tuple[int, Direction], int]:
    """K of every ring ``rp`` receives into, per (stage, direction), each checked to be at least 1.

    Raises:
        ValueError: a receiving (stage, direction) has no ring in ``rings`` (the fix named).
    """
    return {(b.stage, b.direction): _ring_k(rings, b.stage, b.direction) for b in rp.spans}


def overwritten_receives(rp: Replay, rings: RingSizes) -> list[Overwrite]:
    """Every receive posted into a slot whose previous buffer is still held ([Note: counting
    overwrites]).

    One :class:`~pooltk.analysis.lifetimes.Overwrite` per such receive: ``overwritten_by`` is the
    microbatch posting, ``microbatch`` the slot's previous occupant (the latest earlier buffer of
    that slot still held when the receive is posted). Ordered by stage, direction and microbatch.
    """
    by_slot: dict[tuple[int, Direction, int], list[BufferLifetime]] = defaultdict(list)
    for b in rp.spans:
        slot = ring_slot(rings, b.stage, b.direction, b.microbatch)
        by_slot[(b.stage, b.direction, slot)].append(b)
    found = []
    for group in by_slot.values():
        group.sort(key=lambda b: (b.post, b.microbatch))
        for i, new in enumerate(group):
            held = [old for old in group[:i] if new.post <= old.release]
            if held:
                found.append(
                    Overwrite(new.stage, new.direction, held[-1].microbatch, new.microbatch)
                )
    found.sort(key=lambda o: (o.stage, DIRECTIONS.index(o.direction), o.overwritten_by))
    return found


def slot_table(rp: Replay, rings: RingSizes) -> pd.DataFrame:
    """One row per receive buffer: its slot ``microbatch mod K`` and the actions that post, read
    and free it.

    Columns: stage, direction, microbatch, ring, slot, posted_after (the compute action the rank
    ran just before posting, or ``start``), read_by, freed_by, post_t, release_t, overwrites (the
    slot's previous occupant this receive writes over while it is held, or -1: [Note: counting
    overwrites]).
    """
    import pandas as pd

    over = {
        (o.stage, o.direction, o.overwritten_by): o.microbatch
        for o in overwritten_receives(rp, rings)
    }
    label = {}
    for r, events in rp.program.events.items():
        prev = "start"
        for e in events:
            label[(r, e.step, "before")] = prev
            if e.kind in ("F", "B", "I", "W"):
                prev = f"{e.kind}{e.microbatch}"
            label[(r, e.step, "self")] = f"{e.kind}{e.microbatch}"
    rows = []
    for b in rp.spans:
        k = _ring_k(rings, b.stage, b.direction)
        rows.append(
            {
                "stage": b.stage,
                "direction": b.direction,
                "microbatch": b.microbatch,
                "ring": k,
                "slot": ring_slot(rings, b.stage, b.direction, b.microbatch),
                "posted_after": label[(b.rank, b.post, "before")],
                "read_by": label[(b.rank, b.consume, "self")],
                "freed_by": label[(b.rank, b.release, "self")],
                "post_t": rp.time_of_post(b),
                "release_t": rp.time_of_release(b),
                "overwrites": over.get((b.stage, b.direction, b.microbatch), -1),
            }
        )
    return pd.DataFrame(rows)


# --------------------------------------------------------------------- the guard's rule, replayed


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardStop:
    """Where the guard's rule stops a step: the first post into a slot another microbatch still
    owns."""

    stage: int
    """The receiving stage."""
    direction: Direction
    """Which ring."""
    slot: int
    """The slot, ``incoming mod ring``."""
    ring: int
    """The ring's size K."""
    owner: int
    """The microbatch still owning the slot."""
    incoming: int
    """The microbatch whose receive was being posted."""
    rank: int
    """The rank that posted it."""
    time: float
    """When, on the replay clock."""
    ring_post: int
    """Which post of this (stage, direction) ring it was: 1 for the ring's first receive."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GuardReplay:
    """What the guard's rule does on one step of a schedule with given rings."""

    schedule: str
    """Schedule replayed."""
    rings: dict[tuple[int, Direction], int]
    """Ring per (stage, direction) that was checked."""
    posts_checked: int
    """Receive posts checked, over every stage in time order, before the rule stopped the step
    (or all of them)."""
    stop: GuardStop | None
    """Where it stopped, or ``None`` when every post found its slot free."""
    makespan: float = 0.0
    """The step's length on the replay clock (the scale of :attr:`GuardStop.time`)."""

    @property
    def ok(self) -> bool:
        return self.stop is None

    def line(self) -> str:
        """One readable line: passed, or where it stopped (which stage's which receive, and
        when)."""
        if self.stop is None:
            return f"{self.schedule}: the guard passes all {self.posts_checked} receive posts"
        e = self.stop
        return (
            f"{self.schedule}: the guard stops the step (PoolOverrunError) at tick {e.time:g} of "
            f"{self.makespan:g}: stage {e.stage}'s {ordinal(e.ring_post)} "
            f"{RECEIVED[e.direction]} receive (microbatch {e.incoming}) finds slot {e.slot} of "
            f"{e.ring} still owned by microbatch {e.owner}"
        )


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``11th``: how the guard's line counts a ring's receives."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _events_in_time(rp: Replay) -> list[tuple[float, int, Any]]:
    """Every rank's events as (start, rank, event), by start time, then rank, then position."""
    events = sorted(
        (
            (rp.start[(r, e.step)], r, e.step, e)
            for r, evs in rp.program.events.items()
            for e in evs
        ),
        key=lambda t: t[:3],
    )
    return [(time, r, e) for time, r, _, e in events]


def _free_slots(
    owners: dict[tuple[int, Direction], list[int | None]],
    ring_map: dict[tuple[int, Direction], int],
    stage: int,
    microbatch: int,
) -> None:
    """``microbatch`` gives up the slots it owns in ``stage``'s forward and grad rings."""
    for d in DIRECTIONS:
        slots = owners.get((stage, d))
        if slots is not None:
            slot = ring_slot(ring_map, stage, d, microbatch)
            if slots[slot] == microbatch:
                slots[slot] = None


def guard_replay(rp: Replay, rings: RingSizes) -> GuardReplay:
    """Replay the guard's ownership rule over every rank's order, in the order of the replay clock.

    A receive post claims slot ``microbatch mod K`` of its ring; a full backward (or a weight
    step) of the microbatch frees its forward and grad slots; in a forward-only step the forward
    frees. A post into a slot another microbatch still owns is where the real guard raises
    ``PoolOverrunError`` (notebook 02 shows it on real ranks); the replay stops at the first such
    post in time (ties: the lower rank). Each ring belongs to one stage, so the ranks' orders
    interleave by the clock without changing what any ring sees.
    """
    ring_map = receiving_rings(rp, rings)
    owners: dict[tuple[int, Direction], list[int | None]] = {
        key: [None] * k for key, k in ring_map.items()
    }
    posted: dict[tuple[int, Direction], int] = {}
    checked, stop = 0, None
    for time, r, e in _events_in_time(rp):
        if e.kind in ("RECV_F", "RECV_B"):
            key = (e.stage, "forward" if e.kind == "RECV_F" else "grad")
            slots, k = owners[key], ring_map[key]
            slot = ring_slot(ring_map, *key, e.microbatch)
            checked += 1
            posted[key] = posted.get(key, 0) + 1
            if slots[slot] is not None and slots[slot] != e.microbatch:
                stop = GuardStop(
                    stage=e.stage,
                    direction=key[1],
                    slot=slot,
                    ring=k,
                    owner=slots[slot],
                    incoming=e.microbatch,
                    rank=r,
                    time=time,
                    ring_post=posted[key],
                )
                break
            slots[slot] = e.microbatch
        elif e.kind in ("B", "W") or (e.kind == "F" and rp.program.forward_only):
            _free_slots(owners, ring_map, e.stage, e.microbatch)
    return GuardReplay(
        schedule=rp.program.schedule,
        rings=ring_map,
        posts_checked=checked,
        stop=stop,
        makespan=rp.makespan,
    )


def sets_by_version(pp: int, n_microbatches: int) -> pd.DataFrame:
    """Receive-buffer sets per (stage, direction) under 1F1B: what torch <= 2.14 and torch 2.15
    keep, and pooltk.

    Columns: stage, direction, n_microbatches, stock (torch 2.11-2.14: ``M`` up front), stock_lazy
    (torch 2.15 at its peak: the live set, but all ``M`` activations on the last stage: [Note: lazy
    receive buffers] in :mod:`pooltk.analysis.stage_sets`), ring (pooltk's slack-0 ring on torch
    <= 2.14), lazy_released (torch 2.15 with pooltk's last-stage release: the live set).
    """
    import pandas as pd

    from pooltk.analysis.stage_sets import receive_sets

    rings = rings_for(pp, n_microbatches, PoolConfig(slack=0, grad_slack=0))
    return pd.DataFrame(
        {
            "stage": r.stage,
            "direction": r.direction,
            "n_microbatches": n_microbatches,
            "stock": r.stock,
            "stock_lazy": r.stock_lazy,
            "ring": rings[(r.stage, r.direction)],
            "lazy_released": r.lazy_released,
        }
        for r in receive_sets("1F1B", pp=pp, n_microbatches=n_microbatches)
    )


# --------------------------------------------------------------------------- layouts


def layout_families() -> pd.DataFrame:
    """The torch layout table: one row per kind of receive buffer (and releases, how detection tells
    the families apart, what pooltk does, notes), one column per family, and a last row marking the
    family this torch has (``pooltk.probe()``). See [Note: one method, two families] in the families
    module."""
    import pandas as pd

    import pooltk
    from pooltk.nb.layouts import FAMILIES, layout_rows

    found = pooltk.probe().layout
    rows = layout_rows()
    rows.append(
        {
            "": "this torch",
            **{f.name: ("detected here" if f.name == found else "-") for f in FAMILIES},
        }
    )
    return pd.DataFrame(rows).rename(columns={"": "receive buffers"})


# --------------------------------------------------------------------------- the explorer


@dataclass(kw_only=True, slots=True)
class MechanismState:
    """What the notebook's explorer computed last; the widgets only display it."""

    last_inputs: dict[str, Any] | None = None
    """The inputs of the last update."""
    rings: dict[tuple[int, Direction], int] | None = None
    """Ring per (stage, direction) the pool would keep for those inputs."""
    overwrites: list[Overwrite] = field(default_factory=list)
    """The receives that ring would post into a slot still held (empty: safe; [Note: counting
    overwrites])."""
    guard: GuardReplay | None = None
    """What the guard does on that step."""
    last_error: str | None = None
    """Why the last inputs were rejected, else ``None``."""
    replay: Replay | None = None
    """The replayed step of the last successful update."""
    history: list[str] = field(default_factory=list)
    """One summary line per successful update."""

    def line(self) -> str:
        if self.last_error is not None:
            return f"rejected: {self.last_error}"
        assert self.guard is not None and self.last_inputs is not None and self.rings is not None
        pp, m = self.last_inputs["pp"], self.last_inputs["microbatches"]
        kept, stock = sum(self.rings.values()), 2 * (pp - 1) * m
        return (
            f"{self.last_inputs['schedule']} pp={pp} M={m} slack={self.last_inputs['slack']} "
            f"grad_slack={self.last_inputs['grad_slack']}: rings {ring_summary(self.rings)}, "
            f"the pool keeps {kept} of {stock} stock buffer sets; "
            f"{len(self.overwrites)} receive(s) into a slot still held; "
            f"{self.guard.line()}"
        )


def explore(
    state: MechanismState, *, schedule: str, pp: int, microbatches: int, slack: int, grad_slack: int
) -> Replay | None:
    """One explorer update: replay ``schedule`` with the ring for ``slack``; record it in
    ``state``."""
    state.last_inputs = dict(
        schedule=schedule, pp=pp, microbatches=microbatches, slack=slack, grad_slack=grad_slack
    )
    try:
        rp = replay(schedule, pp=pp, n_microbatches=microbatches)
        rings = rings_for(pp, microbatches, PoolConfig(slack=slack, grad_slack=grad_slack))
    except ValueError as exc:  # ScheduleAnalysisError, PoolConfig and ring shape errors
        state.last_error, state.replay = str(exc), None
        return None
    state.replay, state.rings, state.last_error = rp, rings, None
    state.overwrites = overwritten_receives(rp, rings)
    state.guard = guard_replay(rp, rings)
    state.history.append(state.line())
    return rp


def render_explorer(state: MechanismState) -> Figure | None:
    """Print the state's line and show the slot chart of the last update (one figure, shown once).

    Drawn off pyplot: a widget callback (see [Note: widget callbacks draw off pyplot]).
    """
    from pooltk.nb.canvas import off_pyplot
    from pooltk.nb.common import show_figure
    from pooltk.nb.timelines import slot_chart

    print(state.line())
    if state.replay is None or state.rings is None:
        return None
    with off_pyplot():  # every overwrite drawn; where the guard would stop is in the line above
        fig = slot_chart(state.replay, state.rings)
        show_figure(fig)
    return fig


def explorer_controls() -> dict[str, Any]:
    """ipywidgets for :func:`explore`'s keyword arguments (1F1B, pp 4, M 8, slack 0)."""
    from pooltk.nb.common import control

    size = {"label_px": 110, "width_px": 420}
    return {
        "schedule": control(
            "Dropdown", "schedule", options=["1F1B", "GPipe"], value="1F1B", **size
        ),
        "pp": control("IntSlider", "pp (stages)", value=4, min=2, max=8, **size),
        "microbatches": control("IntSlider", "microbatches M", value=8, min=2, max=24, **size),
        "slack": control("IntSlider", "slack", value=0, min=0, max=4, **size),
        "grad_slack": control("IntSlider", "grad slack", value=0, min=0, max=2, **size),
    }
