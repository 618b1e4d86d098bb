"""What slack buys: its cost and tolerance under 1F1B (notebook 00), and per schedule (notebook 04).

- :func:`slack_sweep` / :func:`slack_sweep_figure`: under 1F1B, the sets the pool keeps at each
  slack, and the receives into a slot still held for the exact ring, a ring sized one set short,
  and GPipe run on the 1F1B ring (notebook 00's "what slack buys");
- :func:`slack_needs` / :func:`slack_needs_figure`: for every schedule torch ships, the slack a ring
  sized by each rule needs to be safe (notebook 04).

A ring of ``K`` buffer sets gives microbatch ``c`` slot ``c mod K``; it is safe when no receive is
posted into a slot still held ([Note: counting overwrites] in :mod:`pooltk.nb.mechanism`). The
slack a sizing rule needs is the smallest ``s`` for which ``rule + s`` (capped at ``M``) is safe on
every stage, computed from the schedule's own receive lifetimes (:mod:`pooltk.analysis.lifetimes`).
Nothing here is measured on a device: the lifetimes are torch's action order, and
``data/validation/schedules_gloo_*.csv`` records that the slack-0 rings pooltk derives are bitwise
equal to stock on real gloo ranks.

[Note: sizing rules]
- ``receive lifetimes`` (pooltk): the smallest safe ring of the walked lifetimes, post to release.
  Needs no slack by construction; the reference.
- ``first read to release``: the live set counted from the action that first reads a buffer,
  not from its receive post (torch 2.15's ``analyze_pipeline_activation_liveness`` counts
  activations this way). It misses that a receive is posted before its forward, and, for
  gradients, that a zero-bubble schedule holds them until the weight step.
- ``1F1B formula``: ``W = min(M, N - i)`` activations and 1 gradient, the 1F1B bound, applied to
  a schedule it was not proved for (``force=True`` with pooltk's default sizing).
- ``PR #3780 ring``: the original pool's ``max(2, min(M, max(1, N - i) + slack))`` for both
  directions; its default slack is 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pooltk.analysis.lifetimes import (
    DIRECTIONS,
    BufferLifetime,
    lifetimes,
    overwrites,
    peak_overlap,
)
from pooltk._validate import check_int
from pooltk.analysis.programs import CATALOG, analysable_schedules, resolve_schedule
from pooltk.nb import canvas, style

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "PR_DEFAULT_SLACK",
    "RULES",
    "pr_ring_size",
    "slack_needs",
    "slack_needs_figure",
    "slack_sweep",
    "slack_sweep_figure",
]

RULES: tuple[str, ...] = ("first read to release", "1F1B formula", "PR #3780 ring")
"""The sizing rules compared ([Note: sizing rules]); pooltk's receive lifetimes need 0 slack."""
PR_DEFAULT_SLACK = 2
"""The original pool's default slack (``pp_recv_buffer_pool_slack``, Automodel PR #3780)."""


def pr_ring_size(num_stages: int, stage: int, n_microbatches: int, slack: int) -> int:
    """The original pool's ring, both directions: ``max(2, min(M, max(1, N - i) + slack))`` (PR
    #3780)."""
    check_int("num_stages", num_stages, low=1)
    check_int("stage", stage, low=0, high=num_stages - 1)
    check_int("n_microbatches", n_microbatches, low=1)
    check_int("slack", slack, low=0)
    return max(2, min(n_microbatches, max(1, num_stages - stage) + slack))


def _safe(group: Sequence[BufferLifetime], k: int) -> bool:
    return not overwrites(group, k)


def _needed(group: Sequence[BufferLifetime], ring: int, m: int) -> int:
    """The smallest slack ``s`` whose ring ``ring + s`` (in ``[1, M]``) is safe."""
    for s in range(m + 1):
        if _safe(group, max(1, min(m, ring + s))):
            return s
    return m  # unreachable: K = M gives every microbatch its own slot


def _stage_needs(
    spans: Sequence[BufferLifetime], stage: int, n: int, m: int
) -> list[tuple[str, str, int, int]]:
    """Each rule's (rule, direction, slack needed, ring before slack) on one stage of ``n``."""
    out = []
    groups = {d: [b for b in spans if b.stage == stage and b.direction == d] for d in DIRECTIONS}
    for d, group in groups.items():
        if not group:
            continue
        read = peak_overlap((b.consume, b.release) for b in group)
        out.append(("first read to release", d, _needed(group, read, m), read))
        formula = min(m, n - stage) if d == "forward" else 1
        out.append(("1F1B formula", d, _needed(group, formula, m), formula))
    both = [g for g in groups.values() if g]
    if both:
        s = next(
            s for s in range(m + 1) if all(_safe(g, pr_ring_size(n, stage, m, s)) for g in both)
        )
        out.append(("PR #3780 ring", "both", s, pr_ring_size(n, stage, m, 0)))
    return out


