"""NeMo Automodel's ``training.jsonl`` / ``validation*.jsonl`` metric records.

One JSON object per line: ``step, epoch, timestamp`` (ISO 8601, UTC, milliseconds, ``Z``) and
the metrics ``loss, grad_norm, lr, mem`` (GiB, ``max_memory_allocated``), ``tps`` (tokens/s of
the whole job), ``tps_per_gpu`` (``tps / cp / dp``: ignores PP and TP), ``mfu`` (%, may be
``null`` or absent in older files), ``num_tokens_per_step``, ``num_label_tokens``. Validation
files may name the loss ``val_loss``. Keys are read by name; extra keys are ignored.

The step time is the log's own: ``num_tokens_per_step / tps`` (Automodel computes ``tps`` from
exactly that token count and the step's wall time).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pooltk.logs._common import ParseResult
from pooltk.logs._fast import FLOAT_JSON, INT_JSON, FastRows, Lines, delimiters, match_bytes, parse_timestamps, read_spans

__all__ = ["FORMAT", "fast_rows", "looks_like", "parse", "val_name_from_path"]

FORMAT = "automodel_jsonl"

_TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
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
_INTS = (("epoch", "epoch"), ("num_tokens_per_step", "num_tokens"), ("num_label_tokens", "num_label_tokens"))


def looks_like(line: str) -> bool:
    """True when ``line`` is one JSON object with a ``step`` key (format detection)."""
    text = line.strip()
    if not (text.startswith("{") and text.endswith("}") and '"step"' in text):
        return False
    try:
        record = json.loads(text)
    except ValueError:
        return False
    return isinstance(record, dict) and "step" in record


def val_name_from_path(stem: str) -> str | None:
    """'default' for ``validation.jsonl``, 'squad' for ``validation_squad.jsonl``; None for training files."""
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


def parse(
    lines: Iterable[tuple[int, str]], result: ParseResult, *, val_name: str | None = None, fast: FastRows | None = None
) -> ParseResult:
    """Read numbered JSONL records into ``result``; ``val_name`` marks a validation file.

    ``fast``: rows the vectorised path already read from other lines (see :func:`fast_rows`).
    """
    result.timestamp_format = _TS_FORMAT
    result.mem_basis = "max_allocated"
    rows = result.rows
    kind = "train" if val_name is None else "val"
    n_fast = len(fast) if fast is not None else 0
    for n, raw in lines:
        text = raw.strip()
        if not text:
            result.n_other += 1
            continue
        try:
            record = json.loads(text)
        except ValueError as err:
            reason = "truncated JSON record" if text.startswith("{") and not text.endswith("}") else "not JSON"
            result.skip(n, f"{reason} ({err.msg})", raw)
            continue
        if not isinstance(record, dict):
            result.skip(n, f"JSON {type(record).__name__}, not an object", raw)
            continue
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or not -(2**63) <= step < 2**63:
            result.skip(n, "no int64 'step'", raw)
            continue
        values: dict[str, Any] = {"kind": kind, "line": n, "step": step, "val_name": val_name}
        try:
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
        except ValueError as err:
            result.skip(n, str(err), raw)
            continue
        stamp = record.get("timestamp")
        values["timestamp"] = stamp if isinstance(stamp, str) else None
        if "loss" not in values:
            result.skip(n, "no 'loss' (or 'val_loss')", raw)
            continue
        tokens = values.get("num_tokens")
        tps = values.get("tok_per_s_logged")
        if tokens and tps and math.isfinite(tps) and tps > 0:
            values["step_time_s"] = tokens / tps
            values["step_time_basis"] = "num_tokens_per_step / tps (the log's own timing)"
        rows.add(**values)
    if (len(rows) or n_fast) and kind == "train":
        result.notes.append(
            "tok_per_s_per_gpu_logged is Automodel's tps_per_gpu = tps/cp/dp: it ignores PP and TP; "
            "use pooltk.logs.metrics for a per-physical-GPU basis"
        )
    return result


_FAST_FIELDS: dict[str, tuple[str | None, str]] = {
    "step": ("step", "int"),
    "epoch": ("epoch", "int"),
    "timestamp": ("timestamp", "ts"),
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
_TS_PATTERN = '"YYYY-MM-DDThh:mm:ss.fffZ"'


_SAMPLE_LINES = 200
"""Records of the file's head whose key orders are counted to choose the canonical one."""


