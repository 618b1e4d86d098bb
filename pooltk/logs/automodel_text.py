"""NeMo Automodel training logs as text: the recipe's per-step and validation lines.

Forms read (message part, after the logging prefix):

- current: ``step {} | epoch {} | loss {:.4f} | grad_norm {:.4f} | lr {:.2e} | mem {:.2f} GiB |
  tps {:.2f}({:.2f}/gpu) | num_label_tokens {}``
- 2025-08: the same without ``({}/gpu)`` after ``tps``;
- 2025-07: ``step {} | epoch {} | loss {} | grad_norm {} | mem: {} GiB | tps {}`` (no lr);
- validation: ``[val] name "{}" | step {} | epoch {} | loss {:.4f} | lr {:.2e} | num_label_tokens {}``
  and the 2025-07 ``[val] step {} | epoch {} | loss {}``.

Prefixes: ``%(asctime)s | %(levelname)s | %(name)s | `` (datefmt ``%Y-%m-%d %H:%M:%S``; the level
may carry ANSI colour), Python's default ``INFO:root:``, or none; any of them after torchrun's
``[rankN]:``. Fields are read by name, so a field added later is ignored rather than misread.
Only rank 0 logs in Automodel, so rows carry the rank only when a torchrun prefix says so.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from pooltk.logs._common import Pending, ParseResult, clean_line, drop_truncated, parse_float, parse_int
from pooltk.logs._fast import FLOAT, INT, FastRows, Lines, delimiters, first_byte, match_bytes, parse_timestamps, read_spans

__all__ = ["FORMAT", "fast_rows", "looks_like", "parse"]

FORMAT = "automodel_text"

_TS_FORMAT = "%Y-%m-%d %H:%M:%S"
_PREFIX_TS_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d{3})?$")
_PLAIN_PREFIX_RE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^:]*:")
_CANDIDATE_RE = re.compile(r"step \d+ \| epoch ")
_VAL_NAME_RE = re.compile(r'^\[val\](?: name "(?P<name>[^"]*)" \|)? ?(?P<rest>.*)$')
_WORLD_RE = re.compile(r"\bWorld size: (\d+)\b")
_SIGNATURE_RE = re.compile(r"(?:^|\| |:)(?:\[val\][^|]*\| )?step \d+ \| epoch \d+ \| loss ")

# Field name -> (column, parser). "mem"/"mem:" and "tps" are handled separately.
_SIMPLE_FIELDS = {
    "epoch": ("epoch", parse_int),
    "loss": ("loss", parse_float),
    "grad_norm": ("grad_norm", parse_float),
    "lr": ("lr", parse_float),
    "num_label_tokens": ("num_label_tokens", parse_int),
}


def looks_like(line: str) -> bool:
    """True when ``line`` is an Automodel step or validation line (format detection)."""
    return _SIGNATURE_RE.search(line) is not None


def _split_prefix(line: str) -> tuple[str | None, str]:
    """(timestamp or None, message) for the three prefix forms."""
    if line[:2] == "20" and " | " in line:
        parts = line.split(" | ", 3)
        if len(parts) == 4 and _PREFIX_TS_RE.match(parts[0]):
            return parts[0][:19], parts[3]
    elif _PLAIN_PREFIX_RE.match(line):
        return None, line.split(":", 2)[2]
    return None, line


class _Bad(ValueError):
    """A candidate line that does not parse; the message is the skip reason."""


def _fields(message: str) -> tuple[int, dict[str, object], tuple[str, ...]]:
    """Parse ``step N | key value | ...``; returns (step, values by column, field order)."""
    parts = message.split(" | ")
    head = parts[0]
    if not head.startswith("step "):
        raise _Bad("no 'step N' field")
    try:
        step = parse_int(head[5:])
    except ValueError:
        raise _Bad("step is not an integer") from None
    values: dict[str, object] = {}
    keys: list[str] = ["step"]
    for part in parts[1:]:
        key, sep, value = part.partition(" ")
        if not sep:
            raise _Bad(f"field {part[:30]!r} has no value")
        key = key.rstrip(":")
        keys.append(key)
        try:
            if key in _SIMPLE_FIELDS:
                column, parser = _SIMPLE_FIELDS[key]
                values[column] = parser(value)
            elif key == "mem":
                number, _, unit = value.partition(" ")
                if unit != "GiB":
                    raise _Bad(f"mem unit {unit!r}, expected GiB")
                values["mem_gib"] = parse_float(number)
            elif key == "tps":
                if value.endswith("/gpu)"):
                    total, _, per = value[:-5].partition("(")
                    values["tok_per_s_logged"] = parse_float(total)
                    values["tok_per_s_per_gpu_logged"] = parse_float(per)
                else:
                    values["tok_per_s_logged"] = parse_float(value)
            # other fields (added by later versions) are ignored by name
        except (ValueError, IndexError):
            raise _Bad(f"field {key!r}: {value[:30]!r} is not a number") from None
    return step, values, tuple(keys)


def parse(lines: Iterable[tuple[int, str]], result: ParseResult, *, fast: FastRows | None = None) -> ParseResult:
    """Read numbered Automodel text lines into ``result`` (rows, skips, meta, counts).

    ``fast``: rows the vectorised path already read from other lines of the file (they count
    towards the file's usual field order when cut lines are recognised).
    """
    result.timestamp_format = _TS_FORMAT
    result.mem_basis = "max_allocated"
    rows = result.rows
    pending: list[Pending] = []
    for n, raw in lines:
        line, rank = clean_line(raw)
        if "step " not in line:
            if "World size: " in line:
                m = _WORLD_RE.search(line)
                if m:
                    result.set_meta("world_size", int(m.group(1)), n)
                    result.n_meta += 1
                    continue
            result.n_other += 1
            continue
        ts, message = _split_prefix(line)
        kind = "train"
        val_name = None
        if message.startswith("[val]"):
            kind = "val"
            m = _VAL_NAME_RE.match(message)
            val_name = m.group("name") if m and m.group("name") is not None else "default"
            message = m.group("rest") if m else ""
        elif not message.startswith("step "):
            if _CANDIDATE_RE.search(line):
                result.skip(n, "step line inside other text (interleaved or garbled)", raw)
            else:
                result.n_other += 1
            continue
        try:
            step, values, keys = _fields(message)
        except _Bad as bad:
            result.skip(n, str(bad), raw)
            continue
        if "loss" not in values:
            result.skip(n, "no loss field", raw)
            continue
        values.update(kind=kind, line=n, step=step, timestamp=ts, rank=rank, val_name=val_name)
        pending.append((n, values, keys, raw))
    drop_truncated(pending, result, fast=fast)
    for _, values, _, _ in pending:
        rows.add(**values)
    fast_per_gpu = fast is not None and len(fast) > 0 and "tok_per_s_per_gpu_logged" in fast.columns
    per_gpu = "tok_per_s_per_gpu_logged" in rows.columns() or fast_per_gpu
    if (len(rows) or (fast is not None and len(fast))) and per_gpu:
        result.notes.append(
            "tok_per_s_per_gpu_logged is Automodel's tps/cp/dp: it ignores PP and TP "
            "(with pp8 it is 8x the rate per physical GPU); use pooltk.logs.metrics for a physical basis"
        )
    return result



_FAST_FIELDS = {
    "step": ("step", "int"),
    "epoch": ("epoch", "int"),
    "loss": ("loss", "float"),
    "grad_norm": ("grad_norm", "float"),
    "lr": ("lr", "float"),
    "mem": ("mem_gib", "mem"),
    "tps": ("tok_per_s_logged", "tps"),
    "num_label_tokens": ("num_label_tokens", "int"),
}


_SAMPLE_LINES = 1000
"""Step lines of the file's head whose layouts are counted to choose the canonical one."""


def _sample_keys(head: Iterable[str]) -> tuple[tuple[str, ...], bool] | None:
    """The most common layout among the head's step lines: (field names, whether tps has '/gpu').

    None when that layout has a field the vectorised path does not know (the per-line reader
    then reads the whole file).
    """
    seen: Counter[tuple[tuple[str, ...], bool]] = Counter()
    for raw in head:
        if "\r" in raw or "step " not in raw:
            continue
        line, rank = clean_line(raw)
        if rank is not None or len(line) < 23 or line[19:22] != " | " or not _PREFIX_TS_RE.match(line[:19]):
            continue
        parts = line.split(" | ", 3)
        if len(parts) != 4 or not parts[3].startswith("step "):
            continue
        fields = parts[3].split(" | ")
        tps = next((f for f in fields if f.startswith("tps ")), "")
        seen[(tuple(f.partition(" ")[0] for f in fields), tps.endswith("/gpu)"))] += 1
        if sum(seen.values()) >= _SAMPLE_LINES:
            break
    if not seen:
        return None
    keys, pair = seen.most_common(1)[0][0]
    if any(k not in _FAST_FIELDS for k in keys) or len(set(keys)) != len(keys) or "loss" not in keys:
        return None
    return keys, pair


def fast_rows(lines: Lines, head: Iterable[str]) -> FastRows | None:
    """Read, vectorised, every line laid out exactly like the file's usual step line (see :func:`_sample_keys`).

    See [Note: fast path equals slow path] in :mod:`pooltk.logs._fast`; other lines are left to
    :func:`parse`.
    """
    import numpy as np

    found = _sample_keys(head)
    if found is None:
        return None
    keys, pair = found
    buf = lines.buf
    n_bars = len(keys) + 2
    pos, count, first = delimiters(lines, ord("|"))
    no_cr = delimiters(lines, 13)[1] == 0 if lines.has_cr else True
    cand = np.flatnonzero((count == n_bars) & no_cr & (lines.ends - lines.starts >= 23))
    starts, ends = lines.starts[cand], lines.ends[cand]
    bars = pos[first[cand][:, None] + np.arange(n_bars)]
    ok = bars[:, 0] == starts + 20
    stamps, ok_ts = parse_timestamps(lines, starts, "YYYY-MM-DD hh:mm:ss")
    ok &= ok_ts & (buf[starts + 19] == 32)
    for k in range(3):
        ok &= (buf[bars[:, k] - 1] == 32) & (buf[np.minimum(bars[:, k] + 1, buf.size - 1)] == 32)
    span_starts: list[np.ndarray] = []
    span_ends: list[np.ndarray] = []
    classes: list[int] = []
    names: list[str] = []
    for j, key in enumerate(keys):
        bar = bars[:, 2 + j]
        label = b" " + key.encode() + b" "
        ok &= match_bytes(lines, bar + 1, label)
        v0 = bar + 1 + len(label)
        if j + 1 < len(keys):
            v1 = bars[:, 3 + j] - 1
            ok &= buf[v1] == 32
        else:
            v1 = ends
        column, kind = _FAST_FIELDS[key]
        if kind == "mem":
            ok &= match_bytes(lines, v1 - 4, b" GiB")
            v1 = v1 - 4
        if kind == "tps" and pair:
            ok &= match_bytes(lines, v1 - 5, b"/gpu)")
            paren = first_byte(lines, v0, v1 - 5, ord("("))
            ok &= paren >= 0
            paren = np.where(paren >= 0, paren, v0)
            span_starts += [v0, paren + 1]
            span_ends += [paren, v1 - 5]
            classes += [FLOAT, FLOAT]
            names += ["tok_per_s_logged", "tok_per_s_per_gpu_logged"]
            continue
        span_starts.append(v0)
        span_ends.append(v1)
        classes.append(INT if kind == "int" else FLOAT)
        names.append(column)
    keep = np.flatnonzero(ok)
    read = read_spans(lines, np.stack(span_starts, axis=1)[keep], np.stack(span_ends, axis=1)[keep], classes, names)
    if read is None:
        return None
    columns, accepted = read
    rows = keep[accepted]
    columns = dict(columns)
    columns["timestamp"] = stamps[rows]
    return FastRows(line_index=cand[rows], columns=columns, keys=keys, kind="train")
