"""Figures from a step table on a stated basis: tok/s per physical GPU, steady windows, MFU,
headroom, bubble.

Every result carries the inputs and the basis it was computed on, and turns into a tidy
DataFrame with ``to_frame()``.

[Note: per-GPU bases]
"Tokens per second per GPU" means three different things in these logs:

- Automodel's ``tps_per_gpu`` (and the ``(X/gpu)`` of its text lines) is ``tps / cp / dp``: it
  ignores pipeline and tensor parallelism. With pp8 it is 8x the rate per physical GPU.
- torchtitan's ``tps`` is tokens / (time x non-data-parallel size): already per device.
- Automodel's benchmark recipe prints no rate; per physical GPU it is GBS x seq_len / (iteration
  time x world size).

pooltk's ``tok_per_s_per_gpu`` is always per *physical* GPU (whole-job tokens per second
divided by the number of ranks). :func:`per_gpu_rates` warns (:class:`PerGpuBasisWarning`) when a
log's own per-GPU figure differs from it.

[Note: MFU]
MFU = tok/s per physical GPU x FLOPs per token / peak FLOP/s per GPU. The FLOPs per token and
the peak are inputs, never assumed: the Kimi-K3 report used 6 x 104e9 (active parameters) and a
GB200 peak of 2250 TFLOP/s (the K3 configs' ``peak_tflops``); other GB200 configs and Automodel's
device table use 2500. :func:`mfu_table` shows every peak side by side. A study's constants
(FLOPs bases, peaks, capacities) live with the study (``pooltk.studies.kimi_k3``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_int
from pooltk.logs.runinfo import RunInfo

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from pooltk.logs.reader import LogTable

__all__ = [
    "Bubble",
    "DeviceCapacity",
    "FlopsBasis",
    "Headroom",
    "MfuFigure",
    "MfuTable",
    "PeakBasis",
    "PerGpuBasisWarning",
    "PerGpuRates",
    "RunSummary",
    "StepTimeStats",
    "SteadyWindow",
    "Summary",
    "bubble_1f1b",
    "bubble_table",
    "collapse_ranks",
    "headroom",
    "mfu",
    "mfu_table",
    "per_gpu_rates",
    "steady_window",
    "step_time_stats",
    "step_times",
    "summarize",
]

from pooltk.logs.bases import (  # noqa: E402 - the bases live in their own module; re-exported here
    Bubble,
    DeviceCapacity,
    FlopsBasis,
    Headroom,
    MfuFigure,
    MfuTable,
    PeakBasis,
    PerGpuBasisWarning,
    bubble_1f1b,
    bubble_table,
    headroom,
    mfu,
    mfu_table,
)


# --------------------------------------------------------------------------- per-GPU rates


@dataclass(kw_only=True, slots=True)
class PerGpuRates:
    """The step table with ``tok_per_s_per_gpu`` (per physical GPU) and its basis per run."""

    steps: pd.DataFrame
    """Input rows plus ``tok_per_s_per_gpu`` and ``tok_per_s_per_gpu_basis``."""
    bases: dict[str, str]
    """Run -> how its per-GPU rate was computed (or why it could not be)."""
    warnings: list[str] = field(default_factory=list)
    """Basis warnings (also issued as :class:`PerGpuBasisWarning`)."""

    def to_frame(self) -> pd.DataFrame:
        """The step table with the per-physical-GPU column."""
        return self.steps


def per_gpu_rates(
    steps: pd.DataFrame, runs: Mapping[str, RunInfo] | None = None, *, warn: bool = True
) -> PerGpuRates:
    """Add ``tok_per_s_per_gpu`` (tokens/s per physical GPU) to every row; see
    [Note: per-GPU bases]."""
    import numpy as np

    runs = dict(runs or {})
    out = steps.copy()
    out["tok_per_s_per_gpu"] = np.nan
    out["tok_per_s_per_gpu_basis"] = ""
    bases: dict[str, str] = {}
    notes: list[str] = []
    for run, idx in out.groupby("run", sort=False, observed=True).groups.items():
        rows = out.loc[idx]
        info = runs.get(str(run), RunInfo())
        fmt = str(rows["format"].iloc[0])
        rate, basis = _rate_for(fmt, rows, info)
        bases[str(run)] = basis
        out.loc[idx, "tok_per_s_per_gpu_basis"] = basis
        if rate is not None:
            out.loc[idx, "tok_per_s_per_gpu"] = rate
            logged = rows["tok_per_s_per_gpu_logged"].to_numpy(dtype=float)
            ok = np.isfinite(logged) & np.isfinite(rate) & (rate > 0)
            if fmt != "torchtitan" and ok.any():
                ratio = float(np.median(logged[ok] / rate[ok]))
                if abs(ratio - 1.0) > 0.01:
                    why = (
                        f"pp x tp = {(info.pp or 1) * (info.tp or 1)}"
                        if info.pp or info.tp
                        else "PP/TP not stated"
                    )
                    msg = (
                        f"run {run}: the log's own per-GPU figure is {ratio:.3g}x "
                        "the rate per physical GPU "
                        f"(Automodel's tps_per_gpu = tps/cp/dp ignores PP and TP; {why}); "
                        "tok_per_s_per_gpu is per physical GPU"
                    )
                    notes.append(msg)
                    if warn:
                        warnings.warn(msg, PerGpuBasisWarning, stacklevel=2)
    return PerGpuRates(steps=out, bases=bases, warnings=notes)


def _rate_for(fmt: str, rows: pd.DataFrame, info: RunInfo) -> tuple[Any, str]:
    """(per-physical-GPU rate per row or None, basis sentence)."""
    world, world_basis = info.derived_world_size()
    if world == 0:  # facts that make no GPU: nothing is per GPU (it was inf)
        return None, f"unknown: {world_basis} is 0 GPUs"
    if fmt == "torchtitan":
        basis = "torchtitan tps: tokens / (time x non-DP size), per device as logged"
        return rows["tok_per_s_logged"].to_numpy(dtype=float), basis
    if fmt == "automodel_bench":
        gbs, seq = info.global_batch_size, info.seq_len
        missing = [
            n
            for n, v in (("global_batch_size", gbs), ("seq_len", seq), ("world_size", world))
            if v is None
        ]
        if missing:
            return (
                None,
                f"unknown: needs {', '.join(missing)} "
                "(GBS x seq_len / (iteration time x world size))",
            )
        t = rows["step_time_s"].to_numpy(dtype=float)
        return (
            gbs * seq / (t * world),
            f"GBS x seq_len / (iteration time x world) = {gbs} x {seq} / (t x {world}); "
            f"world from {world_basis}",
        )
    tps = rows["tok_per_s_logged"].to_numpy(dtype=float)
    if world is not None:
        return tps / world, f"tps / world size ({world}; {world_basis})"
    logged = rows["tok_per_s_per_gpu_logged"].to_numpy(dtype=float)
    if info.pp and info.tp and not all(math.isnan(x) for x in logged):
        basis = f"log's tps_per_gpu / (pp x tp) = / ({info.pp} x {info.tp})"
        return logged / (info.pp * info.tp), basis
    return None, "unknown: world size not known (give RunInfo(world_size=...) or a sidecar)"


def collapse_ranks(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, kind, step) when several ranks logged the same step.

    Loss: the first finite value (the last PP stage is the one with a loss); memory: the
    maximum over ranks; rates, MFU: the mean over ranks (each is per device); step time: max.
    """
    import pandas as pd

    if steps.empty or steps["rank"].nunique(dropna=True) <= 1:
        return steps
    agg: dict[str, Any] = {c: "first" for c in steps.columns if c not in ("run", "kind", "step")}
    agg.update(
        {
            "mem_gib": "max",
            "mem_pct": "max",
            "step_time_s": "max",
            "tok_per_s_logged": "mean",
            "tok_per_s_per_gpu_logged": "mean",
            "tflops_per_gpu_logged": "mean",
            "mfu_pct_logged": "mean",
            "line": "min",
        }
    )
    if "tok_per_s_per_gpu" in steps.columns:
        agg["tok_per_s_per_gpu"] = "mean"
    out = steps.groupby(["run", "kind", "step"], sort=False, as_index=False, observed=True).agg(agg)
    out["rank"] = pd.array([pd.NA] * len(out), dtype="Int64")  # several ranks combined
    return out[list(steps.columns)]


