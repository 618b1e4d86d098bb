"""Notebook 00's figures: timelines, the in-flight depth per stage, the ring's slots, torch 2.15.

Each schedule figure takes a :class:`pooltk.nb.mechanism.Replay` (a step of torch's own schedule on
a common clock) and draws it; colours come from :mod:`pooltk.nb.style` (one colour per microbatch in
every figure). Overwrites are counted as [Note: counting overwrites] in :mod:`pooltk.nb.mechanism`
says. Every title states what the figure shows first, and the setting after it.

- :func:`primer_timelines`: 1F1B above GPipe on one clock (the primer);
- :func:`inflight_figure`: microbatches in flight and receive buffers held, per stage, against W;
- :func:`slot_chart`: which ring slot holds which microbatch; with a guard, cut where it stops;
- :func:`versions_figure`: the receive-buffer sets per stage of torch 2.14, torch 2.15 and pooltk.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk.analysis.lifetimes import DIRECTIONS, Direction
from pooltk.nb import canvas, style
from pooltk.nb.mechanism import (
    RECEIVED,
    GuardReplay,
    Replay,
    RingSizes,
    inflight_depth,
    ordinal,
    overwritten_receives,
    phases,
    receiving_rings,
    ring_slot,
    ring_summary,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = [
    "CLOCK_LABEL",
    "inflight_figure",
    "primer_timelines",
    "slot_chart",
    "versions_figure",
]

CLOCK_LABEL = "time in the step (ticks: forward 1, backward 2)"
"""The one clock every schedule figure uses (notebooks 00 and 04; [Note: unit-time replay])."""


def _in_flight(rp: Replay) -> dict[int, list[tuple[float, float]]]:
    """Per stage, each microbatch in flight: from its forward's start to its backward's end."""
    frame = rp.compute_frame()
    frame = frame[frame.kind != "W"]
    out = {}
    for stage, part in frame.groupby("stage"):
        first_f = part[part.kind == "F"].groupby("microbatch").start.min()
        last_b = part[part.kind != "F"].groupby("microbatch").end.max()
        out[stage] = [(first_f[mb], last_b.get(mb, rp.makespan)) for mb in first_f.index]
    return out


def _draw_timeline(ax: Any, rp: Replay, *, xmax: float) -> set[str]:
    """Draw ``rp``'s compute actions and phase bands into ``ax``; return the phases drawn."""
    frame = rp.compute_frame()
    pp = rp.program.num_stages
    ph = phases(rp)
    present: set[str] = set()
    for stage, rows in frame.groupby("stage"):
        group = rows[rows.kind != "W"].sort_values("start")
        times = list(zip(group.start, group.end))
        for name, (a, b) in ph.get(stage, {}).items():
            ax.axvspan(
                times[a][0],
                times[b][1],
                ymin=1 - (stage + 1) / pp,
                ymax=1 - stage / pp,
                color=style.colour(name),
                zorder=0,
            )
            present.add(name)
    for row in frame.itertuples():
        forward = row.kind == "F"
        ax.barh(
            row.stage,
            row.end - row.start,
            left=row.start,
            height=0.62,
            color=style.microbatch_colour(row.microbatch),
            alpha=0.45 if forward else 1.0,
            edgecolor="black",
            linewidth=0.6,
            zorder=2,
        )
        ax.text(
            (row.start + row.end) / 2,
            row.stage,
            f"{row.kind}{row.microbatch}",
            ha="center",
            va="center",
            fontsize=6.5 if row.end - row.start < 1.5 else 7.5,
            zorder=3,
        )
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp), [f"stage {s}" for s in range(pp)])
    ax.set_ylabel("pipeline stage (one rank each)")
    ax.set_xlim(0, xmax)
    ax.grid(axis="y", visible=False)
    return present


def _most_in_flight(rp: Replay) -> list[int]:
    """Per stage, the most microbatches in flight at once (forward started, backward not
    finished)."""
    most = []
    for flight in _in_flight(rp).values():
        times = sorted({t for iv in flight for t in iv})
        most.append(max(_step_counts(flight, times), default=0))
    return most