def _sample_keys(head: Iterable[str]) -> tuple[str, ...] | None:
    """The most common key order among the head's records written the way ``json.dumps`` writes them.

    None when that layout has a key the vectorised path does not know, or no loss.
    """
    seen: Counter[tuple[str, ...]] = Counter()
    for raw in head:
        text = raw.rstrip("\n")
        if not text.startswith('{"step": '):
            continue
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if not isinstance(record, dict) or json.dumps(record) != text:  # not json.dumps' spacing: per-line reader
            continue
        seen[tuple(record)] += 1
        if sum(seen.values()) >= _SAMPLE_LINES:
            break
    if not seen:
        return None
    keys = seen.most_common(1)[0][0]
    if any(k not in _FAST_FIELDS for k in keys) or ("loss" not in keys and "val_loss" not in keys):
        return None
    return keys


def fast_rows(lines: Lines, head: Iterable[str], *, val_name: str | None = None) -> FastRows | None:
    """Read, vectorised, every record laid out exactly like the file's usual record (same keys, same order).

    See [Note: fast path equals slow path] in :mod:`pooltk.logs._fast`. The loss comes from
    ``loss`` (else ``val_loss``) and may not be null (the per-line reader skips such records).
    """
    import numpy as np

    keys = _sample_keys(head)
    if keys is None:
        return None
    buf = lines.buf
    pos, count, first = delimiters(lines, ord(","))
    cand = np.flatnonzero(count == len(keys) - 1)
    starts, ends = lines.starts[cand], lines.ends[cand]
    commas = pos[first[cand][:, None] + np.arange(len(keys) - 1)] if len(keys) > 1 else np.zeros((cand.size, 0), np.int64)
    ok = buf[np.maximum(ends - 1, 0)] == ord("}")
    loss_key = "loss" if "loss" in keys else "val_loss"
    span_starts: list[np.ndarray] = []
    span_ends: list[np.ndarray] = []
    classes: list[int] = []
    names: list[str] = []
    nullable: list[str] = []
    stamps = None
    for j, key in enumerate(keys):
        if j == 0:
            label, at = b'{"' + key.encode() + b'": ', starts
        else:
            label, at = b' "' + key.encode() + b'": ', commas[:, j - 1] + 1
        ok &= match_bytes(lines, at, label)
        v0 = at + len(label)
        v1 = commas[:, j] if j + 1 < len(keys) else ends - 1
        column, kind = _FAST_FIELDS[key]
        if key == "val_loss":
            column = "loss" if loss_key == "val_loss" else "_val_loss"
        if kind == "ts":
            ok &= (v1 - v0) == len(_TS_PATTERN)
            stamps, good = parse_timestamps(lines, v0, _TS_PATTERN)
            ok &= good
            continue
        span_starts.append(v0)
        span_ends.append(v1)
        classes.append(INT_JSON if kind == "int" else FLOAT_JSON)
        names.append(column)
        if kind == "float" and key != loss_key:
            nullable.append(column)
    keep = np.flatnonzero(ok)
    read = read_spans(lines, np.stack(span_starts, axis=1)[keep], np.stack(span_ends, axis=1)[keep], classes, names,
                      nullable=tuple(nullable))
    if read is None:
        return None
    got, accepted = read
    rows = keep[accepted]
    columns: dict[str, object] = {k: v for k, v in got.items() if not k.startswith("_")}
    if stamps is not None:
        columns["timestamp"] = stamps[rows]
    tokens, tps = columns.get("num_tokens"), columns.get("tok_per_s_logged")
    if tokens is not None and tps is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            valid = (tokens != 0) & np.isfinite(tps) & (tps > 0)
            columns["step_time_s"] = np.where(valid, tokens / np.where(valid, tps, 1.0), np.nan)
        columns["step_time_basis"] = np.where(valid, "num_tokens_per_step / tps (the log's own timing)", None).astype(object)
    if val_name is not None:
        columns["val_name"] = np.full(rows.size, val_name, dtype=object)
    return FastRows(line_index=cand[rows], columns=columns, keys=keys, kind="train" if val_name is None else "val")
