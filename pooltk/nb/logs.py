"""Notebook 03's views of run logs: runs beside the published figures, per-step panels, pooled vs
stock speed.

- :func:`beside_published` / :func:`beside_figure`: the user's runs drawn next to the published
  Kimi-K3 bars (tok/s per GPU, MFU, peak memory): on the same axes when they are on the same basis,
  on axes of their own when not (a CPU process's tokens/s and resident memory), approximate
  figures drawn as such;
- :func:`plot_steps`: one panel per figure against the step, one colour per run in every panel;
- :func:`speed_pairs`: each pooled run against its stock twin, and why the pooled one is slower
  when it is ([Note: pooled vs stock speed]).

[Note: pooled vs stock speed]
A pooled run slower than its stock twin is judged from what the logs and their sidecars say,
never guessed: the median step-time ratio over the steady window; whether the two runs' step
times overlap (each run's own spread, step to step); whether they ran at the same time or one
after the other (their timestamps), on how many CPUs for how many ranks (the sidecar's host);
and whether the pooled run was written before pooltk released the last stage's kept graphs (its
``pool_config`` has no ``release``). Before that release the last stage re-homed most of its
receive slots every step (``data/validation/last_stage_rehomes_2026-12-01.csv``: pp2 1F1B, M 16,
slack 2: 39 re-homes in 3 steps without the release, 0 with it), each a fresh allocation and copy
of a whole buffer set, a cost that grows with the set's size. The pool's own cost is measured
side by side by ``benchmarks/bench_pool.py`` (variants alternating inside one launch).

Imports matplotlib and pandas inside the functions that draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooltk._validate import InputError
from pooltk.nb import canvas, style

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "COMPARED",
    "OTHER_BASIS_AXES",
    "QUANTITY_AXES",
    "Beside",
    "beside_figure",
    "beside_published",
    "capacity_device",
    "compare_runs",
    "device_capacity",
    "load_run_info",
    "per_rank",
    "plot_steps",
    "pool_by_run",
    "speed_pairs",
]


def capacity_device(gib: float | None = None) -> Any:
    """The device notebook 03 judges memory against: pooltk's one GB200 capacity
    (:data:`pooltk.memory.fits.GB200`, 184.31 GiB with its source) unless you give a capacity in
    GiB."""
    from pooltk.memory.fits import GB200, Device

    if gib is None:
        return GB200
    return Device.from_gib("your device", gib, "DEVICE_CAPACITY_GIB (your figure)")


def device_capacity(device: Any) -> Any:
    """``device`` (a :class:`pooltk.memory.fits.Device`) as the log metrics'
    :class:`pooltk.logs.metrics.DeviceCapacity`."""
    from pooltk.logs.metrics import DeviceCapacity
    from pooltk.memory.fits import get_device

    device = get_device(device)  # a name or GiB too; an unknown one is named
    return DeviceCapacity(gib=device.gib, source=device.source)


COMPARED: tuple[tuple[str, str], ...] = (
    ("tok_per_s_per_gpu", "tok/s per physical GPU, steady window"),
    ("mfu_pct", "MFU % on the FLOPs basis and peak given"),
    ("peak_mem_gib", "peak memory, GiB, as the log measures it (mem_basis)"),
    ("step_time_median_s", "median seconds per step, steady window"),
)
"""The figures :func:`compare_runs` puts side by side, each with its basis."""

_LABELS = {
    "step_time_s": "seconds per step (s)",
    "tok_per_s_per_gpu": "tokens/s per physical GPU (tok/s)",
    "loss": "loss (as logged)",
}
_TITLES = {
    "step_time_s": "step time",
    "tok_per_s_per_gpu": "throughput",
    "mem_gib": "peak memory",
    "loss": "loss",
}
_RESIDENT = ("resident", "rss", "vmhwm")


def _is_resident(basis: str) -> bool:
    text = str(basis).lower()
    return any(k in text for k in _RESIDENT)


def _step_label(col: str, resident: bool) -> str:
    if col == "mem_gib":
        return (
            "peak resident memory, process (GiB)"
            if resident
            else "peak device memory, as logged (GiB)"
        )
    if col == "tok_per_s_per_gpu" and resident:
        return "tokens/s per rank process (tok/s)"
    return _LABELS.get(col, f"{col} (as logged)")


def _steps_headline(train: pd.DataFrame, runs: list[str]) -> str:
    """What the per-step panels show: the fastest and slowest run by median step time."""
    import math

    med = {
        run: float(train.loc[train["run"].astype(str) == run, "step_time_s"].median())
        for run in runs
    }
    med = {run: t for run, t in med.items() if not math.isnan(t)}
    if len(med) < 2:
        return f"{len(runs)} run(s) step by step: step time, throughput and memory as logged"
    fast, slow = min(med, key=med.get), max(med, key=med.get)
    return (
        f"Step by step, {slow} is the slowest run ({med[slow]:.3g} s per step, median) and "
        f"{fast} the fastest ({med[fast]:.3g} s)"
    )


def plot_steps(
    steps: pd.DataFrame,
    columns: Sequence[str] = ("step_time_s", "tok_per_s_per_gpu", "mem_gib"),
) -> Figure:
    """One panel per column against ``step`` (train rows), a line per run in one colour across the
    panels.

    Runs whose memory is a process's resident memory (CPU runs: their tokens/s are per rank
    process) and runs measured on a device get a row of panels each, so no axis holds two kinds of
    figure; the memory panel says what the logs measured (``mem_basis``). The title is the
    takeaway (the slowest and fastest run by median step time).
    """
    train = steps[steps["kind"] == "train"]
    missing = [c for c in columns if c not in steps.columns]
    if missing or train.empty:
        raise InputError(
            "steps",
            found=f"no column {missing}" if missing else "no train row",
            required=f"train rows with {', '.join(columns)}",
            fix="plot summarize(...).steps (it adds tok_per_s_per_gpu), or name columns it has.",
        )
    runs = [str(r) for r in dict.fromkeys(train["run"])]
    colours = style.run_colours(runs)
    basis = train.groupby(train["run"].astype(str))["mem_basis"].first().astype(str)
    resident = {run: _is_resident(basis.get(run, "")) for run in runs}
    groups = [flag for flag in (False, True) if any(resident[r] == flag for r in runs)]
    fig, axes = canvas.subplots(
        len(groups),
        len(columns),
        figsize=(style.FIGURE_WIDTH_IN, 3.0 * len(groups) + 0.9),
        squeeze=False,
    )
    for row, flag in enumerate(groups):
        for ax, col in zip(axes[row], columns, strict=True):
            for run in (r for r in runs if resident[r] == flag):
                part = train[train["run"].astype(str) == run].sort_values("step")
                ax.plot(part["step"], part[col], marker="o", ms=3.5, color=colours[run], label=run)
            ax.set_ylabel(_step_label(col, flag), fontsize=8.5)
            ax.set_ylim(bottom=0)
            ax.set_xlabel("step (index)")
            where = " (CPU runs)" if flag and len(groups) > 1 else ""
            ax.set_title(_TITLES.get(col, col) + where, fontsize=10)
    fig.suptitle(_steps_headline(train, runs), fontsize=10)
    handles = [h for ax in axes[:, 0] for h in ax.get_legend_handles_labels()[0]]
    style.legend_below(fig, handles, ncol=min(3, len(handles)), top=0.93)
    return fig


@dataclass(kw_only=True, slots=True, frozen=True)
class Beside:
    """The published figures and the user's runs in one table, ready to draw, each on axes of its
    kind."""

    frame: pd.DataFrame
    """One row per (bar, quantity): label, who (``published`` / ``your_runs``), quantity, value,
    approximate,
    basis (memory: ``device`` or ``resident``), same_basis (on the published figures' basis),
    source."""
    capacity: Any
    """The device capacity drawn on the memory panel (a
    :class:`pooltk.logs.metrics.DeviceCapacity`), or None."""

    @property
    def runs(self) -> tuple[str, ...]:
        """The user's runs drawn."""
        return tuple(dict.fromkeys(self.frame.loc[self.frame.who == "your_runs", "label"]))


QUANTITY_AXES: dict[str, tuple[str, str]] = {
    "tok_per_s_per_gpu": ("throughput per GPU", "tokens/s per GPU (tok/s)"),
    "mfu": ("MFU", "MFU (% of peak FLOP/s)"),
    "peak_mem": ("peak device memory", "peak device memory (GiB)"),
}
"""The panels of :func:`beside_figure` on the published basis: quantity -> (title, axis label)."""
OTHER_BASIS_AXES: dict[str, tuple[str, str]] = {
    "tok_per_s_per_gpu": ("throughput of a rank process", "tokens/s per process (tok/s)"),
    "mfu": ("MFU", "MFU (% of peak FLOP/s)"),
    "peak_mem": ("resident memory", "peak resident memory (GiB)"),
}
"""The panels of :func:`beside_figure` for runs on another basis than the published GB200 figures:
a process's tokens/s and resident memory (pooltk's CPU runs), never drawn on a GPU's axes."""


def beside_published(published: Any, summary: Any, *, capacity: Any = None) -> Beside:
    """The published measured figures (:func:`pooltk.studies.kimi_k3.published_figures`) and each
    run of ``summary`` (None: the published figures alone) on one table, quantity by quantity; a
    run's memory basis is kept (resident or device), and so is whether the run is on the published
    basis at all (``same_basis``: tokens/s per GPU and a device's memory; a run whose memory is a
    process's resident memory is a CPU run, its tokens/s per process)."""
    import pandas as pd

    from pooltk.studies.kimi_k3 import published_figures

    rows = [
        {
            "label": r.label,
            "who": "published",
            "quantity": r.quantity,
            "value": r.value,
            "approximate": bool(r.approximate),
            "basis": "device",
            "same_basis": True,
            "source": r.source,
        }
        for r in published_figures(published).itertuples()
    ]
    for r in summary.runs if summary is not None else ():
        mfu = r.mfu.mfu_pct if r.mfu is not None else float("nan")
        same = not _is_resident(r.mem_basis)
        for q, value in (
            ("tok_per_s_per_gpu", r.tok_per_s_per_gpu),
            ("mfu", mfu),
            ("peak_mem", r.peak_mem_gib),
        ):
            basis = "resident" if (q == "peak_mem" and not same) else "device"
            rows.append(
                {
                    "label": str(r.run),
                    "who": "your_runs",
                    "quantity": q,
                    "value": float(value),
                    "approximate": False,
                    "basis": basis,
                    "same_basis": same,
                    "source": f"{r.format} log "
                    f"({r.mem_basis if q == 'peak_mem' else r.tok_per_s_per_gpu_basis})",
                }
            )
    return Beside(frame=pd.DataFrame(rows), capacity=capacity)


def _bar_text(value: float, approximate: bool) -> str:
    import math

    if math.isnan(value):
        return "n/a"
    text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return f"~{text}" if approximate else text


def _beside_panels(ax: Any, part: Any, labels: list[str], capacity: Any, q: str) -> None:
    """One panel: a bar per label of ``part`` (published blue, runs orange), ``~`` hatched, from
    zero."""
    import numpy as np

    rows = part.set_index("label").reindex(labels)
    values = rows["value"].astype(float).to_numpy()
    approx = rows["approximate"].fillna(False).astype(bool).to_numpy()
    who = rows["who"].to_numpy()
    y = np.arange(len(labels))
    for key in ("published", "your_runs"):
        idx = [i for i in range(len(labels)) if who[i] == key]
        if not idx:
            continue
        bars = ax.barh(
            y[idx],
            np.nan_to_num(values[idx]),
            height=0.7,
            color=style.colour(key),
            label=style.label(key),
        )
        for bar, i in zip(bars, idx):
            if approx[i]:
                bar.set_hatch("///")
                bar.set_edgecolor("white")
        style.bar_value_labels(ax, bars, labels=[_bar_text(values[i], approx[i]) for i in idx])
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 1.0
    if q == "peak_mem" and capacity is not None:
        ax.axvline(capacity.gib, color="black", ls="--", lw=1.2)
        top = max(top, capacity.gib)
    ax.set_xlim(0, top * 1.7)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.tick_params(axis="x", labelsize=8)


def beside_figure(beside: Beside) -> Figure:
    """The published bars and each of the user's runs, each on the axes of its own kind and scale.

    Runs on the published basis (tokens/s per GPU, a device's memory) share the published panels;
    runs on another basis (pooltk's CPU runs: tokens/s per rank process, a process's resident
    memory) get their own row of panels, their own axes and units, so a CPU process's 16-22k
    tokens/s never stands on the axis of a GB200's 392-627 per GPU. Published bars in one colour,
    the user's runs in another; a figure the source states as approximate (``~135 GiB``) is
    hatched and labelled ``~``; the device capacity is a line on the device-memory panel, with its
    source; a figure a run lacks (no MFU basis) reads ``n/a``.
    """
    frame = beside.frame
    same = frame[frame["same_basis"].astype(bool)]
    other = frame[~frame["same_basis"].astype(bool)]
    rows = [(same, QUANTITY_AXES)] + ([(other, OTHER_BASIS_AXES)] if len(other) else [])
    heights = [len(dict.fromkeys(part["label"])) for part, _ in rows]
    fig, axes = canvas.subplots(
        len(rows),
        3,
        figsize=(style.FIGURE_WIDTH_IN, 0.42 * sum(heights) + 1.9 * len(rows) + 1.5),
        squeeze=False,
        gridspec_kw={"height_ratios": [h + 1.5 for h in heights]},
    )
    for r, (part, axes_text) in enumerate(rows):
        labels = list(dict.fromkeys(part["label"]))
        for c, (q, (title, axis_label)) in enumerate(axes_text.items()):
            ax = axes[r, c]
            capacity = beside.capacity if r == 0 else None  # a device's, never on resident memory
            _beside_panels(ax, part[part.quantity == q], labels, capacity, q)
            ax.set_xlabel(axis_label, fontsize=9)
            ax.set_title(title, fontsize=10)
            if c:
                ax.tick_params(axis="y", labelleft=False)
        axes[r, 0].set_ylabel(
            "published shape or run (name)" if r == 0 else "your run (name)", fontsize=9
        )
    fig.suptitle(_beside_headline(frame, beside.capacity), fontsize=10)
    handles = _beside_legend(frame, beside.capacity)
    lines = fig._suptitle.get_text().count("\n") + 1
    style.legend_below(fig, handles, ncol=2, top=1 - (0.2 + 0.17 * lines) / fig.get_figheight())
    return fig


def _beside_legend(frame: Any, capacity: Any) -> list[Any]:
    """The legend entries: who drew (published, your runs), the approximate hatch where a figure
    is approximate, and the device capacity's line with its source."""
    from matplotlib.patches import Patch

    who = list(dict.fromkeys(frame["who"]))
    handles = style.legend_handles([k for k in ("published", "your_runs") if k in who])
    if frame["approximate"].fillna(False).astype(bool).any():
        handles.append(
            Patch(
                facecolor=style.colour("published"),
                hatch="///",
                edgecolor="white",
                label="stated as approximate (~) by its source",
            )
        )
    if capacity is not None:
        from matplotlib.lines import Line2D

        from pooltk.nb.fits import short_source

        source = short_source(capacity.source)
        handles.append(
            Line2D(
                [],
                [],
                color="black",
                ls="--",
                label=f"device capacity {capacity.gib:.2f} GiB (source: {source})",
            )
        )
    return handles


def _beside_headline(frame: Any, capacity: Any) -> str:
    """The figure's takeaway: the published range, and where the user's runs stand against it."""
    pub = frame[frame.who == "published"]
    tok = pub[pub.quantity == "tok_per_s_per_gpu"]["value"]
    mem = pub[pub.quantity == "peak_mem"]["value"].dropna()
    head = (
        f"Published Kimi-K3 on GB200: {tok.min():.0f}-{tok.max():.0f} tokens/s per GPU, peaks up "
        f"to {mem.max():.1f} GiB" + (f" of {capacity.gib:.2f}" if capacity is not None else "")
    )
    runs = frame[frame.who == "your_runs"]
    if not len(runs):
        return head
    other = sorted(set(runs.loc[~runs["same_basis"].astype(bool), "label"]))
    if not other:
        return head + ";\nyour runs are on the same basis and share its axes"
    return (
        head + f";\n{len(other)} of your runs are measured otherwise (a CPU rank process's "
        "tokens/s and resident memory):\ndrawn on axes of their own below, not bar to bar"
    )


_TWIN_FACTS = (
    "pp",
    "seq_len",
    "microbatches",
    "global_batch_size",
    "micro_batch_size",
    "hidden",
    "world_size",
)
"""The run facts a stock twin shares with its pooled run (all of them: only the pool differs)."""
_SPEED_PAIR_COLUMNS = [
    "pooled",
    "stock",
    "step_time_ratio",
    "pooled_range_s",
    "stock_range_s",
    "ranges_overlap",
    "order",
    "ranks_per_cpu",
    "release",
    "why",
]
"""The columns of :func:`speed_pairs`."""


def _twin_key(run: str, infos: dict) -> tuple:
    """What a run's twin must share: its :data:`_TWIN_FACTS`, or (no facts) the run itself."""
    info = infos.get(run)
    return tuple(getattr(info, f, None) for f in _TWIN_FACTS) if info is not None else (run,)


def _is_pooled(run: str, pool: pd.DataFrame, infos: dict) -> bool:
    """Whether the run pooled: as its logs say, else as its facts' ``extra`` say."""
    import pandas as pd

    if run in pool.index and not pd.isna(pool.loc[run, "pooled"]):
        return bool(pool.loc[run, "pooled"])
    info = infos.get(run)
    return bool(info is not None and (info.extra or {}).get("pooled"))


def _steady_steps(steps: pd.DataFrame, r: Any) -> pd.DataFrame:
    """Run ``r``'s training steps inside its steady window (all of them when it has none)."""
    run = str(r.run)
    first = getattr(r.window, "first_step", None)
    last = getattr(r.window, "last_step", None)
    part = steps[(steps.run.astype(str) == run) & (steps.kind == "train")]
    return part if first is None or last is None else part[part.step.between(first, last)]


def _pair_row(pooled: Any, stock: Any, steps: pd.DataFrame, info: Any) -> dict[str, Any]:
    """One row of :func:`speed_pairs`: the pooled run ``pooled`` against its stock twin."""
    import math

    run, twin = str(pooled.run), str(stock.run)
    w = {run: _steady_steps(steps, pooled), twin: _steady_steps(steps, stock)}
    ranges = {n: (float(f.step_time_s.min()), float(f.step_time_s.max())) for n, f in w.items()}
    overlap = ranges[run][0] <= ranges[twin][1] and ranges[twin][0] <= ranges[run][1]
    span = {n: (f.timestamp.min(), f.timestamp.max()) for n, f in w.items()}
    together = bool(span[run][0] <= span[twin][1] and span[twin][0] <= span[run][1])
    extra = getattr(info, "extra", None) or {}
    host = extra.get("host")
    cpus = host.get("cpus") if isinstance(host, dict) else None
    world = getattr(info, "world_size", None)
    per_cpu = world / cpus if cpus and world else math.nan
    config = extra.get("pool_config")
    release = config.get("release") if isinstance(config, dict) else None
    ratio = pooled.step_time.median_s / stock.step_time.median_s
    return {
        "pooled": run,
        "stock": twin,
        "step_time_ratio": ratio,
        "pooled_range_s": f"{ranges[run][0]:.2f}-{ranges[run][1]:.2f}",
        "stock_range_s": f"{ranges[twin][0]:.2f}-{ranges[twin][1]:.2f}",
        "ranges_overlap": overlap,
        "order": "at the same time" if together else "one after the other",
        "ranks_per_cpu": per_cpu,
        "release": (
            "not in its pool config: written before the release"
            if release is None
            else str(release)
        ),
        "why": _why(ratio, overlap, together, per_cpu, release),
    }


def speed_pairs(summary: Any, steps: pd.DataFrame, run_info: Any) -> pd.DataFrame:
    """Each pooled run against its stock twin (the same facts but the pool), and why it is slower
    when it is.

    See [Note: pooled vs stock speed]. Columns: pooled, stock, step_time_ratio (pooled / stock
    medians, steady window), pooled_range_s, stock_range_s (step to step, steady window),
    ranges_overlap, order (one after the other, or at the same time), ranks_per_cpu, release (the
    pooled run's pool config), why.
    """
    import pandas as pd

    by_run = {str(r.run): r for r in summary.runs}
    infos = dict(run_info or {})
    pool = pool_by_run(steps).assign(run=lambda f: f["run"].astype(str)).set_index("run")
    rows = []
    for run, r in by_run.items():
        if not _is_pooled(run, pool, infos):
            continue
        twins = [
            s
            for s in by_run
            if s != run
            and not _is_pooled(s, pool, infos)
            and _twin_key(s, infos) == _twin_key(run, infos)
        ]
        if twins:
            rows.append(_pair_row(r, by_run[twins[0]], steps, infos.get(run)))
    return pd.DataFrame(rows, columns=_SPEED_PAIR_COLUMNS)


def _why(ratio: float, overlap: bool, together: bool, per_cpu: float, release: Any) -> str:
    """[Note: pooled vs stock speed], in one sentence."""
    if ratio <= 1.02:
        return f"not slower (pooled / stock median step time {ratio:.2f})"
    parts = [f"{100 * (ratio - 1):.0f} % slower"]
    if release is None:
        parts.append(
            "written before pooltk released the last stage's kept graphs: that stage then "
            "re-homed most of its slots every step, a fresh allocation and copy of a whole set "
            "each (data/validation/last_stage_rehomes_2026-12-01.csv), a cost that grows with "
            "the set's size"
        )
    parts.append(
        "within the two runs' own step-to-step spread"
        if overlap
        else "beyond the two runs' own step-to-step spread"
    )
    if not together:
        parts.append("they ran one after the other, each meeting whatever else the machine ran")
    if per_cpu == per_cpu and per_cpu > 1:
        parts.append(f"{per_cpu:g} ranks per CPU share cores")
    parts.append(
        "the pool's own cost is measured with variants alternating in one launch "
        "(benchmarks/bench_pool.py)"
    )
    return "; ".join(parts)


def load_run_info(path: str | Path | None) -> Any:
    """Run facts from a JSON file: one object of facts for every run, or ``{run: {facts}}`` per
    run; None for None.

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
        raise InputError(
            "run info file",
            found=f"{str(p)!r} ({err.strerror or err})",
            required="a readable JSON file",
            fix="check --run-info / RUN_INFO_FILE",
        ) from None
    except ValueError as err:
        raise InputError(
            "run info file",
            found=f"invalid JSON in {p} ({err})",
            required="a JSON object of run facts",
            fix='write e.g. {"world_size": 256, "pp": 8, "global_batch_size": 4096, '
            '"seq_len": 2048}',
        ) from None
    if not isinstance(obj, dict):
        raise InputError(
            "run info file",
            found=f"a JSON {type(obj).__name__}",
            required="a JSON object",
            fix="one object of facts, or one object per run name",
        )
    if obj and all(isinstance(v, dict) for v in obj.values()):
        return {str(run): RunInfo.from_facts(facts, source=str(p)) for run, facts in obj.items()}
    return RunInfo.from_facts(obj, source=str(p))


def pool_by_run(steps: pd.DataFrame) -> pd.DataFrame:
    """Per run: whether it was pooled, whose pool, slack and layout (missing where the log does not
    say)."""
    cols = ["pooled", "pool_impl", "slack", "layout"]
    first = steps.groupby("run", observed=True, sort=False)[cols].first()
    return first.reset_index()


def compare_runs(summary: Any, steps: pd.DataFrame, *, baseline: str | None = None) -> pd.DataFrame:
    """Runs side by side: each figure of :data:`COMPARED` and its ratio to ``baseline`` (default:
    the first run).

    The ratio is run / baseline on the same basis (the ``basis`` row of each figure is in
    :data:`COMPARED`); pool columns say which runs used which pool.
    """
    import numpy as np

    from pooltk._validate import check_choice

    frame = summary.to_frame()
    runs = [str(r) for r in frame["run"]]
    if not runs:
        raise ValueError(
            "compare_runs: found no run in the summary; required at least one. "
            "Fix: read some logs first."
        )
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
    """Per run and rank, from the step table as read (where the logs name ranks): rows, step range,
    peak memory, median logged step time, mean logged per-GPU rate, and the timestamp spread of the
    rank's lines."""
    have = steps[steps["rank"].notna() & (steps["kind"] == "train")]
    cols = [
        "run",
        "rank",
        "rows",
        "first_step",
        "last_step",
        "peak_mem_gib",
        "step_time_median_s",
        "tok_per_s_per_gpu_logged_mean",
    ]
    if have.empty:
        return have.reindex(columns=cols).iloc[:0]
    g = have.groupby(["run", "rank"], observed=True)
    out = g.agg(
        rows=("step", "count"),
        first_step=("step", "min"),
        last_step=("step", "max"),
        peak_mem_gib=("mem_gib", "max"),
        step_time_median_s=("step_time_s", "median"),
        tok_per_s_per_gpu_logged_mean=("tok_per_s_per_gpu_logged", "mean"),
    )
    return out.reset_index()[cols]
