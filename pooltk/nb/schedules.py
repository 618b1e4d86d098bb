"""Figures and tables for pooling beyond 1F1B: per-schedule buffer lifetimes and ring sizes.

Everything is computed from :mod:`pooltk.analysis.lifetimes` (the schedules' own action orders) and
:func:`pooltk.pool.ring.ring_size` (the one slack rule the pool uses), so the notebook only calls.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_choice
from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk import PoolConfig
from pooltk.nb import canvas, style
from pooltk.nb.slack import pr_ring_size
from pooltk.pool.ring import ring_size

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "VALIDATION_CSV",
    "allowlist_table",
    "lifetime_chart",
    "rank_figure",
    "validation_summary",
]

VALIDATION_CSV = files("pooltk.analysis").joinpath("data", "schedules_gloo_2026-11-30.csv")
"""The recorded every-schedule gloo validation, shipped as package data (``data/validation/``)."""


def _stages_per_rank(schedule: str) -> int:
    """The catalog's stages per rank of ``schedule``, in any spelling torch's names take (an
    unknown name is the catalog's error, naming the known ones)."""
    from pooltk.analysis.programs import CATALOG, resolve_schedule

    return CATALOG[resolve_schedule(schedule)[0]].stages_per_rank


def _peak_window(intervals: list[tuple[float, float]]) -> tuple[int, float, float]:
    """The most half-open intervals ``[start, end)`` live at once, and the first span they are."""
    times = sorted({t for iv in intervals for t in iv})
    best, where = 0, (0.0, 0.0)
    for a, b in zip(times, times[1:]):
        n = sum(s <= a < e for s, e in intervals)
        if n > best:
            best, where = n, (a, b)
    return best, where[0], where[1]


def _draw_stage_lifetimes(ax: Any, rp: Any, part: list[Any], row: int, n_rows: int) -> int:
    """One stage's row: its peak window shaded, each microbatch's buffer a line from post to
    release, stacked in microbatch order; returns the peak overlap."""
    intervals = [(rp.time_of_post(b), rp.time_of_release(b)) for b in part]
    n, t0, t1 = _peak_window(intervals)
    ax.axvspan(
        t0,
        t1,
        ymin=1 - (row + 0.95) / n_rows,
        ymax=1 - (row + 0.05) / n_rows,
        color=style.colour("peak_overlap"),
        zorder=0,
    )
    for j, (b, (a, e)) in enumerate(zip(part, intervals)):
        y = row + (j / max(len(part), 1)) * 0.8 - 0.4
        ax.plot([a, e], [y, y], color=style.microbatch_colour(b.microbatch), lw=2, zorder=2)
    return n


def _label_lifetime_axes(
    ax: Any, stages: list[int], rank_of: dict[int, int], peaks: dict[int, int], makespan: float
) -> None:
    """A row per stage named with its rank, its peak on the right, the clock on x."""
    from pooltk.nb.timelines import CLOCK_LABEL

    ax.set_yticks(range(len(stages)))
    ax.set_yticklabels([f"stage {s} (rank {rank_of[s]})" for s in stages], fontsize=8.5)
    ax.set_ylabel("stage (index; its rank)")
    ax.set_ylim(len(stages) - 0.5, -0.5)
    right = ax.secondary_yaxis("right")
    right.set_yticks(range(len(stages)), [f"peak {peaks[s]}" for s in stages], fontsize=8.5)
    right.set_ylabel("most held at once (buffers)", fontsize=8.5)
    ax.set_xlim(0, makespan)
    ax.set_xlabel(CLOCK_LABEL + "; split backward halves 1 each")
    ax.grid(axis="y", visible=False)


def lifetime_chart(
    schedule: str,
    *,
    pp: int,
    n_microbatches: int,
    stages_per_rank: int | None = None,
    direction: str = "forward",
) -> "Figure":
    """One row per stage: each microbatch's receive buffer, post to release, on notebook 00's clock.

    The clock is :func:`pooltk.nb.mechanism.replay`'s (forward 1 tick, backward 2, each half of a
    split backward 1; [Note: unit-time replay]), the one notebook 00 draws 1F1B and GPipe on. Each
    line is one microbatch's buffer, in that microbatch's colour; within a stage's row the
    microbatches are stacked in order, so overlapping lines are buffers live at the same time. Each
    stage's peak overlap is shaded and written at the row's right: the most buffers it holds at
    once, which is what its ring must hold (the receive lifetimes' live set), not ``M``.
    """
    from matplotlib.lines import Line2D

    from pooltk.nb.mechanism import RECEIVED, replay

    check_choice("direction", direction, RECEIVED)
    vpp = _stages_per_rank(schedule) if stages_per_rank is None else stages_per_rank
    rp = replay(schedule, pp=pp, n_microbatches=n_microbatches, stages_per_rank=vpp)
    spans = [b for b in rp.spans if b.direction == direction]
    stages = sorted({b.stage for b in spans})
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.55 * max(len(stages), 2) + 2.2))
    peaks: dict[int, int] = {}
    for row, stage in enumerate(stages):
        part = sorted((b for b in spans if b.stage == stage), key=lambda b: b.microbatch)
        peaks[stage] = _draw_stage_lifetimes(ax, rp, part, row, len(stages))
    rank_of = {b.stage: b.rank for b in spans}
    _label_lifetime_axes(ax, stages, rank_of, peaks, rp.makespan)
    most = max(peaks.values(), default=0)
    ax.set_title(
        f"{schedule}: a stage holds at most {most} {RECEIVED[direction]} receive buffers at once "
        f"(shaded: each stage's peak), of M = {n_microbatches}\n(pp{pp} x {vpp} stage(s) per rank; "
        "line: one microbatch's buffer, from its receive post to its release)",
        fontsize=9.5,
    )
    handles = [
        Line2D([], [], color=style.microbatch_colour(mb), lw=2, label=f"mb {mb}")
        for mb in range(n_microbatches)
    ]
    style.legend_below(fig, handles, ncol=min(n_microbatches, 8))
    return fig


