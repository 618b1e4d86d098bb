"""NeMo Automodel training logs as text: the recipe's per-step and validation records.

Forms read (the record, after any logging prefix):

- current: ``step {} | epoch {} | loss {:.4f} | grad_norm {:.4f} | lr {:.2e} | mem {:.2f} GiB |
  tps {:.2f}({:.2f}/gpu) | num_label_tokens {}``
- 2025-08: the same without ``({}/gpu)`` after ``tps``;
- 2025-07: ``step {} | epoch {} | loss {} | grad_norm {} | mem: {} GiB | tps {}`` (no lr);
- validation:
  ``[val] name "{}" | step {} | epoch {} | loss {:.4f} | lr {:.2e} | num_label_tokens {}`` and the
  2025-07 ``[val] step {} | epoch {} | loss {}``.

The record's own logging prefix is part of it: ``%(asctime)s | %(levelname)s | %(name)s | ``
(datefmt ``%Y-%m-%d %H:%M:%S``), Python's default ``INFO:root:``, or none. The signature
``step N | epoch N | loss`` is found wherever it stands; what stands before the logging prefix
is decoration. Fields are read by name (a field added later is ignored rather than misread);
a record ends after its last ``| key value`` field, so a second record on the same line (two
ranks writing at once) is read as its own row.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pooltk.logs._common import parse_float, parse_int
from pooltk.logs.records import Rec, Skip

__all__ = [
    "CANDIDATE",
    "DETECT",
    "FORMAT",
    "META_HINTS",
    "TS_FORMAT",
    "fast",
    "finish",
    "meta",
    "parse_line",
]

FORMAT = "automodel_text"
TS_FORMAT = "%Y-%m-%d %H:%M:%S"
MEM_BASIS = "max_allocated"

_TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
_PREFIX = (
    r"(?:(?P<ts>" + _TS + r")(?:,\d{3})? \| [A-Z]+ \| [^|\n]*? \| "
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^:\s]*:)?"
)
_VAL = r'(?:\[val\](?: name "[^"\n]*" \|)? ?)?'
CANDIDATE = (
    r"(?:"
    + _TS
    + r"(?:,\d{3})? \| [A-Z]+ \| [^|\n]*? \| |(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^:\s]*:)?"
    + _VAL
    + r"step \d+ \| epoch "
)
"""Where a record starts (also an interleaved one that cannot be read: it is then counted as
skipped)."""
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)|N/A|None"
_FIELD = r" \| (?!step \d)[a-z_]+:? (?:" + _NUM + r")(?:\((?:" + _NUM + r")/gpu\)| GiB)?"
_RECORD_RE = re.compile(
    r"(?P<pre>" + _PREFIX + r")(?P<val>\[val\](?: name \"(?P<name>[^\"\n]*)\" \|)? ?)?"
    r"(?P<body>step (?:\d+)(?:" + _FIELD + r")*)"
)
DETECT = r"step \d+ \| epoch \d+ \| loss "
"""The record's signature (format detection)."""
_CAND_RE = re.compile(CANDIDATE)
_WORLD_RE = re.compile(r"\bWorld size: (\d+)\b")
META_HINTS = ("World size: ",)


def _RUNS_ON(ch: str) -> bool:  # noqa: N802 - reads as a predicate on the character after a record
    """Whether a record's last value directly followed by ``ch`` may have been cut: ``ch`` could
    continue a number.

    (``9328.79Saving checkpoint`` is a whole value and a print; ``6553`` + ``6...`` is not
    knowable.)
    """
    return ch.isdigit() or ch in ".-+_,"


_SIMPLE = {
    "epoch": ("epoch", parse_int),
    "loss": ("loss", parse_float),
    "grad_norm": ("grad_norm", parse_float),
    "lr": ("lr", parse_float),
    "num_label_tokens": ("num_label_tokens", parse_int),
}


class _Bad(ValueError):
    """A record that does not parse; the message is the skip reason."""


