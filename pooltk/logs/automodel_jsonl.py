"""NeMo Automodel's ``training.jsonl`` / ``validation*.jsonl`` metric records.

One JSON object per line: ``step, epoch, timestamp`` (ISO 8601, UTC, milliseconds, ``Z``) and
the metrics ``loss, grad_norm, lr, mem`` (GiB, ``max_memory_allocated``), ``tps`` (tokens/s of
the whole job), ``tps_per_gpu`` (``tps / cp / dp``: ignores PP and TP), ``mfu`` (%, may be
``null`` or absent in older files), ``num_tokens_per_step``, ``num_label_tokens``. Validation
files may name the loss ``val_loss``. Keys are read by name through :data:`FIELDS`; extra keys are
ignored. A record is
found wherever it stands (``{"step":`` after a prefix, several on a line); one cut before its
closing brace is counted as truncated.

The step time is the log's own: ``num_tokens_per_step / tps`` (Automodel computes ``tps`` from
exactly that token count and the step's wall time).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pooltk.logs._common import ParseResult
from pooltk.logs.records import Field, Rec, Skip

__all__ = [
    "CANDIDATE",
    "DETECT",
    "FIELDS",
    "FORMAT",
    "finish",
    "pattern",
    "records_in",
    "split",
    "val_name_from_path",
]

FORMAT = "automodel_jsonl"
TS_FORMAT = "%Y-%m-%dT%H:%M:%S%.fZ"
MEM_BASIS = "max_allocated"

FIELDS: dict[str, Field] = {
    "step": Field("step", "int"),
    "loss": Field("loss"),
    "grad_norm": Field("grad_norm"),
    "lr": Field("lr"),
    "mem": Field("mem_gib"),
    "tps": Field("tok_per_s_logged"),
    "tps_per_gpu": Field("tok_per_s_per_gpu_logged"),
    "mfu": Field("mfu_pct_logged"),
    "val_loss": Field("loss"),
    "epoch": Field("epoch", "int"),
    "num_tokens_per_step": Field("num_tokens", "int"),
    "num_label_tokens": Field("num_label_tokens", "int"),
    "timestamp": Field("timestamp", "str"),
}
"""The field table: key -> column and type. A column two keys fill takes the first one present
(``val_loss`` where there is no ``loss``); values are checked in this order (the first wrong one
is the skip's reason)."""

CANDIDATE = r'\{\s*"step"\s*:'
"""Where a record starts."""
DETECT = CANDIDATE
_CAND_RE = re.compile(CANDIDATE)
_DECODER = json.JSONDecoder()
_VAL_FILE_RE = re.compile(r"(?:^|[_-])validation(?:[_-](?P<name>[^.]+))?$")
_FRACTION = r"(?:\.\d+)?(?:[eE][-+]?\d+)?"
_FAST = {
    "int": r"-?(?:0|[1-9]\d{0,17})",
    "float": r"(?:0|-?[1-9]\d*)" + _FRACTION + r"|-0(?:\.\d+(?:[eE][-+]?\d+)?|[eE][-+]?\d+)",
    "str": r'"[^"\\,\x00-\x1f]*"',
}
"""The values the fast path reads (each also ``null``): JSON numbers (not the integer ``-0``, which
:mod:`json` reads as 0) and strings without escapes, control characters or commas, which polars and
:mod:`json` read alike."""


def val_name_from_path(stem: str) -> str | None:
    """'default' for ``validation.jsonl``, 'squad' for ``validation_squad.jsonl``; None for training
    files."""
    m = _VAL_FILE_RE.search(stem)
    if m is None:
        return None
    return m.group("name") or "default"


def _number(record: dict[str, Any], key: str, *, integer: bool) -> Any:
    """The value under ``key``: None when absent or null; raises ValueError for a wrong type."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key!r} is {type(value).__name__} {str(value)[:30]!r}, not a number")
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                raise ValueError(f"{key!r} is {value!r}, not an integer")
            value = int(value)
        if not -(2**63) <= value < 2**63:
            raise ValueError(f"{key!r} is {value}, outside int64")
        return value
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{key!r} is an integer too large for a float") from None


def _values(record: dict[str, Any]) -> dict[str, Any]:
    """A record's values by column, read by :data:`FIELDS`; raises ValueError naming what is
    wrong."""
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not -(2**63) <= step < 2**63:
        raise ValueError("no int64 'step'")
    values: dict[str, Any] = {"kind": "train", "step": step, "timestamp": None}
    for key, field in FIELDS.items():
        if field.kind == "str":
            value = record.get(key)
            values[field.column] = value if isinstance(value, str) else None
        elif key != "step" and values.get(field.column) is None:
            number = _number(record, key, integer=field.kind == "int")
            if number is not None:
                values[field.column] = number
    if values.get("loss") is None:
        raise ValueError("no 'loss' (or 'val_loss')")
    return values


def records_in(line: str) -> list[Rec | Skip]:
    """Every record on ``line``, read by :data:`FIELDS`."""
    out: list[Rec | Skip] = []
    end = 0
    starts = [m.start() for m in _CAND_RE.finditer(line)]
    for k, start in enumerate(starts):
        if start < end:
            continue
        try:
            record, end = _DECODER.raw_decode(line, start)
        except ValueError as err:
            after = next((s for s in starts[k + 1 :] if s > start), None)
            out.append(_broken(line, start, after, err))
            end = len(line) if after is None else after
            continue
        if not isinstance(record, dict):
            continue
        try:
            values = _values(record)
        except ValueError as err:
            out.append(Skip(start=start, reason=str(err), end=end))
            continue
        canonical = json.dumps(record) == line[start:end]
        layout = tuple(record) if canonical else None
        out.append(Rec(start=start, end=end, values=values, layout=layout))
    return out


def _broken(line: str, start: int, after: int | None, err: ValueError) -> Skip:
    """The skip for a record at ``start`` that is not JSON: cut (where the next record on its line
    begins, ``after``, or at the line's end) or garbled."""
    msg = getattr(err, "msg", str(err))
    if after is not None:  # the next record on the line is read on its own
        # ([Note: a cut record is never a value])
        whole = line[start:after].rstrip().endswith("}")  # ends as a record does, yet is not JSON
        reason = "not JSON" if whole else "truncated JSON record"
        why = f"({msg})" if whole else "(cut where the next record begins)"
        return Skip(start=start, end=after, reason=f"{reason} {why}")
    cut = getattr(err, "pos", 0) >= len(line.rstrip()) or "}" not in line[start:]
    return Skip(
        start=start, reason=f"truncated JSON record ({msg})" if cut else f"not JSON ({msg})"
    )


def pattern(layout: tuple[str, ...]) -> str | None:
    """The regex of a record whose keys are ``layout`` as ``json.dumps`` writes it (values in
    :data:`_FAST`'s classes or ``null``; a key the table does not read holds any of them); None
    where the record does not start with its step or two keys fill one column."""
    columns = [FIELDS[key].column for key in layout if key in FIELDS]
    if not layout or layout[0] != "step" or len(set(columns)) != len(columns):
        return None
    anything = "|".join(_FAST.values())
    values = (_FAST[FIELDS[key].kind] if key in FIELDS else anything for key in layout)
    return (
        r"\{" + ", ".join(f'"{re.escape(k)}": (?:{v}|null)' for k, v in zip(layout, values)) + r"\}"
    )


def split(layout: tuple[str, ...]) -> tuple[list, list, Any]:
    """How records of ``layout`` (the column ``body``) are cut, as polars expressions: (columns to
    make first, (key, form, value text) per field, the timestamps: None, a field holds them)."""
    import polars as pl

    parts = pl.col("parts")
    texts = []
    for j, key in enumerate(layout):
        value = parts.struct.field(f"field_{j}").str.strip_prefix(
            f'"{key}": ' if j else f'{{"{key}": '
        )
        if key in FIELDS:
            texts.append((key, 0, value.str.strip_suffix("}") if j == len(layout) - 1 else value))
    return [("parts", pl.col("body").str.split_exact(", ", len(layout) - 1))], texts, None


def finish(found: Any, result: ParseResult, *, stem: str = "") -> None:
    """File-level columns: train or validation (from the file name), the step time, notes."""
    import polars as pl

    frame = found.frame
    val_name = val_name_from_path(stem)
    if not frame.height:
        return
    if val_name is not None:
        frame = frame.with_columns(pl.lit("val").alias("kind"), pl.lit(val_name).alias("val_name"))
    if "num_tokens" in frame.columns and "tok_per_s_logged" in frame.columns:
        tps = pl.col("tok_per_s_logged").cast(pl.Float64)
        tokens = pl.col("num_tokens").cast(pl.Float64)
        valid = tokens.is_not_null() & (tokens != 0) & tps.is_finite() & (tps > 0)
        basis = "num_tokens_per_step / tps (the log's own timing)"
        frame = frame.with_columns(  # null where not valid
            pl.when(valid).then(tokens / tps).alias("step_time_s"),
            pl.when(valid).then(pl.lit(basis)).alias("step_time_basis"),
        )
    found.frame = frame
    if val_name is None:
        result.notes.append(
            "tok_per_s_per_gpu_logged is Automodel's tps_per_gpu = tps/cp/dp: "
            "it ignores PP and TP; "
            "use pooltk.logs.metrics for a per-physical-GPU basis"
        )