# --------------------------------------------------------------------------- windows and step times


@dataclass(kw_only=True, slots=True, frozen=True)
class SteadyWindow:
    """The steps a steady-state figure is averaged over."""

    run: str
    first_step: int | None
    """First step in the window (None when the run has no train step)."""
    last_step: int | None
    """Last step in the window."""
    n_steps: int
    """Logged train steps in the window."""
    n_excluded: int
    """Logged train steps before the window (warmup)."""
    rule: str
    """How the window was chosen."""

    def to_frame(self) -> pd.DataFrame:
        """One row."""
        import pandas as pd

        return pd.DataFrame([asdict(self)])


def steady_window(
    run_steps: pd.DataFrame, *, warmup_steps: int | None = None, declared: int | None = None
) -> SteadyWindow:
    """The steady-state window of one run's train rows.

    ``warmup_steps`` (given by the user) excludes that many logged steps. Otherwise the run's own
    ``declared`` throughput warmup (the benchmark recipe's warmup iterations) is used. Otherwise
    the first max(1, ceil(10%)) logged steps are excluded (compilation, allocator growth) when
    at least 2 steps are logged; a single logged step is used as it is, and the rule says so.
    """
    train = run_steps[run_steps["kind"] == "train"]
    run = str(run_steps["run"].iloc[0]) if len(run_steps) else ""
    steps = sorted(set(int(s) for s in train["step"]))
    n = len(steps)
    if n == 0:
        return SteadyWindow(
            run=run,
            first_step=None,
            last_step=None,
            n_steps=0,
            n_excluded=0,
            rule="no train step logged",
        )
    if warmup_steps is not None:
        check_int(
            "warmup_steps", warmup_steps, low=0, fix="give how many logged steps to leave out."
        )
        k = min(warmup_steps, n - 1)
        rule = f"excluded the first {k} logged step(s) (given"
        rule += ")" if k == warmup_steps else f" {warmup_steps}; the run logged {n}: the last kept)"
    elif declared is not None:
        kept = [s for s in steps if s >= declared]
        k = n - len(kept) if kept else n - 1
        rule = f"excluded steps < {declared} (the run's declared warmup)"
    elif n >= 2:
        k = max(1, math.ceil(0.1 * n))
        rule = f"excluded the first {k} logged step(s): max(1, ceil(10% of {n})) (default rule)"
    else:
        k, rule = 0, "the only logged step: no warmup cut possible"
    window = steps[k:]
    return SteadyWindow(
        run=run,
        first_step=window[0],
        last_step=window[-1],
        n_steps=len(window),
        n_excluded=k,
        rule=rule,
    )