def _fields(body: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    parts = body.split(" | ")
    values: dict[str, Any] = {"step": parse_int(parts[0][5:])}
    keys = ["step"]
    for part in parts[1:]:
        key, _, value = part.partition(" ")
        key = key.rstrip(":")
        keys.append(key)
        try:
            if key in _SIMPLE:
                column, parser = _SIMPLE[key]
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


def parse_line(line: str) -> list[Rec | Skip]:
    """Every record on ``line`` (the definition of the format); candidates that do not read are
    Skips."""
    out: list[Rec | Skip] = []
    cands = list(_CAND_RE.finditer(line))
    for k, cand in enumerate(cands):
        stop = cands[k + 1].start() if k + 1 < len(cands) else len(line)
        m = _RECORD_RE.match(line, cand.start(), stop)  # a record ends where the next one starts
        if m is None or " | loss " not in m.group("body"):
            out.append(
                Skip(
                    start=cand.start(),
                    reason="step record garbled (interleaved or cut)",
                    end=cand.end(),
                )
            )
            continue
        if m.end() < stop and _RUNS_ON(line[m.end()]):
            out.append(
                Skip(
                    start=cand.start(),
                    reason="step record runs into other text (two writes garbled)",
                    end=m.end(),
                )
            )
            continue
        try:
            values, keys = _fields(m.group("body"))
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


def meta(line: str, n: int, result: Any) -> bool:
    """Take run facts from a non-record line; True when one was found."""
    m = _WORLD_RE.search(line)
    if m is None:
        return False
    result.set_meta("world_size", int(m.group(1)), n)
    return True


def finish(found: Any, result: Any, *, stem: str = "") -> None:  # noqa: ARG001
    """File-level facts: the timestamp format, the memory basis, the per-GPU figure's basis."""
    result.timestamp_format = TS_FORMAT
    result.mem_basis = MEM_BASIS
    frame = found.frame
    if (
        "tok_per_s_per_gpu_logged" in frame.columns
        and frame["tok_per_s_per_gpu_logged"].null_count() < frame.height
    ):
        result.notes.append(
            "tok_per_s_per_gpu_logged is Automodel's tps/cp/dp: it ignores PP and TP "
            "(with pp8 it is 8x the rate per physical GPU); "
            "use pooltk.logs.metrics for a physical basis"
        )


# --------------------------------------------------------------------------- the engine's path

_FNUM = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_COLUMNS = {
    "epoch": ("epoch", "int"),
    "loss": ("loss", "float"),
    "grad_norm": ("grad_norm", "float"),
    "lr": ("lr", "float"),
    "num_label_tokens": ("num_label_tokens", "int"),
    "mem": ("mem_gib", "mem"),
    "tps": ("tok_per_s_logged", "tps"),
}


def _layout(sample: list[str]) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
    """(prefix kind, field names, labels as written) of the most common single-record train line."""
    seen: Counter[tuple[str, tuple[str, ...], tuple[str, ...]]] = Counter()
    for text in sample:
        recs = parse_line(text)
        if (
            len(recs) != 1
            or not isinstance(recs[0], Rec)
            or recs[0].end != len(text)
            or recs[0].values["kind"] != "train"
        ):
            continue
        kind = (
            "ts"
            if recs[0].values["timestamp"]
            else ("plain" if not text.startswith("step ") else "none")
        )
        labels = tuple(p.partition(" ")[0] for p in text.split(" | ")[(3 if kind == "ts" else 0) :])
        tps = next((p for p in text.split(" | ") if p.startswith("tps ")), "")
        seen[(kind + ("/gpu" if tps.endswith("/gpu)") else ""), recs[0].keys, labels)] += 1
    if not seen:
        return None
    kind, keys, labels = seen.most_common(1)[0][0]
    if (
        len(set(keys)) != len(keys)
        or any(k not in _COLUMNS for k in keys[1:])
        or "loss" not in keys
    ):
        return None
    return kind, keys, labels


def fast(body: Any) -> tuple[dict[str, Any], Any, tuple[str, ...]] | None:
    """The file's usual layout read by polars: (columns, which bodies were read, field names)."""
    import polars as pl

    found = _layout(body.head(1000).to_list())
    if found is None:
        return None
    kind, keys, labels = found
    pair = kind.endswith("/gpu")
    kind = kind.removesuffix("/gpu")
    labels = ("step", *labels[1:])
    pattern = {
        "ts": r"^" + _TS + r" \| [A-Z]+ \| [^|]*? \| ",
        "plain": r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^:\s]*:",
        "none": "^",
    }[kind]
    pattern += r"step \d+"
    for key, label in zip(keys[1:], labels[1:], strict=True):
        value = {
            "int": r"\d+",
            "float": _FNUM,
            "mem": _FNUM + " GiB",
            "tps": _FNUM + (r"\(" + _FNUM + r"/gpu\)" if pair else ""),
        }[_COLUMNS[key][1]]
        pattern += r" \| " + re.escape(label) + " " + value
    ok = body.str.contains(pattern + "$")
    stamps = None
    if kind == "ts":  # the logging prefix's three fields, then the record's
        split = body.str.splitn(" | ", 3 + len(keys)).struct.unnest()
        stamps = split["field_0"].str.slice(0, 19)
        parts = split.select(split.columns[3:]).rename(
            lambda c: f"field_{int(c.split('_')[1]) - 3}"
        )
    else:
        rest = body.str.splitn(":", 3).struct.unnest()["field_2"] if kind == "plain" else body
        parts = rest.str.splitn(" | ", len(keys)).struct.unnest()
    cols: dict[str, Any] = {"step": parts["field_0"].str.slice(5).cast(pl.Int64, strict=False)}
    for j, (key, label) in enumerate(zip(keys[1:], labels[1:], strict=True), start=1):
        value = parts[f"field_{j}"].str.slice(len(label) + 1)
        column, how = _COLUMNS[key]
        if how == "int":
            cols[column] = value.cast(pl.Int64, strict=False)
        elif how == "float":
            cols[column] = value.cast(pl.Float64, strict=False)
        elif how == "mem":
            cols[column] = value.str.strip_suffix(" GiB").cast(pl.Float64, strict=False)
        elif pair:
            two = value.str.strip_suffix("/gpu)").str.split_exact("(", 1).struct.unnest()
            cols["tok_per_s_logged"] = two["field_0"].cast(pl.Float64, strict=False)
            cols["tok_per_s_per_gpu_logged"] = two["field_1"].cast(pl.Float64, strict=False)
        else:
            cols["tok_per_s_logged"] = value.cast(pl.Float64, strict=False)
    for values in cols.values():  # an integer beyond int64 is left to the definition
        ok = ok & values.is_not_null()
    ok = ok.fill_null(False)
    cols["kind"] = pl.repeat("train", body.len(), dtype=pl.String, eager=True)
    cols["timestamp"] = (
        stamps if stamps is not None else pl.repeat(None, body.len(), dtype=pl.String, eager=True)
    )
    return cols, ok, keys
