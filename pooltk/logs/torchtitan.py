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

Fields are read as ``key: value`` pairs by name. Colour escapes are stripped first. A non-last
pipeline stage prints ``loss: -1.0000`` (it has no loss); that is stored as NaN and noted.
torchtitan's ``tps`` is per device already: tokens / (time x non-data-parallel size).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from pooltk.logs._common import ParseResult, parse_float, parse_int
from pooltk.logs.records import Rec, Skip

__all__ = ["CANDIDATE", "DETECT", "FORMAT", "META_HINTS", "fast", "finish", "meta", "parse_line"]

FORMAT = "torchtitan"
TS_FORMAT = "%Y-%m-%d %H:%M:%S,%3f"
MEM_BASIS = "max_reserved"

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
_MEM_RE = re.compile(r"^(?P<gib>[-+0-9.naif]+)GiB(?:\((?P<pct>[-+0-9.naif]+)%\))?$")
META_HINTS = (
    "Peak FLOPS used",
    " capacity: ",
    "device mesh",
    "local batch size",
    "sequence length",
    "gradient accumulation steps",
    "torchtitan version: ",
)

_META_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("peak_flops", re.compile(r"Peak FLOPS used for computing MFU: ([0-9.e+]+)")),
    ("device_name", re.compile(r"(?:CUDA|GPU|XPU|NPU) capacity: (.+?) with ([0-9.]+)GiB memory")),
    ("mesh", re.compile(r"Building (?:\d+-D )?device mesh with parallelism: (.+)$")),
    ("batch", re.compile(r"local batch size (\d+), global batch size (\d+)")),
    ("seq_len", re.compile(r"sequence length (\d+)")),
    ("grad_acc", re.compile(r"gradient accumulation steps (\d+)")),
    ("version", re.compile(r"torchtitan version: (\S+)")),
)


def meta(message: str, n: int, result: ParseResult) -> bool:
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
                if value != "N/A" and not value.endswith(
                    "%"
                ):  # torchtitan always writes the sign: cut short
                    raise _Bad(f"truncated: mfu {value[:30]!r} without its '%'")
                values["mfu_pct_logged"] = parse_float(value.removesuffix("%"))
            elif key == "lr":
                values["lr"] = parse_float(value)
        except ValueError:
            raise _Bad(f"field {key!r}: {value[:30]!r} is not a number") from None
    return kind, step, values, tuple(keys)


def parse_line(line: str) -> list[Rec | Skip]:
    """Every record on ``line`` (the definition of the format); bare or damaged ones are Skips."""
    out: list[Rec | Skip] = []
    end = 0
    cands = list(_CAND_RE.finditer(line))
    for k, cand in enumerate(cands):
        if cand.start() < end:
            continue
        stop = cands[k + 1].start() if k + 1 < len(cands) else len(line)
        m = _RECORD_RE.match(line, cand.start(), stop)  # a record ends where the next one starts
        if m is None:
            out.append(
                Skip(
                    start=cand.start(),
                    reason="step fields without torchtitan's logging prefix "
                    "(interleaved or garbled)",
                    end=cand.end(),
                )
            )
            end = cand.end()
            continue
        end = m.end()
        try:
            kind, step, values, keys = _fields(m.group("msg"))
        except _Bad as bad:
            out.append(Skip(start=cand.start(), reason=str(bad), end=m.end()))
            continue
        if "loss" not in values:
            out.append(Skip(start=cand.start(), reason="no loss field", end=m.end()))
            continue
        values.update(kind=kind, step=step, timestamp=m.group("ts"))
        out.append(Rec(start=cand.start(), end=m.end(), values=values, keys=keys))
    return out


def finish(found: Any, result: ParseResult, *, stem: str = "") -> None:  # noqa: ARG001
    """The file-level columns and notes: loss -1 (a non-last PP stage) as NaN, tps per device."""
    import polars as pl

    result.timestamp_format = TS_FORMAT
    result.mem_basis = MEM_BASIS
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


# --------------------------------------------------------------------------- the engine's path

_FNUM = r"-?\d+(?:\.\d+)?"
_VALUE = {
    "loss": _FNUM,
    "grad_norm": _FNUM,
    "memory": _FNUM + r"GiB\(" + _FNUM + r"%\)",
    "tps": r"\d{1,3}(?:,\d{3})*",
    "wps": r"\d{1,3}(?:,\d{3})*",
    "tflops": r"\d{1,3}(?:,\d{3})*(?:\.\d+)?",
    "mfu": _FNUM + "%|N/A",
}


def _layout(sample: list[str]) -> tuple[str, ...] | None:
    seen: Counter[tuple[str, ...]] = Counter()
    for text in sample:
        recs = parse_line(text)
        if (
            len(recs) == 1
            and isinstance(recs[0], Rec)
            and recs[0].end == len(text)
            and recs[0].values["kind"] == "train"
        ):
            seen[recs[0].keys] += 1
    if not seen:
        return None
    keys = seen.most_common(1)[0][0]
    if (
        keys[:2] != ("step", "loss")
        or any(k not in _VALUE for k in keys[1:])
        or len(set(keys)) != len(keys)
    ):
        return None
    return keys


def fast(body: Any) -> tuple[dict[str, Any], Any, tuple[str, ...]] | None:
    """The file's usual layout read by polars: (columns, which bodies were read, field names)."""
    import polars as pl

    keys = _layout(body.head(1000).to_list())
    if keys is None:
        return None
    pattern = r"^" + _PREFIX + r"step: *\d+"
    for key in keys[1:]:
        pattern += r"  +" + key + r": +(?:" + _VALUE[key] + ")"
    ok = body.str.contains(pattern + "$")
    head = body.str.splitn(" - ", 4).struct.unnest()
    stamps = head["field_0"].str.slice(-23)
    parts = head["field_3"].str.split_exact(":", len(keys)).struct.unnest()

    def value(j: int) -> Any:
        text = parts[f"field_{j}"]
        if j < len(keys):
            text = text.str.strip_suffix(keys[j])
        return text.str.strip_chars(" ")

    cols: dict[str, Any] = {"step": value(1).cast(pl.Int64, strict=False)}
    for j, key in enumerate(keys[1:], start=2):
        text = value(j)
        if key == "memory":
            two = text.str.strip_suffix("%)").str.split_exact("GiB(", 1).struct.unnest()
            cols["mem_gib"] = two["field_0"].cast(pl.Float64, strict=False)
            cols["mem_pct"] = two["field_1"].cast(pl.Float64, strict=False)
        elif key in ("tps", "wps", "tflops"):
            cols["tflops_per_gpu_logged" if key == "tflops" else "tok_per_s_logged"] = (
                text.str.replace_all(",", "", literal=True).cast(pl.Float64, strict=False)
            )
        elif key == "mfu":
            cols["mfu_pct_logged"] = pl.select(
                pl.when(text == "N/A")
                .then(float("nan"))
                .otherwise(text.str.strip_suffix("%").cast(pl.Float64, strict=False))
            ).to_series()
        else:
            cols[key] = text.cast(pl.Float64, strict=False)
    for values in cols.values():
        ok = ok & values.is_not_null()
    cols["kind"] = pl.repeat("train", body.len(), dtype=pl.String, eager=True)
    cols["timestamp"] = stamps
    return cols, ok.fill_null(False), keys
