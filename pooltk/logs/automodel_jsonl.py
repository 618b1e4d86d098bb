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
from collections.abc import Iterable
from typing import Any

from pooltk.logs._common import ParseResult

__all__ = ["FORMAT", "looks_like", "parse", "val_name_from_path"]

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
            return int(value)
        return value
    return float(value)


def parse(lines: Iterable[str], result: ParseResult, *, val_name: str | None = None) -> ParseResult:
    """Read JSONL records into ``result``; ``val_name`` marks a validation file."""
    result.timestamp_format = _TS_FORMAT
    result.mem_basis = "max_allocated"
    rows = result.rows
    kind = "train" if val_name is None else "val"
    n = 0
    for n, raw in enumerate(lines, start=1):
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
        if isinstance(step, bool) or not isinstance(step, int):
            result.skip(n, "no integer 'step'", raw)
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
    result.n_lines = n
    if rows and kind == "train":
        result.notes.append(
            "tok_per_s_per_gpu_logged is Automodel's tps_per_gpu = tps/cp/dp: it ignores PP and TP; "
            "use pooltk.logs.metrics for a per-physical-GPU basis"
        )
    return result
