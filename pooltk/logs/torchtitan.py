"""torchtitan per-step metric lines.

The record: optional ``[titan] ``, ``{date time,ms} - {logger} - {LEVEL} - `` and the metric
message, wherever it stands in a line (torchrun's ``[rankN]:`` and any other prefix before it are
decoration; a second record on the same line is its own row). Messages read (field order confirmed
in torchtitan's source, see docs/logs.md):

- 2024 ``train.py``:
  ``step: {:2}  loss: {:7.4f}  memory: {:5.2f}GiB({:.2f}%)  wps: {:,}  mfu: {:.2f}%``
- ``components/metrics.py``: ``... tps: {:,}  tflops: {:,.2f}  mfu: {:.2f}%`` (tps replaces wps);
- later: ``grad_norm: {:7.4f}`` after loss; newest: ``loss: {:8.5f}`` and ``mfu: N/A`` when the
  device's peak FLOP/s is unknown;
- ``validate step: {:2}  loss: {:7.4f}  memory: ...  tps: {:,}``;
- progress forms such as ``step: 640/644 = 99.38%`` (the step is the number before the slash).

Fields are read as ``key: value`` pairs by name through :data:`FIELDS`. Colour escapes are stripped
first. A non-last
pipeline stage prints ``loss: -1.0000`` (it has no loss); that is stored as NaN and noted.
torchtitan's ``tps`` is per device already: tokens / (time x non-data-parallel size).
"""

from __future__ import annotations

import re
from typing import Any

from pooltk.logs._common import ParseResult, parse_int, read_facts
from pooltk.logs.records import BadRecord, Field, Rec, Skip, form_pattern, read_form

__all__ = [
    "CANDIDATE",
    "DETECT",
    "FIELDS",
    "FORMAT",
    "META_HINTS",
    "finish",
    "meta",
    "pattern",
    "records_in",
    "split",
]

FORMAT = "torchtitan"
TS_FORMAT = "%Y-%m-%d %H:%M:%S,%3f"
MEM_BASIS = "max_reserved"

FIELDS: dict[str, Field] = {
    "step": Field("step", "int"),
    "loss": Field("loss"),
    "grad_norm": Field("grad_norm"),
    "lr": Field("lr"),
    "memory": Field(
        "mem_gib", forms=("{}GiB({}%)", "{}GiB"), also="mem_pct", number=r"[-+0-9.naif]+"
    ),
    "tps": Field("tok_per_s_logged", "count"),
    "wps": Field("tok_per_s_logged", "count"),
    "tflops": Field("tflops_per_gpu_logged", "count"),
    "mfu": Field("mfu_pct_logged", forms=("{}%", "N/A")),
}
"""The field table: key as written -> column, type, form (``N/A``: no number); a memory figure
holds only the digits, sign and point of a number, ``nan`` or ``inf``."""

_TS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
_PREFIX = r"(?:\[titan\] )?" + _TS + r" - [^ \n]+ - [A-Z]+ - "
CANDIDATE = r"(?:" + _PREFIX + r"(?:validate )?step:|(?:validate )?step:\s*\d+\S*\s+loss:)"
"""Where a record starts; a bare ``step: N  loss:`` without the logging prefix is counted as
skipped."""
DETECT = r"(?:^|\s|- )(?:validate )?step:\s*\d+(?:/\d+)?\s.*?\bloss:\s"
_CAND_RE = re.compile(CANDIDATE)
_RECORD_RE = re.compile(
    r"(?:\[titan\] )?(?P<ts>" + _TS + r") - [^ \n]+ - [A-Z]+ - "
    r"(?P<msg>(?:validate )?step:\s*\d+(?:/\d+)?(?: = [\d.]+%)?(?:\s+[A-Za-z_]+:\s+[^\s\[]+)*)"
)
_KV_RE = re.compile(r"([A-Za-z_]+):\s+(\S+)")
_FAST = {"int": r"\d{1,18}", "float": r"-?\d+(?:\.\d+)?", "count": r"\d{1,3}(?:,\d{3})*(?:\.\d+)?"}
"""The numbers the fast path reads: what polars and :func:`parse_float` read alike, within
what a memory figure may hold (no exponent)."""
META_HINTS = (
    "Peak FLOPS used",
    " capacity: ",
    "device mesh",
    "local batch size",
    "sequence length",
    "gradient accumulation steps",
    "torchtitan version: ",
)

