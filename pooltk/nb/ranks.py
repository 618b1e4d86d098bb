"""Figures and tables for the memory model per rank and per boundary (notebooks 01 and 04).

Everything comes from :func:`pooltk.memory.model.model_memory` (rank-shared rings from
:func:`pooltk.analysis.sharing.rank_rings`, boundaries from the preset) and
:func:`pooltk.memory.model.compare_models`; this module only draws and tabulates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, MemoryModel, PipelineShape, model_memory

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["RANK_BARS", "boundary_figure", "rank_bars", "schedule_ranks"]

RANK_BARS: tuple[tuple[str, str], ...] = (
    ("stock", "stock (torch <= 2.14)"),
    ("tight", "per-stage rings"),
    ("shared", "rank-shared rings"),
    ("rank_live", "rank live set"),
)
"""Variant and legend label of each bar :func:`rank_bars` draws."""


def rank_bars(model: MemoryModel, *, ax: Any = None, title: str | None = None, unit: str = "gib",
              ylabel: str | None = None) -> Figure:
    """Per rank: stock, the per-stage rings summed, the rank-shared rings and the rank's live set."""
    import matplotlib.pyplot as plt
    import numpy as np

    frame = model.per_rank_frame(unit)
    if ax is None:
        fig, ax = plt.subplots(figsize=(9, 3.6))
    else:
        fig = ax.figure
    x = np.arange(len(frame))
    width = 0.8 / len(RANK_BARS)
    for k, (variant, label) in enumerate(RANK_BARS):
        ax.bar(x + (k - (len(RANK_BARS) - 1) / 2) * width, frame[f"{variant}_{unit}"], width, label=label)
    ax.set_xticks(x)
    ax.set_xticklabels([f"rank {r}\n(stages {s})" for r, s in zip(frame["rank"], frame["stages"])], fontsize=8)
    ax.set_ylabel(ylabel or f"receive buffers, {unit.upper()}")
    ax.set_yscale("log")
    ax.set_title(title or f"{model.shape.describe()}: per rank")
    ax.legend(fontsize=8, ncols=2)
    fig.tight_layout()
    return fig


def boundary_figure(models: Mapping[str, MemoryModel]) -> Figure:
    """Left: MiB per forward set at each boundary; right: stock and pooled GiB per stage, one line per model."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    for label, m in models.items():
        bounds = m.boundaries_frame()
        left.plot(bounds["boundary"], bounds["forward_set_mib"], marker="o", label=label)
        stages = range(m.shape.num_stages)
        line = right.plot(stages, [m.stage_gib(i, "stock") for i in stages], marker="o", label=f"{label}: stock")
        right.plot(stages, [m.stage_gib(i, "pooled") for i in stages], marker="s", ls="--", color=line[0].get_color(),
                   label=f"{label}: pooled ({m.config.policy})")
    left.set_xlabel("boundary b (stage b -> b + 1)")
    left.set_ylabel("MiB per set (one microbatch)")
    left.set_title("what crosses each boundary")
    right.set_xlabel("stage")
    right.set_ylabel("receive buffers, GiB")
    right.set_title("per stage")
    for ax in (left, right):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def schedule_ranks(schedules: Sequence[str], *, pp: int, n_microbatches: int, slack: int = 2,
                   grad_slack: int = 1, boundary: Boundary | None = None) -> pd.DataFrame:
    """Per schedule and rank, buffer sets (bytes with ``boundary``): stock, the per-stage rings, the
    rank-shared rings and the rank's live set, from the memory model (one set = 1 byte without ``boundary``)."""
    import pandas as pd

    config = PoolConfig(slack=slack, grad_slack=grad_slack)
    frames = []
    for name in schedules:
        model = model_memory(PipelineShape(pp=pp, n_microbatches=n_microbatches, schedule=name),
                             boundary or Boundary.opaque(1), config, unpoolable="stock")
        frame = model.per_rank_frame("bytes")
        keep = {"stock_bytes": "stock", "tight_bytes": "per_stage_rings", "shared_bytes": "rank_shared",
                "rank_live_bytes": "rank_live", "live_set_bytes": "live_per_stage"}
        frame = frame[["rank", "stages", *keep]].rename(columns=keep).astype({v: int for v in keep.values()})
        frames.append(frame.assign(schedule=name, vpp=model.shape.stages_per_rank)[["schedule", "vpp", "rank", "stages",
                                                                                   *keep.values()]])
    return pd.concat(frames, ignore_index=True)
