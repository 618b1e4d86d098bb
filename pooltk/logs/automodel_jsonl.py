"""NeMo Automodel's ``training.jsonl`` / ``validation*.jsonl`` metric records.

One JSON object per line: ``step, epoch, timestamp`` (ISO 8601, UTC, milliseconds, ``Z``) and
the metrics ``loss, grad_norm, lr, mem`` (GiB, ``max_memory_allocated``), ``tps`` (tokens/s of
the whole job), ``tps_per_gpu`` (``tps / cp / dp``: ignores PP and TP), ``mfu`` (%, may be
``null`` or absent in older files), ``num_tokens_per_step``, ``num_label_tokens``. Validation
files may name the loss ``val_loss``. Keys are read by name; extra keys are ignored. A record is
found wherever it stands (``{"step":`` after a prefix, several on a line); one cut before its
closing brace is counted as truncated.

The step time is the log's own: ``num_tokens_per_step / tps`` (Automodel computes ``tps`` from
exactly that token count and the step's wall time).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from pooltk.logs._common import ParseResult
from pooltk.logs.records import Rec, Skip

__all__ = ["CANDIDATE", "DETECT", "FORMAT", "fast", "finish", "parse_line", "val_name_from_path"]

FORMAT = "automodel_jsonl"
TS_FORMAT = "%Y-%m-%dT%H:%M:%S%.fZ"
MEM_BASIS = "max_allocated"
CANDIDATE = r'\{\s*"step"\s*:'
"""Where a record starts."""
DETECT = CANDIDATE
_CAND_RE = re.compile(CANDIDATE)
_DECODER = json.JSONDecoder()
_VAL_FILE_RE = re.compile(r"(?:^|[_-])validation(?:[_-](?P<name>[^.]+))?$")

_FLOATS = (
    ("loss", "loss"),
    ("grad_norm", "grad_norm"),
    ("lr", "lr"),
    ("mem", "mem_gib"),
    ("tps", "tok_per_s_logged"),
    ("tps_per_gpu", "tok_per_s_per_gpu_logged"),
    ("mfu", "mfu_pct_logged"),
)
_INTS = (
    ("epoch", "epoch"),
    ("num_tokens_per_step", "num_tokens"),
    ("num_label_tokens", "num_label_tokens"),
)


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
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not -(2**63) <= step < 2**63:
        raise ValueError("no int64 'step'")
    values: dict[str, Any] = {"kind": "train", "step": step}
    for key, column in _FLOATS:
        number = _number(record, key, integer=False)
        if number is not None:
            values[column] = number
    if "loss" not in values:
        alt = _number(record, "val_loss", integer=False)
        if alt is not None:
            values["loss"] = alt
    for key, column in _INTS:
        number = _number(record, key, integer=True)
        if number is not None:
            values[column] = number
    stamp = record.get("timestamp")
    values["timestamp"] = stamp if isinstance(stamp, str) else None
    if "loss" not in values:
        raise ValueError("no 'loss' (or 'val_loss')")
    return values


def parse_line(line: str) -> list[Rec | Skip]:
    """Every record on ``line`` (the definition of the format)."""
    out: list[Rec | Skip] = []
    end = 0
    starts = [m.start() for m in _CAND_RE.finditer(line)]
    for k, start in enumerate(starts):
        if start < end:
            continue
        try:
            record, end = _DECODER.raw_decode(line, start)
        except ValueError as err:
            pos = getattr(err, "pos", 0)
            after = next((s for s in starts[k + 1 :] if s > start), None)
            if after is not None:  # the next record on the line is read on its own
                # ([Note: a cut record is never a value])
                whole = (
                    line[start:after].rstrip().endswith("}")
                )  # ends as a record does, yet is not JSON: garbled
                out.append(
                    Skip(
                        start=start,
                        end=after,
                        reason=f"not JSON ({err.msg})"
                        if whole
                        else "truncated JSON record (cut where the next record begins)",
                    )
                )
                end = after
                continue
            cut = pos >= len(line.rstrip()) or "}" not in line[start:]
            out.append(
                Skip(
                    start=start,
                    reason=f"truncated JSON record ({err.msg})" if cut else f"not JSON ({err.msg})",
                )
            )
            end = len(line)
            continue
        if not isinstance(record, dict):
            continue
        try:
            out.append(Rec(start=start, end=end, values=_values(record)))
        except ValueError as err:
            out.append(Skip(start=start, reason=str(err), end=end))
    return out


def finish(found: Any, result: ParseResult, *, stem: str = "") -> None:
    """File-level columns: train or validation (from the file name), the step time, notes."""
    import polars as pl

    result.timestamp_format = TS_FORMAT
    result.mem_basis = MEM_BASIS
    frame = found.frame
    val_name = val_name_from_path(stem)
    if not frame.height:
        return
    if val_name is not None:
        frame = frame.with_columns(pl.lit("val").alias("kind"), pl.lit(val_name).alias("val_name"))
    if "num_tokens" in frame.columns and "tok_per_s_logged" in frame.columns:
        tps, tokens = (
            pl.col("tok_per_s_logged").cast(pl.Float64),
            pl.col("num_tokens").cast(pl.Float64),
        )
        valid = tokens.is_not_null() & (tokens != 0) & tps.is_finite() & (tps > 0)
        frame = frame.with_columns(
            pl.when(valid).then(tokens / tps).otherwise(None).alias("step_time_s"),
            pl.when(valid)
            .then(pl.lit("num_tokens_per_step / tps (the log's own timing)"))
            .otherwise(None)
            .alias("step_time_basis"),
        )
    found.frame = frame
    if val_name is None:
        result.notes.append(
            "tok_per_s_per_gpu_logged is Automodel's tps_per_gpu = tps/cp/dp: "
            "it ignores PP and TP; "
            "use pooltk.logs.metrics for a per-physical-GPU basis"
        )


# --------------------------------------------------------------------------- the engine's path

_JNUM = r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?"
"""A JSON number; an infinite result (an integer too long for a float, ``1e400``) is left to the
definition."""
_COLUMNS: dict[str, tuple[str | None, str]] = {
    "step": ("step", "int"),
    "epoch": ("epoch", "int"),
    "timestamp": ("timestamp", "str"),
    "loss": ("loss", "float"),
    "val_loss": (None, "float"),
    "grad_norm": ("grad_norm", "float"),
    "lr": ("lr", "float"),
    "mem": ("mem_gib", "float"),
    "tps": ("tok_per_s_logged", "float"),
    "tps_per_gpu": ("tok_per_s_per_gpu_logged", "float"),
    "mfu": ("mfu_pct_logged", "float"),
    "num_tokens_per_step": ("num_tokens", "int"),
    "num_label_tokens": ("num_label_tokens", "int"),
}


def _layout(sample: list[str]) -> tuple[str, ...] | None:
    seen: Counter[tuple[str, ...]] = Counter()
    for text in sample:
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if isinstance(record, dict) and json.dumps(record) == text:
            seen[tuple(record)] += 1
    if not seen:
        return None
    keys = seen.most_common(1)[0][0]
    if (
        keys[0] != "step"
        or any(k not in _COLUMNS for k in keys)
        or ("loss" not in keys and "val_loss" not in keys)
    ):
        return None
    return keys


def fast(body: Any) -> tuple[dict[str, Any], Any, tuple[str, ...]] | None:
    """The file's usual layout (``json.dumps`` spacing, the same keys in the same order) read by
    polars."""
    import polars as pl

    keys = _layout(body.head(200).to_list())
    if keys is None:
        return None
    loss_key = "loss" if "loss" in keys else "val_loss"
    pattern = []
    for key in keys:
        kind = _COLUMNS[key][1]
        value = {"int": r"-?(?:0|[1-9]\d*)", "str": r'"[^"\\,]*"', "float": _JNUM}[kind]
        if kind == "float" and key != loss_key:
            value = f"(?:{value}|null)"
        pattern.append(f'"{key}": {value}')
    ok = body.str.contains("^\\{" + ", ".join(pattern) + "\\}$")
    parts = (
        body.str.strip_prefix("{")
        .str.strip_suffix("}")
        .str.split_exact(", ", len(keys) - 1)
        .struct.unnest()
    )
    cols: dict[str, Any] = {}
    for j, key in enumerate(keys):
        text = parts[f"field_{j}"].str.strip_prefix(f'"{key}": ')
        column, kind = _COLUMNS[key]
        if key == "val_loss":
            column = "loss" if loss_key == "val_loss" else None
        if column is None:
            continue
        if kind == "str":
            cols[column] = text.str.strip_chars('"')
        else:
            cols[column] = text.cast(pl.Int64 if kind == "int" else pl.Float64, strict=False)
            if column in ("step", "loss") or kind == "int":
                ok = ok & cols[column].is_not_null()
            if kind == "float":
                ok = ok & ~cols[column].is_infinite().fill_null(False)
    cols["kind"] = pl.repeat("train", body.len(), dtype=pl.String, eager=True)
    return cols, ok.fill_null(False), ()