def _in_window(run_steps: pd.DataFrame, window: SteadyWindow) -> pd.DataFrame:
    train = run_steps[run_steps["kind"] == "train"]
    if window.first_step is None:
        return train.iloc[0:0]
    return train[(train["step"] >= window.first_step) & (train["step"] <= window.last_step)]


@dataclass(kw_only=True, slots=True, frozen=True)
class StepTimeStats:
    """Seconds per step over a window, with how they were measured."""

    run: str
    n: int
    """Step times used."""
    mean_s: float
    median_s: float
    p90_s: float
    std_s: float
    """Standard deviation (0 for one value)."""
    min_s: float
    max_s: float
    basis: str
    """Where the step times come from."""

    def to_frame(self) -> pd.DataFrame:
        """One row."""
        import pandas as pd

        return pd.DataFrame([asdict(self)])


def step_times(run_steps: pd.DataFrame) -> tuple[pd.Series, str]:
    """Seconds per step for each train row: the log's own figure, else timestamp differences.

    Timestamp differences are divided by the step difference (logs every N steps) and take the
    timestamp's resolution (whole seconds for Automodel text logs); the basis says which.
    """
    import numpy as np
    import pandas as pd

    train = run_steps[run_steps["kind"] == "train"].sort_values("step")
    own = train["step_time_s"]
    if own.notna().any():
        basis = str(train.loc[own.notna(), "step_time_basis"].iloc[0])
        return own, basis
    ts = train["timestamp"]
    if ts.notna().sum() >= 2:
        dt = ts.diff().dt.total_seconds()
        ds = train["step"].diff()
        per = (dt / ds).where(ds > 0)
        frac = (ts.dropna().dt.microsecond != 0).any()
        resolution = "ms" if frac else "1 s"
        return (
            per,
            "timestamp differences / steps between logged lines "
            f"({resolution} resolution; includes logging)",
        )
    return pd.Series(
        np.nan, index=train.index
    ), "unknown: no step time in the log and fewer than 2 timestamped steps"


