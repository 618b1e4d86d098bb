"""Find every record of a format wherever it stands in a line, and read it from the format's field
table: one reader for every text format.

[Note: a record, not a line]
A format (:mod:`pooltk.logs.automodel_text`, :mod:`~pooltk.logs.torchtitan`,
:mod:`~pooltk.logs.automodel_jsonl`) states its record once:

- ``CANDIDATE``: where a record starts (the same text in Python's ``re`` and polars' Rust engine);
- ``FIELDS``: its field table, each key as written -> :class:`Field` (the column it fills, its
  type, how its value is written); nothing else maps a key to a column;
- ``records_in(line)``: every record of one line read by that table, with its span and
  ``layout`` (the prefix form, the keys and the form of each value), or a :class:`Skip` and why;
- ``pattern(layout)`` and ``split(layout)``: one layout's record as a regex, and how its field
  texts are cut out of the record's text, as polars expressions (the format's syntax; what the
  texts hold is the table's).

:func:`read_records` takes the file's usual layout (the most common one among the first lines
holding one whole train record), finds every line whose text from some point on is exactly one
record of that layout (``str.find`` with the layout's regex anchored at the line's end: the proof
and the place in one pass) and reads those in polars, each field cast as the table says. Python
reads only what is left: lines with several records, a record behind text that holds another
record's signature, other layouts, validation records, damaged values. What stands before each
record is its prefix (decoration columns, :mod:`pooltk.logs.decoration`). The per-line readers
these were built from are kept in tests/logs/oracle.py, and tests/logs/test_oracle.py requires
the same table from both on every fixture, real log and generated log.

[Note: a cut record is never a value]
A file whose last line has no newline was cut mid-write: a record reaching the end of that line is
counted as ``truncated`` (``num_label_tokens 524`` may have been ``524288``), never read. A record
whose fields are a strict prefix of the file's usual order (a crash cut it, and a later write put
the newline) is counted the same way; so are a JSON record without its closing brace, one cut where
the next record begins on its line (a kill cut it and the restart appended its first record there:
that record is read), and a value missing the unit its format always writes (torchtitan's ``mfu``
without ``%``). Left open: a text record whose *last* value runs straight into the next record
(Automodel's ``num_label_tokens 52`` + ``2025-...``) reads as whole, as when two ranks' whole
records share a line; only the length of a number could tell them apart.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pooltk.logs._common import ParseResult, parse_float, parse_int
from pooltk.logs.schema import RowBuilder

__all__ = [
    "BadRecord",
    "Field",
    "Found",
    "Rec",
    "Skip",
    "TRUNCATED_EOF",
    "form_numbers",
    "form_pattern",
    "read_form",
    "read_records",
    "to_lines",
]

TRUNCATED_EOF = "truncated: the file ends inside this record (no newline after it)"
_SAMPLE = 64
"""Candidate lines whose records decide the usual layout (a sample read in Python: a layout it
misses is read correctly, only by Python)."""


@dataclass(frozen=True, slots=True)
class Field:
    """One key of a format's records: the column it fills, its type, how its value is written."""

    column: str
    """The step-table column the (first) number fills."""
    kind: str = "float"
    """'int', 'float', 'count' (thousands commas allowed) or 'str' (a JSON string)."""
    forms: tuple[str, ...] = ("{}",)
    """How the value may be written, ``{}`` standing for a number (``"{} GiB"``,
    ``"{}({}/gpu)"``); a form without ``{}`` is a word meaning no number (torchtitan's ``N/A``)."""
    also: str = ""
    """The column of a form's second number."""
    number: str = ""
    """A regex each number text must match whole (empty: any text the number parser reads)."""


@dataclass(kw_only=True, slots=True)
class Rec:
    """One record found by a format's ``records_in``."""

    start: int
    """Offset of the record in its line."""
    end: int
    """Offset just past it."""
    values: dict[str, Any]
    """Values by column (``kind`` and ``step`` at least)."""
    keys: tuple[str, ...] = ()
    """Field names in the order written (for cut-record detection)."""
    layout: Any = None
    """How the record is written, for the fast path (None: a form it does not read)."""


