"""Measured vs modelled: the saving the pool makes in a process's resident memory, per stage.

:func:`pooltk.parity.rss.measure_rss` trains stock and pooled 1F1B pipelines on real gloo
ranks and records each rank's peak resident memory (see [Note: what a rank measures] there).
This module turns those launches into a tidy table (:func:`launches_frame`, one row per
launch and rank; what ``data/validation/memory_measured_<date>.csv`` holds) and compares the
measured saving with the memory model's (:func:`measured_vs_modelled`). It lives beside the
harness that measures (it was ``pooltk.memory.measured``), so ``pooltk.memory`` stays below
``pooltk.parity`` and imports nothing of it; the shipped CSV is still ``pooltk.memory``'s package
data, next to the model's other data.

[Note: measured saving]
For one shape and stage: ``measured_saving = median(stock peak_delta) - median(pooled
peak_delta)`` over the repetitions, where ``peak_delta`` is the rank's final high-water mark
minus its resident memory before the stage was built. Both variants build the same stage,
batch and activations; only the receive buffers differ, so the saving should equal the
model's ``stock - pooled`` receive-buffer bytes of that stage. ``relative_difference`` is
``measured / modelled - 1`` and the goal is ``|relative_difference| <= 5 %``
(:data:`GOAL`). ``counted_saving`` is the same difference over the distinct storages
behind the stage's receive buffers (the allocator-side count), which must equal the model
exactly.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from pooltk.parity.experiments import Rings
from pooltk.memory.model import MemoryModelError, PipelineShape, harness_boundary, model_memory

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from pooltk.parity.rss import RssLaunch, RssSpec

__all__ = [
    "DEFAULT_SHAPES",
    "GOAL",
    "MEASURED_CSV",
    "RAW_COLUMNS",
    "default_specs",
    "format_comparison",
    "launches_frame",
    "measured_vs_modelled",
    "read_measured",
    "shipped_measurement",
    "write_measured",
]

GOAL = 0.05
"""Largest accepted ``|measured / modelled - 1|`` of the per-stage saving."""

MEASURED_CSV = "memory_measured_2026-12-01.csv"
"""The shipped measurement (package data, a link to ``data/validation/``)."""

DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((8, 131072), (16, 65536), (32, 32768))
"""``(microbatches, seq_len)`` at pp4, 2 rows, hidden 64, float32: 64, 32 and 16 MiB per set,
so stock holds 1 GiB of receive buffers on each middle stage in all three."""

RAW_COLUMNS: tuple[str, ...] = (
    "shape", "pp", "microbatches", "rows_per_microbatch", "seq_len", "hidden", "layers_per_stage", "steps",
    "set_bytes", "variant", "policy", "slack", "grad_slack", "rep", "launch", "stage",
    "baseline_rss_bytes", "hwm_after_setup_bytes", "peak_hwm_bytes", "peak_delta_bytes", "maxrss_bytes",
    "recv_forward_bytes", "recv_grad_bytes", "recv_forward_sets", "recv_grad_sets", "hwm_reset", "installed",
    "wall_s", "torch", "cpus",
)
"""Columns of the raw measurement CSV, one row per launch and rank (see data/validation/README.md)."""


def default_specs(*, steps: int = 2) -> list[RssSpec]:
    """The three shapes of :data:`DEFAULT_SHAPES` as launch specs."""
    from pooltk.parity.rss import RssSpec

    return [RssSpec(microbatches=m, seq_len=s, steps=steps) for m, s in DEFAULT_SHAPES]


def launches_frame(launches: Sequence[RssLaunch]) -> pd.DataFrame:
    """One row per launch and rank with :data:`RAW_COLUMNS`; ``rep`` counts launches of a shape and variant."""
    import pandas as pd
    import torch

    seen: dict[tuple[str, str], int] = {}
    rows = []
    for order, launch in enumerate(launches):
        s, cfg = launch.spec, launch.config
        rep = seen[(s.label(), launch.variant)] = seen.get((s.label(), launch.variant), -1) + 1
        for r in launch.ranks:
            rows.append({
                "shape": s.label(), "pp": s.pp, "microbatches": s.microbatches,
                "rows_per_microbatch": s.rows_per_microbatch, "seq_len": s.seq_len, "hidden": s.hidden,
                "layers_per_stage": s.layers_per_stage, "steps": s.steps, "set_bytes": s.boundary_bytes,
                "variant": launch.variant, "policy": cfg.policy if cfg else "",
                "slack": cfg.slack if cfg else "", "grad_slack": cfg.grad_slack if cfg else "",
                "rep": rep, "launch": order, "stage": r.rank,
                "baseline_rss_bytes": r.baseline_rss, "hwm_after_setup_bytes": r.hwm_after_setup,
                "peak_hwm_bytes": r.hwm_by_step[-1], "peak_delta_bytes": r.peak_delta,
                "maxrss_bytes": r.maxrss_by_step[-1],
                "recv_forward_bytes": r.recv["forward"]["bytes"], "recv_grad_bytes": r.recv["grad"]["bytes"],
                "recv_forward_sets": r.recv["forward"]["sets"], "recv_grad_sets": r.recv["grad"]["sets"],
                "hwm_reset": r.hwm_reset, "installed": "" if r.installed is None else r.installed,
                "wall_s": round(launch.wall_s, 2), "torch": torch.__version__, "cpus": os.cpu_count(),
            })
    return pd.DataFrame.from_records(rows, columns=list(RAW_COLUMNS))


def write_measured(frame: pd.DataFrame, path: Any) -> None:
    """Write the raw table as CSV."""
    frame.to_csv(path, index=False)


def read_measured(source: Any) -> pd.DataFrame:
    """The raw table from a CSV path or file object; a clear error when columns are missing."""
    import pandas as pd

    frame = pd.read_csv(source)
    missing = [c for c in RAW_COLUMNS if c not in frame.columns]
    if missing:
        raise MemoryModelError(
            "measurement CSV", found=f"no column(s) {', '.join(missing)}", required=f"the columns {', '.join(RAW_COLUMNS)}",
            fix="write it with `pooltk memory --measure --csv PATH`.",
        )
    return frame


def shipped_measurement() -> pd.DataFrame:
    """The measurement shipped with pooltk (:data:`MEASURED_CSV`), read as package data."""
    text = resources.files("pooltk.memory").joinpath("data", MEASURED_CSV).read_text(encoding="utf-8")
    return read_measured(io.StringIO(text))


def _config_of(rows: pd.DataFrame) -> PoolConfig:
    pooled = rows[rows.variant == "pooled"]
    if pooled.empty:
        raise MemoryModelError("measurement", found=f"no pooled launch for shape {rows.shape.iloc[0]!r}",
                               required="stock and pooled launches of every shape", fix="rerun `pooltk memory --measure`.")
    first = pooled.iloc[0]
    return Rings(slack=int(first.slack), grad_slack=int(first.grad_slack), policy=str(first.policy))


def measured_vs_modelled(raw: pd.DataFrame, *, goal: float = GOAL) -> pd.DataFrame:
    """Per shape and stage: modelled, counted and measured saving; see [Note: measured saving].

    Columns: ``shape``, ``stage``, ``reps`` (pairs), ``modelled_stock_mib``, ``modelled_pooled_mib``,
    ``modelled_saving_mib``, ``counted_saving_mib``, ``measured_stock_peak_mib``,
    ``measured_pooled_peak_mib`` (medians of ``peak_delta``), ``measured_saving_mib``,
    ``saving_min_mib`` / ``saving_max_mib`` (over pairs of the same repetition),
    ``relative_difference``, ``within_goal``.
    """
    import pandas as pd

    records = []
    for shape_label, rows in raw.groupby("shape", sort=False):
        first = rows.iloc[0]
        config = _config_of(rows)
        shape = PipelineShape(pp=int(first.pp), n_microbatches=int(first.microbatches))
        boundary = harness_boundary(rows=int(first.rows_per_microbatch), seq_len=int(first.seq_len), hidden=int(first.hidden))
        model = model_memory(shape, boundary, config)
        for stage, srows in rows.groupby("stage"):
            stage = int(stage)
            by = {v: srows[srows.variant == v].set_index("rep") for v in ("stock", "pooled")}
            stock_med = float(by["stock"].peak_delta_bytes.median())
            pooled_med = float(by["pooled"].peak_delta_bytes.median())
            pairs = (by["stock"].peak_delta_bytes - by["pooled"].peak_delta_bytes).dropna()
            counted = lambda v: float((by[v].recv_forward_bytes + by[v].recv_grad_bytes).median())  # noqa: E731
            modelled = model.saved_bytes(stage, "pooled")
            measured = stock_med - pooled_med
            rel = measured / modelled - 1 if modelled else float("nan")
            records.append({
                "shape": shape_label,
                "stage": stage,
                "reps": int(len(pairs)),
                "modelled_stock_mib": model.stage_bytes(stage, "stock") / 2**20,
                "modelled_pooled_mib": model.stage_bytes(stage, "pooled") / 2**20,
                "modelled_saving_mib": modelled / 2**20,
                "counted_saving_mib": (counted("stock") - counted("pooled")) / 2**20,
                "measured_stock_peak_mib": stock_med / 2**20,
                "measured_pooled_peak_mib": pooled_med / 2**20,
                "measured_saving_mib": measured / 2**20,
                "saving_min_mib": float(pairs.min()) / 2**20 if len(pairs) else float("nan"),
                "saving_max_mib": float(pairs.max()) / 2**20 if len(pairs) else float("nan"),
                "relative_difference": rel,
                "within_goal": bool(abs(rel) <= goal),
            })
    return pd.DataFrame.from_records(records)


def format_comparison(table: pd.DataFrame) -> str:
    """The comparison as the text table ``pooltk memory --measure`` prints (MiB = 2**20 bytes)."""
    lines = [f"{'shape':44} {'stage':>5} {'modelled':>9} {'counted':>9} {'measured':>9} {'min..max':>15} {'diff':>7}  goal"]
    for r in table.itertuples():
        lines.append(
            f"{r.shape:44} {r.stage:>5} {r.modelled_saving_mib:9.1f} {r.counted_saving_mib:9.1f} {r.measured_saving_mib:9.1f} "
            f"{f'{r.saving_min_mib:.1f}..{r.saving_max_mib:.1f}':>15} {r.relative_difference:+7.2%}  "
            f"{'within 5%' if r.within_goal else 'MISSED'}"
        )
    lines.append("saving per stage in MiB (2**20 B): modelled = model stock - pooled receive buffers; counted = distinct "
                 "receive storages; measured = median stock - median pooled peak resident growth (VmHWM - VmRSS before setup)")
    return "\n".join(lines)

