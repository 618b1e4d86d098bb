"""Figures and tables for the memory model per rank and per boundary (notebooks 01 and 04).

Everything comes from :func:`pooltk.memory.model.model_memory` (rank-shared rings from
:func:`pooltk.analysis.sharing.rank_rings`, boundaries from the preset) and
:func:`pooltk.memory.model.compare_models`; this module only draws and tabulates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pooltk._validate import InputError
from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, MemoryModel, PipelineShape, model_memory
from pooltk.nb import canvas, style

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["RANK_BARS", "boundary_figure", "rank_bars", "schedule_ranks"]

RANK_BARS: tuple[tuple[str, str, str], ...] = (
    ("stock", "stock", "stock torch (<= 2.14)"),
    ("tight", "tight", "pooltk, per-stage rings"),
    ("shared", "shared", "pooltk, rank-shared rings"),
    ("rank_live", "rank_live", "rank live set (floor)"),
)
"""Variant column, series key (:mod:`pooltk.nb.style`) and legend label of each bar
:func:`rank_bars` draws."""


def rank_bars(
    model: MemoryModel,
    *,
    title: str | None = None,
    unit: str = "gib",
    ylabel: str | None = None,
) -> Figure:
    """Per rank, from zero: stock, the per-stage rings summed, the rank-shared rings and the rank's
    live set."""
    import numpy as np

    frame = model.per_rank_frame(unit)
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 4.2))
    x = np.arange(len(frame))
    width = 0.8 / len(RANK_BARS)
    for k, (variant, key, label) in enumerate(RANK_BARS):
        bars = ax.bar(
            x + (k - (len(RANK_BARS) - 1) / 2) * width,
            frame[f"{variant}_{unit}"],
            width,
            color=style.colour(key),
            label=label,
        )
        if unit == "bytes":  # counts of buffer sets: small integers, written on the bars
            style.bar_value_labels(ax, bars, "{:,.0f}")
    ax.set_xticks(
        x, [f"rank {r}\n(stages {s})" for r, s in zip(frame["rank"], frame["stages"])], fontsize=8
    )
    ax.set_xlabel("rank (index; the stages it runs)")
    ax.set_ylabel(ylabel or f"receive buffers per rank ({'GiB' if unit == 'gib' else unit})")
    ax.set_ylim(0, float(frame[f"stock_{unit}"].max()) * 1.15)
    ax.set_title(title or f"{model.shape.describe()}: per rank", fontsize=10)
    style.legend_below(fig, ax.get_legend_handles_labels()[0], ncol=2)
    return fig


def boundary_figure(models: Mapping[str, MemoryModel]) -> Figure:
    """Left: MiB per forward set at each boundary; right: stock and pooled GiB per stage, one
    colour per model."""
    from matplotlib.lines import Line2D

    colours = style.run_colours(models)
    fig, (left, right) = canvas.subplots(1, 2, figsize=(style.FIGURE_WIDTH_IN, 4.3))
    for label, m in models.items():
        bounds = m.boundaries_frame()
        c = colours[label]
        left.plot(bounds["boundary"], bounds["forward_set_mib"], marker="o", color=c)
        stages = range(m.shape.num_stages)
        right.plot(stages, [m.stage_gib(i, "stock") for i in stages], marker="o", color=c)
        right.plot(stages, [m.stage_gib(i, "pooled") for i in stages], marker="s", ls="--", color=c)
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    left.set_xlabel("boundary (index b: stage b -> b + 1)")
    left.set_ylabel("one forward set (MiB)")
    left.set_title("what crosses each boundary", fontsize=10)
    right.set_xlabel("stage (index)")
    right.set_ylabel("receive buffers per stage (GiB)")
    policy = next(iter(models.values())).policy
    right.set_title(f"per stage: stock solid, pooled dashed ({policy})", fontsize=10)
    handles = [
        Line2D([], [], color=colours[k], marker="o", label=f"{k} boundaries") for k in models
    ]
    fig.suptitle(_boundary_headline(models), fontsize=10)
    style.legend_below(fig, handles, ncol=len(handles), top=0.88)
    return fig


def _boundary_headline(models: Mapping[str, MemoryModel]) -> str:
    """The takeaway: each model's largest stock stage, in GiB, and the pooled one beside it."""
    parts = []
    for label, m in models.items():
        stages = range(m.shape.num_stages)
        stock = max(m.stage_gib(i, "stock") for i in stages)
        pooled = max(m.stage_gib(i, "pooled") for i in stages)
        parts.append(f"{label}: {stock:.1f} GiB stock, {pooled:.1f} pooled")
    return "The boundaries set the receive buffers; the fullest stage holds\n" + "; ".join(parts)


def schedule_ranks(
    schedules: Sequence[str],
    *,
    pp: int,
    n_microbatches: int,
    slack: int = 2,
    grad_slack: int = 1,
) -> pd.DataFrame:
    """Per schedule and rank, buffer sets: stock, the per-stage rings, the rank-shared rings and the
    rank's live set, from the memory model (one set counted as 1 byte)."""
    import pandas as pd

    if isinstance(schedules, str) or not schedules:
        raise InputError(
            "schedules",
            found=repr(schedules),
            required="a list of schedule names",
            fix="e.g. schedule_ranks(['1F1B', 'Interleaved1F1B'], pp=4, n_microbatches=8).",
        )
    config = PoolConfig(slack=slack, grad_slack=grad_slack)
    frames = []
    for name in schedules:
        model = model_memory(
            PipelineShape(pp=pp, n_microbatches=n_microbatches, schedule=name),
            Boundary.opaque(1),
            config,
            unpoolable="stock",
        )
        frame = model.per_rank_frame("bytes")
        keep = {
            "stock_bytes": "stock",
            "tight_bytes": "per_stage_rings",
            "shared_bytes": "rank_shared",
            "rank_live_bytes": "rank_live",
            "live_set_bytes": "live_per_stage",
        }
        frame = (
            frame[["rank", "stages", *keep]]
            .rename(columns=keep)
            .astype({v: int for v in keep.values()})
        )
        frames.append(
            frame.assign(schedule=name, vpp=model.shape.stages_per_rank)[
                ["schedule", "vpp", "rank", "stages", *keep.values()]
            ]
        )
    return pd.concat(frames, ignore_index=True)