@dataclass(kw_only=True, slots=True)
class Skip:
    """A candidate that is not a complete record."""

    start: int
    """Offset in its line."""
    reason: str
    """Why (the skip report's key)."""
    end: int = -1
    """Offset just past what was looked at (-1: the end of the line)."""


@dataclass(kw_only=True, slots=True)
class Found:
    """Every record of a file: a polars frame of values (one row per record) and the accounting."""

    frame: Any
    """polars DataFrame: ``line`` (1-based), ``prefix`` and the value columns."""


class BadRecord(ValueError):
    """A record that does not parse; the message is the skip reason."""


def form_numbers(form: str, text: str) -> list[str] | None:
    """The number texts of ``text`` written in ``form`` (see :attr:`Field.forms`), or None."""
    pieces = form.split("{}")
    if len(pieces) == 1:
        return [] if text == form else None
    head, tail = pieces[0], pieces[-1]
    if len(text) < len(head) + len(tail) or not text.startswith(head) or not text.endswith(tail):
        return None
    inner = text[len(head) : len(text) - len(tail)]
    if len(pieces) == 2:
        return [inner]
    first, sep, second = inner.partition(pieces[1])
    return [first, second] if sep else None


def read_form(key: str, field: Field, text: str, values: dict[str, Any]) -> int | None:
    """The form (index into ``field.forms``) ``text`` is written in, its numbers put into
    ``values`` by column; None where no form fits. A number that does not parse raises
    :class:`BadRecord`."""
    parse = parse_int if field.kind == "int" else parse_float
    for form, written in enumerate(field.forms):
        numbers = form_numbers(written, text)
        if numbers is None:
            continue
        if field.number and not all(re.fullmatch(field.number, x) for x in numbers):
            return None
        try:
            for column, number in zip((field.column, field.also), numbers):
                values[column] = parse(number)
        except ValueError:
            raise BadRecord(f"field {key!r}: {text[:30]!r} is not a number") from None
        return form
    return None


def to_lines(data: bytes) -> Any:
    """The lines of UTF-8 ``data`` as a polars String Series (newline-split, no trailing empty line;
    undecodable bytes replaced). polars' CSV reader splits them, with a separator byte the data
    lacks."""
    import polars as pl

    if not data:
        return pl.Series("l", [], dtype=pl.String)
    n = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    sep = next((c for c in b"\x1f\x1e\x1d\x1c\x01\x02\x03" if bytes([c]) not in data), None)
    if sep is not None and b"\r" not in data and b"\x00" not in data:
        frame = pl.read_csv(
            data,
            has_header=False,
            separator=chr(sep),
            quote_char=None,
            new_columns=["l"],
            schema={"l": pl.String},
            raise_if_empty=False,
            encoding="utf8-lossy",
        )
        lines = frame.to_series().fill_null("")
        if lines.len() == n:
            return lines
    return pl.Series("l", data.decode("utf-8", errors="replace").split("\n")[:n], dtype=pl.String)