def primer_timelines(one_f_one_b: Replay, gpipe: Replay) -> Figure:
    """1F1B above GPipe, one stage per row, on one clock: what each stage runs when (the primer).

    Light boxes are forwards, full ones backwards (label: action and microbatch); the background
    bands are each stage's warmup, steady and cooldown phases. The title says how many
    microbatches each schedule keeps in flight on a stage at most.
    """
    from matplotlib.patches import Patch

    pp = one_f_one_b.program.num_stages
    m = one_f_one_b.program.n_microbatches
    xmax = max(one_f_one_b.makespan, gpipe.makespan)
    fig, axes = canvas.subplots(
        2, 1, figsize=(style.FIGURE_WIDTH_IN, 1.2 * pp + 3.2), sharex=True, squeeze=False
    )
    present: set[str] = set()
    for ax, rp in zip(axes[:, 0], (one_f_one_b, gpipe)):
        present |= _draw_timeline(ax, rp, xmax=xmax)
        most = _most_in_flight(rp)
        ax.set_title(
            f"{rp.program.schedule}: stages 0-{pp - 1} each hold at most "
            f"{', '.join(str(k) for k in most)} microbatches between forward and backward",
            fontsize=9.5,
            loc="left",
        )
    axes[-1, 0].set_xlabel(CLOCK_LABEL)
    fig.suptitle(
        f"1F1B starts each backward as early as it can and holds fewer microbatches than GPipe,\n"
        f"which runs all {m} forwards first "
        f"(pp={pp}, M={m}; light box: forward F, full: backward B)",
        fontsize=10,
    )
    order = [p for p in ("warmup", "steady", "cooldown") if p in present]
    handles = [Patch(color=style.colour(p), label=style.label(p)) for p in order]
    style.legend_below(fig, handles, ncol=len(handles))
    return fig


def _step_counts(intervals: Sequence[tuple[float, float]], times: Sequence[float]) -> list[int]:
    """How many half-open intervals ``[start, end)`` contain each time."""
    return [sum(a <= t < b for a, b in intervals) for t in times]


def _inflight_panel(ax: Any, rp: Replay, stage: int, flight: list[tuple[float, float]]) -> int:
    """Draw ``stage``'s microbatches in flight, receive buffers held and W; return the most held."""
    from matplotlib.ticker import MaxNLocator

    pp, m = rp.program.num_stages, rp.program.n_microbatches
    held = [
        (rp.time_of_post(b), rp.time_of_release(b))
        for b in rp.spans
        if b.stage == stage and b.direction == "forward"
    ]
    times = sorted({0.0, rp.makespan, *(t for iv in flight + held for t in iv)})
    in_flight, held_at = _step_counts(flight, times), _step_counts(held, times)
    ax.step(
        times,
        in_flight,
        where="post",
        color=style.colour("in_flight"),
        lw=2,
        label=style.label("in_flight"),
    )
    ax.step(
        times,
        held_at,
        where="post",
        color=style.colour("held_buffers"),
        lw=2,
        ls="--",
        label=style.label("held_buffers"),
    )
    w = inflight_depth(pp, stage, m)
    ax.axhline(w, color="black", lw=1, ls=":", zorder=1)
    held_peak = max(held_at, default=0)
    ax.set_ylim(0, max(w, held_peak, max(in_flight, default=0)) + 1.2)
    ax.set_ylabel("microbatches (count)", fontsize=7.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=3))
    ax.set_title(
        f"stage {stage}: W = min(M, N - i) = min({m}, {pp} - {stage}) = {w} (dotted); "
        f"receive buffers held at most {held_peak}",
        fontsize=9,
        loc="left",
    )
    return held_peak


