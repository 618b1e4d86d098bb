"""What slack buys: for each torch schedule, how much slack a ring sized by a given rule needs to be safe.

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
from typing import TYPE_CHECKING

from pooltk.analysis.lifetimes import (
    DIRECTIONS,
    BufferLifetime,
    lifetimes,
    overwrites,
    peak_overlap,
)
from pooltk.analysis.programs import CATALOG, analysable_schedules
from pooltk.nb import canvas, style

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["PR_DEFAULT_SLACK", "RULES", "pr_ring_size", "slack_needs", "slack_needs_figure"]

RULES: tuple[str, ...] = ("first read to release", "1F1B formula", "PR #3780 ring")
"""The sizing rules compared ([Note: sizing rules]); pooltk's receive lifetimes need 0 by construction."""
PR_DEFAULT_SLACK = 2
"""The original pool's default slack (``pp_recv_buffer_pool_slack``, Automodel PR #3780)."""


def pr_ring_size(num_stages: int, stage: int, n_microbatches: int, slack: int) -> int:
    """The original pool's ring for both directions: ``max(2, min(M, max(1, N - i) + slack))`` (Automodel PR #3780)."""
    return max(2, min(n_microbatches, max(1, num_stages - stage) + slack))


def _safe(group: Sequence[BufferLifetime], k: int) -> bool:
    return not overwrites(group, k)


def _needed(group: Sequence[BufferLifetime], ring_of_slack, m: int) -> int:  # noqa: ANN001 - slack -> K
    """The smallest slack ``s`` whose ring ``ring_of_slack(s)`` (capped at M, at least 1) is safe."""
    for s in range(m + 1):
        if _safe(group, max(1, min(m, ring_of_slack(s)))):
            return s
    return m  # unreachable: K = M gives every microbatch its own slot


def slack_needs(
    schedules: Sequence[str] | None = None, *, pp: int = 4, n_microbatches: int = 8
) -> pd.DataFrame:
    """Per schedule, rule and direction: the slack that rule needs (the most over stages) and the stage needing it.

    Columns: schedule, vpp, rule, direction, slack_needed, worst_stage, covered_by_pr_default (slack
    needed <= :data:`PR_DEFAULT_SLACK`). The PR's ring is one size for both directions, so its rows
    say ``both``.
    """
    import pandas as pd

    m = n_microbatches
    rows = []
    for name in schedules or analysable_schedules():
        vpp = CATALOG[name].stages_per_rank
        spans = lifetimes(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
        n = pp * vpp
        worst: dict[tuple[str, str], tuple[int, int]] = {}

        def note(rule: str, direction: str, s: int, stage: int, worst=worst) -> None:
            if s > worst.get((rule, direction), (-1, -1))[0]:
                worst[(rule, direction)] = (s, stage)

        for stage in range(n):
            groups = {
                d: [b for b in spans if b.stage == stage and b.direction == d] for d in DIRECTIONS
            }
            for d, group in groups.items():
                if not group:
                    continue
                read = peak_overlap((b.consume, b.release) for b in group)
                note("first read to release", d, _needed(group, lambda s, k=read: k + s, m), stage)
                formula = min(m, n - stage) if d == "forward" else 1
                note("1F1B formula", d, _needed(group, lambda s, k=formula: k + s, m), stage)
            both = [g for g in groups.values() if g]
            if both:
                s = next(
                    s
                    for s in range(m + 1)
                    if all(_safe(g, pr_ring_size(n, stage, m, s)) for g in both)
                )
                note("PR #3780 ring", "both", s, stage)
        for rule in RULES:
            for direction in (*DIRECTIONS, "both"):
                if (rule, direction) in worst:
                    s, stage = worst[(rule, direction)]
                    rows.append(
                        {
                            "schedule": name,
                            "vpp": vpp,
                            "rule": rule,
                            "direction": direction,
                            "slack_needed": s,
                            "worst_stage": stage,
                            "covered_by_pr_default": s <= PR_DEFAULT_SLACK,
                        }
                    )
    return pd.DataFrame(rows)


def slack_needs_figure(frame: pd.DataFrame, *, pp: int, n_microbatches: int) -> Figure:
    """Heatmap: schedule x (rule, direction) -> slack needed, annotated; a black frame where the PR's slack 2 falls short."""
    import numpy as np
    import seaborn as sns
    from matplotlib.patches import Rectangle

    frame = frame.assign(column=frame["rule"] + "\n" + frame["direction"])
    columns = [
        f"{r}\n{d}"
        for r in RULES
        for d in ("forward", "grad", "both")
        if f"{r}\n{d}" in set(frame.column)
    ]
    schedules = list(dict.fromkeys(frame["schedule"]))
    grid = frame.pivot(index="schedule", columns="column", values="slack_needed").reindex(
        index=schedules, columns=columns
    )
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.42 * len(schedules) + 2.4))
    sns.heatmap(
        grid,
        annot=True,
        fmt=".0f",
        cmap="Blues",
        vmin=0,
        vmax=max(3, int(np.nanmax(grid.to_numpy()))),
        cbar_kws={"label": "slack needed (buffer sets)"},
        ax=ax,
        linewidths=0.5,
        linecolor="white",
    )
    for i, sched in enumerate(schedules):
        for j, col in enumerate(columns):
            v = grid.loc[sched, col]
            if col.startswith("PR #3780") and v == v and v > PR_DEFAULT_SLACK:
                ax.add_patch(
                    Rectangle((j + 0.04, i + 0.04), 0.92, 0.92, fill=False, edgecolor="black", lw=2)
                )
    ax.set_xlabel("sizing rule and direction (black frame: the PR's default slack 2 is not enough)")
    ax.set_ylabel("schedule (torch class)")
    ax.set_title(
        f"slack each sizing rule needs to be safe, pp={pp}, M={n_microbatches} "
        "(pooltk's receive lifetimes: 0 everywhere)",
        fontsize=10,
    )
    ax.tick_params(axis="x", labelsize=8, rotation=0)
    fig.tight_layout()
    return fig