def step_time_stats(run_steps: pd.DataFrame, window: SteadyWindow) -> StepTimeStats:
    """Step-time statistics over ``window``."""
    import numpy as np

    times, basis = step_times(run_steps)
    in_window = _in_window(run_steps, window)
    values = times.reindex(in_window.index).to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    if values.size == 0:
        figures = ("mean_s", "median_s", "p90_s", "std_s", "min_s", "max_s")
        return StepTimeStats(run=window.run, n=0, basis=basis, **dict.fromkeys(figures, math.nan))
    return StepTimeStats(
        run=window.run,
        n=int(values.size),
        mean_s=float(values.mean()),
        median_s=float(np.median(values)),
        p90_s=float(np.percentile(values, 90)),
        std_s=float(values.std(ddof=1)) if values.size > 1 else 0.0,
        min_s=float(values.min()),
        max_s=float(values.max()),
        basis=basis,
    )


# --------------------------------------------------------------------------- per-run summary


@dataclass(kw_only=True, slots=True, frozen=True)
class RunSummary:
    """The usual figures of one run, each with its basis."""

    run: str
    format: str
    n_steps: int
    """Logged train steps."""
    first_step: int | None
    """First logged train step."""
    last_step: int | None
    """Last logged train step."""
    window: SteadyWindow
    step_time: StepTimeStats
    """Step-time statistics over the window."""
    tok_per_s_per_gpu: float
    """Steady tokens/s per physical GPU (mean over the window); NaN when not computable."""
    tok_per_s_per_gpu_basis: str
    """How it was computed."""
    tok_per_s_per_gpu_logged: float
    """The log's own per-GPU figure over the window (its basis may ignore PP/TP)."""
    mfu: MfuFigure | None
    """MFU on the given FLOPs basis and first peak (None without a FLOPs basis or rate)."""
    mfu_logged_pct: float
    """The log's own MFU over the window (its own basis), NaN when not logged."""
    peak_mem_gib: float
    """Peak memory over all train steps, GiB."""
    mem_basis: str
    """Which allocator peak."""
    headroom: Headroom | None
    """Against the given device capacity (None without one)."""
    final_loss: float
    """Last finite train loss."""
    warnings: tuple[str, ...]
    """Basis warnings for this run."""

    def to_dict(self) -> dict[str, Any]:
        """A flat dict (one row of :meth:`Summary.to_frame`)."""
        return {
            "run": self.run,
            "format": self.format,
            "n_steps": self.n_steps,
            "first_step": self.first_step,
            "last_step": self.last_step,
            "window": f"{self.window.first_step}..{self.window.last_step} ({self.window.n_steps})",
            "window_rule": self.window.rule,
            "step_time_median_s": self.step_time.median_s,
            "step_time_basis": self.step_time.basis,
            "tok_per_s_per_gpu": self.tok_per_s_per_gpu,
            "tok_per_s_per_gpu_basis": self.tok_per_s_per_gpu_basis,
            "tok_per_s_per_gpu_logged": self.tok_per_s_per_gpu_logged,
            "mfu_pct": self.mfu.mfu_pct if self.mfu else math.nan,
            "mfu_basis": self.mfu.basis if self.mfu else "",
            "mfu_logged_pct": self.mfu_logged_pct,
            "peak_mem_gib": self.peak_mem_gib,
            "mem_basis": self.mem_basis,
            "headroom_gib": self.headroom.headroom_gib if self.headroom else math.nan,
            "capacity_gib": self.headroom.capacity_gib if self.headroom else math.nan,
            "final_loss": self.final_loss,
            "warnings": " | ".join(self.warnings),
        }


@dataclass(kw_only=True, slots=True, frozen=True)
class Summary:
    """One :class:`RunSummary` per run, and the rows they were computed from."""

    runs: tuple[RunSummary, ...]
    """Per run, in the order the runs were read."""
    steps: pd.DataFrame
    """The step rows (ranks combined) with ``tok_per_s_per_gpu`` and ``step_time_s`` on each run's
    stated basis."""

    def to_frame(self) -> pd.DataFrame:
        """One row per run."""
        import pandas as pd

        frame = pd.DataFrame([r.to_dict() for r in self.runs])
        for c in ("first_step", "last_step"):  # integers beside a run with none (not 0.0 / NaN)
            if c in frame:
                frame[c] = pd.Series([getattr(r, c) for r in self.runs], dtype=object)
        return frame

    def __getitem__(self, run: str) -> RunSummary:
        for r in self.runs:
            if r.run == run:
                return r
        raise KeyError(f"Summary: no run {run!r}; runs: {', '.join(r.run for r in self.runs)}")


