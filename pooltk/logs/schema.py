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


@dataclass(kw_only=True, slots=True, frozen=True)
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
        name="run",
        dtype="category",
        doc="run name: the file stem, or its folder for generic names (training.jsonl)",
    ),
    ColumnSpec(name="source_file", dtype="category", doc="path of the file the row was read from"),
    ColumnSpec(
        name="format", dtype="category", doc="detected log family (see pooltk.logs.FORMATS)"
    ),
    ColumnSpec(name="kind", dtype="category", doc="'train' or 'val'"),
    ColumnSpec(name="line", dtype="int64", doc="1-based line number of the row in source_file"),
    ColumnSpec(
        name="rank",
        dtype="Int64",
        doc="rank that printed the line when the log says so ([rankN]:, 'Rank N |', a JSONL rank)",
    ),
    ColumnSpec(
        name="task",
        dtype="Int64",
        doc="launcher task of the line: srun --label task id or docker compose replica",
    ),
    ColumnSpec(
        name="host",
        dtype="category",
        doc="host the line came from, where a launcher or collector says "
        "(pdsh, journald, syslog, SageMaker, Ray, SkyPilot, CloudWatch stream, GCP instance)",
    ),
    ColumnSpec(
        name="pod",
        dtype="category",
        doc="Kubernetes pod, where kubectl --prefix, stern or a GCP export says",
    ),
    ColumnSpec(
        name="collector_time",
        dtype="datetime64[ns]",
        doc="when the launcher or collector stamped the line "
        "(kubectl --timestamps, journald, RFC 5424, envelopes), UTC",
    ),
    ColumnSpec(
        name="step", dtype="int64", doc="optimizer step (benchmark: iteration index, from 0)"
    ),
    ColumnSpec(name="epoch", dtype="Int64", doc="epoch, where logged"),
    ColumnSpec(
        name="timestamp",
        dtype="datetime64[ns]",
        doc="when the line was logged (JSONL: UTC; text: host clock)",
    ),
    ColumnSpec(
        name="loss", dtype="float64", doc="loss as logged; NaN where a non-last PP stage printed -1"
    ),
    ColumnSpec(name="grad_norm", dtype="float64", doc="gradient norm as logged"),
    ColumnSpec(name="lr", dtype="float64", doc="learning rate as logged"),
    ColumnSpec(
        name="mem_gib", dtype="float64", doc="peak device memory, GiB (2**30 B); see mem_basis"
    ),
    ColumnSpec(
        name="mem_basis",
        dtype="category",
        doc="which peak: 'max_allocated' (Automodel) or 'max_reserved' (torchtitan)",
    ),
    ColumnSpec(
        name="mem_pct",
        dtype="float64",
        doc="peak memory as % of device capacity, where logged (torchtitan)",
    ),
    ColumnSpec(
        name="tok_per_s_logged",
        dtype="float64",
        doc="the log's own token rate (Automodel: whole job; torchtitan: per device)",
    ),
    ColumnSpec(
        name="tok_per_s_per_gpu_logged",
        dtype="float64",
        doc="the log's own per-GPU rate (Automodel: tps/cp/dp, ignores PP and TP)",
    ),
    ColumnSpec(
        name="tflops_per_gpu_logged",
        dtype="float64",
        doc="achieved TFLOP/s per device, where logged (torchtitan)",
    ),
    ColumnSpec(
        name="mfu_pct_logged",
        dtype="float64",
        doc="MFU in %, as logged on the framework's own basis",
    ),
    ColumnSpec(
        name="num_tokens", dtype="Int64", doc="tokens in the step's global batch, where logged"
    ),
    ColumnSpec(
        name="num_label_tokens", dtype="Int64", doc="label (loss) tokens in the step, where logged"
    ),
    ColumnSpec(
        name="step_time_s",
        dtype="float64",
        doc="seconds per step from the log; basis in step_time_basis",
    ),
    ColumnSpec(name="step_time_basis", dtype="category", doc="how step_time_s was obtained"),
    ColumnSpec(name="val_name", dtype="category", doc="validation set name for kind == 'val'"),
    ColumnSpec(
        name="pooled",
        dtype="boolean",
        doc="whether the run logged a receive-buffer pool install; missing when it logged neither",
    ),
    ColumnSpec(
        name="pool_impl",
        dtype="category",
        doc="whose pool: 'automodel' (recv_buffer_pool) or 'pooltk'",
    ),
    ColumnSpec(name="slack", dtype="Int64", doc="the pool's slack as its install line states it"),
    ColumnSpec(
        name="layout",
        dtype="category",
        doc="the torch layout the pool installed against, as logged",
    ),
)

_NAMES = tuple(c.name for c in COLUMNS)


class RowBuilder:
    """Column-wise accumulator: a per-file reader appends values,
    :func:`pooltk.logs.frames.from_result` takes the columns.

    Only the columns a reader fills are stored; the rest come out missing.
    """

    __slots__ = ("_cols", "_n")

    def __init__(self) -> None:
        self._cols: dict[str, list[Any]] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, **values: Any) -> None:
        """Append one row; unknown column names are a programming error."""
        n = self._n
        for key, value in values.items():
            col = self._cols.get(key)
            if col is None:
                if key not in _NAMES:
                    raise KeyError(
                        f"RowBuilder.add: unknown column {key!r}; known: {', '.join(_NAMES)}"
                    )
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