def _inflight_headline(rp: Replay, held_peaks: list[int]) -> str:
    """Whether every stage holds at most W activation buffers, then the peaks and the shape."""
    pp, m = rp.program.num_stages, rp.program.n_microbatches
    within = all(h <= inflight_depth(pp, i, m) for i, h in enumerate(held_peaks))
    if within:
        verdict = (
            f"{rp.program.schedule}: no stage holds more activation buffers than its in-flight "
            "depth W = min(M, N - i)"
        )
    else:
        verdict = (
            f"{rp.program.schedule}: some stage holds more activation buffers than "
            "W = min(M, N - i)"
        )
    return verdict + (
        f"\n(held at most: {', '.join(str(h) for h in held_peaks)} on stages 0-{pp - 1}; "
        f"pp=N={pp}, M={m})"
    )


def inflight_figure(rp: Replay) -> Figure:
    """One panel per stage: microbatches in flight and receive buffers held, against W.

    In flight: forward started, backward not finished. Held: a forward receive buffer from its
    post to its release. The dashed line is 1F1B's in-flight depth ``W = min(M, N - i)``, written in
    each panel's title: under 1F1B no stage goes past it, and stage 0 holds no receive buffer at
    all (its inputs are the data, not a receive).
    """
    in_flight = _in_flight(rp)
    pp = rp.program.num_stages
    fig, axes = canvas.subplots(
        pp, 1, figsize=(style.FIGURE_WIDTH_IN, 1.25 * pp + 1.3), sharex=True, squeeze=False
    )
    held_peaks = [
        _inflight_panel(ax, rp, stage, in_flight.get(stage, []))
        for stage, ax in enumerate(axes[:, 0])
    ]
    axes[-1, 0].set_xlabel(CLOCK_LABEL)
    axes[-1, 0].set_xlim(0, rp.makespan)
    fig.suptitle(_inflight_headline(rp, held_peaks), fontsize=10)
    style.legend_below(fig, axes[0, 0].get_legend_handles_labels()[0], ncol=2)
    return fig


Lane = tuple[int, Direction, int]
"""A slot chart's lane: (stage, direction, slot)."""
ROW_H, LANE_GAP = 0.32, 0.3
"""A slot chart's row height and the gap between two lanes (y units)."""
OVERWRITE_RED = "#C44E52"
"""The colour of an overwrite and of the guard's stop in a slot chart."""


def _lane(b: Any, ring_map: dict[tuple[int, Direction], int]) -> Lane:
    """The lane of buffer ``b``: its (stage, direction, slot)."""
    return (b.stage, b.direction, ring_slot(ring_map, b.stage, b.direction, b.microbatch))


def _sub_rows(
    rp: Replay, ring_map: dict[tuple[int, Direction], int]
) -> dict[tuple[int, Direction, int], int]:
    """Sub-row of each buffer inside its slot's lane: the lowest row free at its post time.

    A receive posted after the previous buffer is freed (in the rank's order) reuses its row. In a
    safe ring every buffer of a slot fits in row 0; each extra row is a buffer that shares its slot
    with one still held.
    """
    rows: dict[tuple[int, Direction, int], int] = {}
    # lane -> release position per row (one rank per lane)
    busy: dict[Lane, list[int]] = {}
    for b in sorted(rp.spans, key=lambda b: (b.post, b.microbatch)):
        lane = _lane(b, ring_map)
        ends = busy.setdefault(lane, [])
        # as overwritten_receives judges
        row = next((i for i, e in enumerate(ends) if e < b.post), len(ends))
        if row == len(ends):
            ends.append(-1)
        ends[row] = b.release
        rows[(b.stage, b.direction, b.microbatch)] = row
    return rows


