"""Seaborn figures of step tables and published figures (notebooks and reports).

Imports matplotlib and seaborn: analysis only, never the core package.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["COMPARED", "compare_runs", "load_run_info", "per_rank", "plot_published", "plot_steps", "pool_by_run"]

COMPARED: tuple[tuple[str, str], ...] = (
    ("tok_per_s_per_gpu", "tok/s per physical GPU, steady window"),
    ("mfu_pct", "MFU % on the FLOPs basis and peak given"),
    ("peak_mem_gib", "peak memory, GiB, as the log measures it (mem_basis)"),
    ("step_time_median_s", "median seconds per step, steady window"),
)
"""The figures :func:`compare_runs` puts side by side, each with its basis."""

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


def load_run_info(path: str | Path | None) -> Any:
    """Run facts from a JSON file: one object of facts for every run, or ``{run: {facts}}`` per run; None for None.

    Returns a RunInfo or a dict of them (what :func:`pooltk.logs.metrics.summarize` takes).
    """
    import json

    from pooltk._validate import InputError
    from pooltk.logs.runinfo import RunInfo

    if path is None:
        return None
    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError("run info file", found=f"{str(p)!r} ({err.strerror or err})", required="a readable JSON file",
                         fix="check --run-info / RUN_INFO_FILE") from None
    except ValueError as err:
        raise InputError("run info file", found=f"invalid JSON in {p} ({err})", required="a JSON object of run facts",
                         fix='write e.g. {"world_size": 256, "pp": 8, "global_batch_size": 4096, "seq_len": 2048}') from None
    if not isinstance(obj, dict):
        raise InputError("run info file", found=f"a JSON {type(obj).__name__}", required="a JSON object",
                         fix="one object of facts, or one object per run name")
    if obj and all(isinstance(v, dict) for v in obj.values()):
        return {str(run): RunInfo.from_facts(facts, source=str(p)) for run, facts in obj.items()}
    return RunInfo.from_facts(obj, source=str(p))


def pool_by_run(steps: pd.DataFrame) -> pd.DataFrame:
    """Per run: whether it was pooled, whose pool, slack and layout (missing where the log does not say)."""
    cols = ["pooled", "pool_impl", "slack", "layout"]
    first = steps.groupby("run", observed=True, sort=False)[cols].first()
    return first.reset_index()


def compare_runs(summary: Any, steps: pd.DataFrame, *, baseline: str | None = None) -> pd.DataFrame:
    """Runs side by side: each figure of :data:`COMPARED` and its ratio to ``baseline`` (default: the first run).

    The ratio is run / baseline on the same basis (the ``basis`` row of each figure is in
    :data:`COMPARED`); pool columns say which runs used which pool.
    """
    import numpy as np

    from pooltk._validate import check_choice

    frame = summary.to_frame()
    runs = [str(r) for r in frame["run"]]
    if not runs:
        raise ValueError("compare_runs: found no run in the summary; required at least one. Fix: read some logs first.")
    base = runs[0] if baseline is None else check_choice("baseline run", baseline, runs)
    ref = frame.set_index("run").loc[base]
    out = frame[["run", "format", "n_steps"]].copy()
    for col, _ in COMPARED:
        values = frame[col].astype(float)
        out[col] = values
        denom = float(ref[col]) if np.isfinite(float(ref[col])) and float(ref[col]) != 0 else np.nan
        out[f"{col}_vs_{base}"] = values / denom
    return out.merge(pool_by_run(steps), on="run", how="left")


def per_rank(steps: pd.DataFrame) -> pd.DataFrame:
    """Per run and rank, from the step table as read (where the logs name ranks): rows, step range, peak memory,
    median logged step time, mean logged per-GPU rate, and the timestamp spread of the rank's lines."""
    have = steps[steps["rank"].notna() & (steps["kind"] == "train")]
    cols = ["run", "rank", "rows", "first_step", "last_step", "peak_mem_gib", "step_time_median_s", "tok_per_s_per_gpu_logged_mean"]
    if have.empty:
        return have.reindex(columns=cols).iloc[:0]
    g = have.groupby(["run", "rank"], observed=True)
    out = g.agg(rows=("step", "count"), first_step=("step", "min"), last_step=("step", "max"), peak_mem_gib=("mem_gib", "max"),
                step_time_median_s=("step_time_s", "median"), tok_per_s_per_gpu_logged_mean=("tok_per_s_per_gpu_logged", "mean"))
    return out.reset_index()[cols]