def _schedule_needs(name: str, pp: int, m: int) -> list[dict]:
    """:func:`slack_needs`' rows of one schedule: per rule and direction, the most over stages."""
    name, _ = resolve_schedule(name)  # any spelling; an unknown name is named, never a KeyError
    vpp = CATALOG[name].stages_per_rank
    spans = lifetimes(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
    n = pp * vpp
    worst: dict[tuple[str, str], tuple[int, int]] = {}
    base: dict[tuple[str, str], list[int]] = {}  # the rule's ring per stage before slack
    for stage in range(n):
        for rule, direction, s, k in _stage_needs(spans, stage, n, m):
            base.setdefault((rule, direction), []).append(k)
            if s > worst.get((rule, direction), (-1, -1))[0]:
                worst[(rule, direction)] = (s, stage)
    rows = []
    for rule in RULES:
        for direction in (*DIRECTIONS, "both"):
            if (rule, direction) not in worst:
                continue
            s, stage = worst[(rule, direction)]
            if rule == "PR #3780 ring":
                at_m = any(pr_ring_size(n, i, m, s) >= m for i in range(n))
            else:
                at_m = any(k + s >= m for k in base[(rule, direction)])
            rows.append(
                {
                    "schedule": name,
                    "vpp": vpp,
                    "rule": rule,
                    "direction": direction,
                    "slack_needed": s,
                    "worst_stage": stage,
                    "covered_by_pr_default": s <= PR_DEFAULT_SLACK,
                    "ring_at_m": at_m,
                }
            )
    return rows


def slack_needs(
    schedules: Sequence[str] | None = None, *, pp: int = 4, n_microbatches: int = 8
) -> pd.DataFrame:
    """Per schedule, rule and direction: the slack the rule needs (most over stages), the stage
    needing it.

    Columns: schedule, vpp, rule, direction, slack_needed, worst_stage, covered_by_pr_default (slack
    needed <= :data:`PR_DEFAULT_SLACK`), ring_at_m (at that slack some stage's ring is ``M``: that
    stage saves nothing, so a slack of 0 there is no saving, not a success). The PR's ring is one
    size for both directions, so its rows say ``both``.
    """
    import pandas as pd

    if isinstance(schedules, str):  # one name, not its letters
        schedules = [schedules]
    rows = []
    for name in schedules or analysable_schedules():
        rows += _schedule_needs(name, pp, n_microbatches)
    return pd.DataFrame(rows)


_COLUMN_TEXT = {
    ("first read to release", "forward"): "counted from\nfirst read:\nactivations",
    ("first read to release", "grad"): "counted from\nfirst read:\ngradients",
    ("1F1B formula", "forward"): "1F1B's bound\nW = min(M, N - i):\nactivations",
    ("1F1B formula", "grad"): "1F1B's bound\n1 set:\ngradients",
    ("PR #3780 ring", "both"): "PR #3780 ring\n(one size for\nboth directions)",
}
"""Each heatmap column as a reader names it (the rule, what it counts, the direction)."""


def _needs_grid(frame: pd.DataFrame) -> tuple[list, list[str], Any, list[list[str]]]:
    """The heatmap's columns (rule, direction), rows (schedules), slack grid and cell texts."""
    import numpy as np

    keys = [k for k in _COLUMN_TEXT if ((frame.rule == k[0]) & (frame.direction == k[1])).any()]
    schedules = list(dict.fromkeys(frame["schedule"]))
    index = frame.set_index(["schedule", "rule", "direction"])
    grid = np.array([[index.loc[(s, *k), "slack_needed"] for k in keys] for s in schedules])
    at_m = [[bool(index.loc[(s, *k), "ring_at_m"]) for k in keys] for s in schedules]
    notes = [
        [f"{int(v)}\n(K = M)" if m else f"{int(v)}" for v, m in zip(row, ms)]
        for row, ms in zip(grid, at_m)
    ]
    return keys, schedules, grid, notes


def _frame_pr_shortfalls(ax: Any, keys: list, grid: Any) -> int:
    """Frame in black each PR-ring cell needing more than the PR's default slack; return how
    many."""
    from matplotlib.patches import Rectangle

    pr = [j for j, k in enumerate(keys) if k[0] == "PR #3780 ring"]
    short = 0
    for i in range(len(grid)):
        for j in pr:
            if grid[i, j] > PR_DEFAULT_SLACK:
                short += 1
                ax.add_patch(
                    Rectangle((j + 0.04, i + 0.04), 0.92, 0.92, fill=False, edgecolor="black", lw=2)
                )
    return short


def slack_needs_figure(frame: pd.DataFrame, *, pp: int, n_microbatches: int) -> Figure:
    """Heatmap: schedule x sizing rule -> slack needed; ``K = M`` where it leaves a stage no saving.

    A black frame marks where the PR's default slack 2 falls short. A cell whose ring reaches
    ``M`` on some stage says so (``K = M``): a 0 there means the rule already gives every
    microbatch its own buffer, not that it is tight.
    """
    import numpy as np
    import seaborn as sns

    keys, schedules, grid, notes = _needs_grid(frame)
    vpp = dict(zip(frame["schedule"], frame["vpp"]))
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.5 * len(schedules) + 2.9))
    sns.heatmap(
        grid,
        annot=np.array(notes),
        fmt="",
        annot_kws={"fontsize": 8.5},
        cmap="Blues",
        vmin=0,
        vmax=max(3, int(np.nanmax(grid))),
        cbar_kws={"label": "slack needed (buffer sets per stage)"},
        ax=ax,
        linewidths=0.5,
        linecolor="white",
        xticklabels=[_COLUMN_TEXT[k] for k in keys],
        yticklabels=[f"{s} ({vpp[s]} stage{'s' if vpp[s] > 1 else ''}/rank)" for s in schedules],
    )
    short = _frame_pr_shortfalls(ax, keys, grid)
    ax.set_xlabel(
        "how the ring was sized (black frame: the PR's default slack 2 is not enough)", fontsize=9
    )
    ax.set_ylabel("schedule (torch class)")
    ax.tick_params(axis="x", labelsize=7.5, rotation=0)
    ax.tick_params(axis="y", labelsize=8.5, rotation=0)
    ax.set_title(
        "slack each sizing rule needs before no receive lands on a held buffer", fontsize=9
    )
    fig.suptitle(
        f"Sized by any rule but the receive lifetimes, most schedules need slack; the PR's "
        f"default 2 falls short on {short} of {len(schedules)}\n(pp={pp}, M={n_microbatches}; "
        "pooltk sizes from the receive lifetimes and needs 0 everywhere)",
        fontsize=9.5,
    )
    fig.tight_layout()
    return fig


