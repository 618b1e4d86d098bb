"""NeMo Automodel's benchmark recipe (``nemo_automodel/recipes/llm/benchmark.py``): its log and JSON
summary.

No public sample of this output exists; this reader is built from the recipe's format strings
(Automodel @05de44f, read in the ``search`` corpus; see docs/logs.md):

- setup: ``Running {steps} iterations with {warmup} warmup steps``; ``GA steps: {ga}, DP size:
  {dp}, Local batch size: {lbs}, Global batch size: {gbs}``; ``TFLOPs/GPU: {:.6f}`` -- despite the
  label this is the FLOPs of one *global step* (``flops_formula(config, gbs=GBS, seq_len)``) / 1e12;
- per iteration: ``Rank 0 | Iteration {i}``, then ``Rank 0 | Iteration {i} | num_label_tokens={n} |
  Max Memory Allocated: {:.2f} GB | loss={:.4f}`` -- "GB" is ``max_memory_allocated() / 1024**3``,
  i.e. GiB; then ``Max iter time: {:.6f} seconds`` (slowest rank) and ``MFU: {:.6f}%``;
- a timer block ``(min, max) time across ranks (ms):`` with rows ``    {name} {dots}: ({min:.2f},
  {max:.2f})`` (or ``max time across ranks (ms):`` and one value): the values are SECONDS despite
  "(ms)", because the recipe passes ``normalizer=1000`` to timers that already count ms;
- the summary between rows of 60 ``=``: ``Benchmarking Summary``, ``Total setup time: {:.2f}
  seconds``, ``Total warmup time ({w} steps): ...``, ``Total iteration time ({n} steps): ...``,
  ``Average iteration time: {:.3f} seconds (...)``, ``Average MFU: {:.6f}% (...)``;
- the optional JSON summary file (``benchmark.json_output_path``).

The recipe prints no token rate. Per physical GPU it is GBS x seq_len / (iteration time x world
size); :mod:`pooltk.logs.metrics` computes it when the run's facts give those numbers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from pooltk.logs._common import ParseResult, clean_line, parse_float, read_facts

__all__ = [
    "DETECT",
    "FORMAT",
    "SUMMARY_FORMAT",
    "SUMMARY_KEYS",
    "looks_like_summary",
    "parse",
    "parse_summary",
]

FORMAT = "automodel_bench"
SUMMARY_FORMAT = "automodel_bench_summary"

TS_FORMAT = "%Y-%m-%d %H:%M:%S"
MEM_BASIS = "max_allocated"
_PREFIX_RE = re.compile(
    r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:,\d{3})? \| [^|]*? \| [^|]*? \| (?P<msg>.*)$"
)
_ROW_RE = re.compile(
    r"^Rank (?P<rank>\d+) \| Iteration (?P<it>\d+) \| num_label_tokens=(?P<nlt>\d+) \| "
    r"Max Memory Allocated: (?P<mem>\S+) GB \| loss=(?P<loss>\S+)\s*$"
)
_CANDIDATE_RE = re.compile(r"Iteration \d+ \| num_label_tokens=")
_ITER_START_RE = re.compile(r"^Rank \d+ \| Iteration \d+\s*$")
DETECT = (
    r"Rank \d+ \| Iteration \d+ \| num_label_tokens="
    r"|Benchmarking Summary|GA steps: \d+, DP size: \d+"
    r"|Running \d+ iterations with \d+ warmup steps"
)
"""The recipe's signature, wherever it stands in a line (format detection)."""
_START_RE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d{3})? \| |Rank \d+ \| Iteration |Max iter time: |MFU: "
)
_FIGURES: dict[str, tuple[str, str]] = {
    "Max iter time: ": ("step_time_s", " seconds"),
    "MFU: ": ("mfu_pct_logged", "%"),
}
"""The lines that follow an iteration line with one of its figures: label -> (column, the unit
written after the number)."""
_TIMER_HEAD_RE = re.compile(r"^(?:\(min, max\) |max )time across ranks \(ms\):\s*$")
_TIMER_ROW_RE = re.compile(
    r"^\s*(?P<name>\S+) \.*: (?:\((?P<min>[0-9.]+), (?P<max>[0-9.]+)\)|(?P<only>[0-9.]+))\s*$"
)

_META_RES: tuple[tuple[re.Pattern[str], tuple[tuple[str, type], ...]], ...] = (
    (
        re.compile(r"^Running (\d+) iterations with (\d+) warmup steps"),
        (("total_steps", int), ("warmup_steps", int)),
    ),
    (
        re.compile(
            r"^GA steps: (\d+), DP size: (\d+), Local batch size: (\d+), Global batch size: (\d+)"
        ),
        (
            ("grad_acc_steps", int),
            ("dp", int),
            ("local_batch_size", int),
            ("global_batch_size", int),
        ),
    ),
    (re.compile(r"^TFLOPs/GPU: ([0-9.eE+-]+)\s*$"), (("tflops_per_global_step", float),)),
    (re.compile(r"^Total setup time: ([0-9.]+) seconds"), (("setup_time_s", float),)),
    (
        re.compile(r"^Total warmup time \((\d+) steps\): ([0-9.]+) seconds"),
        (("warmup_steps", int), ("warmup_time_s", float)),
    ),
    (
        re.compile(r"^Total iteration time \((\d+) steps\): ([0-9.]+) seconds"),
        (("training_steps", int), ("training_time_s", float)),
    ),
    (re.compile(r"^Average iteration time: ([0-9.]+) seconds"), (("avg_iter_time_s", float),)),
    (re.compile(r"^Average MFU: ([0-9.eE+-]+)%"), (("avg_mfu_pct", float),)),
)

