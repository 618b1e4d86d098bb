"""Seaborn figures of step tables and published figures (notebooks and reports).

Imports matplotlib and seaborn: analysis only, never the core package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["plot_published", "plot_steps"]

_LABELS = {
    "step_time_s": "seconds per step",
    "tok_per_s_per_gpu": "tokens/s per physical GPU",
    "mem_gib": "peak memory (GiB)",
    "loss": "loss",
}


def plot_steps(steps: pd.DataFrame, columns: Sequence[str] = ("step_time_s", "tok_per_s_per_gpu", "mem_gib"),
               *, hue: str = "run", title: str | None = None) -> Figure:
    """One panel per column against ``step``, a line per ``hue`` value (train rows only)."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    train = steps[steps["kind"] == "train"].copy()
    if hue in train and hasattr(train[hue], "cat"):
        train[hue] = train[hue].cat.remove_unused_categories()
    fig, axes = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.6), squeeze=False)
    for ax, col in zip(axes[0], columns, strict=True):
        sns.lineplot(data=train, x="step", y=col, hue=hue, marker="o", ax=ax, legend=ax is axes[0][-1])
        ax.set_ylabel(_LABELS.get(col, col))
    if axes[0][-1].get_legend() is not None:
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1.0))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_published(table: pd.DataFrame) -> Figure:
    """Bars of the published tok/s/GPU, MFU and peak memory by shape."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    cols = [c for c in ("tok_per_s_per_gpu", "mfu_pct", "peak_mem_gib") if c in table]
    fig, axes = plt.subplots(1, len(cols), figsize=(4.6 * len(cols), 3.8), squeeze=False)
    labels = {"tok_per_s_per_gpu": "tok/s/GPU", "mfu_pct": "MFU (%)", "peak_mem_gib": "peak memory (GiB)"}
    for ax, col in zip(axes[0], cols, strict=True):
        sns.barplot(data=table, y="shape", x=col, hue="shape", legend=False, ax=ax)
        ax.set_xlabel(labels[col])
        ax.set_ylabel("" if ax is not axes[0][0] else "shape")
        if ax is not axes[0][0]:
            ax.set_yticklabels([])
    fig.tight_layout()
    return fig
