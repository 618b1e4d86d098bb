"""Find every record of a format wherever it stands in a line, and read it: one driver for every
format.

[Note: a record, not a line]
A format (:mod:`pooltk.logs.automodel_text`, ...) defines its record by a signature regex
(``CANDIDATE``, the same text in Python's ``re`` and polars' Rust engine) and a Python reader
(``parse_line``) that returns every record on a line with its span. The driver:

1. finds each line's first candidate with polars (``str.find``); lines without one are not
   records (run facts are read from them by the format's ``META_HINTS`` / ``meta``);
2. reads, in polars, the lines whose text from that point on is exactly one record of the
   file's usual layout (``fast``: an anchored regex proves the layout, then fields are split and
   cast by the engine; every value is in a class both engines convert identically);
3. reads every other candidate line with ``parse_line`` (the definition): several records on a
   line, a record after another rank's text, odd layouts, damaged values;
4. keeps what stands before each record as its prefix (decoration columns,
   :mod:`pooltk.logs.decoration`).

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

from collections import Counter
from dataclasses import dataclass
from typing import Any

from pooltk.logs._common import ParseResult

__all__ = ["Rec", "Skip", "TRUNCATED_EOF", "read_records", "to_lines"]

TRUNCATED_EOF = "truncated: the file ends inside this record (no newline after it)"


@dataclass(kw_only=True, slots=True)
class Rec:
    """One record found by a format's ``parse_line``."""

    start: int
    """Offset of the record in its line."""
    end: int
    """Offset just past it."""
    values: dict[str, Any]
    """Values by column (``kind`` and ``step`` at least)."""
    keys: tuple[str, ...] = ()
    """Field names in the order written (for cut-record detection)."""


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


def _slice(strings: Any, start: Any, length: Any = None) -> Any:
    """``strings`` cut at byte offsets (polars' ``str.find`` gives bytes; ``str.slice`` counts
    characters)."""
    import polars as pl

    return strings.cast(pl.Binary).bin.slice(start, length).cast(pl.String)


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