def read_records(
    fmt: Any, lines: Any, result: ParseResult, *, cut_last: bool, fast: bool = True
) -> Found:
    """All records of ``fmt`` in ``lines``; skips and meta go to ``result``; see the Notes above.
    ``fast=False`` reads every candidate line with ``records_in`` (``engine="python"``)."""
    import polars as pl

    n = lines.len()
    result.n_lines = n
    usual = _usual_layout(fmt, lines) if fast and n else None
    done, fast_frame = _read_usual(fmt, lines, usual[0]) if usual else (None, None)
    if done is None:
        done = pl.repeat(False, n, eager=True)
    rest = (~done).arg_true()
    cand = done.clone().scatter(rest, lines.gather(rest).str.contains(fmt.CANDIDATE))
    left = (cand & ~done).arg_true().to_list()
    texts = lines.gather(left).to_list() if left else []
    pending = _leftovers(fmt, left, texts, n, result, cut_last)
    kept, fast_frame = _judge_cut(pending, fast_frame, usual, lines, result, cut_last)
    frames = [f for f in (fast_frame, _rows(kept)) if f is not None and f.height]
    if not frames:
        empty = {"line": pl.Series([], dtype=pl.Int64), "prefix": pl.Series([], dtype=pl.String)}
        frame = pl.DataFrame(empty)
    elif len(frames) == 1:
        frame = frames[0]
    else:
        frame = pl.concat(frames, how="diagonal_relaxed").sort(["line", "rec"])
    _meta(fmt, lines, cand, result)
    record_lines = int(frame["line"].n_unique()) if frame.height else 0
    row_lines = set(frame["line"].to_list()) if result.skip_lines else set()
    result.n_row_lines = record_lines
    result.n_other = max(0, n - record_lines - len(result.skip_lines - row_lines) - result.n_meta)
    return Found(frame=frame.drop("rec", strict=False))


def _usual_layout(fmt: Any, lines: Any) -> tuple[Any, tuple[str, ...]] | None:
    """(layout, its keys) of the most common single whole-line train record among the first
    candidate lines, or None where there is none the format's ``pattern`` reads."""
    seen: Counter[Any] = Counter()
    keys: dict[Any, tuple[str, ...]] = {}
    for part in (lines.head(50 * _SAMPLE), lines):
        sample = part.filter(part.str.contains(fmt.CANDIDATE)).head(_SAMPLE)
        if sample.len():
            break
    for text in sample.to_list():
        recs = fmt.records_in(text)
        if len(recs) == 1 and isinstance(recs[0], Rec) and recs[0].end == len(text):
            if recs[0].layout is not None:
                seen[recs[0].layout] += 1
                keys[recs[0].layout] = recs[0].keys
    if not seen:
        return None
    layout = seen.most_common(1)[0][0]
    return (layout, keys[layout]) if fmt.pattern(layout) is not None else None


def _read_usual(fmt: Any, lines: Any, layout: Any) -> tuple[Any, Any]:
    """(which lines were read, their rows): every line whose text from some offset to its end is
    one record of ``layout`` and whose text before it holds no record's signature. polars runs it
    as lazy queries over parts of the file, in parallel."""
    import polars as pl

    n = lines.len()
    parts = _parts(pl.LazyFrame({"text": lines}).with_row_index("line", offset=1), n)
    start = pl.col("text").str.find(fmt.pattern(layout) + "$").alias("start")
    found = pl.collect_all(
        [p.with_columns(start).filter(pl.col("start").is_not_null()) for p in parts]
    )
    cut, clear = _prefix_and_body(fmt, prefixed=any(f["start"].max() or 0 for f in found))
    stages, texts, stamps = fmt.split(layout)
    typed = _typed(fmt, texts)
    checked = [c for c, v in typed.items() if v is not None]  # numbers read (not words)
    if stamps is not None:
        typed["timestamp"] = stamps
    queries = []
    for f in found:
        q = f.lazy().with_columns(**cut).filter(clear)
        for name, stage in stages:
            q = q.with_columns(stage.alias(name))
        queries.append(
            q.select(
                pl.col("line").cast(pl.Int64),
                rec=pl.lit(0, dtype=pl.Int64),
                prefix=pl.col("prefix"),
                kind=pl.lit("train", dtype=pl.String),
                **{c: pl.lit(float("nan")) if v is None else v for c, v in typed.items()},
            )
        )
    frame = pl.concat(pl.collect_all(queries))
    floats = [c for c in checked if frame.schema[c] == pl.Float64]
    fine = [pl.col(c).is_finite() | pl.col(c).is_null() for c in floats]
    required = [
        pl.col(c).is_not_null() if c in checked else pl.lit(False) for c in ("step", "loss")
    ]
    frame = frame.filter(pl.all_horizontal(*fine, *required))  # else Python reads the line
    done = pl.repeat(False, n, eager=True).scatter(frame["line"] - 1, True)
    return done, frame