def slack_sweep(*, pp: int, n_microbatches: int) -> pd.DataFrame:
    """Under 1F1B, per slack from 0 until every forward ring is ``M``: what the pool keeps and
    tolerates.

    Columns: slack, sets_kept (every ring the pool keeps at that slack, grad slack 0), stock (what
    torch 2.11-2.14 keeps), all_at_m (every forward ring is ``M``: no saving left), and the
    receives into a slot still held ([Note: counting overwrites]) for three rings given that slack:
    exact (sized from 1F1B's live set, as the pool sizes it), one_short (sized one set short of
    it, the guard's negative control) and gpipe_forced (the 1F1B ring, run under GPipe).
    """
    import pandas as pd

    from pooltk import PoolConfig
    from pooltk.nb.mechanism import one_short, overwritten_receives, replay, rings_for

    m = n_microbatches
    one = replay("1F1B", pp=pp, n_microbatches=m)
    gp = replay("GPipe", pp=pp, n_microbatches=m)
    rows = []
    for slack in range(m):
        rings = rings_for(pp, m, PoolConfig(slack=slack, grad_slack=0))
        forward = [k for (_, d), k in rings.items() if d == "forward" and k]
        rows.append(
            {
                "slack": slack,
                "sets_kept": sum(rings.values()),
                "stock": 2 * (pp - 1) * m,
                "all_at_m": all(k >= m for k in forward),
                "exact": len(overwritten_receives(one, rings)),
                "one_short": len(overwritten_receives(one, one_short(rings))),
                "gpipe_forced": len(overwritten_receives(gp, rings)),
            }
        )
        if rows[-1]["all_at_m"]:
            break
    return pd.DataFrame(rows)