def _slot_chart_title(
    rp: Replay, ring_map: dict[tuple[int, Direction], int], bad: list[Any], guard: Any
) -> str:
    """The takeaway first (safe, how many overwrites, where the guard stopped), then the setting."""
    setting = (
        f"{rp.program.schedule}, pp={rp.program.num_stages}, M={rp.program.n_microbatches}, "
        f"rings {ring_summary(ring_map)}"
    )
    if guard is not None and guard.stop is not None:
        e = guard.stop
        return (
            f"The guard stops the step at tick {e.time:g} of {rp.makespan:g}, before anything is "
            f"overwritten: stage {e.stage}'s {ordinal(e.ring_post)} {RECEIVED[e.direction]} "
            f"receive (microbatch {e.incoming})\nfinds slot {e.slot} still owned by microbatch "
            f"{e.owner}. "
            f"{setting}; drawn up to the stop"
        )
    if not bad:
        return (
            "Every receive lands in a slot already freed: microbatch c takes slot c mod K, which "
            f"microbatch c - K left at its backward\n({setting})"
        )
    per_stage = Counter(o.stage for o in bad)
    where = ", ".join(f"stage {s}: {n}" for s, n in sorted(per_stage.items()))
    return (
        f"{len(bad)} receives land in a slot whose buffer is still held (red x; {where})\n"
        f"({setting})"
    )


@dataclass(frozen=True, slots=True)
class _SlotRows:
    """Where a slot chart draws: its lanes top to bottom, each as deep as the buffers it holds at
    once."""

    ring_map: dict[tuple[int, Direction], int]
    """(stage, direction) -> K, for the rings the replay receives into."""
    sub: dict[tuple[int, Direction, int], int]
    """(stage, direction, microbatch) -> the buffer's row inside its lane."""
    lanes: list[Lane]
    """The lanes drawn, top to bottom."""
    depth: dict[Lane, int]
    """Rows per lane."""
    top: dict[Lane, float]
    """The y of each lane's top edge."""
    height: float
    """The y below the last lane."""

    def y_of(self, lane: Lane, microbatch: int) -> float:
        """The y of the middle of the row that ``microbatch``'s buffer takes in ``lane``."""
        return self.top[lane] + (self.sub[(lane[0], lane[1], microbatch)] + 0.5) * ROW_H


def _slot_rows(rp: Replay, rings: RingSizes, spans: list[Any], cut: float | None) -> _SlotRows:
    """The lanes of every ring the replay receives into (up to the cut: those with a receive)."""
    ring_map = receiving_rings(rp, rings)
    sub = _sub_rows(rp, ring_map)
    used = {(b.stage, b.direction) for b in spans}
    lanes: list[Lane] = [
        (s, d, j)
        for d in DIRECTIONS
        for s in range(rp.program.num_stages)
        if (s, d) in ring_map and (cut is None or (s, d) in used)
        for j in range(ring_map[(s, d)])
    ]
    rows_used: dict[Lane, list[int]] = {lane: [] for lane in lanes}
    for b in spans:
        rows_used[_lane(b, ring_map)].append(sub[(b.stage, b.direction, b.microbatch)])
    depth = {lane: 1 + max(rows_used[lane], default=0) for lane in lanes}
    top: dict[Lane, float] = {}
    y = 0.0
    for lane in lanes:
        top[lane] = y
        y += depth[lane] * ROW_H + LANE_GAP
    return _SlotRows(ring_map, sub, lanes, depth, top, y)


def _drawn_spans(rp: Replay, stop: Any) -> list[Any]:
    """The buffers a slot chart draws: all, or with a guard's ``stop`` those posted before it and
    the post it refused."""
    if stop is None:
        return list(rp.spans)
    refused = (stop.stage, stop.direction, stop.incoming)
    return [
        b
        for b in rp.spans
        if rp.time_of_post(b) < stop.time or (b.stage, b.direction, b.microbatch) == refused
    ]


def _draw_buffers(ax: Any, rp: Replay, spans: list[Any], rows: _SlotRows, end: float) -> None:
    """Each buffer: a thin line from its post to its first read, a bar while held, its
    microbatch."""
    for b in spans:
        yb = rows.y_of(_lane(b, rows.ring_map), b.microbatch)
        t_post = rp.time_of_post(b)
        t_read = min(rp.time_of_consume(b), end)
        t_free = min(rp.time_of_release(b), end)
        c = style.microbatch_colour(b.microbatch)
        ax.plot([t_post, t_read], [yb, yb], color=c, lw=1.5, solid_capstyle="butt", zorder=2)
        if t_free > t_read:
            ax.barh(
                yb,
                t_free - t_read,
                left=t_read,
                height=ROW_H * 0.8,
                color=c,
                edgecolor="black",
                linewidth=0.4,
                zorder=2,
            )
        ax.text(
            (t_read + t_free) / 2 if t_free > t_read else (t_post + t_read) / 2,
            yb,
            str(b.microbatch),
            ha="center",
            va="center",
            fontsize=7,
            zorder=3,
        )


