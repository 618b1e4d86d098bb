"""The per-line definitions the readers were built from, kept as an oracle the fast readers are
compared against (tests/logs/test_oracle.py).

[Note: the oracle]
Each text format was first written as a Python reader of one line (``parse_line``: every record on
the line, with its span, or a skip with its reason), driven over a file by ``read_records`` below,
and the run segmenter as a walk over the rows in line order (``segment``). pooltk now reads every
format from one field table per format (``FIELDS`` in pooltk/logs/automodel_text.py, ...) and
splits runs with one vectorised segmenter (pooltk/logs/runs.py); these originals stay here, copied
as they were (pooltk @ eaa4a0e), so that a test can read a file both ways and require the same
table, row for row and value for value, and the same skip report. Changes, each marked: torchtitan's
reasons for a memory value not in its form and an mfu without its ``%`` (a cut record) are kept
as written instead of re-worded "not a number"; in the walk, a row's time counts for the run it is
in (the run its stream left, where its step began a run); and ranks whose rows are several writers'
copies tolerate a late print (``shared``). Nothing in pooltk imports this.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

import numpy as np

from pooltk.logs.records import TRUNCATED_EOF, Found, Rec, Skip
from pooltk.logs.runs import CLOCK_BACK_MAX_S

_INT64 = (-(2**63), 2**63 - 1)


def parse_float(text: str) -> float:
    t = text.strip()
    if "," in t:
        t = t.replace(",", "")
    if t in ("N/A", "None", "null", ""):
        if t == "":
            raise ValueError("empty number")
        return math.nan
    return float(t)


def parse_int(text: str) -> int:
    value = int(text.strip().replace(",", ""))
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"{value} is outside int64")
    return value


class _Bad(ValueError):
    """A record that does not parse; the message is the skip reason."""


# --------------------------------------------------------------------------- automodel_text

_AM_TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
_AM_PREFIX = (
    r"(?:(?P<ts>" + _AM_TS + r")(?:,\d{3})? \| [A-Z]+ \| [^|\n]*? \| "
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^:\s]*:)?"
)
_AM_CAND = re.compile(
    r"(?:" + _AM_TS + r"(?:,\d{3})? \| [A-Z]+ \| [^|\n]*? \| "
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^:\s]*:)?"
    r'(?:\[val\](?: name "[^"\n]*" \|)? ?)?step \d+ \| epoch '
)
_AM_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)|N/A|None"
_AM_FIELD = r" \| (?!step \d)[a-z_]+:? (?:" + _AM_NUM + r")(?:\((?:" + _AM_NUM + r")/gpu\)| GiB)?"
_AM_RECORD = re.compile(
    r"(?P<pre>" + _AM_PREFIX + r")(?P<val>\[val\](?: name \"(?P<name>[^\"\n]*)\" \|)? ?)?"
    r"(?P<body>step (?:\d+)(?:" + _AM_FIELD + r")*)"
)
_AM_SIMPLE = {
    "epoch": ("epoch", parse_int),
    "loss": ("loss", parse_float),
    "grad_norm": ("grad_norm", parse_float),
    "lr": ("lr", parse_float),
    "num_label_tokens": ("num_label_tokens", parse_int),
}


def _am_fields(body: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    parts = body.split(" | ")
    values: dict[str, Any] = {"step": parse_int(parts[0][5:])}
    keys = ["step"]
    for part in parts[1:]:
        key, _, value = part.partition(" ")
        key = key.rstrip(":")
        keys.append(key)
        try:
            if key in _AM_SIMPLE:
                column, parser = _AM_SIMPLE[key]
                values[column] = parser(value)
            elif key == "mem":
                number, _, unit = value.partition(" ")
                if unit != "GiB":
                    raise _Bad(
                        "truncated or garbled: mem without its unit GiB"
                        if not unit
                        else f"mem unit {unit!r}, expected GiB"
                    )
                values["mem_gib"] = parse_float(number)
            elif key == "tps":
                if value.endswith("/gpu)"):
                    total, _, per = value[:-5].partition("(")
                    values["tok_per_s_logged"] = parse_float(total)
                    values["tok_per_s_per_gpu_logged"] = parse_float(per)
                else:
                    values["tok_per_s_logged"] = parse_float(value)
        except ValueError as err:
            if isinstance(err, _Bad):
                raise
            raise _Bad(f"field {key!r}: {value[:30]!r} is not a number") from None
    return values, tuple(keys)


def automodel_text(line: str) -> list[Rec | Skip]:
    out: list[Rec | Skip] = []
    cands = list(_AM_CAND.finditer(line))
    for k, cand in enumerate(cands):
        stop = cands[k + 1].start() if k + 1 < len(cands) else len(line)
        m = _AM_RECORD.match(line, cand.start(), stop)
        if m is None or " | loss " not in m.group("body"):
            out.append(
                Skip(
                    start=cand.start(),
                    reason="step record garbled (interleaved or cut)",
                    end=cand.end(),
                )
            )
            continue
        if m.end() < stop and (line[m.end()].isdigit() or line[m.end()] in ".-+_,"):
            out.append(
                Skip(
                    start=cand.start(),
                    reason="step record runs into other text (two writes garbled)",
                    end=m.end(),
                )
            )
            continue
        try:
            values, keys = _am_fields(m.group("body"))
        except _Bad as bad:
            out.append(Skip(start=cand.start(), reason=str(bad), end=m.end()))
            continue
        if "loss" not in values:
            out.append(Skip(start=cand.start(), reason="no loss field", end=m.end()))
            continue
        kind = "val" if m.group("val") is not None else "train"
        values.update(
            kind=kind,
            timestamp=m.group("ts"),
            val_name=(m.group("name") or "default") if kind == "val" else None,
        )
        out.append(Rec(start=cand.start(), end=m.end(), values=values, keys=keys))
    return out


# --------------------------------------------------------------------------- torchtitan

_TT_TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
_TT_PREFIX = r"(?:\[titan\] )?" + _TT_TS + r" - [^ \n]+ - [A-Z]+ - "
_TT_CAND = re.compile(
    r"(?:" + _TT_PREFIX + r"(?:validate )?step:|(?:validate )?step:\s*\d+\S*\s+loss:)"
)
_TT_RECORD = re.compile(
    r"(?:\[titan\] )?(?P<ts>" + _TT_TS + r") - [^ \n]+ - [A-Z]+ - "
    r"(?P<msg>(?:validate )?step:\s*\d+(?:/\d+)?(?: = [\d.]+%)?(?:\s+[A-Za-z_]+:\s+[^\s\[]+)*)"
)
_TT_KV = re.compile(r"([A-Za-z_]+):\s+(\S+)")
_TT_MEM = re.compile(r"^(?P<gib>[-+0-9.naif]+)GiB(?:\((?P<pct>[-+0-9.naif]+)%\))?$")


def _tt_fields(message: str) -> tuple[str, int, dict[str, object], tuple[str, ...]]:
    if message.startswith("validate step:"):
        kind, body = "val", message[len("validate ") :]
    elif message.startswith("step:"):
        kind, body = "train", message
    else:
        raise _Bad("no 'step:' at the start of the message")
    pairs = _TT_KV.findall(body)
    if not pairs or pairs[0][0] != "step":
        raise _Bad("no 'step: N' field")
    try:
        step = parse_int(pairs[0][1].split("/", 1)[0])
    except ValueError:
        raise _Bad("step is not an integer") from None
    values: dict[str, object] = {}
    keys: list[str] = ["step"]
    for key, value in pairs[1:]:
        keys.append(key)
        try:
            if key in ("loss", "grad_norm", "lr"):
                values[key] = parse_float(value)
            elif key == "memory":
                m = _TT_MEM.match(value)
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
                if value != "N/A" and not value.endswith("%"):
                    raise _Bad(f"truncated: mfu {value[:30]!r} without its '%'")
                values["mfu_pct_logged"] = parse_float(value.removesuffix("%"))
        except _Bad:  # the one change: the clause below re-worded these two reasons as "not a
            raise  # number", so an mfu cut before its '%' was not counted as truncated
        except ValueError:
            raise _Bad(f"field {key!r}: {value[:30]!r} is not a number") from None
    return kind, step, values, tuple(keys)


def torchtitan(line: str) -> list[Rec | Skip]:
    out: list[Rec | Skip] = []
    end = 0
    cands = list(_TT_CAND.finditer(line))
    for k, cand in enumerate(cands):
        if cand.start() < end:
            continue
        stop = cands[k + 1].start() if k + 1 < len(cands) else len(line)
        m = _TT_RECORD.match(line, cand.start(), stop)
        if m is None:
            reason = "step fields without torchtitan's logging prefix (interleaved or garbled)"
            out.append(Skip(start=cand.start(), reason=reason, end=cand.end()))
            end = cand.end()
            continue
        end = m.end()
        try:
            kind, step, values, keys = _tt_fields(m.group("msg"))
        except _Bad as bad:
            out.append(Skip(start=cand.start(), reason=str(bad), end=m.end()))
            continue
        if "loss" not in values:
            out.append(Skip(start=cand.start(), reason="no loss field", end=m.end()))
            continue
        values.update(kind=kind, step=step, timestamp=m.group("ts"))
        out.append(Rec(start=cand.start(), end=m.end(), values=values, keys=keys))
    return out


# --------------------------------------------------------------------------- automodel_jsonl

_JS_CAND = re.compile(r'\{\s*"step"\s*:')
_JS_DECODER = json.JSONDecoder()
_JS_FLOATS = (
    ("loss", "loss"),
    ("grad_norm", "grad_norm"),
    ("lr", "lr"),
    ("mem", "mem_gib"),
    ("tps", "tok_per_s_logged"),
    ("tps_per_gpu", "tok_per_s_per_gpu_logged"),
    ("mfu", "mfu_pct_logged"),
)
_JS_INTS = (
    ("epoch", "epoch"),
    ("num_tokens_per_step", "num_tokens"),
    ("num_label_tokens", "num_label_tokens"),
)


def _js_number(record: dict[str, Any], key: str, *, integer: bool) -> Any:
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


def _js_values(record: dict[str, Any]) -> dict[str, Any]:
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or not -(2**63) <= step < 2**63:
        raise ValueError("no int64 'step'")
    values: dict[str, Any] = {"kind": "train", "step": step}
    for key, column in _JS_FLOATS:
        number = _js_number(record, key, integer=False)
        if number is not None:
            values[column] = number
    if "loss" not in values:
        alt = _js_number(record, "val_loss", integer=False)
        if alt is not None:
            values["loss"] = alt
    for key, column in _JS_INTS:
        number = _js_number(record, key, integer=True)
        if number is not None:
            values[column] = number
    stamp = record.get("timestamp")
    values["timestamp"] = stamp if isinstance(stamp, str) else None
    if "loss" not in values:
        raise ValueError("no 'loss' (or 'val_loss')")
    return values


def automodel_jsonl(line: str) -> list[Rec | Skip]:
    out: list[Rec | Skip] = []
    end = 0
    starts = [m.start() for m in _JS_CAND.finditer(line)]
    for k, start in enumerate(starts):
        if start < end:
            continue
        try:
            record, end = _JS_DECODER.raw_decode(line, start)
        except ValueError as err:
            pos = getattr(err, "pos", 0)
            after = next((s for s in starts[k + 1 :] if s > start), None)
            if after is not None:
                whole = line[start:after].rstrip().endswith("}")
                reason = (
                    f"not JSON ({err.msg})"
                    if whole
                    else "truncated JSON record (cut where the next record begins)"
                )
                out.append(Skip(start=start, end=after, reason=reason))
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
            out.append(Rec(start=start, end=end, values=_js_values(record)))
        except ValueError as err:
            out.append(Skip(start=start, reason=str(err), end=end))
    return out


PARSE_LINE = {
    "automodel_text": (automodel_text, _AM_CAND.pattern),
    "torchtitan": (torchtitan, _TT_CAND.pattern),
    "automodel_jsonl": (automodel_jsonl, _JS_CAND.pattern),
}
"""Format name -> (its per-line definition, its record signature)."""


# --------------------------------------------------------------------------- the file driver


def read_records(fmt: Any, lines: Any, result: Any, *, cut_last: bool, fast: bool = True) -> Found:
    """Every record of ``fmt`` in ``lines`` read by its per-line definition alone (the signature of
    pooltk.logs.records.read_records, whose place a test gives it)."""
    import polars as pl

    parse_line, candidate = PARSE_LINE[fmt.FORMAT]
    n = lines.len()
    result.n_lines = n
    cand = lines.str.find(candidate).is_not_null()
    rest = cand.arg_true().to_list()
    pending: list[tuple[int, int, str, Rec]] = []
    for i, text in zip(rest, lines.gather(rest).to_list() if rest else [], strict=True):
        prev = 0
        for item in parse_line(text):
            if isinstance(item, Skip):
                cut = cut_last and i == n - 1 and item.end in (-1, len(text))
                reason = (
                    TRUNCATED_EOF if cut and item.reason.startswith("truncated") else item.reason
                )
                result.skip(i + 1, reason, text)
                continue
            pending.append((i + 1, prev, text, item))
            prev = item.end
    by_kind: dict[str, Counter[tuple[str, ...]]] = {}
    for _, _, _, rec in pending:
        if rec.keys:
            by_kind.setdefault(str(rec.values.get("kind")), Counter())[rec.keys] += 1
    usual = {k: max(c, key=lambda keys: (c[keys], len(keys))) for k, c in by_kind.items()}
    cols: dict[str, list[Any]] = {"line": [], "prefix": []}
    j = 0
    for ln, prev, text, rec in pending:
        full = usual.get(str(rec.values.get("kind")))
        if ln == n and cut_last and rec.end >= len(text.rstrip()):
            result.skip(ln, TRUNCATED_EOF, text)
            continue
        if full and rec.keys and len(rec.keys) < len(full) and full[: len(rec.keys)] == rec.keys:
            reason = (
                f"truncated: ends after '{rec.keys[-1]}' (the file's lines go on to '{full[-1]}')"
            )
            result.skip(ln, reason, text)
            continue
        row = {"line": ln, "prefix": text[prev : rec.start], **rec.values}
        for key in row:
            if key not in cols:
                cols[key] = [None] * j
        for key, col in cols.items():
            col.append(row.get(key))
        j += 1
    frame = pl.DataFrame(cols, strict=False, infer_schema_length=None)
    frame = frame.with_columns(pl.col("line").cast(pl.Int64), pl.col("prefix").cast(pl.String))
    record_lines = int(frame["line"].n_unique()) if frame.height else 0
    hints = getattr(fmt, "META_HINTS", ())
    other = (~cand).arg_true()
    if hints and other.len():
        hit = other.gather(lines.gather(other).str.contains_any(list(hints)).arg_true()).to_list()
        for i, text in zip(hit, lines.gather(hit).to_list() if hit else [], strict=True):
            if fmt.meta(text, i + 1, result):
                result.n_meta += 1
    row_lines = set(frame["line"].to_list()) if result.skip_lines else set()
    result.n_row_lines = record_lines
    result.n_other = max(0, n - record_lines - len(result.skip_lines - row_lines) - result.n_meta)
    return Found(frame=frame)


# --------------------------------------------------------------------------- the run segmenter


def segment(
    lines: Any,
    stream: Any,
    step: Any,
    train: Any,
    banner_lines: Any,
    b_rank: Any,
    ts: Any,
    has_ts: Any,
    *,
    exact: bool = False,
    again: bool = False,
    shared: frozenset[int] = frozenset(),
) -> tuple[Any, list[str]]:
    """The rows walked in line order: (run of each row, why each run after the first began).
    ``shared``: ranks whose rows are several writers' copies (the rule added with the segmenter
    that replaced this walk: they tolerate a late print, as the rows without a rank do)."""
    order = np.argsort(lines, kind="stable")
    state: dict[int, dict[str, Any]] = {}
    seg_of_stream: dict[int, int] = {}
    run_latest: dict[int, int] = {}
    index = np.zeros(lines.size, dtype=np.int64)
    reasons: list[str] = []
    n_runs = 1
    bi = 0
    bound = int(CLOCK_BACK_MAX_S * 1e9)
    interval: dict[int, int] = {}
    for s in np.unique(stream):
        d = np.diff(step[(stream == s) & train])
        d = d[d > 0]
        interval[int(s)] = int(np.median(d)) if d.size else 1

    def start_new(s: int, why: str, at: int) -> None:
        nonlocal n_runs
        target = seg_of_stream.get(s, 0) + 1
        if target >= n_runs:
            n_runs = target + 1
            reasons.append(f"line {at}: {why}")
        seg_of_stream[s] = target
        state[s] = {}

    for i in order.tolist():
        ln = int(lines[i])
        while bi < banner_lines.size and banner_lines[bi] < ln:
            br = int(b_rank[bi])
            for s, st in list(state.items()):
                if st.get("stepped") and (br < 0 or br == s or s < 0):
                    at = int(banner_lines[bi])
                    start_new(s, f"start-up banner at line {at} after steps were logged", at)
            bi += 1
        s = int(stream[i])
        st = state.setdefault(s, {})
        if has_ts[i]:
            t = int(ts[i])
            fresh = s not in seg_of_stream
            if fresh:
                seg_of_stream[s] = n_runs - 1
            top = st.get("latest") if not fresh else run_latest.get(n_runs - 1)
            if top is not None and t < top - bound:
                start_new(
                    s,
                    f"the clock went back {_span(top - t)} (more than a DST shift plus node skew, "
                    f"{CLOCK_BACK_MAX_S / 3600:.2f} h)"
                    + (f" (rank {s})" if s >= 0 else "")
                    + ": another run",
                    ln,
                )
                st = state[s]
            st["latest"] = t if st.get("latest") is None else max(st["latest"], t)
        if train[i]:
            top = st.get("max_step")
            tol = 0 if (s >= 0 and s not in shared) or exact else interval.get(s, 1)
            if top is not None and (step[i] < top - tol or (again and step[i] == top)):
                why = (
                    f"step went back from {top} to {int(step[i])}"
                    if step[i] < top
                    else f"step {top} logged again"
                )
                start_new(s, why + (f" (rank {s})" if s >= 0 else ""), ln)
                st = state[s]
                if has_ts[i]:
                    st["latest"] = int(ts[i])
            st["max_step"] = (
                int(step[i]) if st.get("max_step") is None else max(st["max_step"], int(step[i]))
            )
            st["stepped"] = True
        index[i] = seg_of_stream.setdefault(s, n_runs - 1)
        if has_ts[i]:  # changed: a row's time counts for its own run (it was the run its stream
            k, t = index[i], int(ts[i])  # left where its step began a run)
            run_latest[k] = t if k not in run_latest else max(run_latest[k], t)
    return index, reasons


def _span(ns: int) -> str:
    s = ns / 1e9
    if s >= 2 * 86400:
        return f"{s / 86400:,.0f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"
