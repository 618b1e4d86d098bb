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
is decoration. Fields are read by name through :data:`FIELDS` (a field added later is ignored
rather than misread); a record ends after its last ``| key value`` field, so a second record on
the same line (two ranks writing at once) is read as its own row.
"""

from __future__ import annotations

import re
from typing import Any

from pooltk.logs._common import parse_int
from pooltk.logs.records import BadRecord, Field, Rec, Skip, form_pattern, read_form

__all__ = [
    "CANDIDATE",
    "DETECT",
    "FIELDS",
    "FORMAT",
    "META_HINTS",
    "TS_FORMAT",
    "finish",
    "meta",
    "pattern",
    "records_in",
    "split",
]

FORMAT = "automodel_text"
TS_FORMAT = "%Y-%m-%d %H:%M:%S"
MEM_BASIS = "max_allocated"

FIELDS: dict[str, Field] = {
    "step": Field("step", "int"),
    "epoch": Field("epoch", "int"),
    "loss": Field("loss"),
    "grad_norm": Field("grad_norm"),
    "lr": Field("lr"),
    "num_label_tokens": Field("num_label_tokens", "int"),
    "mem": Field("mem_gib", forms=("{} GiB",)),
    "tps": Field("tok_per_s_logged", forms=("{}({}/gpu)", "{}"), also="tok_per_s_per_gpu_logged"),
}
"""The field table: key as written (``mem:`` in 2025-07 is ``mem``) -> column, type, form."""

_TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
_LEVEL = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[^:\s]*:"
_HEADS = {
    "ts": _TS + r" \| [A-Z]+ \| [^|\n]*? \| ",
    "ms": _TS + r",\d{3} \| [A-Z]+ \| [^|\n]*? \| ",
    "plain": _LEVEL,
    "none": "",
}
"""The record's own logging prefix, by form: ``%(asctime)s | %(levelname)s | %(name)s | `` (with
or without milliseconds), Python's default ``INFO:root:``, or none."""
_VAL = r'(?:\[val\](?: name "[^"\n]*" \|)? ?)?'
CANDIDATE = (
    r"(?:"
    + _TS
    + r"(?:,\d{3})? \| [A-Z]+ \| [^|\n]*? \| |"
    + _LEVEL
    + r")?"
    + _VAL
    + r"step \d+ \| epoch "
)
"""Where a record starts (also an interleaved one that cannot be read: it is then counted as
skipped)."""
_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)|N/A|None"
_FIELD = r" \| (?!step \d)[a-z_]+:? (?:" + _NUM + r")(?:\((?:" + _NUM + r")/gpu\)| GiB)?"
_RECORD_RE = re.compile(
    r"(?P<pre>(?:(?P<ts>" + _TS + r")(?:,\d{3})? \| [A-Z]+ \| [^|\n]*? \| |" + _LEVEL + r")?)"
    r'(?P<val>\[val\](?: name "(?P<name>[^"\n]*)" \|)? ?)?'
    r"(?P<body>step (?:\d+)(?:" + _FIELD + r")*)"
)
_FAST = {"int": r"\d{1,18}", "float": r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"}
"""The numbers the fast path reads: what polars and :func:`parse_float` / :func:`parse_int` read
alike."""
DETECT = r"step \d+ \| epoch \d+ \| loss "
"""The record's signature (format detection)."""
_CAND_RE = re.compile(CANDIDATE)
_WORLD_RE = re.compile(r"\bWorld size: (\d+)\b")
META_HINTS = ("World size: ",)


def _runs_on(ch: str) -> bool:
    """Whether a record's last value directly followed by ``ch`` may have been cut: ``ch`` could
    continue a number.

    (``9328.79Saving checkpoint`` is a whole value and a print; ``6553`` + ``6...`` is not
    knowable.)
    """
    return ch.isdigit() or ch in ".-+_,"


def _value(key: str, text: str, values: dict[str, Any]) -> int | None:
    """Put the value of ``key`` into ``values`` as :data:`FIELDS` says; the form it was written in
    (None: a key the table does not read)."""
    field = FIELDS.get(key) if key != "step" else None  # a second step: read by no one
    if field is None:
        return None
    form = read_form(key, field, text, values)
    if form is None:
        unit = field.forms[0].replace("{}", "").strip()
        raise BadRecord(f"truncated or garbled: {key} without its unit {unit}")
    return form


def _fields(body: str) -> tuple[dict[str, Any], tuple[str, ...], tuple[tuple[str, Any], ...]]:
    """(values by column, keys in order, (label as written, form) per field after the step)."""
    parts = body.split(" | ")
    try:
        values: dict[str, Any] = {"step": parse_int(parts[0][5:])}
    except ValueError:
        raise BadRecord("step is not an int64") from None
    keys, written = ["step"], []
    for part in parts[1:]:
        label, _, text = part.partition(" ")
        keys.append(label.rstrip(":"))
        written.append((label, _value(keys[-1], text, values)))
    return values, tuple(keys), tuple(written)


def records_in(line: str) -> list[Rec | Skip]:
    """Every record on ``line``, read by :data:`FIELDS`; candidates that do not read are Skips."""
    out: list[Rec | Skip] = []
    cands = list(_CAND_RE.finditer(line))
    for k, cand in enumerate(cands):
        stop = cands[k + 1].start() if k + 1 < len(cands) else len(line)
        m = _RECORD_RE.match(line, cand.start(), stop)  # a record ends where the next one starts
        if m is None or " | loss " not in m.group("body"):
            reason = "step record garbled (interleaved or cut)"
            out.append(Skip(start=cand.start(), reason=reason, end=cand.end()))
            continue
        if m.end() < stop and _runs_on(line[m.end()]):
            reason = "step record runs into other text (two writes garbled)"
            out.append(Skip(start=cand.start(), reason=reason, end=m.end()))
            continue
        try:
            values, keys, written = _fields(m.group("body"))
        except BadRecord as bad:
            out.append(Skip(start=cand.start(), reason=str(bad), end=m.end()))
            continue
        if "loss" not in values:
            out.append(Skip(start=cand.start(), reason="no loss field", end=m.end()))
            continue
        val = m.group("val") is not None
        values.update(
            kind="val" if val else "train",
            timestamp=m.group("ts"),
            val_name=(m.group("name") or "default") if val else None,
        )
        layout = None if val else (_head(m.group("pre"), m.group("ts")), written)
        out.append(Rec(start=cand.start(), end=m.end(), values=values, keys=keys, layout=layout))
    return out


def _head(pre: str, ts: str | None) -> str:
    """The form of a record's logging prefix (a key of :data:`_HEADS`)."""
    if ts is not None:
        return "ms" if pre[19:20] == "," else "ts"
    return "plain" if pre else "none"


def pattern(layout: tuple[str, tuple[tuple[str, Any], ...]]) -> str | None:
    """The regex of a train record written as ``layout`` (values in :data:`_FAST`'s classes);
    None where a key is one the table does not read (``x_step 5 | epoch`` would hide a second
    record's signature) or two keys fill one column."""
    head, written = layout
    if any(form is None for _, form in written):
        return None
    fields = [FIELDS[label.rstrip(":")] for label, _ in written]
    if len({f.column for f in fields}) != len(fields):
        return None
    out = _HEADS[head] + r"step " + _FAST["int"]
    for (label, form), field in zip(written, fields):
        out += r" \| " + re.escape(label) + " " + form_pattern(field.forms[form], _FAST[field.kind])
    return out


def split(layout: tuple[str, tuple[tuple[str, Any], ...]]) -> tuple[list, list, Any]:
    """How records of ``layout`` (the column ``body``, from the record's start) are cut, as polars
    expressions: (columns to make first, (key, form, value text) per field, the timestamps)."""
    import polars as pl

    head, written = layout
    skip = 3 if head in ("ts", "ms") else 0  # the logging prefix's three fields
    parts = pl.col("parts")
    step = parts.struct.field(f"field_{skip}")
    if head == "plain":
        step = step.str.splitn(":", 3).struct.field("field_2")
    texts = [("step", 0, step.str.strip_prefix("step "))]
    for j, (label, form) in enumerate(written, start=skip + 1):
        value = parts.struct.field(f"field_{j}").str.strip_prefix(label + " ")
        texts.append((label.rstrip(":"), form, value))
    stamps = parts.struct.field("field_0").str.slice(0, 19) if skip else None
    return [("parts", pl.col("body").str.split_exact(" | ", skip + len(written)))], texts, stamps


def meta(line: str, n: int, result: Any) -> bool:
    """Take run facts from a non-record line; True when one was found."""
    m = _WORLD_RE.search(line)
    if m is None:
        return False
    result.set_meta("world_size", int(m.group(1)), n)
    return True


def finish(found: Any, result: Any, *, stem: str = "") -> None:  # noqa: ARG001
    """File-level facts: the per-GPU figure's basis."""
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
