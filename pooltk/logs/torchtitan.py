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
from collections.abc import Iterable

from pooltk.logs._common import Pending, ParseResult, clean_line, drop_truncated, parse_float, parse_int

__all__ = ["FORMAT", "looks_like", "parse"]

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


def parse(lines: Iterable[tuple[int, str]], result: ParseResult) -> ParseResult:
    """Read torchtitan log lines into ``result`` (rows, skips, meta, counts)."""
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
    drop_truncated(pending, result)
    for _, values, _, _ in pending:
        result.rows.add(**values)
    result.n_placeholder_loss = n_minus_one
    if n_minus_one:
        result.notes.append(
            f"{n_minus_one} row(s) printed loss -1 (a non-last pipeline stage has no loss): stored as NaN"
        )
    return result