def _draw_overwrites(ax: Any, rp: Replay, bad: list[Any], rows: _SlotRows, *, hatch: bool) -> None:
    """A red cross at each overwriting post; with ``hatch``, a red hatched span over its lane until
    the older buffer is freed."""
    by_key = {(b.stage, b.direction, b.microbatch): b for b in rp.spans}
    for o in bad:
        old = by_key[(o.stage, o.direction, o.microbatch)]
        new = by_key[(o.stage, o.direction, o.overwritten_by)]
        lane = _lane(old, rows.ring_map)
        t0 = rp.time_of_post(new)
        if hatch:
            t1 = rp.time_of_release(old)
            ax.fill_between(
                [t0, max(t1, t0 + 0.15)],
                rows.top[lane],
                rows.top[lane] + rows.depth[lane] * ROW_H,
                facecolor="none",
                edgecolor=OVERWRITE_RED,
                hatch="///",
                linewidth=0.0,
                zorder=1,
            )
        yn = rows.y_of(lane, o.overwritten_by)
        ax.plot(t0, yn, marker="x", color=OVERWRITE_RED, ms=8, mew=2.0, zorder=4, ls="none")


def _overwrite_mark() -> Any:
    """The legend entry of an overwrite drawn to the step's end."""
    from matplotlib.lines import Line2D

    return Line2D(
        [],
        [],
        color=OVERWRITE_RED,
        marker="x",
        ls="none",
        mew=2,
        label="a receive into a slot still held (hatched until the older buffer is freed)",
    )


def _draw_stop(ax: Any, stop: Any) -> Any:
    """The guard's stop: a red vertical line; returns its legend entry, which names the post
    refused."""
    from matplotlib.lines import Line2D

    ax.axvline(stop.time, color=OVERWRITE_RED, lw=1.5, zorder=4)
    return Line2D(
        [],
        [],
        color=OVERWRITE_RED,
        marker="x",
        mew=2,
        lw=1.5,
        label=f"the guard refuses this post and the step stops (PoolOverrunError):\n"
        f"microbatch {stop.incoming} into stage {stop.stage}'s {RECEIVED[stop.direction]} "
        f"slot {stop.slot}, still owned by microbatch {stop.owner}",
    )


def _label_slot_axes(ax: Any, rows: _SlotRows, end: float, *, cut: bool) -> None:
    """One tick per lane, the clock on x (a margin past a cut), the axis labels."""
    ax.set_yticks(
        [rows.top[lane] + rows.depth[lane] * ROW_H / 2 for lane in rows.lanes],
        [f"s{s} {'act' if d == 'forward' else 'grad'} slot {j}" for s, d, j in rows.lanes],
        fontsize=7.5,
    )
    ax.set_ylim(rows.height - LANE_GAP / 2, -LANE_GAP / 2)
    ax.set_xlim(0, end + (0.04 * end + 0.2 if cut else 0))
    ax.set_xlabel(CLOCK_LABEL + "; thin line: posted, not yet read; bar: held")
    ax.set_ylabel("ring slot (stage, direction, slot)")
    ax.grid(axis="y", visible=False)