_META: tuple[tuple[re.Pattern[str], tuple[tuple[str, type], ...]], ...] = (
    (re.compile(r"Peak FLOPS used for computing MFU: ([0-9.e+]+)"), (("peak_flops", float),)),
    (
        re.compile(r"(?:CUDA|GPU|XPU|NPU) capacity: (.+?) with ([0-9.]+)GiB memory"),
        (("device_name", str), ("device_capacity_gib", float)),
    ),
    (
        re.compile(r"local batch size (\d+), global batch size (\d+)"),
        (("local_batch_size", int), ("global_batch_size", int)),
    ),
    (re.compile(r"sequence length (\d+)"), (("seq_len", int),)),
    (re.compile(r"gradient accumulation steps (\d+)"), (("grad_acc_steps", int),)),
    (re.compile(r"torchtitan version: (\S+)"), (("framework_version", str),)),
)
"""Setup lines: regex -> the run fact (and its type) each group gives."""
_MESH_RE = re.compile(r"Building (?:\d+-D )?device mesh with parallelism: (.+)$")


def meta(message: str, n: int, result: ParseResult) -> bool:
    """Take run facts from a setup line; True when one was found."""
    found = read_facts(_META, message, n, result)
    m = _MESH_RE.search(message)
    if m is None:
        return found
    for part in m.group(1).split(","):
        name, _, value = part.strip().partition("=")
        if value.strip().isdigit():
            result.set_meta(f"mesh_{name.strip()}", int(value), n)
    return True


def _value(key: str, text: str, values: dict[str, Any]) -> int | None:
    """Put the value of ``key`` into ``values`` as :data:`FIELDS` says; the form it was written in
    (None: a key the table does not read)."""
    field = FIELDS.get(key) if key != "step" else None  # a second step: read by no one
    if field is None:
        return None
    form = read_form(key, field, text, values)
    if form is not None:
        return form
    if key == "memory":
        raise BadRecord(f"memory {text[:30]!r} is not '<n>GiB(<p>%)'")
    unit = field.forms[0].replace("{}", "")  # torchtitan always writes it: the value was cut
    raise BadRecord(f"truncated: {key} {text[:30]!r} without its {unit!r}")


def _fields(message: str) -> tuple[str, int, dict[str, Any], tuple[str, ...], Any]:
    """Parse a metric message into (kind, step, values by column, keys in order, layout fields:
    (key, form) per field after the step, None for a progress step)."""
    if message.startswith("validate step:"):
        kind, body = "val", message[len("validate ") :]
    elif message.startswith("step:"):
        kind, body = "train", message
    else:
        raise BadRecord("no 'step:' at the start of the message")
    pairs = _KV_RE.findall(body)
    if not pairs or pairs[0][0] != "step":
        raise BadRecord("no 'step: N' field")
    try:
        step = parse_int(pairs[0][1].split("/", 1)[0])
    except ValueError:
        raise BadRecord("step is not an integer") from None
    values: dict[str, Any] = {}
    written = tuple((key, _value(key, text, values)) for key, text in pairs[1:])
    plain = pairs[0][1].isdigit() and not body.split(None, 2)[-1].startswith("= ")
    keys = ("step", *(key for key, _ in written))
    return kind, step, values, keys, written if plain else None


