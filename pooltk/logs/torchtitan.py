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

_FAST_KEYS = ("loss", "grad_norm", "memory", "tps", "wps", "tflops", "mfu")
"""Fields the vectorised path reads (after ``step``); a layout with any other is left to :func:`parse`."""


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
    if keys[:2] != ("step", "loss") or any(k not in _FAST_KEYS for k in keys[1:]) or len(set(keys)) != len(keys):
        return None
    return keys


def _comma_number(w: Any, lens: Any) -> tuple[Any, Any]:
    """``{:,}``/``{:,.2f}`` numbers from (n, W) byte windows: (values, valid), as float() gives them with commas dropped.

    Valid: digits and commas with at most one '.', 1 to 15 digits. The digits form an exact
    integer N (< 2**53) and the value is N / 10**(digits after the point), one correctly rounded
    IEEE division: the double nearest the decimal, which is what float() returns.
    """
    import numpy as np

    n, width = w.shape
    value = np.zeros(n, dtype=np.float64)
    n_digits = np.zeros(n, dtype=np.int64)
    n_dots = np.zeros(n, dtype=np.int64)
    past_dot = np.zeros(n, dtype=np.int64)
    valid = lens <= width
    for k in range(width):
        col = w[:, k]
        inside = k < lens
        digit = inside & (col >= 48) & (col <= 57)
        dot = inside & (col == 46)
        valid &= ~inside | digit | dot | (col == 44)
        value = np.where(digit, value * 10.0 + (col.astype(np.float64) - 48.0), value)
        n_digits += digit
        past_dot += digit & (n_dots > 0)
        n_dots += dot
    valid &= (n_dots <= 1) & (n_digits >= 1) & (n_digits <= 15)
    return value / (10.0 ** past_dot), valid


def fast_rows(data: bytes, lines: Any, head: Iterable[str]) -> Any:  # noqa: ARG001 - same signature as the other formats
    """Read, vectorised, every train line laid out exactly in the file's canonical layout (see :func:`_canonical_keys`).

    numpy locates the colons, checks the prefix (``[titan] `` optional, the timestamp, `` - NAME
    - INFO - step:``), every label and the two spaces before it, and gathers the value spans;
    pandas' C parser converts them (the classes of [Note: fast path equals slow path] in
    :mod:`pooltk.logs._fast`); ``tps``'s thousands commas are summed digit by digit (at most 15
    digits, so exact). A line differing in any byte class, label or delimiter is left to
    :func:`parse`; tests/logs/test_fast_path.py checks the two agree.
    """
    import numpy as np

    from pooltk.logs._fast import FLOAT, INT, FastRows, delimiters, first_byte, match_bytes, parse_timestamps, read_spans, window

    keys = _canonical_keys(head)
    if keys is None:
        return None
    buf = lines.buf
    last = buf.size - 1

    def at(p: np.ndarray) -> np.ndarray:
        return buf[np.clip(p, 0, last)]

    n_colon = 2 + len(keys)
    pos, count, first = delimiters(lines, ord(":"))
    no_cr = delimiters(lines, 13)[1] == 0 if lines.has_cr else True
    cand = np.flatnonzero((count == n_colon) & no_cr & (lines.ends - lines.starts >= 40))
    if cand.size == 0:
        return None
    starts, ends = lines.starts[cand], lines.ends[cand]
    colons = pos[first[cand][:, None] + np.arange(n_colon)]
    titan = match_bytes(lines, starts, b"[titan] ")
    ts0 = starts + np.where(titan, 8, 0)
    stamps, ok = parse_timestamps(lines, ts0, "YYYY-MM-DD hh:mm:ss,fff")
    ok &= (colons[:, 0] == ts0 + 13) & (colons[:, 1] == ts0 + 16) & match_bytes(lines, ts0 + 23, b" - ")
    c = colons[:, 2:]
    ok &= match_bytes(lines, c[:, 0] - 14, b" - INFO - step")
    name_end = c[:, 0] - 14
    ok &= (name_end > ts0 + 26) & (name_end - (ts0 + 26) <= 40)
    ok &= first_byte(lines, ts0 + 26, name_end, 32, width=48) < 0  # the logger name has no space
    # value spans: after each colon at least one space, then the value up to two spaces before the next label
    v0 = c + 1
    ok &= (at(v0) == 32).all(axis=1)
    for _ in range(16):
        sp = at(v0) == 32
        if not sp.any():
            break
        v0 = v0 + sp
    v1 = np.empty_like(v0)
    for j in range(1, len(keys)):
        label = keys[j].encode()
        ok &= match_bytes(lines, c[:, j] - len(label) - 2, b"  " + label)
        v1[:, j - 1] = c[:, j] - len(label) - 2
    v1[:, -1] = ends
    ok &= (v1 > v0).all(axis=1) & (v1 - v0 <= 32).all(axis=1)
    spans0: list[np.ndarray] = [v0[:, 0]]
    spans1: list[np.ndarray] = [v1[:, 0]]
    classes, names = [INT], ["step"]
    columns_extra: dict[str, np.ndarray] = {}
    for j, key in enumerate(keys[1:], start=1):
        a, b = v0[:, j], v1[:, j]
        if key == "memory":
            g = first_byte(lines, a, b, ord("G"), width=32)
            ok &= (g > a) & match_bytes(lines, np.maximum(g, 0), b"GiB(") & match_bytes(lines, b - 2, b"%)") & (b - 2 > g + 4)
            g = np.where(g > a, g, a + 1)
            for s0, s1 in ((a, g), (g + 4, b - 2)):  # the per-line reader's memory number excludes e/E
                w = window(lines, s0, 32)
                inside = np.arange(32)[None, :] < (s1 - s0)[:, None]
                ok &= ~(((w == ord("e")) | (w == ord("E"))) & inside).any(axis=1)
            spans0 += [a, g + 4]
            spans1 += [g, b - 2]
            classes += [FLOAT, FLOAT]
            names += ["mem_gib", "mem_pct"]
        elif key in ("tps", "wps", "tflops"):
            value, good = _comma_number(window(lines, a, 24), b - a)
            ok &= good
            columns_extra["tflops_per_gpu_logged" if key == "tflops" else "tok_per_s_logged"] = value
        elif key == "mfu":
            ok &= (at(b - 1) == ord("%")) & (at(b - 2) != ord("%"))
            spans0.append(a)
            spans1.append(b - 1)
            classes.append(FLOAT)
            names.append("mfu_pct_logged")
        else:  # loss, grad_norm
            spans0.append(a)
            spans1.append(b)
            classes.append(FLOAT)
            names.append(key)
    keep = np.flatnonzero(ok)
    read = read_spans(lines, np.stack(spans0, axis=1)[keep], np.stack(spans1, axis=1)[keep], classes, names)
    if read is None:
        return None
    columns, accepted = read
    rows = keep[accepted]
    out = dict(columns)
    out["timestamp"] = stamps[rows]
    for name, values in columns_extra.items():
        out[name] = values[rows]
    if "tok_per_s_logged" in out:
        out["tok_per_s_per_gpu_logged"] = out["tok_per_s_logged"]
    placeholder = out["loss"] == -1.0
    out["loss"] = np.where(placeholder, np.nan, out["loss"])
    return FastRows(line_index=cand[rows], columns=out, keys=keys, kind="train", n_placeholder=int(placeholder.sum()))
