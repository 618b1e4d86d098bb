"""Write metric records in NeMo Automodel's ``training.jsonl`` schema, exactly.

One JSON object per line, keys in Automodel's order::

    {"step": 0, "epoch": 0, "timestamp": "2026-02-17T05:19:31.963Z", "loss": 4.70,
     "grad_norm": 74.3, "lr": 1.4e-05, "mem": 22.1, "tps": 10.29, "tps_per_gpu": 1.28, "mfu": null,
     "num_tokens_per_step": 1483, "num_label_tokens": 112}

``timestamp`` is ISO 8601 UTC with milliseconds and ``Z``; ``mem`` is GiB (2**30 B, Automodel's
``max_memory_allocated() / 1024**3``); ``tps`` is whole-job tokens/s and ``tps_per_gpu`` is
Automodel's ``tps / cp / dp`` (it ignores PP and TP: write it the way Automodel would, and let
:mod:`pooltk.logs.metrics` give the per-physical-GPU rate); ``mfu`` is % or null. Serialised with
``json.dumps`` defaults, as Automodel does (a NaN loss is written as ``NaN``).

Every record is validated before anything is written; a bad record raises ``ValueError`` naming
the record index, the key, the value found, what is required and the fix.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pooltk._validate import check_int

__all__ = ["TRAINING_KEYS", "format_timestamp", "validate_record", "write_training_jsonl"]

TRAINING_KEYS: tuple[str, ...] = (
    "step",
    "epoch",
    "timestamp",
    "loss",
    "grad_norm",
    "lr",
    "mem",
    "tps",
    "tps_per_gpu",
    "mfu",
    "num_tokens_per_step",
    "num_label_tokens",
)
"""Keys of one training record, in Automodel's order."""

_TS_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
_INT_KEYS = ("step", "epoch", "num_tokens_per_step", "num_label_tokens")
_FLOAT_KEYS = ("loss", "grad_norm", "lr", "mem", "tps", "tps_per_gpu")
_NONNEG_FINITE = ("lr", "mem", "tps", "tps_per_gpu")


def format_timestamp(when: datetime) -> str:
    """``2026-02-17T05:19:31.963Z`` from a timezone-aware datetime."""
    if when.tzinfo is None:
        raise ValueError(
            f"timestamp: found a naive datetime {when!r}; required a timezone-aware one. "
            "Fix: pass datetime.now(timezone.utc) or attach tzinfo."
        )
    utc = when.astimezone(timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def _bad(index: int, key: str, value: Any, required: str, fix: str) -> ValueError:
    return ValueError(f"record {index}: {key!r} found {value!r}; required {required}. Fix: {fix}")


def validate_record(record: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """A copy of ``record`` in Automodel's key order with the timestamp formatted; raises
    ValueError.

    ``mfu`` may be missing or None (written as null); every other key is required. Unknown keys
    are refused (they would not be Automodel's schema).
    """
    if not isinstance(record, Mapping):
        raise ValueError(
            f"record {index}: found {type(record).__name__}; "
            f"required a mapping of {', '.join(TRAINING_KEYS)}."
        )
    unknown = sorted(set(record) - set(TRAINING_KEYS))
    if unknown:
        raise ValueError(
            f"record {index}: unknown key(s) {unknown}; "
            f"required exactly {', '.join(TRAINING_KEYS)}. "
            "Fix: drop them (Automodel's training.jsonl has no other keys)."
        )
    missing = [k for k in TRAINING_KEYS if k != "mfu" and k not in record]
    if missing:
        raise ValueError(
            f"record {index}: missing key(s) {missing}. "
            f"Fix: give every key of {', '.join(TRAINING_KEYS)} (mfu may be None)."
        )
    out: dict[str, Any] = {}
    for key in _INT_KEYS:
        value = record[key]
        out[key] = check_int(
            f"record {index}: {key}",
            value,
            low=0,
            fix="pass an int (not a float or a tensor: use int(x))",
        )
    stamp = record["timestamp"]
    if isinstance(stamp, datetime):
        out["timestamp"] = format_timestamp(stamp)
    elif isinstance(stamp, str) and _TS_RE.match(stamp):
        out["timestamp"] = stamp
    else:
        raise _bad(
            index,
            "timestamp",
            stamp,
            "ISO 8601 UTC with milliseconds and Z (2026-02-17T05:19:31.963Z) or an aware datetime",
            "pass datetime.now(timezone.utc)",
        )
    for key in _FLOAT_KEYS:
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _bad(index, key, value, "a number", "pass a float (use float(x) for tensors)")
        value = float(value)
        if key in _NONNEG_FINITE and not (math.isfinite(value) and value >= 0):
            raise _bad(
                index,
                key,
                value,
                "a finite number >= 0",
                "check the measurement (GiB for mem, tokens/s for tps)",
            )
        out[key] = value
    mfu = record.get("mfu")
    if mfu is not None:
        if (
            isinstance(mfu, bool)
            or not isinstance(mfu, (int, float))
            or not math.isfinite(float(mfu))
            or mfu < 0
        ):
            raise _bad(
                index,
                "mfu",
                mfu,
                "None or a finite percentage >= 0",
                "pass None when MFU is not computed",
            )
        mfu = float(mfu)
    out["mfu"] = mfu
    return {k: out[k] for k in TRAINING_KEYS}


def write_training_jsonl(
    path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]
) -> Path:
    """Validate every record, then write them to ``path`` (one JSON object per line). Returns the
    path.

    Steps must be strictly increasing (a training log never repeats or reorders steps). Nothing
    is written when any record is invalid.
    """
    checked = [validate_record(r, i) for i, r in enumerate(records)]
    if not checked:
        raise ValueError(
            "write_training_jsonl: found no records; required at least one. "
            "Fix: pass the run's step records."
        )
    for i in range(1, len(checked)):
        if checked[i]["step"] <= checked[i - 1]["step"]:
            raise ValueError(
                f"record {i}: 'step' found {checked[i]['step']} after {checked[i - 1]['step']}; "
                "required strictly increasing steps. "
                "Fix: write one record per optimizer step, in order."
            )
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r) + "\n" for r in checked)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out)
    return out