def slot_chart(
    rp: Replay,
    rings: RingSizes,
    *,
    guard: GuardReplay | None = None,
) -> Figure:
    """Which ring slot each microbatch's receive buffer occupies, on the replay clock.

    One lane per (stage, direction, slot). Each bar is one microbatch's buffer (label: the
    microbatch): a thin line from the receive post until a compute action first reads it, then a
    bar while it is held (an activation until its backward, a gradient until its backward). In a
    safe ring a slot's buffers follow one another on one row. A receive posted while the slot's
    previous buffer is still held gets a row of its own, a red cross at its post and a red hatched
    span until the older buffer is freed: it writes over live data (silently, on gloo and NCCL).

    With a ``guard`` that stops the step, the chart ends where it stops: nothing after the stop is
    drawn (no later receive, no bar past the stop, no lane that had no receive yet), and the red
    cross is the post the guard refused.
    """
    stop = guard.stop if guard is not None else None
    cut = stop.time if stop is not None else None
    spans = _drawn_spans(rp, stop)
    rows = _slot_rows(rp, rings, spans, cut)
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.5 * rows.height + 2.2))
    end = cut if cut is not None else rp.makespan
    _draw_buffers(ax, rp, spans, rows, end)
    all_bad = overwritten_receives(rp, rings)
    bad = all_bad
    marks = []
    if stop is not None:
        refused = (stop.stage, stop.direction, stop.incoming)
        bad = [o for o in all_bad if (o.stage, o.direction, o.overwritten_by) == refused]
    _draw_overwrites(ax, rp, bad, rows, hatch=stop is None)
    if bad and stop is None:
        marks.append(_overwrite_mark())
    if stop is not None:
        marks.append(_draw_stop(ax, stop))
    _label_slot_axes(ax, rows, end, cut=stop is not None)
    ax.set_title(_slot_chart_title(rp, rows.ring_map, all_bad, guard), fontsize=9.5)
    if marks:
        style.legend_below(fig, marks, ncol=1)
    else:
        fig.tight_layout()
    return fig


def versions_figure(sets: Any) -> Figure:
    """Receive-buffer sets per stage (both directions): torch <= 2.14, torch 2.15, pooltk on each.

    ``sets`` is :func:`pooltk.nb.mechanism.sets_by_version`'s frame. Bars from zero, one colour per
    series (:mod:`pooltk.nb.style`), the total of each series in its legend entry.
    """
    import numpy as np

    series = (
        ("stock", "stock", "stock torch (<= 2.14)"),
        ("stock_lazy", "stock_lazy", "stock torch >= 2.15 (lazy buffers)"),
        ("ring", "tight", "pooltk ring, slack 0 (torch <= 2.14)"),
        ("lazy_released", "lazy_released", "torch >= 2.15 + pooltk release"),
    )
    per_stage = sets.groupby("stage", as_index=False)[[c for c, _, _ in series]].sum()
    totals = {c: int(per_stage[c].sum()) for c, _, _ in series}
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 4.2))
    x = np.arange(len(per_stage))
    width = 0.8 / len(series)
    for k, (col, key, text) in enumerate(series):
        bars = ax.bar(
            x + (k - (len(series) - 1) / 2) * width,
            per_stage[col],
            width,
            color=style.colour(key),
            label=f"{text}: {totals[col]} sets",
        )
        style.bar_value_labels(ax, bars, "{:,.0f}")
    ax.set_xticks(x, [f"stage {s}" for s in per_stage["stage"]])
    ax.set_xlabel("stage (index)")
    ax.set_ylabel("receive buffer sets held (count)")
    ax.set_ylim(0, float(per_stage["stock"].max()) * 1.2)
    last = int(per_stage["stage"].max())
    m = int(sets["n_microbatches"].iloc[0])
    ax.set_title(
        f"torch 2.15 allocates each receive when it comes: {totals['stock_lazy']} of "
        f"{totals['stock']} sets, but the last stage still keeps all {m} activations\n"
        f"(its kept losses hold them); pooltk's release frees those: {totals['lazy_released']} "
        f"sets, as many as the ring on torch <= 2.14 (1F1B, pp={last + 1}, M={m})",
        fontsize=9.5,
    )
    style.legend_below(fig, ax.get_legend_handles_labels()[0], ncol=2)
    return fig
