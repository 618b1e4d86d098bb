"""The tidy step table every reader produces: one row per logged step (and rank) of a run.

Columns carry their unit in the name (``mem_gib``, ``step_time_s``, ``tok_per_s_logged``).
Figures copied from a log keep the log's own basis and say so with a ``_logged`` suffix;
figures on a stated physical basis (``tok_per_s_per_gpu``, ``mfu_pct``) are added by
:mod:`pooltk.logs.metrics`, never guessed by a reader.

[Note: memory units]
Every memory figure in the frame is GiB (2**30 bytes). Automodel prints ``mem {:.2f} GiB``
(``max_memory_allocated() / 1024**3``); its benchmark recipe prints the same quantity labelled
"GB" (also ``/ 1024**3``: GiB despite the label); torchtitan prints ``max_reserved`` in GiB.
Which allocator statistic it is goes in ``mem_basis``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["COLUMNS", "ColumnSpec", "RowBuilder", "concat_frames"]


@dataclass(slots=True, frozen=True)
class ColumnSpec:
    """One column of the step table."""

    name: str
    """Column name; the unit is part of it where there is one."""
    dtype: str
    """pandas dtype the column is cast to."""
    doc: str
    """What the value is and where it comes from."""


COLUMNS: tuple[ColumnSpec, ...] = (
    ColumnSpec(
        "run",
        "category",
        "run name: the file stem, or its folder for generic names (training.jsonl)",
    ),
    ColumnSpec("source_file", "category", "path of the file the row was read from"),
    ColumnSpec("format", "category", "detected log family (see pooltk.logs.FORMATS)"),
    ColumnSpec("kind", "category", "'train' or 'val'"),
    ColumnSpec("line", "int64", "1-based line number of the row in source_file"),
    ColumnSpec(
        "rank",
        "Int64",
        "rank that printed the line when the log says so ([rankN]:, 'Rank N |', a JSONL rank)",
    ),
    ColumnSpec(
        "task",
        "Int64",
        "launcher task of the line: srun --label task id or docker compose replica",
    ),
    ColumnSpec(
        "host",
        "category",
        "host the line came from, where a launcher or collector says (pdsh, journald, syslog, "
        "SageMaker, Ray, SkyPilot, CloudWatch stream, GCP instance)",
    ),
    ColumnSpec(
        "pod",
        "category",
        "Kubernetes pod, where kubectl --prefix, stern or a GCP export says",
    ),
    ColumnSpec(
        "collector_time",
        "datetime64[ns]",
        "when the launcher or collector stamped the line "
        "(kubectl --timestamps, journald, RFC 5424, envelopes), UTC",
    ),
    ColumnSpec("step", "int64", "optimizer step (benchmark: iteration index, from 0)"),
    ColumnSpec("epoch", "Int64", "epoch, where logged"),
    ColumnSpec(
        "timestamp",
        "datetime64[ns]",
        "when the line was logged (JSONL: UTC; text: host clock)",
    ),
    ColumnSpec("loss", "float64", "loss as logged; NaN where a non-last PP stage printed -1"),
    ColumnSpec("grad_norm", "float64", "gradient norm as logged"),
    ColumnSpec("lr", "float64", "learning rate as logged"),
    ColumnSpec("mem_gib", "float64", "peak device memory, GiB (2**30 B); see mem_basis"),
    ColumnSpec(
        "mem_basis",
        "category",
        "which peak: 'max_allocated' (Automodel) or 'max_reserved' (torchtitan)",
    ),
    ColumnSpec(
        "mem_pct",
        "float64",
        "peak memory as % of device capacity, where logged (torchtitan)",
    ),
    ColumnSpec(
        "tok_per_s_logged",
        "float64",
        "the log's own token rate (Automodel: whole job; torchtitan: per device)",
    ),
    ColumnSpec(
        "tok_per_s_per_gpu_logged",
        "float64",
        "the log's own per-GPU rate (Automodel: tps/cp/dp, ignores PP and TP)",
    ),
    ColumnSpec(
        "tflops_per_gpu_logged",
        "float64",
        "achieved TFLOP/s per device, where logged (torchtitan)",
    ),
    ColumnSpec("mfu_pct_logged", "float64", "MFU in %, as logged on the framework's own basis"),
    ColumnSpec("num_tokens", "Int64", "tokens in the step's global batch, where logged"),
    ColumnSpec("num_label_tokens", "Int64", "label (loss) tokens in the step, where logged"),
    ColumnSpec("step_time_s", "float64", "seconds per step from the log; basis in step_time_basis"),
    ColumnSpec("step_time_basis", "category", "how step_time_s was obtained"),
    ColumnSpec("val_name", "category", "validation set name for kind == 'val'"),
    ColumnSpec(
        "pooled",
        "boolean",
        "whether the run logged a receive-buffer pool install; missing when it logged neither",
    ),
    ColumnSpec("pool_impl", "category", "whose pool: 'automodel' (recv_buffer_pool) or 'pooltk'"),
    ColumnSpec("slack", "Int64", "the pool's slack as its install line states it"),
    ColumnSpec("layout", "category", "the torch layout the pool installed against, as logged"),
)

_NAMES = tuple(c.name for c in COLUMNS)


class RowBuilder:
    """Column-wise accumulator: a reader appends values, :func:`pooltk.logs.frames.from_result`
    (or :func:`pooltk.logs.records.read_records`) takes the columns.

    Only the columns a reader fills are stored; the rest come out missing. ``also``: names beside
    the step table's columns that rows may hold.
    """

    __slots__ = ("_cols", "_n", "_names")

    def __init__(self, also: tuple[str, ...] = ()) -> None:
        self._cols: dict[str, list[Any]] = {}
        self._n = 0
        self._names = (*_NAMES, *also)

    def add(self, **values: Any) -> None:
        """Append one row; unknown column names are a programming error."""
        n = self._n
        for key, value in values.items():
            col = self._cols.get(key)
            if col is None:
                if key not in self._names:
                    known = ", ".join(self._names)
                    raise KeyError(f"RowBuilder.add: unknown column {key!r}; known: {known}")
                col = self._cols[key] = [None] * n
            col.append(value)
        self._n = n + 1
        for col in self._cols.values():
            if len(col) < n + 1:
                col.append(None)

    def columns(self) -> dict[str, list[Any]]:
        """The filled columns, each as long as the number of rows."""
        return self._cols


def _missing(dtype: str, n: int) -> Any:
    """An all-missing column of ``dtype``, built without a Python loop."""
    import numpy as np
    import pandas as pd

    if dtype == "float64":
        return np.full(n, np.nan)
    if dtype == "datetime64[ns]":
        return np.full(n, np.datetime64("NaT"), dtype="datetime64[ns]")
    if dtype in ("Int64", "int64"):
        return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))
    if dtype == "boolean":
        return pd.arrays.BooleanArray(np.zeros(n, dtype=bool), np.ones(n, dtype=bool))
    if dtype == "category":
        return pd.Categorical.from_codes(
            np.full(n, -1, dtype=np.int8), categories=pd.Index([], dtype="str")
        )
    raise ValueError(f"no missing value for dtype {dtype!r}")


def _str_categorical(cat: Any) -> Any:
    """``cat`` with categories of pandas' ``str`` dtype (so categoricals of different files
    unite)."""
    import pandas as pd

    if cat.categories.dtype == "str":
        return cat
    return pd.Categorical.from_codes(
        cat.codes, categories=pd.Index([str(c) for c in cat.categories], dtype="str")
    )


def concat_frames(frames: list[Any]) -> Any:
    """Concatenate step tables, keeping the categorical columns categorical (categories united)."""
    import pandas as pd
    from pandas.api.types import union_categoricals

    frames = [f for f in frames if len(f)] or frames[:1]
    if len(frames) == 1:
        return frames[0].reset_index(drop=True)
    cats = [c.name for c in COLUMNS if c.dtype == "category"]
    united = {
        c: union_categoricals([_str_categorical(f[c].array) for f in frames], sort_categories=True)
        for c in cats
    }
    out = pd.concat([f.drop(columns=cats) for f in frames], ignore_index=True)
    for c in cats:
        out[c] = united[c]
    return out[[c.name for c in COLUMNS]]
