"""torchtitan's structured per-rank JSONL
(``structured_logs/<source>.global_rank_<N>.<stamp>.jsonl``).

Written by ``TraceJsonlFormatter`` (torchtitan/observability/structured_logger/jsonl_handler.py,
read in the search corpus): one JSON object per event with ``rank``/``global_rank``,
``local_rank``, ``source``, ``step`` (from ``set_step``), ``time_us``, ``log_type_name`` and,
by kind of event:

- spans: ``<name>_start`` and ``<name>_end``, the ``_end`` record's ``value`` being the elapsed
  wall time in **milliseconds**; the trainer wraps each step in a ``step`` span, so ``step_end``
  gives the step time;
- scalars (``log_trace_scalar``): ``log_type_name`` ``metric_value``, the name in ``event_name``
  and the number in ``value``;
- instants (``training_start`` ...).

One row per ``step_end`` record (rank from the record, timestamp from ``time_us``, UTC);
scalars of the same rank and step fill the columns they name (:data:`SCALARS`), other events
are counted as other lines. The file has no loss unless a scalar carries one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from pooltk.logs._common import ParseResult

__all__ = ["DETECT", "FORMAT", "SCALARS", "parse"]

FORMAT = "torchtitan_jsonl"
TS_FORMAT = None  # time_us is read into datetimes
MEM_BASIS = "max_reserved"
DETECT = r'\{.*"log_type_name".*"time_us"|\{.*"time_us".*"log_type_name"'
"""The structured logger's record signature, wherever it stands in a line (format detection)."""

SCALARS: dict[str, str] = {
    "loss": "loss",
    "train.loss": "loss",
    "loss_metrics/global_avg_loss": "loss",
    "grad_norm": "grad_norm",
    "train.grad_norm": "grad_norm",
    "lr": "lr",
    "tps": "tok_per_s_logged",
    "train.tps": "tok_per_s_logged",
    "mfu": "mfu_pct_logged",
    "mfu(%)": "mfu_pct_logged",
    "tflops": "tflops_per_gpu_logged",
    "memory/max_reserved(GiB)": "mem_gib",
    "global_valid_tokens": "num_label_tokens",
}
"""``metric_value`` event names read into columns; others are ignored (counted as other)."""


def parse(lines: Iterable[tuple[int, str]], result: ParseResult) -> ParseResult:
    """Read numbered records into ``result``: rows from ``step_end``, scalars joined by (rank,
    step)."""
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    scalars: dict[tuple[int, int], dict[str, float]] = {}
    n_scalar = 0
    for n, raw in lines:
        record = _record(n, raw, result)
        if record is None:
            continue
        kind, step = record["log_type_name"], record.get("step")
        rank, value = record.get("global_rank", record.get("rank")), record.get("value")
        if kind == "step_end":
            if not isinstance(step, int) or isinstance(step, bool) or not isinstance(rank, int):
                result.skip(n, "step_end without an integer step and rank", raw)
            elif not _is_number(value) or not math.isfinite(value):
                result.skip(n, "step_end without a duration", raw)
            else:
                rows[(rank, step)] = {
                    "line": n,
                    "step": step,
                    "rank": rank,
                    "kind": "train",
                    "timestamp": _utc(record.get("time_us")),
                    "step_time_s": float(value) / 1000.0,
                    "step_time_basis": "torchtitan structured log: step span (ms)",
                }
            continue
        name = record.get("event_name")
        if kind == "metric_value" and name in SCALARS and isinstance(step, int):
            if isinstance(rank, int) and _is_number(value):
                scalars.setdefault((rank, step), {})[SCALARS[name]] = float(value)
                n_scalar += 1
        result.n_other += 1
    _join(rows, scalars, n_scalar, result)
    return result


def _record(n: int, raw: str, result: ParseResult) -> dict[str, Any] | None:
    """The structured record on line ``n``, or None (the line counted as other or skipped)."""
    text = raw.strip()
    if "{" in text:  # what stands before the record is decoration
        text = text[text.find("{") :]
    try:
        record = json.loads(text) if text else None
    except ValueError:
        if '"log_type_name"' in text:
            result.skip(n, "not a complete JSON record (cut or garbled)", raw)
            return None
        record = None
    if not isinstance(record, dict) or "log_type_name" not in record:
        result.n_other += 1
        return None
    return record


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _join(
    rows: dict[tuple[int, int], dict[str, Any]],
    scalars: dict[tuple[int, int], dict[str, float]],
    n_scalar: int,
    result: ParseResult,
) -> None:
    """The step rows, in line order, with the scalars of their (rank, step), into ``result``."""
    for key in sorted(rows, key=lambda k: rows[k]["line"]):
        values = rows[key]
        for column, value in scalars.get(key, {}).items():
            values[column] = int(value) if column == "num_label_tokens" else value
        if "loss" not in values:
            values["loss"] = math.nan
            result.n_placeholder_loss += 1
        result.rows.add(**values)
    if rows:
        result.notes.append(
            "torchtitan structured log: step time from each rank's 'step' span; "
            f"{n_scalar} scalar record(s) "
            "joined to their step (counted as other lines)"
        )
        if not any("loss" in s for s in scalars.values()):
            result.notes.append(
                "no loss scalar in this structured log: loss is missing (read the text log for it)"
            )


def _utc(time_us: Any) -> Any:
    """``time_us`` (microseconds since the epoch) as a naive UTC datetime, or None."""
    import datetime as dt

    if not isinstance(time_us, int) or isinstance(time_us, bool):
        return None
    return dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=time_us)