def rank_figure(schedule: str, *, pp: int, n_microbatches: int) -> "Figure":
    """Buffer sets per rank, both directions (:func:`pooltk.nb.ranks.rank_bars`), titled by totals.

    Counted with one byte per set (``Boundary.opaque(1)``), so the bars are counts of sets, under
    pooltk's default :class:`~pooltk.PoolConfig` (slack 2, grad slack 1).
    """
    from pooltk.memory.model import Boundary, PipelineShape, model_memory
    from pooltk.nb.ranks import rank_bars

    vpp = _stages_per_rank(schedule)
    model = model_memory(
        PipelineShape(pp=pp, n_microbatches=n_microbatches, schedule=schedule), Boundary.opaque(1)
    )
    frame = model.per_rank_frame("bytes")
    stock, tight, shared = (int(frame[f"{c}_bytes"].sum()) for c in ("stock", "tight", "shared"))
    return rank_bars(
        model,
        unit="bytes",
        ylabel="receive buffers per rank (buffer sets)",
        title=f"{schedule}: rings shared by a rank's stages keep {shared} sets, one ring per stage "
        f"{tight}, stock {stock}\n(pp{pp} x {vpp} stages per rank, M={n_microbatches}, both "
        "directions, slack 2 and grad slack 1)",
    )


def _schedule_rows(
    name: str, *, pp: int, n_microbatches: int, config: PoolConfig
) -> list[dict[str, Any]]:
    """:func:`allowlist_table`'s rows of one schedule, a row per stage."""
    from pooltk.analysis.lifetimes import live_table

    vpp = _stages_per_rank(name)
    table = live_table(name, pp=pp, n_microbatches=n_microbatches, stages_per_rank=vpp)
    n_stages = pp * vpp
    rows = []
    for stage in range(n_stages):
        part = table[table.stage == stage].set_index("direction")
        stock = int(part.stock_buffers.sum())
        # 0 where nothing is received, handoffs included
        auto = sum(
            ring_size(int(part.loc[d, "ring_min"]), n_microbatches, d, config) for d in DIRECTIONS
        )
        if name == "1F1B":
            k = pr_ring_size(n_stages, stage, n_microbatches, config.slack)
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
                "live_peak": int(part.live_peak.sum()),
            }
        )
    return rows


def allowlist_table(
    schedules: list[str] | tuple[str, ...],
    *,
    pp: int,
    n_microbatches: int,
    slack: int = 2,
    grad_slack: int = 1,
) -> "pd.DataFrame":
    """Per schedule and stage: sets of stock torch, the original allowlisted pool, ``auto``, the
    live set.

    ``stock``: torch <= 2.14 (``M`` per direction up front). ``stock_lazy``: torch >= 2.15, which
    allocates per receive: the live set, except all ``M`` forward on the last stage
    (:func:`pooltk.analysis.stage_sets.lazy_holds`). ``seed_allowlist``: the original
    implementation pools only 1F1B (one ring ``max(2, min(M, N - i + slack))`` for both
    directions) and leaves every other schedule stock. ``pooltk_auto``: ``install(schedule="auto",
    sharing="stage")``, smallest safe ``c mod K`` ring plus slack, capped at M (0 where the stage
    receives nothing, same-rank V handoffs included: the pool gives them no receive buffers).
    ``live_peak``: most buffers live at once. The rank-shared rings (``sharing="rank"``, the
    default) are per rank: :func:`pooltk.nb.ranks.schedule_ranks`.
    """
    import pandas as pd

    config = PoolConfig(slack=slack, grad_slack=grad_slack)
    rows = []
    for name in schedules:
        rows += _schedule_rows(name, pp=pp, n_microbatches=n_microbatches, config=config)
    return pd.DataFrame(rows)


def validation_summary(path: "Path | Traversable" = VALIDATION_CSV) -> "pd.DataFrame":
    """The recorded real-gloo validation (``pooltk schedules --validate``): a row per shape."""
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