def summarize(
    table: LogTable,
    *,
    run_info: Mapping[str, RunInfo] | RunInfo | None = None,
    flops: FlopsBasis | None = None,
    peaks: Sequence[PeakBasis] = (),
    capacity: DeviceCapacity | None = None,
    warmup_steps: int | None = None,
    warn: bool = True,
) -> Summary:
    """Per-run figures: steps, steady window, step time, tok/s per physical GPU, MFU, peak memory,
    headroom.

    ``run_info`` adds or overrides facts (one RunInfo for every run, or a mapping by run);
    ``flops`` is the FLOPs-per-token basis for MFU (none: only the log's own MFU is shown);
    ``peaks[0]`` is the peak the summary's MFU uses (:func:`mfu_table` shows all); without
    ``peaks``, a run's own logged peak FLOP/s (torchtitan's setup line) where it has one.
    """
    infos: dict[str, RunInfo] = dict(table.runs)
    if isinstance(run_info, RunInfo):
        infos = {r: i.merged(run_info) for r, i in infos.items()}
    elif run_info is not None:
        for r, extra in run_info.items():
            infos[r] = infos.get(r, RunInfo()).merged(extra)
    rates = per_gpu_rates(table.steps, infos, warn=warn)
    steps = collapse_ranks(rates.steps).astype({"step_time_basis": "object"})
    out: list[RunSummary] = []
    for key, rows in steps.groupby("run", sort=False, observed=True):
        run = str(key)
        times, time_basis = step_times(rows)
        steps.loc[times.index, "step_time_s"] = times
        steps.loc[times.index, "step_time_basis"] = time_basis
        info = infos.get(run, RunInfo())
        window = steady_window(rows, warmup_steps=warmup_steps, declared=info.warmup_steps)
        peak = peaks[0] if peaks else _logged_peak(info)
        out.append(_run_summary(run, rows, window, rates, flops, peak, capacity))
    return Summary(runs=tuple(out), steps=steps)


def _logged_peak(info: RunInfo) -> PeakBasis | None:
    """The run's own logged peak FLOP/s (torchtitan's setup line) as a basis, or None."""
    if not info.peak_flops:
        return None
    return PeakBasis(
        name=f"{info.peak_flops / 1e12:g} TFLOP/s (the log's own peak)",
        flops_per_s=info.peak_flops,
        source=info.sources.get("peak_flops", "the log"),
    )


def _mean(values: pd.Series) -> float:
    """The mean of the values present, NaN where none is (every windowed rate and MFU of a
    summary: torchtitan's ``tok_per_s_per_gpu`` and ``tok_per_s_per_gpu_logged`` hold the same
    values and come out as the same float)."""
    return float(values.mean()) if values.notna().any() else math.nan


def _run_summary(
    run: str,
    rows: pd.DataFrame,
    window: SteadyWindow,
    rates: PerGpuRates,
    flops: FlopsBasis | None,
    peak_basis: PeakBasis | None,
    capacity: DeviceCapacity | None,
) -> RunSummary:
    """One run's figures over its steady ``window`` (see :func:`summarize`)."""
    import numpy as np

    train = rows[rows["kind"] == "train"]
    in_window = _in_window(rows, window)
    stats = step_time_stats(rows, window)
    rate = _mean(in_window["tok_per_s_per_gpu"])
    fig = None
    if flops is not None and math.isfinite(rate) and peak_basis is not None:
        fig = mfu(rate, flops, peak_basis)
    mem = train["mem_gib"]
    peak = float(mem.max()) if mem.notna().any() else math.nan
    losses = train["loss"].to_numpy(dtype=float)
    finite = losses[np.isfinite(losses)]
    basis_mem = train["mem_basis"].dropna()
    return RunSummary(
        run=run,
        format=str(rows["format"].iloc[0]),
        n_steps=int(train["step"].nunique()),
        first_step=int(train["step"].min()) if len(train) else None,
        last_step=int(train["step"].max()) if len(train) else None,
        window=window,
        step_time=stats,
        tok_per_s_per_gpu=rate,
        tok_per_s_per_gpu_basis=rates.bases.get(run, ""),
        tok_per_s_per_gpu_logged=_mean(in_window["tok_per_s_per_gpu_logged"]),
        mfu=fig,
        mfu_logged_pct=_mean(in_window["mfu_pct_logged"]),
        peak_mem_gib=peak,
        mem_basis=str(basis_mem.iloc[0]) if len(basis_mem) else "",
        headroom=headroom(peak, capacity) if capacity is not None and math.isfinite(peak) else None,
        final_loss=float(finite[-1]) if finite.size else math.nan,
        warnings=tuple(w for w in rates.warnings if w.startswith(f"run {run}:")),
    )