def records_in(line: str) -> list[Rec | Skip]:
    """Every record on ``line``, read by :data:`FIELDS`; bare or damaged ones are Skips."""
    out: list[Rec | Skip] = []
    end = 0
    cands = list(_CAND_RE.finditer(line))
    for k, cand in enumerate(cands):
        if cand.start() < end:
            continue
        stop = cands[k + 1].start() if k + 1 < len(cands) else len(line)
        m = _RECORD_RE.match(line, cand.start(), stop)  # a record ends where the next one starts
        if m is None:
            reason = "step fields without torchtitan's logging prefix (interleaved or garbled)"
            out.append(Skip(start=cand.start(), reason=reason, end=cand.end()))
            end = cand.end()
            continue
        end = m.end()
        try:
            kind, step, values, keys, written = _fields(m.group("msg"))
        except BadRecord as bad:
            out.append(Skip(start=cand.start(), reason=str(bad), end=m.end()))
            continue
        if "loss" not in values:
            out.append(Skip(start=cand.start(), reason="no loss field", end=m.end()))
            continue
        values.update(kind=kind, step=step, timestamp=m.group("ts"))
        titan = m.group(0).startswith("[titan] ")
        layout = (titan, written) if kind == "train" and written is not None else None
        out.append(Rec(start=cand.start(), end=m.end(), values=values, keys=keys, layout=layout))
    return out


def pattern(layout: tuple[bool, tuple[tuple[str, Any], ...]]) -> str | None:
    """The regex of a train record written as ``layout`` (values in :data:`_FAST`'s classes);
    None where a key is one the table does not read or two keys fill one column."""
    titan, written = layout
    if any(form is None for _, form in written):
        return None
    columns = [FIELDS[key].column for key, _ in written]
    if len(set(columns)) != len(columns):
        return None
    out = (r"\[titan\] " if titan else "") + _TS + r" - [^ \n]+ - [A-Z]+ - step: *" + _FAST["int"]
    for key, form in written:
        field = FIELDS[key]
        out += r"  +" + key + r": +" + form_pattern(field.forms[form], _FAST[field.kind])
    return out


def split(layout: tuple[bool, tuple[tuple[str, Any], ...]]) -> tuple[list, list, Any]:
    """How records of ``layout`` (the column ``body``, from the record's start) are cut, as polars
    expressions: (columns to make first, (key, form, value text) per field, the timestamps)."""
    import polars as pl

    _, written = layout
    keys = ["step", *(key for key, _ in written)]
    forms = [0, *(form for _, form in written)]
    stages = [
        ("head", pl.col("body").str.splitn(" - ", 4)),  # no field of the logging prefix has " - "
        ("parts", pl.col("head").struct.field("field_3").str.split_exact(":", len(keys))),
    ]
    texts = []
    for j, key in enumerate(keys, start=1):  # "  7.3  grad_norm": a value, then the next key
        value = pl.col("parts").struct.field(f"field_{j}")
        if j < len(keys):
            value = value.str.strip_suffix(keys[j])
        texts.append((key, forms[j - 1], value.str.strip_chars(" ")))
    return stages, texts, pl.col("head").struct.field("field_0").str.slice(-23)


def finish(found: Any, result: ParseResult, *, stem: str = "") -> None:  # noqa: ARG001
    """The file-level columns and notes: loss -1 (a non-last PP stage) as NaN, tps per device."""
    import polars as pl

    frame = found.frame
    if frame.height and "loss" in frame.columns:
        minus = int((frame["loss"] == -1.0).sum())
        frame = frame.with_columns(
            pl.when(pl.col("loss") == -1.0)
            .then(float("nan"))
            .otherwise(pl.col("loss"))
            .alias("loss")
        )
        if "tok_per_s_logged" in frame.columns:
            frame = frame.with_columns(pl.col("tok_per_s_logged").alias("tok_per_s_per_gpu_logged"))
        result.n_placeholder_loss = minus
        if minus:
            result.notes.append(
                f"{minus} row(s) printed loss -1 (a non-last pipeline stage has no loss): "
                "stored as NaN"
            )
    found.frame = frame