def _draw_cost(ax: Any, sweep: pd.DataFrame) -> None:
    """Left panel: the sets the pool keeps per slack, against stock's."""
    stock = int(sweep["stock"].iloc[0])
    ax.plot(
        sweep["slack"],
        sweep["sets_kept"],
        marker="o",
        ms=4,
        color=style.colour("tight"),
        label="1F1B, ring = live set",
    )
    style.reference_line(
        ax,
        stock,
        text=f"stock torch (<= 2.14): {stock}",
        source="",
        colour_=style.colour("stock"),
        above=False,
    )
    ax.set_ylim(0, stock * 1.1)
    ax.set_xlabel("slack (extra sets per activation ring)")
    ax.set_ylabel("buffer sets the pool keeps (count)")
    per = int(sweep["sets_kept"].iloc[1] - sweep["sets_kept"].iloc[0]) if len(sweep) > 1 else 0
    ax.set_title(
        f"cost: +{per} sets per unit of slack\n({per} receiving stages), until a ring reaches M",
        fontsize=9.5,
    )


_SWEEP_RINGS = (  # column, series, label, marker, line style, width, marker size
    ("exact", "tight", "1F1B, ring = live set", "s", "-", 3, 6),
    ("one_short", "ring_one_short", "1F1B, ring sized one set short", "o", "--", 1.5, 4),
    ("gpipe_forced", "gpipe_forced", "GPipe on the 1F1B ring", "o", "-", 1.5, 4),
)
"""The right panel's three rings and how each is drawn."""


def _draw_hurt(ax: Any, sweep: pd.DataFrame) -> None:
    """Right panel: per ring, the receives into a slot still held, per slack."""
    # the exact ring last: on top where the lines meet at 0
    for col, key, text, marker, ls, lw, ms in reversed(_SWEEP_RINGS):
        ax.plot(
            sweep["slack"],
            sweep[col],
            marker=marker,
            ls=ls,
            lw=lw,
            ms=ms,
            color=style.colour(key),
            label=text,
        )
    ax.set_ylim(0, max(1, int(sweep["gpipe_forced"].max())) * 1.15)
    ax.set_xlabel("slack (extra sets per activation ring)")
    ax.set_ylabel("receives into a slot still held (count)")
    ax.set_title("tolerance: receives that would overwrite live data", fontsize=9.5)


def _mark_all_at_m(cost: Any, hurt: Any, sweep: pd.DataFrame, n_microbatches: int) -> None:
    """A dotted line on both panels at the first slack where every activation ring is ``M``."""
    full = sweep[sweep["all_at_m"]]
    if not len(full):
        return
    at = int(full["slack"].iloc[0])
    for ax in (cost, hurt):
        ax.axvline(at, color="black", ls=":", lw=1)
    hurt.annotate(
        f"slack {at}: every activation ring\nis M = {n_microbatches}: no activation saving",
        xy=(at, 0.55 * hurt.get_ylim()[1]),
        xytext=(-6, 0),
        textcoords="offset points",
        ha="right",
        fontsize="x-small",
    )


def slack_sweep_figure(sweep: pd.DataFrame, *, pp: int, n_microbatches: int) -> Figure:
    """Left: the sets the pool keeps per slack, against stock. Right: receives into slots still
    held.

    Both axes are linear counts. The right panel's three rings: the exact 1F1B ring, one set
    short of it, and the 1F1B ring under GPipe; the slack at which every forward ring reaches ``M``
    (no saving left) is marked on both panels.
    """
    fig, (cost, hurt) = canvas.subplots(1, 2, figsize=(style.FIGURE_WIDTH_IN, 4.0))
    _draw_cost(cost, sweep)
    _draw_hurt(hurt, sweep)
    gpipe_ok = int(sweep.loc[sweep["gpipe_forced"] == 0, "slack"].min())
    _mark_all_at_m(cost, hurt, sweep, n_microbatches)
    for ax in (cost, hurt):
        ax.set_xticks(list(sweep["slack"]))
    short_ok = int(sweep.loc[sweep["one_short"] == 0, "slack"].min())
    fig.suptitle(
        "Under 1F1B slack costs one set per receiving stage and buys tolerance, not safety: the "
        f"exact ring is safe at slack 0,\na ring one set short is safe from slack {short_ok}, and "
        f"GPipe on the 1F1B ring only at slack {gpipe_ok}, where every activation ring is M "
        f"(pp={pp}, M={n_microbatches})",
        fontsize=9.5,
    )
    handles, _ = hurt.get_legend_handles_labels()
    style.legend_below(fig, handles[::-1], ncol=3)
    fig.tight_layout(rect=(0, 0.08, 1, 0.97))
    return fig