def read_records(fmt: Any, lines: Any, result: ParseResult, *, cut_last: bool) -> Found:
    """All records of ``fmt`` in ``lines``; skips and meta go to ``result``; see the Notes above."""
    import polars as pl

    n = lines.len()
    result.n_lines = n
    off = lines.str.find(fmt.CANDIDATE)
    cand = off.is_not_null()
    cand_idx = cand.arg_true()
    fast_frame = None
    fast_ok = pl.repeat(False, cand_idx.len(), dtype=pl.Boolean, eager=True)
    fast_keys: tuple[str, ...] = ()
    at_start = (
        cand_idx.len() > 0 and off.max() == 0
    )  # every record starts its line (an undecorated file)

    def take(
        values: Any, idx: Any, of: int
    ) -> Any:  # a gather that copies nothing when it takes every row
        return values if idx.len() == of else values.gather(idx)

    if cand_idx.len():
        body = (
            take(lines, cand_idx, n)
            if at_start
            else _slice(take(lines, cand_idx, n), take(off, cand_idx, n))
        )
        got = fmt.fast(body)
        if got is not None:
            fast_cols, fast_ok, fast_keys = got
            sel = fast_ok.arg_true()
            fidx = take(cand_idx, sel, cand_idx.len())
            fast_frame = pl.DataFrame(
                {
                    "line": (fidx + 1).cast(pl.Int64),
                    "rec": pl.repeat(0, sel.len(), dtype=pl.Int64, eager=True),
                    "prefix": (
                        pl.repeat("", sel.len(), dtype=pl.String, eager=True)
                        if at_start
                        else _slice(take(lines, fidx, n), 0, take(off, fidx, n))
                    ),
                    **{k: take(v, sel, cand_idx.len()) for k, v in fast_cols.items()},
                }
            )
    rest = cand_idx.filter(~fast_ok).to_list()
    pending: list[tuple[int, int, str, Rec]] = []
    rest_text = lines.gather(rest).to_list() if rest else []
    for i, text in zip(rest, rest_text, strict=True):
        prev = 0
        for item in fmt.parse_line(text):
            if isinstance(item, Skip):
                cut = cut_last and i == n - 1 and item.end in (-1, len(text))
                result.skip(
                    i + 1,
                    TRUNCATED_EOF if cut and item.reason.startswith("truncated") else item.reason,
                    text,
                )
                continue
            pending.append((i + 1, prev, text, item))
            prev = item.end
    # cut records: the layout is a strict prefix of the usual one, or the file ends inside the
    # record
    usual = _usual_layouts(pending, fast_frame, fast_keys)
    kept: list[tuple[int, str, Rec]] = []
    for ln, prev, text, rec in pending:
        full = usual.get(str(rec.values.get("kind")))
        if ln == n and cut_last and rec.end >= len(text.rstrip()):
            result.skip(ln, TRUNCATED_EOF, text)
            continue
        if full and rec.keys and len(rec.keys) < len(full) and full[: len(rec.keys)] == rec.keys:
            result.skip(
                ln,
                f"truncated: ends after '{rec.keys[-1]}' (the file's lines go on to '{full[-1]}')",
                text,
            )
            continue
        kept.append((ln, text[prev : rec.start], rec))
    full = usual.get("train")
    if (
        fast_frame is not None
        and fast_keys
        and full
        and len(fast_keys) < len(full)
        and full[: len(fast_keys)] == fast_keys
    ):
        reason = f"truncated: ends after '{fast_keys[-1]}' (the file's lines go on to '{full[-1]}')"
        for ln in fast_frame["line"].to_list():
            result.skip(ln, reason, lines[ln - 1])
        fast_frame = None
    if (
        fast_frame is not None
        and cut_last
        and fast_frame.height
        and int(fast_frame["line"][-1]) == n
    ):
        result.skip(n, TRUNCATED_EOF, lines[n - 1])
        fast_frame = fast_frame.slice(0, fast_frame.height - 1)
    slow_frame = None
    if kept:
        cols: dict[str, list[Any]] = {"line": [], "rec": [], "prefix": []}
        for j, (ln, prefix, rec) in enumerate(kept):
            row = {"line": ln, "rec": j + 1, "prefix": prefix, **rec.values}
            for key in row:
                if key not in cols:
                    cols[key] = [None] * j
            for key, col in cols.items():
                col.append(row.get(key))
        slow_frame = pl.DataFrame(cols, strict=False, infer_schema_length=None)
    frames = [f for f in (fast_frame, slow_frame) if f is not None and f.height]
    if not frames:
        frame = pl.DataFrame(
            {"line": pl.Series([], dtype=pl.Int64), "prefix": pl.Series([], dtype=pl.String)}
        )
    elif len(frames) == 1:
        frame = frames[0]
    else:
        frame = pl.concat(frames, how="diagonal_relaxed").sort(["line", "rec"])
    record_lines = int(frame["line"].n_unique()) if frame.height else 0
    _meta(fmt, lines, cand, result)
    row_lines = set(frame["line"].to_list()) if result.skip_lines else set()
    result.n_row_lines = record_lines
    result.n_other = max(0, n - record_lines - len(result.skip_lines - row_lines) - result.n_meta)
    return Found(frame=frame.drop("rec", strict=False))


def _usual_layouts(
    pending: list[tuple[int, int, str, Rec]], fast_frame: Any, fast_keys: tuple[str, ...]
) -> dict[str, tuple[str, ...]]:
    by_kind: dict[str, Counter[tuple[str, ...]]] = {}
    if fast_frame is not None and fast_frame.height and fast_keys:
        by_kind.setdefault("train", Counter())[fast_keys] += fast_frame.height
    for _, _, _, rec in pending:
        if rec.keys:
            by_kind.setdefault(str(rec.values.get("kind")), Counter())[rec.keys] += 1
    # the most common layout; a tie goes to the longest (a cut record is a shorter copy of a whole
    # one)
    return {
        kind: max(counts, key=lambda k: (counts[k], len(k))) for kind, counts in by_kind.items()
    }


def _meta(fmt: Any, lines: Any, cand: Any, result: ParseResult) -> None:
    hints = getattr(fmt, "META_HINTS", ())
    if not hints:
        return
    other = (~cand).arg_true()  # run facts are looked for only on lines without a record
    if other.len() == 0:
        return
    hit = other.gather(lines.gather(other).str.contains_any(list(hints)).arg_true()).to_list()
    if not hit:
        return
    for i, text in zip(hit, lines.gather(hit).to_list(), strict=True):
        if fmt.meta(text, i + 1, result):
            result.n_meta += 1
