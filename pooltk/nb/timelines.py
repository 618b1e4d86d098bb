"""The schedule figures of notebook 00: the timeline, the in-flight depth per stage, the ring's slots.

Each takes a :class:`pooltk.nb.mechanism.Replay` (a step of torch's own schedule on a common
clock) and draws it; colours come from :mod:`pooltk.nb.style` (one colour per microbatch in every
figure). Overwrites are counted as [Note: counting overwrites] in :mod:`pooltk.nb.mechanism` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pooltk.analysis.lifetimes import DIRECTIONS, Direction
from pooltk.nb import canvas, style
from pooltk.nb.mechanism import (
    GuardReplay,
    Replay,
    RingSizes,
    inflight_depth,
    overwritten_receives,
    phases,
    ring_summary,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = ["inflight_figure", "schedule_timeline", "slot_chart"]

CLOCK_LABEL = "replay clock (ticks: forward 1, backward 2)"


def _compute_spans(rp: Replay) -> Any:
    frame = rp.compute_frame()
    return frame[frame.kind != "W"]


def schedule_timeline(rp: Replay, *, title: str | None = None) -> Figure:
    """Per stage, every forward (light) and backward (full colour) on the replay clock, phases shaded.

    The label in each box is the action and microbatch (``F3``, ``B3``); the background band of a
    stage shows its phases read off the order itself (:func:`pooltk.nb.mechanism.phases`). The
    legend lists only the phases this schedule has (GPipe has no steady phase).
    """
    from matplotlib.patches import Patch

    frame = rp.compute_frame()
    pp = rp.program.num_stages
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.6 * pp + 1.9))
    ph = phases(rp)
    present: list[str] = []
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
            if name not in present:
                present.append(name)
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
    ax.set_xlim(0, rp.makespan)
    ax.set_xlabel(CLOCK_LABEL)
    ax.grid(axis="y", visible=False)
    order = [p for p in ("warmup", "steady", "cooldown") if p in present]
    handles = [Patch(color=style.colour(p), label=style.label(p)) for p in order]
    m = rp.program.n_microbatches
    ax.set_title(
        title
        or f"{rp.program.schedule}, pp={pp}, M={m}: light = forward F, full = backward B "
        "(label: action and microbatch)",
        fontsize=10,
    )
    style.legend_below(fig, handles, ncol=len(handles))
    return fig


def _step_counts(intervals: Sequence[tuple[float, float]], times: Sequence[float]) -> list[int]:
    """How many half-open intervals ``[start, end)`` contain each time."""
    return [sum(a <= t < b for a, b in intervals) for t in times]


def inflight_figure(rp: Replay) -> Figure:
    """One panel per stage: microbatches in flight and receive buffers held over the step, against W.

    In flight: forward started, backward not finished. Held: a forward receive buffer from its
    post to its release. The dashed line is 1F1B's in-flight depth ``W = min(M, N - i)``, written in
    each panel's title: under 1F1B no stage goes past it, and stage 0 holds no receive buffer at
    all (its inputs are the data, not a receive).
    """
    from matplotlib.ticker import MaxNLocator

    comp = _compute_spans(rp)
    pp, m = rp.program.num_stages, rp.program.n_microbatches
    fig, axes = canvas.subplots(
        pp, 1, figsize=(style.FIGURE_WIDTH_IN, 1.25 * pp + 1.3), sharex=True, squeeze=False
    )
    end = rp.makespan
    for stage, ax in enumerate(axes[:, 0]):
        part = comp[comp.stage == stage]
        first_f = part[part.kind == "F"].groupby("microbatch").start.min()
        last_b = part[part.kind != "F"].groupby("microbatch").end.max()
        flight = [(first_f[mb], last_b.get(mb, end)) for mb in first_f.index]
        held = [
            (rp.time_of_post(b), rp.time_of_release(b))
            for b in rp.spans
            if b.stage == stage and b.direction == "forward"
        ]
        times = sorted({0.0, end, *(t for iv in flight + held for t in iv)})
        ax.step(
            times,
            _step_counts(flight, times),
            where="post",
            color=style.colour("in_flight"),
            lw=2,
            label=style.label("in_flight"),
        )
        ax.step(
            times,
            _step_counts(held, times),
            where="post",
            color=style.colour("held_buffers"),
            lw=2,
            ls="--",
            label=style.label("held_buffers"),
        )
        w = inflight_depth(pp, stage, m)
        ax.axhline(w, color="black", lw=1, ls=":", zorder=1)
        held_peak = max(_step_counts(held, times), default=0)
        ax.set_ylim(0, max(w, held_peak, max(_step_counts(flight, times), default=0)) + 1.2)
        ax.set_ylabel("microbatches (count)", fontsize=7.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=3))
        ax.set_title(
            f"stage {stage}: W = min(M, N - i) = min({m}, {pp} - {stage}) = {w} (dotted); "
            f"receive buffers held at most {held_peak}",
            fontsize=9,
            loc="left",
        )
    axes[-1, 0].set_xlabel(CLOCK_LABEL)
    axes[-1, 0].set_xlim(0, end)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle(f"{rp.program.schedule}, pp={pp}, M={m}: in-flight depth per stage", fontsize=10)
    style.legend_below(fig, handles, ncol=2)
    return fig


def _sub_rows(
    rp: Replay, ring_map: dict[tuple[int, Direction], int]
) -> dict[tuple[int, Direction, int], int]:
    """Sub-row of each buffer inside its slot's lane: the lowest row free at its post time.

    A receive posted after the previous buffer is freed (in the rank's order) reuses its row. In a safe ring every buffer
    of a slot fits in row 0; each extra row is a buffer that shares its slot with one still held.
    """
    rows: dict[tuple[int, Direction, int], int] = {}
    busy: dict[
        tuple[int, Direction, int], list[int]
    ] = {}  # lane -> release position per row (one rank per lane)
    for b in sorted(rp.spans, key=lambda b: (b.post, b.microbatch)):
        lane = (b.stage, b.direction, b.microbatch % ring_map[(b.stage, b.direction)])
        ends = busy.setdefault(lane, [])
        row = next(
            (i for i, e in enumerate(ends) if e < b.post), len(ends)
        )  # as overwritten_receives judges
        if row == len(ends):
            ends.append(-1)
        ends[row] = b.release
        rows[(b.stage, b.direction, b.microbatch)] = row
    return rows


def slot_chart(
    rp: Replay,
    rings: RingSizes,
    *,
    stages: Sequence[int] | None = None,
    guard: GuardReplay | None = None,
    title: str | None = None,
) -> Figure:
    """Which ring slot each microbatch's receive buffer occupies, on the replay clock.

    One lane per (stage, direction, slot). Each bar is one microbatch's buffer (label: the
    microbatch): a thin line from the receive post until a compute action first reads it, then a
    bar while it is held (an activation until its backward, a gradient until its backward). In a
    safe ring a slot's buffers follow one another on one row. A receive posted while the slot's
    previous buffer is still held gets a row of its own, a red cross at its post and a red hatched
    span until the older buffer is freed: it writes over live data (silently, on gloo and NCCL).
    With ``guard``, a vertical line marks where the guard stops the step.
    """
    from matplotlib.lines import Line2D

    ring_map = {(b.stage, b.direction): rings[(b.stage, b.direction)] for b in rp.spans}
    keep = set(range(rp.program.num_stages)) if stages is None else set(stages)
    sub = _sub_rows(rp, ring_map)
    lanes: list[tuple[int, Direction, int]] = [
        (s, d, j)
        for d in DIRECTIONS
        for s in range(rp.program.num_stages)
        if (s, d) in ring_map and s in keep
        for j in range(ring_map[(s, d)])
    ]
    depth = {
        lane: 1
        + max(
            (r for (s, d, mb), r in sub.items() if (s, d, mb % ring_map[(s, d)]) == lane), default=0
        )
        for lane in lanes
    }
    row_h, gap = 0.32, 0.3
    top: dict[tuple[int, Direction, int], float] = {}
    y = 0.0
    for lane in lanes:
        top[lane] = y
        y += depth[lane] * row_h + gap
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.5 * y + 2.0))
    by_key = {(b.stage, b.direction, b.microbatch): b for b in rp.spans}
    bad = [o for o in overwritten_receives(rp, rings) if o.stage in keep]
    for b in rp.spans:
        if b.stage not in keep:
            continue
        lane = (b.stage, b.direction, b.microbatch % ring_map[(b.stage, b.direction)])
        yb = top[lane] + (sub[(b.stage, b.direction, b.microbatch)] + 0.5) * row_h
        t_post, t_read, t_free = rp.time_of_post(b), rp.time_of_consume(b), rp.time_of_release(b)
        c = style.microbatch_colour(b.microbatch)
        ax.plot([t_post, t_read], [yb, yb], color=c, lw=1.5, solid_capstyle="butt", zorder=2)
        ax.barh(
            yb,
            t_free - t_read,
            left=t_read,
            height=row_h * 0.8,
            color=c,
            edgecolor="black",
            linewidth=0.4,
            zorder=2,
        )
        ax.text(
            (t_read + t_free) / 2,
            yb,
            str(b.microbatch),
            ha="center",
            va="center",
            fontsize=7,
            zorder=3,
        )
    for o in bad:
        old, new = (
            by_key[(o.stage, o.direction, o.microbatch)],
            by_key[(o.stage, o.direction, o.overwritten_by)],
        )
        lane = (o.stage, o.direction, o.microbatch % ring_map[(o.stage, o.direction)])
        t0, t1 = rp.time_of_post(new), rp.time_of_release(old)
        ax.fill_between(
            [t0, max(t1, t0 + 0.15)],
            top[lane],
            top[lane] + depth[lane] * row_h,
            facecolor="none",
            edgecolor="#C44E52",
            hatch="///",
            linewidth=0.0,
            zorder=1,
        )
        yn = top[lane] + (sub[(o.stage, o.direction, o.overwritten_by)] + 0.5) * row_h
        ax.plot(t0, yn, marker="x", color="#C44E52", ms=8, mew=2.0, zorder=4, ls="none")
    marks = []
    if bad:
        marks.append(
            Line2D(
                [],
                [],
                color="#C44E52",
                marker="x",
                ls="none",
                mew=2,
                label="a receive into a slot still held (hatched until the older buffer is freed)",
            )
        )
    if guard is not None and guard.stop is not None and guard.stop.stage in keep:
        stop = guard.stop
        ax.axvline(stop.time, color="#C44E52", lw=1.5, zorder=4)
        marks.append(
            Line2D(
                [],
                [],
                color="#C44E52",
                lw=1.5,
                label=f"the guard stops the step here: microbatch {stop.incoming} posting into stage "
                f"{stop.stage}'s {stop.direction} slot {stop.slot}, still owned by {stop.owner}",
            )
        )
    ax.set_yticks(
        [top[lane] + depth[lane] * row_h / 2 for lane in lanes],
        [f"s{s} {'act' if d == 'forward' else 'grad'} slot {j}" for s, d, j in lanes],
        fontsize=7.5,
    )
    ax.set_ylim(y - gap / 2, -gap / 2)
    ax.set_xlim(0, rp.makespan)
    ax.set_xlabel(CLOCK_LABEL + "; thin line: posted, not yet read; bar: held")
    ax.set_ylabel("ring slot (stage, direction, slot)")
    ax.grid(axis="y", visible=False)
    per_stage: dict[int, int] = {}
    for o in bad:
        per_stage[o.stage] = per_stage.get(o.stage, 0) + 1
    verdict = (
        f"{len(bad)} receive(s) into a slot still held (red; "
        + ", ".join(f"stage {s}: {n}" for s, n in sorted(per_stage.items()))
        + ")"
        if bad
        else "every receive finds its slot free"
    )
    ax.set_title(
        title
        or (
            f"{rp.program.schedule}, pp={rp.program.num_stages}, M={rp.program.n_microbatches}, "
            f"rings {ring_summary(ring_map)}:\n{verdict}"
        ),
        fontsize=9.5,
    )
    if marks:
        style.legend_below(fig, marks, ncol=1)
    else:
        fig.tight_layout()
    return fig
