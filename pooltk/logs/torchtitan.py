"""torchtitan per-step metric lines.

Line layout: optional torchrun ``[rankN]:`` prefix (sometimes doubled, or absent when every rank
logs to one stream), optional ``[titan] ``, ``{date time,ms} - {logger} - {LEVEL} - `` and then the
message. Messages read (field order confirmed in torchtitan's source, see docs/logs.md):

- 2024 ``train.py``: ``step: {:2}  loss: {:7.4f}  memory: {:5.2f}GiB({:.2f}%)  wps: {:,}  mfu: {:.2f}%``
- ``components/metrics.py``: ``... tps: {:,}  tflops: {:,.2f}  mfu: {:.2f}%`` (tps replaces wps);
- later: ``grad_norm: {:7.4f}`` after loss; newest: ``loss: {:8.5f}`` and ``mfu: N/A`` when the
  device's peak FLOP/s is unknown;
- ``validate step: {:2}  loss: {:7.4f}  memory: ...  tps: {:,}``;
- progress forms such as ``step: 640/644 = 99.38%`` (the step is the number before the slash).

Fields are read as ``key: value`` pairs by name. Colour escapes are stripped first. A non-last
pipeline stage prints ``loss: -1.0000`` (it has no loss); that is stored as NaN and noted.
torchtitan's ``tps`` is per device already: tokens / (time x non-data-parallel size).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pooltk.logs._common import Pending, ParseResult, clean_line, drop_truncated, parse_float, parse_int

__all__ = ["FORMAT", "fast_rows", "looks_like", "parse"]

FORMAT = "torchtitan"

_TS_FORMAT = "%Y-%m-%d %H:%M:%S,%f"
_PREFIX_RE = re.compile(
    r"^(?:\[titan\] )?(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - (?P<name>[^ ]+) - (?P<level>[A-Z]+) - (?P<msg>.*)$"
)
_KV_RE = re.compile(r"([A-Za-z_]+):\s+(\S+)")
_SIGNATURE_RE = re.compile(r"(?:^|\s|- )(?:validate )?step:\s*\d+(?:/\d+)?\s.*?\bloss:\s")
_CANDIDATE_RE = re.compile(r"step:\s*\d")
_MEM_RE = re.compile(r"^(?P<gib>[-+0-9.naif]+)GiB(?:\((?P<pct>[-+0-9.naif]+)%\))?$")

_META_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("peak_flops", re.compile(r"Peak FLOPS used for computing MFU: ([0-9.e+]+)")),
    ("device_name", re.compile(r"(?:CUDA|GPU|XPU|NPU) capacity: (.+?) with ([0-9.]+)GiB memory")),
    ("mesh", re.compile(r"Building (?:\d+-D )?device mesh with parallelism: (.+)$")),
    ("batch", re.compile(r"local batch size (\d+), global batch size (\d+)")),
    ("seq_len", re.compile(r"sequence length (\d+)")),
    ("grad_acc", re.compile(r"gradient accumulation steps (\d+)")),
    ("version", re.compile(r"torchtitan version: (\S+)")),
)


def looks_like(line: str) -> bool:
    """True when ``line`` is a torchtitan step or validation metric line (format detection)."""
    if "step:" not in line:
        return False
    if "\x1b" in line:
        line = clean_line(line)[0]
    return _SIGNATURE_RE.search(line) is not None


def _meta(message: str, n: int, result: ParseResult) -> bool:
    """Take run facts from a setup line; True when one was found."""
    found = False
    for key, pattern in _META_PATTERNS:
        m = pattern.search(message)
        if m is None:
            continue
        found = True
        if key == "peak_flops":
            result.set_meta("peak_flops", float(m.group(1)), n)
        elif key == "device_name":
            result.set_meta("device_name", m.group(1), n)
            result.set_meta("device_capacity_gib", float(m.group(2)), n)
        elif key == "mesh":
            for part in m.group(1).split(","):
                name, _, value = part.strip().partition("=")
                if value.strip().isdigit():
                    result.set_meta(f"mesh_{name.strip()}", int(value), n)
        elif key == "batch":
            result.set_meta("local_batch_size", int(m.group(1)), n)
            result.set_meta("global_batch_size", int(m.group(2)), n)
        elif key == "seq_len":
            result.set_meta("seq_len", int(m.group(1)), n)
        elif key == "grad_acc":
            result.set_meta("grad_acc_steps", int(m.group(1)), n)
        elif key == "version":
            result.set_meta("framework_version", m.group(1), n)
    return found


class _Bad(ValueError):
    """A candidate line that does not parse; the message is the skip reason."""


def _fields(message: str) -> tuple[str, int, dict[str, object], tuple[str, ...]]:
    """Parse a metric message into (kind, step, values by column, field order)."""
    if message.startswith("validate step:"):
        kind, body = "val", message[len("validate ") :]
    elif message.startswith("step:"):
        kind, body = "train", message
    else:
        raise _Bad("no 'step:' at the start of the message")
    pairs = _KV_RE.findall(body)
    if not pairs or pairs[0][0] != "step":
        raise _Bad("no 'step: N' field")
    step_text = pairs[0][1].split("/", 1)[0]
    try:
        step = parse_int(step_text)
    except ValueError:
        raise _Bad("step is not an integer") from None
    values: dict[str, object] = {}
    keys: list[str] = ["step"]
    for key, value in pairs[1:]:
        keys.append(key)
        try:
            if key == "loss":
                values["loss"] = parse_float(value)
            elif key == "grad_norm":
                values["grad_norm"] = parse_float(value)
            elif key == "memory":
                m = _MEM_RE.match(value)
                if m is None:
                    raise _Bad(f"memory {value[:30]!r} is not '<n>GiB(<p>%)'")
                values["mem_gib"] = float(m.group("gib"))
                if m.group("pct") is not None:
                    values["mem_pct"] = float(m.group("pct"))
            elif key in ("tps", "wps"):
                values["tok_per_s_logged"] = parse_float(value)
            elif key == "tflops":
                values["tflops_per_gpu_logged"] = parse_float(value)
            elif key == "mfu":
                values["mfu_pct_logged"] = parse_float(value.rstrip("%"))
            elif key == "lr":
                values["lr"] = parse_float(value)
        except ValueError:
            raise _Bad(f"field {key!r}: {value[:30]!r} is not a number") from None
    return kind, step, values, tuple(keys)


def parse(lines: Iterable[tuple[int, str]], result: ParseResult, *, fast: Any = None) -> ParseResult:
    """Read torchtitan log lines into ``result`` (rows, skips, meta, counts).

    ``fast``: rows :func:`fast_rows` already read from other lines of the file (they count
    towards the file's usual field order, and their -1 placeholder losses towards the note).
    """
    result.timestamp_format = _TS_FORMAT
    result.mem_basis = "max_reserved"
    pending: list[Pending] = []
    n_minus_one = 0
    for n, raw in lines:
        line, rank = clean_line(raw)
        m = _PREFIX_RE.match(line) if " - " in line else None
        if m is None:
            if "step:" in line and _CANDIDATE_RE.search(line) and "loss:" in line:
                result.skip(n, "step line without the logging prefix (interleaved or garbled)", raw)
            else:
                result.n_other += 1
            continue
        message = m.group("msg")
        if "step:" not in message:
            if _meta(message, n, result):
                result.n_meta += 1
            else:
                result.n_other += 1
            continue
        if not (message.startswith("step:") or message.startswith("validate step:")):
            if _CANDIDATE_RE.search(message) and "loss:" in message:
                result.skip(n, "step fields inside other text (interleaved or garbled)", raw)
            else:
                result.n_other += 1
            continue
        try:
            kind, step, values, keys = _fields(message)
        except _Bad as bad:
            result.skip(n, str(bad), raw)
            continue
        if "loss" not in values:
            result.skip(n, "no loss field", raw)
            continue
        if values["loss"] == -1.0:
            values["loss"] = math.nan
            n_minus_one += 1
        tps = values.get("tok_per_s_logged")
        if tps is not None:
            values["tok_per_s_per_gpu_logged"] = tps
        values.update(kind=kind, line=n, step=step, timestamp=m.group("ts"), rank=rank)
        pending.append((n, values, keys, raw))
    drop_truncated(pending, result, fast=fast)
    for _, values, _, _ in pending:
        result.rows.add(**values)
    if fast is not None and len(fast):
        n_minus_one += fast.n_placeholder
    result.n_placeholder_loss = n_minus_one
    if n_minus_one:
        result.notes.append(
            f"{n_minus_one} row(s) printed loss -1 (a non-last pipeline stage has no loss): stored as NaN"
        )
    return result



# --------------------------------------------------------------------------- vectorised canonical lines

_FAST_SAMPLE = 1000
"""Metric lines of the file's head whose layouts are counted to choose the canonical one."""

_NUM = rb"(-?\d+\.\d+)"
_FAST_PARTS = {
    "loss": rb"  loss: *" + _NUM,
    "grad_norm": rb"  grad_norm: *" + _NUM,
    "memory": rb"  memory: *(\d+\.\d+)GiB\((\d+\.\d+)%\)",
    "tps": rb"  tps: *(\d{1,3}(?:,\d{3})*)",
    "wps": rb"  wps: *(\d{1,3}(?:,\d{3})*)",
    "tflops": rb"  tflops: *(\d{1,3}(?:,\d{3})*\.\d+)",
    "mfu": rb"  mfu: *(\d+\.\d+)%",
}


def _canonical_keys(head: Iterable[str]) -> tuple[str, ...] | None:
    """The most common field order of the head's train metric lines, if every field is one the fast path reads."""
    seen: Counter[tuple[str, ...]] = Counter()
    for raw in head:
        if "step:" not in raw:
            continue
        m = _PREFIX_RE.match(raw)
        if m is None or not m.group("msg").startswith("step:"):
            continue
        try:
            _, _, _, keys = _fields(m.group("msg"))
        except _Bad:
            continue
        seen[keys] += 1
        if sum(seen.values()) >= _FAST_SAMPLE:
            break
    if not seen:
        return None
    keys = seen.most_common(1)[0][0]
    if keys[:2] != ("step", "loss") or any(k not in _FAST_PARTS for k in keys[1:]) or len(set(keys)) != len(keys):
        return None
    return keys


def fast_rows(data: bytes, lines: Any, head: Iterable[str]) -> Any:
    """Read, with one compiled pattern over the whole file, every train line in the file's canonical layout.

    The pattern accepts only the canonical field order with strict number forms (decimals with
    digits on both sides, thousands groups of exactly three digits), so each value equals what
    :func:`parse` gives (tests/logs/test_fast_path.py); every other line is left to :func:`parse`.
    Returns a :class:`pooltk.logs._fast.FastRows` or None when the head has no canonical layout.
    """
    import numpy as np

    from pooltk.logs._fast import FastRows, parse_timestamps

    keys = _canonical_keys(head)
    if keys is None:
        return None
    pattern = re.compile(
        rb"(?m)^(?:\[titan\] )?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) - [^ \n\r]+ - [A-Z]+ - step: *(\d{1,18})"
        + b"".join(_FAST_PARTS[k] for k in keys[1:]) + rb"$"
    )
    matches = list(pattern.finditer(data))
    if not matches:
        return None
    offsets = [m.start() for m in matches]
    cols = list(zip(*(m.groups() for m in matches), strict=True))
    del matches
    line_index = np.searchsorted(lines.starts, np.asarray(offsets, dtype=np.int64), side="right") - 1
    out: dict[str, Any] = {}
    starts = np.asarray(offsets, dtype=np.int64)
    titan = lines.buf[np.minimum(starts, lines.buf.size - 1)] == ord("[")  # '[titan] ' before the stamp
    stamps, _ = parse_timestamps(lines, starts + np.where(titan, 8, 0), "YYYY-MM-DD hh:mm:ss,fff")
    out["timestamp"] = stamps
    out["step"] = np.array(cols[1], dtype="S18").astype(np.int64)
    j = 2
    for key in keys[1:]:
        if key == "memory":
            out["mem_gib"] = np.array(cols[j], dtype="S32").astype(np.float64)
            out["mem_pct"] = np.array(cols[j + 1], dtype="S32").astype(np.float64)
            j += 2
            continue
        raw = cols[j]
        j += 1
        if key in ("tps", "wps", "tflops"):
            values = np.array([float(v.replace(b",", b"")) for v in raw], dtype=np.float64)
        else:
            values = np.array(raw, dtype="S32").astype(np.float64)
        column = {"loss": "loss", "grad_norm": "grad_norm", "tps": "tok_per_s_logged", "wps": "tok_per_s_logged",
                  "tflops": "tflops_per_gpu_logged", "mfu": "mfu_pct_logged"}[key]
        out[column] = values
    if "tok_per_s_logged" in out:
        out["tok_per_s_per_gpu_logged"] = out["tok_per_s_logged"]
    placeholder = out["loss"] == -1.0
    out["loss"] = np.where(placeholder, np.nan, out["loss"])
    return FastRows(line_index=line_index.astype(np.int64), columns=out, keys=keys, kind="train",
                    n_placeholder=int(placeholder.sum()))
