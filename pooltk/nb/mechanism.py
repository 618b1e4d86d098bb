"""How the ring works, drawn from torch's own schedule order (notebook 00).

Everything here is derived from :mod:`pooltk.analysis.lifetimes` / :mod:`pooltk.analysis.programs`
(the recorded action order of a torch schedule) and :mod:`pooltk.pool.sizing` (the ring sizes the
pool itself uses); nothing is hand-drawn:

- :func:`replay` puts one step of a schedule on a common clock (:class:`Replay`);
- :func:`schedule_timeline` draws it per stage with the warmup / steady / cooldown phases;
- :func:`slot_chart` draws which ring slot each microbatch's activation and gradient
  occupy, from receive post to release, and marks the overwrites a too-small ring causes;
- :func:`slot_table` lists the same as a tidy table, with the actions that post and free;
- :func:`guard_replay` runs the real :class:`pooltk.pool.guard.SlotOwnership` over the order
  and returns the :class:`~pooltk.pool.guard.PoolOverrunError` the guard would raise;
- :func:`guard_note` returns the guard's own [Note: slot ownership] text;
- :func:`layout_families` tells how torch's three receive-buffer layouts differ and which
  this torch has, by feature detection;
- :func:`explore` / :func:`render_explorer` / :func:`explorer_controls`: the notebook's
  interactive view, recording what it computed in a :class:`MechanismState`.

[Note: unit-time replay]
The analysis gives each rank's actions in order, not when they run. :func:`replay` gives
every compute action a duration (forward 1 tick, backward 2 by default) and starts it as
soon as its rank is free and its input exists: ``F`` of stage ``s`` after ``F`` of stage
``s - 1`` (same microbatch), ``B`` / ``I`` of stage ``s`` after ``B`` / ``I`` of stage
``s + 1``. A receive is posted when its rank reaches it in its order (the rank's clock
then); sends take no time. The clock only draws the order on a shared axis; which buffers
overlap comes from :func:`pooltk.analysis.lifetimes.lifetimes` and :func:`~pooltk.analysis.lifetimes.overwrites`.

Imports matplotlib / seaborn / pandas / ipywidgets inside the functions that need them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pooltk.config import PoolConfig
from pooltk.pool.guard import PoolOverrunError, SlotOwnership
from pooltk.pool.sizing import ring_sizes
from pooltk.analysis.programs import Program, ScheduleAnalysisError, program
from pooltk.analysis.lifetimes import DIRECTIONS, BufferLifetime, Direction, Overwrite, lifetimes_of, overwrites

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "GuardReplay",
    "MechanismState",
    "Replay",
    "explore",
    "explorer_controls",
    "guard_note",
    "guard_replay",
    "layout_families",
    "phases",
    "render_explorer",
    "replay",
    "rings_for",
    "schedule_timeline",
    "slot_chart",
    "slot_table",
]

Rings = Mapping[tuple[int, Direction], int]


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
    forward_ticks: float
    """Duration of one forward."""
    backward_ticks: float
    """Duration of one full backward."""

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
                    rows.append({"rank": rank, "stage": e.stage, "kind": e.kind, "microbatch": e.microbatch,
                                 "position": e.step, "start": self.start[(rank, e.step)],
                                 "end": self.end[(rank, e.step)]})
        return pd.DataFrame(rows)

    def time_of_post(self, b: BufferLifetime) -> float:
        return self.start[(b.rank, b.post)]

    def time_of_consume(self, b: BufferLifetime) -> float:
        return self.start[(b.rank, b.consume)]

    def time_of_release(self, b: BufferLifetime) -> float:
        return self.end[(b.rank, b.release)]


def replay(
    schedule: str,
    *,
    pp: int,
    n_microbatches: int,
    forward_ticks: float = 1.0,
    backward_ticks: float = 2.0,
) -> Replay:
    """Analyse ``schedule`` (torch's name) and put its step on a clock. See [Note: unit-time replay].

    Raises:
        ScheduleAnalysisError: the schedule or shape cannot be analysed (torch's reason quoted).
        ValueError: a duration is not positive.
    """
    for label, v in (("forward_ticks", forward_ticks), ("backward_ticks", backward_ticks)):
        if not v > 0:
            raise ValueError(f"replay {label}: found {v!r}; required > 0.")
    prog = program(schedule, pp=pp, n_microbatches=n_microbatches)
    spans = tuple(lifetimes_of(prog))
    durations = {"F": forward_ticks, "B": backward_ticks, "I": backward_ticks / 2, "W": backward_ticks / 2}
    last = prog.num_stages - 1
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, microbatch) -> end time
    start: dict[tuple[int, int], float] = {}
    end: dict[tuple[int, int], float] = {}
    pointer = {r: 0 for r in prog.events}
    clock = {r: 0.0 for r in prog.events}

    def _ready(kind: str, stage: int, mb: int) -> float | None:
        if kind == "F":
            return 0.0 if stage == 0 else done.get(("F", stage - 1, mb))
        if kind in ("B", "I"):
            if stage == last:
                return done.get(("F", stage, mb))
            return done.get(("B", stage + 1, mb), done.get(("I", stage + 1, mb)))
        return done.get(("I", stage, mb), done.get(("B", stage, mb)))  # W after its I

    while any(pointer[r] < len(prog.events[r]) for r in prog.events):
        progressed = False
        for r, events in prog.events.items():
            while pointer[r] < len(events):
                e = events[pointer[r]]
                if e.kind in durations:
                    ready = _ready(e.kind, e.stage, e.microbatch)
                    if ready is None:
                        break
                    t0 = max(clock[r], ready)
                    clock[r] = t0 + durations[e.kind]
                    done[(e.kind, e.stage, e.microbatch)] = clock[r]
                    start[(r, e.step)], end[(r, e.step)] = t0, clock[r]
                else:  # receive posts and sends: at the rank's clock, no duration
                    start.setdefault((r, e.step), clock[r])
                    end.setdefault((r, e.step), clock[r])
                pointer[r] += 1
                progressed = True
        if not progressed:
            stuck = {r: prog.events[r][pointer[r]] for r in prog.events if pointer[r] < len(prog.events[r])}
            raise ScheduleAnalysisError(
                f"{prog.schedule}: the unit-time replay cannot make progress; ranks wait on {stuck}. "
                "The action order is not one pooltk can draw."
            )
    return Replay(program=prog, spans=spans, start=start, end=end,
                  forward_ticks=forward_ticks, backward_ticks=backward_ticks)


def phases(rp: Replay) -> dict[int, dict[str, tuple[int, int]]]:
    """Per stage, the compute phases as ``(first, last)`` positions in the stage's compute order.

    ``warmup``: forwards before the stage's first backward; ``cooldown``: backwards after
    its last forward; ``steady``: the rest (one forward, one backward, ...). A phase with
    no actions is left out (GPipe has no steady phase).
    """
    out: dict[int, dict[str, tuple[int, int]]] = {}
    by_stage: dict[int, list[str]] = {}
    for r, events in rp.program.events.items():
        for e in events:
            if e.kind in ("F", "B", "I"):
                by_stage.setdefault(e.stage, []).append(e.kind)
    for stage, kinds in sorted(by_stage.items()):
        first_b = next((i for i, k in enumerate(kinds) if k != "F"), len(kinds))
        last_f = max((i for i, k in enumerate(kinds) if k == "F"), default=-1)
        spans = {"warmup": (0, first_b - 1), "steady": (first_b, last_f),
                 "cooldown": (max(last_f + 1, first_b), len(kinds) - 1)}
        out[stage] = {name: (a, b) for name, (a, b) in spans.items() if b >= a}
    return out


# --------------------------------------------------------------------------- rings


def rings_for(pp: int, n_microbatches: int, config: PoolConfig) -> dict[tuple[int, Direction], int]:
    """The ring the pool keeps per (stage, direction) under ``config`` (0: no receives).

    The same :func:`pooltk.pool.sizing.ring_sizes` the pool uses: sized for 1F1B whatever schedule
    it is then run under (that is what ``force=True`` does).
    """
    out: dict[tuple[int, Direction], int] = {}
    for stage in range(pp):
        k = ring_sizes(pp, stage, n_microbatches, config)
        out[(stage, "forward")], out[(stage, "grad")] = k.forward, k.grad
    return out


def _ring_k(rings: Rings | int, stage: int, direction: Direction) -> int:
    if isinstance(rings, int):
        return rings
    k = rings.get((stage, direction))
    if k is None or k < 1:
        raise ValueError(f"rings: no ring for stage {stage} {direction}; required an integer >= 1 per receiving "
                         "(stage, direction). Fix: build them with rings_for(pp, M, PoolConfig(...)).")
    return k


def slot_table(rp: Replay, rings: Rings | int) -> pd.DataFrame:
    """One row per receive buffer: its slot ``microbatch mod K`` and the actions that post, read and free it.

    Columns: stage, direction, microbatch, ring, slot, posted_after (the compute action the
    rank ran just before posting, or ``start``), read_by, freed_by, post_t, release_t,
    overwrites (the microbatch whose live buffer this receive would overwrite, or -1).
    """
    import pandas as pd

    over = {(o.stage, o.direction, o.overwritten_by): o.microbatch for o in overwrites(rp.spans, _rings_map(rp, rings))}
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
        rows.append({
            "stage": b.stage, "direction": b.direction, "microbatch": b.microbatch, "ring": k,
            "slot": b.microbatch % k, "posted_after": label[(b.rank, b.post, "before")],
            "read_by": label[(b.rank, b.consume, "self")], "freed_by": label[(b.rank, b.release, "self")],
            "post_t": rp.time_of_post(b), "release_t": rp.time_of_release(b),
            "overwrites": over.get((b.stage, b.direction, b.microbatch), -1),
        })
    return pd.DataFrame(rows)


def _rings_map(rp: Replay, rings: Rings | int) -> dict[tuple[int, Direction], int]:
    return {(b.stage, b.direction): _ring_k(rings, b.stage, b.direction) for b in rp.spans}


# --------------------------------------------------------------------------- the guard


@dataclass(frozen=True, slots=True)
class GuardReplay:
    """What the guard does on one step of a schedule with given rings."""

    schedule: str
    """Schedule replayed."""
    rings: dict[tuple[int, Direction], int]
    """Ring per (stage, direction) that was checked."""
    posts_checked: int
    """Receive posts the guard checked before it stopped (or all of them)."""
    error: PoolOverrunError | None
    """The error the guard raised, or ``None`` when every post found its slot free."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def line(self) -> str:
        """One readable line: passed, or where it stopped."""
        if self.error is None:
            return f"{self.schedule}: guard passed all {self.posts_checked} receive posts"
        e = self.error
        return (f"{self.schedule}: guard raised PoolOverrunError at post {self.posts_checked}: stage {e.stage} "
                f"{e.direction} slot {e.slot} of {e.ring} still owned by microbatch {e.owner}, "
                f"microbatch {e.incoming} posting")


def guard_replay(rp: Replay, rings: Rings | int) -> GuardReplay:
    """Run :class:`pooltk.pool.guard.SlotOwnership` (the guard's own class) over every rank's order.

    A receive post acquires ``microbatch mod K``; a full backward (or a weight step) of the
    microbatch releases its forward and grad slots; in a forward-only step the forward
    releases. Ranks are independent (a ring belongs to one stage), so they are replayed one
    after the other; the first overrun stops the replay, as it stops the real run.
    """
    ring_map = _rings_map(rp, rings)
    owners = {key: SlotOwnership(stage=key[0], direction=key[1], ring=k) for key, k in ring_map.items()}
    checked = 0
    for r in sorted(rp.program.events):
        for e in rp.program.events[r]:
            if e.kind in ("RECV_F", "RECV_B"):
                key = (e.stage, "forward" if e.kind == "RECV_F" else "grad")
                checked += 1
                try:
                    owners[key].acquire(e.microbatch)
                except PoolOverrunError as exc:
                    return GuardReplay(schedule=rp.program.schedule, rings=ring_map, posts_checked=checked, error=exc)
            elif e.kind in ("B", "W") or (e.kind == "F" and rp.program.forward_only):
                for d in DIRECTIONS:
                    if (e.stage, d) in owners:
                        owners[(e.stage, d)].release(e.microbatch)
    return GuardReplay(schedule=rp.program.schedule, rings=ring_map, posts_checked=checked, error=None)


def guard_note() -> str:
    """The text of ``[Note: slot ownership]`` in :mod:`pooltk.pool.guard`: the invariant the guard checks."""
    import pooltk.pool.guard as guard

    doc = guard.__doc__ or ""
    m = re.search(r"\[Note: slot ownership\]\n(.*?)(?:\n\[Note:|\Z)", doc, flags=re.S)
    if m is None:
        raise LookupError("pooltk.pool.guard's docstring has no [Note: slot ownership] block; the guard's docs moved.")
    return m.group(1).strip()


# --------------------------------------------------------------------------- layouts


def layout_families() -> pd.DataFrame:
    """One row per method a layout family makes buffers in, and whether this torch defines it.

    Columns: family, torch, what_pooltk_does, where (``Class.method`` or module attribute),
    defined_here, detected_here (the family :func:`pooltk.pool.adapters.detect` picked).
    """
    import pandas as pd

    from pooltk.pool.adapters import detect
    from pooltk.pool.adapters.families import FAMILIES

    found = detect().layout
    rows = []
    for family in FAMILIES:
        for marker in family.markers:
            rows.append({
                "family": family.name, "torch": family.torch, "what_pooltk_does": family.what_pooltk_does,
                "where": marker.where, "defined_here": marker.defined(),
                "detected_here": found is not None and found.name == family.name,
            })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- figures


_PHASE_COLOURS = {"warmup": "#fde9c9", "steady": "#dcefdc", "cooldown": "#dde6f5"}


def schedule_timeline(rp: Replay, *, ax: Any = None, title: str | None = None) -> Figure:
    """Per stage, every forward (light) and backward (dark) on the replay clock, phases shaded.

    The label in each box is the microbatch; the background band of a stage shows its
    warmup (forwards before the first backward), steady state and cooldown, taken from the
    order itself (:func:`phases`).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    frame = rp.compute_frame()
    pp = rp.program.num_stages
    if ax is None:
        fig, ax = plt.subplots(figsize=(11, 0.62 * pp + 1.4))
    else:
        fig = ax.figure
    ph = phases(rp)
    for stage, group in frame.groupby("stage"):
        group = group[group.kind != "W"].sort_values("start")
        times = list(zip(group.start, group.end))
        for name, (a, b) in ph.get(stage, {}).items():
            ax.axvspan(times[a][0], times[b][1], ymin=1 - (stage + 1) / pp, ymax=1 - stage / pp,
                       color=_PHASE_COLOURS[name], zorder=0)
    cmap = plt.get_cmap("tab20")
    for row in frame.itertuples():
        dark = row.kind != "F"
        colour = cmap((2 * row.microbatch) % 20 + (0 if dark else 1))
        ax.barh(row.stage, row.end - row.start, left=row.start, height=0.62, color=colour,
                edgecolor="black", linewidth=0.6, zorder=2)
        ax.text((row.start + row.end) / 2, row.stage, f"{row.kind}{row.microbatch}", ha="center", va="center",
                fontsize=7 if row.end - row.start < 1.5 else 8, zorder=3)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp), [f"stage {s}" for s in range(pp)])
    ax.set_xlim(0, rp.makespan)
    ax.set_xlabel(f"replay clock (forward = {rp.forward_ticks:g} tick, backward = {rp.backward_ticks:g})")
    ax.grid(axis="y", visible=False)
    ax.legend(handles=[Patch(color=c, label=n) for n, c in _PHASE_COLOURS.items()], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize="small")
    m = rp.program.n_microbatches
    ax.set_title(title or f"{rp.program.schedule}, pp={pp}, M={m}: F = forward, B = backward (label = microbatch)")
    fig.tight_layout()
    return fig


def _sub_rows(rp: Replay, ring_map: dict[tuple[int, Direction], int]) -> dict[tuple[int, Direction, int], int]:
    """Sub-row of each buffer inside its slot's lane: the lowest row free at its post time.

    A receive posted when the previous buffer is freed reuses its row (post after release in
    the rank's order). In a safe ring every buffer of a slot fits in row 0; each
    extra row is a buffer that shares its slot with one still held.
    """
    rows: dict[tuple[int, Direction, int], int] = {}
    busy: dict[tuple[int, Direction, int], list[float]] = {}  # lane -> release time per row
    for b in sorted(rp.spans, key=lambda b: (rp.time_of_post(b), b.microbatch)):
        lane = (b.stage, b.direction, b.microbatch % ring_map[(b.stage, b.direction)])
        ends = busy.setdefault(lane, [])
        t = rp.time_of_post(b)
        row = next((i for i, e in enumerate(ends) if e <= t), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = rp.time_of_release(b)
        rows[(b.stage, b.direction, b.microbatch)] = row
    return rows


def slot_chart(
    rp: Replay,
    rings: Rings | int,
    *,
    stages: Sequence[int] | None = None,
    ax: Any = None,
    title: str | None = None,
) -> Figure:
    """Which ring slot each microbatch's receive buffer occupies, on the replay clock.

    One lane per (stage, direction, slot). Each bar is one microbatch's buffer (label =
    microbatch): a thin line from the receive post until a compute action first reads it,
    then a thick bar while it is held (an activation until its backward, a gradient until
    its backward). In a safe ring a slot's buffers follow one another on one row. A buffer
    posted while the slot's previous one is still held gets a row of its own, a red cross
    at its post and a red hatched span until the older buffer is freed: that receive
    overwrites live data (:func:`pooltk.analysis.lifetimes.overwrites`), silently on gloo.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    ring_map = _rings_map(rp, rings)
    keep = set(range(rp.program.num_stages)) if stages is None else set(stages)
    sub = _sub_rows(rp, ring_map)
    lanes: list[tuple[int, Direction, int]] = [
        (s, d, j) for d in DIRECTIONS for s in range(rp.program.num_stages) if (s, d) in ring_map and s in keep
        for j in range(ring_map[(s, d)])
    ]
    depth = {lane: 1 + max((r for (s, d, mb), r in sub.items() if (s, d, mb % ring_map[(s, d)]) == lane), default=0)
             for lane in lanes}
    row_h, gap = 0.32, 0.3
    top: dict[tuple[int, Direction, int], float] = {}
    y = 0.0
    for lane in lanes:
        top[lane] = y
        y += depth[lane] * row_h + gap
    if ax is None:
        fig, ax = plt.subplots(figsize=(11, 0.55 * y + 1.6))
    else:
        fig = ax.figure
    palette = sns.color_palette("husl", rp.program.n_microbatches)
    by_key = {(b.stage, b.direction, b.microbatch): b for b in rp.spans}
    bad = [o for o in overwrites(rp.spans, ring_map) if o.stage in keep]
    for b in rp.spans:
        if b.stage not in keep:
            continue
        lane = (b.stage, b.direction, b.microbatch % ring_map[(b.stage, b.direction)])
        yb = top[lane] + (sub[(b.stage, b.direction, b.microbatch)] + 0.5) * row_h
        t_post, t_read, t_free = rp.time_of_post(b), rp.time_of_consume(b), rp.time_of_release(b)
        c = palette[b.microbatch]
        ax.plot([t_post, t_read], [yb, yb], color=c, lw=1.5, solid_capstyle="butt", zorder=2)
        ax.barh(yb, t_free - t_read, left=t_read, height=row_h * 0.8, color=c, edgecolor="black", linewidth=0.4,
                zorder=2)
        ax.text((t_read + t_free) / 2, yb, str(b.microbatch), ha="center", va="center", fontsize=7, zorder=3)
    landed = set()
    for o in bad:
        old, new = by_key[(o.stage, o.direction, o.microbatch)], by_key[(o.stage, o.direction, o.overwritten_by)]
        lane = (o.stage, o.direction, o.microbatch % ring_map[(o.stage, o.direction)])
        t0, t1 = rp.time_of_post(new), rp.time_of_release(old)
        ax.fill_between([t0, max(t1, t0 + 0.15)], top[lane], top[lane] + depth[lane] * row_h, facecolor="none",
                        edgecolor="red", hatch="///", linewidth=0.0, zorder=1)
        yn = top[lane] + (sub[(o.stage, o.direction, o.overwritten_by)] + 0.5) * row_h
        ax.plot(t0, yn, marker="x", color="red", ms=8, mew=2.0, zorder=4)
        landed.add((o.stage, o.direction, o.overwritten_by))
    ax.set_yticks([top[lane] + depth[lane] * row_h / 2 for lane in lanes],
                  [f"s{s} {'act' if d == 'forward' else 'grad'} slot {j}" for s, d, j in lanes], fontsize=8)
    ax.set_ylim(y - gap / 2, -gap / 2)
    ax.set_xlim(0, rp.makespan)
    ax.set_xlabel("replay clock (same as the timeline)")
    ax.grid(axis="y", visible=False)
    verdict = (f"{len(landed)} receive(s) land in a slot still held (red)" if landed
               else "every receive finds its slot free")
    ax.set_title(title or (f"{rp.program.schedule}, pp={rp.program.num_stages}, M={rp.program.n_microbatches}, "
                           f"rings {_ring_summary(ring_map)}: {verdict}"), fontsize=10)
    fig.tight_layout()
    return fig


def _ring_summary(ring_map: Mapping[tuple[int, Direction], int]) -> str:
    """``act [- 3 2 1] grad [1 1 1 -]``: ring per stage, ``-`` where a stage has no receives."""
    stages = range(1 + max(s for s, _ in ring_map))
    fwd = " ".join(str(ring_map.get((s, "forward")) or "-") for s in stages)
    grad = " ".join(str(ring_map.get((s, "grad")) or "-") for s in stages)
    return f"act [{fwd}] grad [{grad}]"


# --------------------------------------------------------------------------- the explorer


@dataclass(kw_only=True, slots=True)
class MechanismState:
    """What the notebook's explorer computed last; the widgets only display it."""

    last_inputs: dict[str, Any] | None = None
    """The inputs of the last update."""
    rings: dict[tuple[int, Direction], int] | None = None
    """Ring per (stage, direction) the pool would keep for those inputs."""
    overwrites: list[Overwrite] = field(default_factory=list)
    """What that ring would overwrite under the chosen schedule (empty: safe)."""
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
        return (f"{self.last_inputs['schedule']} pp={pp} M={m} slack={self.last_inputs['slack']} "
                f"grad_slack={self.last_inputs['grad_slack']}: rings {_ring_summary(self.rings)}, the pool keeps "
                f"{kept} of {stock} stock buffer sets; {len(self.overwrites)} overwrite(s); {self.guard.line()}")


def explore(
    state: MechanismState, *, schedule: str, pp: int, microbatches: int, slack: int, grad_slack: int
) -> Replay | None:
    """One explorer update: replay ``schedule`` with the tight ring for ``slack``; record it in ``state``."""
    state.last_inputs = dict(schedule=schedule, pp=pp, microbatches=microbatches, slack=slack, grad_slack=grad_slack)
    try:
        rp = replay(schedule, pp=pp, n_microbatches=microbatches)
        rings = rings_for(pp, microbatches, PoolConfig(slack=slack, grad_slack=grad_slack))
    except ValueError as exc:  # ScheduleAnalysisError, PoolConfig and ring shape errors
        state.last_error, state.replay = str(exc), None
        return None
    state.replay, state.rings, state.last_error = rp, rings, None
    state.overwrites = overwrites(rp.spans, _rings_map(rp, rings))
    state.guard = guard_replay(rp, rings)
    state.history.append(state.line())
    return rp


def render_explorer(state: MechanismState) -> Figure | None:
    """Print the state's line and draw the slot chart of the last update."""
    import matplotlib.pyplot as plt

    print(state.line())
    if state.replay is None or state.rings is None:
        return None
    fig = slot_chart(state.replay, state.rings)
    plt.show()
    return fig


def explorer_controls() -> dict[str, Any]:
    """ipywidgets for :func:`explore`'s keyword arguments (1F1B, pp 4, M 8, slack 0)."""
    import ipywidgets as w

    style = {"description_width": "110px"}
    layout = w.Layout(width="420px")
    return {
        "schedule": w.Dropdown(options=["1F1B", "GPipe"], value="1F1B", description="schedule", style=style,
                               layout=layout),
        "pp": w.IntSlider(value=4, min=2, max=8, description="pp (stages)", style=style, layout=layout),
        "microbatches": w.IntSlider(value=8, min=2, max=24, description="microbatches M", style=style, layout=layout),
        "slack": w.IntSlider(value=0, min=0, max=4, description="slack", style=style, layout=layout),
        "grad_slack": w.IntSlider(value=0, min=0, max=2, description="grad slack", style=style, layout=layout),
    }