SUMMARY_KEYS: dict[str, str] = {
    "total_steps": "total_steps",
    "warmup_steps": "warmup_steps",
    "training_steps": "training_steps",
    "setup_time_seconds": "setup_time_s",
    "warmup_time_seconds": "warmup_time_s",
    "training_time_seconds": "training_time_s",
    "avg_iter_time_seconds": "avg_iter_time_s",
    "avg_mfu_percent": "avg_mfu_pct",
    "tflops_per_gpu": "tflops_per_global_step",
    "peak_tflops": "peak_tflops",
    "world_size": "world_size",
    "global_batch_size": "global_batch_size",
    "local_batch_size": "local_batch_size",
    "seq_len": "seq_len",
}
"""JSON summary key -> run-fact name (``tflops_per_gpu`` is per global step, as in the log)."""


def looks_like_summary(text: str) -> bool:
    """True when ``text`` is the recipe's JSON summary (one object with its keys)."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return False
    try:
        obj = json.loads(stripped)
    except ValueError:
        return False
    return isinstance(obj, dict) and "avg_iter_time_seconds" in obj and "world_size" in obj


def _message(line: str) -> tuple[str | None, str]:
    m = _PREFIX_RE.match(line) if " | " in line else None
    if m is None:
        return None, line
    return m.group("ts"), m.group("msg")


def parse(lines: Iterable[tuple[int, str]], result: ParseResult) -> ParseResult:
    """Read benchmark-recipe output into ``result`` (one row per logged iteration; each line cut
    where its record starts: its figures span lines)."""
    current: dict[str, Any] | None = None
    rows: list[dict[str, Any]] = []
    in_timers = False
    for n, text in lines:
        start = _START_RE.search(text)  # what stands before the record is decoration
        raw = text[start.start() :] if start is not None else text
        line = clean_line(raw)
        ts, msg = _message(line)
        if in_timers:
            m = _TIMER_ROW_RE.match(msg)
            if m is not None:
                _timer_row(m, current, n, result)
                result.n_meta += 1
                continue
            in_timers = False
        if _TIMER_HEAD_RE.match(msg.strip()):
            in_timers = True
            result.n_meta += 1
            continue
        m = _ROW_RE.match(msg)
        if m is not None:
            try:
                current = _iteration(m, n, ts)
            except ValueError:
                result.skip(n, "iteration line with a field that is not a number", raw)
                continue
            rows.append(current)
            continue
        if _CANDIDATE_RE.search(msg):
            result.skip(n, "iteration line that does not match the recipe's format", raw)
            continue
        label = next((label for label in _FIGURES if msg.startswith(label)), None)
        if label is not None:
            _attach(current, label, msg, n, raw, result)
            continue
        if read_facts(_META_RES, msg, n, result) or _ITER_START_RE.match(msg):
            result.n_meta += 1
            continue
        result.n_other += 1
    for values in rows:
        result.rows.add(**values)
    if rows:
        result.notes.append(
            "Automodel's benchmark prints no token rate; tok/s per GPU = GBS x seq_len / "
            "(iteration time x world size)"
        )
    return result


def _iteration(m: re.Match[str], n: int, ts: str | None) -> dict[str, Any]:
    """The row of an iteration line; raises ValueError for a figure that is not a number."""
    return {
        "kind": "train",
        "line": n,
        "rank": int(m.group("rank")),
        "step": int(m.group("it")),
        "num_label_tokens": int(m.group("nlt")),
        "mem_gib": parse_float(m.group("mem")),
        "loss": parse_float(m.group("loss")),
        "timestamp": ts,
    }


def _attach(
    current: dict[str, Any] | None, label: str, msg: str, n: int, raw: str, result: ParseResult
) -> None:
    """Put the figure of ``msg``, a line that starts with ``label`` (see :data:`_FIGURES`), on the
    latest iteration row; count it as skipped when impossible."""
    column, unit = _FIGURES[label]
    text = msg[len(label) :].rstrip().removesuffix(unit)
    if current is None:
        result.skip(n, f"{column} line before any iteration line", raw)
        return
    try:
        value = parse_float(text)
    except ValueError:
        result.skip(n, f"{column} is not a number", raw)
        return
    if current.get(column) is not None:
        result.skip(n, f"second {column} line for iteration {current['step']}", raw)
        return
    current[column] = value
    if column == "step_time_s":
        current["step_time_basis"] = "benchmark 'Max iter time' (slowest rank)"
    result.n_meta += 1


def _timer_row(
    m: re.Match[str], current: dict[str, Any] | None, n: int, result: ParseResult
) -> None:
    """A timer row: values are seconds despite the block's '(ms)' label."""
    name = m.group("name")
    seconds = float(m.group("max") or m.group("only"))
    if name == "setup":
        result.set_meta("setup_time_s", seconds, n)
    elif (
        name in ("iteration", "iteration_warmup")
        and current is not None
        and current.get("step_time_s") is None
    ):
        current["step_time_s"] = seconds
        current["step_time_basis"] = (
            "benchmark timer block, max across ranks (seconds despite '(ms)')"
        )


def parse_summary(text: str, result: ParseResult) -> ParseResult:
    """Read the recipe's JSON summary into run facts (no rows)."""
    obj = json.loads(text)
    for key, fact in SUMMARY_KEYS.items():
        if key in obj and obj[key] is not None:
            result.set_meta(fact, obj[key], 0)
    result.n_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    result.n_meta = result.n_lines
    return result