def _prefix_and_body(fmt: Any, *, prefixed: bool) -> tuple[dict[str, Any], Any]:
    """(the expressions cutting a found line at its record's ``start`` into ``prefix`` and
    ``body``, the filter keeping the lines whose prefix Python need not read); ``prefixed``: some
    record starts after its line's start (a prefix may hide another record)."""
    import polars as pl

    if not prefixed:
        return {"prefix": pl.lit("", dtype=pl.String), "body": pl.col("text")}, pl.lit(True)
    text = pl.col("text").cast(pl.Binary)  # str.find gives bytes; str.slice counts characters
    head = pl.col("start")
    cut = {
        "prefix": text.bin.slice(0, head).cast(pl.String),
        "body": text.bin.slice(head).cast(pl.String),
    }
    # the line's first candidate starts the record: a prefix holding another record's start, or
    # the record's own logging head (a line the usual layout reads without it), is Python's
    return cut, pl.col("text").str.find(fmt.CANDIDATE) == head


def _parts(frame: Any, n: int) -> list[Any]:
    """``frame`` (lazy, ``n`` rows) cut into one part per polars thread (one when it is small)."""
    import polars as pl

    k = max(1, min(pl.thread_pool_size(), n // 20_000))
    return [frame.slice(i * n // k, (i + 1) * n // k - i * n // k) for i in range(k)]


def _typed(fmt: Any, texts: list[tuple[str, int, Any]]) -> dict[str, Any]:
    """The columns of a layout's fields (key, form, value text) as :attr:`Field.kind` types them
    (polars expressions; None for a word standing for no number, read as NaN). The layout's regex
    holds every number to a form polars reads as Python does: an integer to 18 digits, so only a
    float can come out unread as Python reads it (infinite: ``1e400``, an integer past 2**1024)."""
    import polars as pl

    typed: dict[str, Any] = {}
    for key, form, text in texts:
        field = fmt.FIELDS[key]
        pieces = field.forms[form].split("{}")
        if len(pieces) == 1:
            typed[field.column] = None
            continue
        inner = text.str.strip_prefix(pieces[0]).str.strip_suffix(pieces[-1])
        numbers = [inner]
        if len(pieces) == 3:
            two = inner.str.split_exact(pieces[1], 1)
            numbers = [two.struct.field("field_0"), two.struct.field("field_1")]
        for column, number in zip((field.column, field.also), numbers):
            if field.kind == "int":
                typed[column] = number.cast(pl.Int64, strict=False)
            elif field.kind == "str":  # a JSON string without escapes, or null
                typed[column] = pl.when(number.str.starts_with('"')).then(
                    number.str.strip_chars('"')
                )
            else:
                digits = number.str.replace_all(",", "") if field.kind == "count" else number
                typed[column] = digits.cast(pl.Float64, strict=False)
    return typed


def _leftovers(
    fmt: Any, where: list[int], texts: list[str], n: int, result: ParseResult, cut_last: bool
) -> list[tuple[int, int, str, Rec]]:
    """Every record of the lines the fast path left, read by ``records_in``: (line, end of the
    record before it on its line, text, record); skips are counted in ``result``."""
    pending: list[tuple[int, int, str, Rec]] = []
    for i, text in zip(where, texts, strict=True):
        prev = 0
        for item in fmt.records_in(text):
            if isinstance(item, Skip):
                cut = cut_last and i == n - 1 and item.end in (-1, len(text))
                reason = (
                    TRUNCATED_EOF if cut and item.reason.startswith("truncated") else item.reason
                )
                result.skip(i + 1, reason, text)
                continue
            pending.append((i + 1, prev, text, item))
            prev = item.end
    return pending


def _judge_cut(
    pending: list[tuple[int, int, str, Rec]],
    fast_frame: Any,
    usual: Any,
    lines: Any,
    result: ParseResult,
    cut_last: bool,
) -> tuple[list[tuple[int, str, Rec]], Any]:
    """(the leftovers' records as (line, prefix, record), the fast path's rows), less the records
    cut short; see [Note: a cut record is never a value]."""
    n = lines.len()
    fast_keys = usual[1] if usual is not None and fast_frame is not None else ()
    full_of = _usual_keys(pending, fast_frame, fast_keys)
    kept: list[tuple[int, str, Rec]] = []
    for ln, prev, text, rec in pending:
        full = full_of.get(str(rec.values.get("kind")))
        if ln == n and cut_last and rec.end >= len(text.rstrip()):
            result.skip(ln, TRUNCATED_EOF, text)
        elif full and rec.keys and len(rec.keys) < len(full) and full[: len(rec.keys)] == rec.keys:
            result.skip(ln, _cut_after(rec.keys, full), text)
        else:
            kept.append((ln, text[prev : rec.start], rec))
    full = full_of.get("train")
    if fast_keys and full and len(fast_keys) < len(full) and full[: len(fast_keys)] == fast_keys:
        for ln in fast_frame["line"].to_list():
            result.skip(ln, _cut_after(fast_keys, full), lines[ln - 1])
        fast_frame = None
    if fast_frame is not None and cut_last and fast_frame.height and fast_frame["line"][-1] == n:
        result.skip(n, TRUNCATED_EOF, lines[n - 1])
        fast_frame = fast_frame.slice(0, fast_frame.height - 1)
    return kept, fast_frame


def _rows(kept: list[tuple[int, str, Rec]]) -> Any:
    """The leftovers' records as a polars frame (``rec`` orders the records of one line)."""
    import polars as pl

    rows = RowBuilder(also=("rec", "prefix"))
    for j, (ln, prefix, rec) in enumerate(kept):
        rows.add(line=ln, rec=j + 1, prefix=prefix, **rec.values)
    return pl.DataFrame(rows.columns(), strict=False, infer_schema_length=None) if kept else None


def _cut_after(keys: tuple[str, ...], full: tuple[str, ...]) -> str:
    return f"truncated: ends after '{keys[-1]}' (the file's lines go on to '{full[-1]}')"


def _usual_keys(
    pending: list[tuple[int, int, str, Rec]], fast_frame: Any, fast_keys: tuple[str, ...]
) -> dict[str, tuple[str, ...]]:
    """Per kind of record, the keys of the file's most common layout (a tie goes to the longest: a
    cut record is a shorter copy of a whole one)."""
    by_kind: dict[str, Counter[tuple[str, ...]]] = {}
    if fast_frame is not None and fast_frame.height and fast_keys:
        by_kind.setdefault("train", Counter())[fast_keys] += fast_frame.height
    for _, _, _, rec in pending:
        if rec.keys:
            by_kind.setdefault(str(rec.values.get("kind")), Counter())[rec.keys] += 1
    return {
        kind: max(counts, key=lambda k: (counts[k], len(k))) for kind, counts in by_kind.items()
    }


def _meta(fmt: Any, lines: Any, cand: Any, result: ParseResult) -> None:
    """Run facts from the lines that hold no record (the format's ``META_HINTS`` and ``meta``)."""
    hints = getattr(fmt, "META_HINTS", ())
    other = (~cand).arg_true()  # run facts are looked for only on lines without a record
    if not hints or other.len() == 0:
        return
    hit = other.gather(lines.gather(other).str.contains_any(list(hints)).arg_true()).to_list()
    for i, text in zip(hit, lines.gather(hit).to_list() if hit else [], strict=True):
        if fmt.meta(text, i + 1, result):
            result.n_meta += 1


def form_pattern(form: str, number: str) -> str:
    """The regex of a value written in ``form`` (:attr:`Field.forms`), each number ``number``."""
    return f"(?:{number})".join(re.escape(piece) for piece in form.split("{}"))
