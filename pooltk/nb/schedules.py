"""Figures and tables for pooling beyond 1F1B: per-schedule buffer lifetimes and ring sizes.

Everything is computed from :mod:`pooltk.analysis.lifetimes` (the schedules' own action orders) and
:func:`pooltk.pool.ring.ring_size` (the one slack rule the pool uses), so the notebook only calls.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk import PoolConfig
from pooltk.nb import canvas, style
from pooltk.nb.slack import pr_ring_size
from pooltk.pool.ring import ring_size

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["VALIDATION_CSV", "allowlist_table", "lifetime_chart", "validation_summary"]

VALIDATION_CSV = files("pooltk.analysis").joinpath("data", "schedules_gloo_2026-11-30.csv")
"""The recorded every-schedule gloo validation, shipped as package data (``data/validation/`` in the repository)."""


def _stages_per_rank(schedule: str) -> int:
    from pooltk.analysis.programs import CATALOG

    return CATALOG[schedule].stages_per_rank


def lifetime_chart(
    schedule: str,
    *,
    pp: int,
    n_microbatches: int,
    stages_per_rank: int | None = None,
    direction: str = "forward",
) -> "Figure":
    """One row per stage: each microbatch's receive buffer from post to release, in its rank's action order.

    Each line is one microbatch's buffer, in that microbatch's colour (the legend under the figure);
    within a stage's row the microbatches are stacked in order, so overlapping lines are buffers
    live at the same time.
    """
    from matplotlib.lines import Line2D

    from pooltk.analysis.lifetimes import lifetime_frame, lifetimes

    vpp = stages_per_rank or _stages_per_rank(schedule)
    df = lifetime_frame(
        lifetimes(schedule, pp=pp, n_microbatches=n_microbatches, stages_per_rank=vpp)
    )
    df = df[df.direction == direction]
    stages = sorted(df.stage.unique())
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.5 * max(len(stages), 2) + 2.0))
    for row, stage in enumerate(stages):
        part = df[df.stage == stage].sort_values("microbatch")
        n = len(part)
        for j, b in enumerate(part.itertuples()):
            y = row + (j / max(n, 1)) * 0.8 - 0.4
            ax.plot([b.post, b.release], [y, y], color=style.microbatch_colour(b.microbatch), lw=2)
    ax.set_yticks(range(len(stages)))
    rank_of = df.groupby("stage")["rank"].first().to_dict()
    ax.set_yticklabels([f"stage {s} (rank {int(rank_of[s])})" for s in stages])
    ax.set_ylabel("stage (index; its rank)")
    ax.invert_yaxis()
    ax.set_xlim(left=0)
    ax.set_xlabel("position in the rank's action order (actions; receive post -> release)")
    ax.set_title(
        f"{schedule}, pp{pp} x {vpp} stage(s)/rank, M={n_microbatches}: {direction} receive buffers "
        "(colour: microbatch, mb)",
        fontsize=10,
    )
    handles = [
        Line2D([], [], color=style.microbatch_colour(mb), lw=2, label=f"mb {mb}")
        for mb in range(n_microbatches)
    ]
    style.legend_below(fig, handles, ncol=min(n_microbatches, 8))
    return fig


def allowlist_table(
    schedules: list[str] | tuple[str, ...],
    *,
    pp: int,
    n_microbatches: int,
    slack: int = 2,
    grad_slack: int = 1,
) -> "pd.DataFrame":
    """Per schedule and stage: sets stock torch keeps, the original allowlisted pool, pooltk ``auto``, the live set.

    ``stock``: torch <= 2.14 (``M`` per direction up front). ``stock_lazy``: torch >= 2.15, which
    allocates per receive: the live set, except all ``M`` forward on the last stage
    (:func:`pooltk.analysis.stage_sets.lazy_holds`). ``seed_allowlist``: the original implementation pools only 1F1B (one ring
    ``max(2, min(M, N - i + slack))`` for both directions) and leaves every other schedule stock.
    ``pooltk_auto``: ``install(schedule="auto", sharing="stage")``, smallest safe ``c mod K`` ring plus
    slack, capped at M (0 where the stage receives nothing, same-rank V handoffs included: the pool
    gives them no receive buffers). ``live_peak``: most buffers live at once. The rank-shared rings
    (``sharing="rank"``, the default) are per rank: :func:`pooltk.nb.ranks.schedule_ranks`.
    """
    import pandas as pd

    from pooltk.analysis.lifetimes import live_table

    rows = []
    for name in schedules:
        vpp = _stages_per_rank(name)
        table = live_table(name, pp=pp, n_microbatches=n_microbatches, stages_per_rank=vpp)
        n_stages = pp * vpp
        for stage in range(n_stages):
            part = table[table.stage == stage].set_index("direction")
            stock = int(part.stock_buffers.sum())
            live = int(part.live_peak.sum())
            auto = 0
            config = PoolConfig(slack=slack, grad_slack=grad_slack)
            for d in DIRECTIONS:
                k0 = int(part.loc[d, "ring_min"])
                auto += ring_size(
                    k0, n_microbatches, d, config
                )  # 0 where nothing is received, handoffs included
            if name == "1F1B":
                k = pr_ring_size(n_stages, stage, n_microbatches, slack)
                seed = sum(k for d in DIRECTIONS if int(part.loc[d, "stock_buffers"]))
            else:
                seed = stock
            rows.append(
                {
                    "schedule": name,
                    "pp": pp,
                    "vpp": vpp,
                    "n_microbatches": n_microbatches,
                    "stage": stage,
                    "stock": stock,
                    "stock_lazy": int(part.lazy_buffers.sum()),
                    "seed_allowlist": seed,
                    "pooltk_auto": auto,
                    "live_peak": live,
                }
            )
    return pd.DataFrame(rows)


def validation_summary(path: "Path | Traversable" = VALIDATION_CSV) -> "pd.DataFrame":
    """The recorded real-gloo validation (``pooltk schedules --validate``), one row per schedule and shape."""
    import pandas as pd

    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; required the recorded validation table. Fix: regenerate it with "
            f"`pooltk schedules --validate --pp 2 4 --factors 1 2 4 --csv {path}`."
        )
    with path.open("rb") as fh:
        df = pd.read_csv(fh)
    g = df.groupby(["schedule", "pp", "vpp", "n_microbatches"], sort=False)
    return g.agg(
        stock=("stock", "sum"),
        pooltk_slack0=("pooltk", "sum"),
        analysed_peak=("analysed_peak", "sum"),
        measured_peak=("measured_peak", "sum"),
        parity=("parity", "all"),
        peaks_match=("peak_matches", "all"),
    ).reset_index()
