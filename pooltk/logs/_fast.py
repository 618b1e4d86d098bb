"""Vectorised reading of canonical step lines: numpy finds the fields, pandas' C parser converts them.

The per-line readers are the definition of every format; this module only reads, faster, the
lines whose layout is *exactly* the canonical one of the file (same delimiters, same field
labels), and hands every other line to the per-line reader.

How: numpy locates each line's delimiters and checks every label byte; the value bytes of the
accepted lines are gathered into a compact CSV (values only) that ``pandas.read_csv`` converts
in C; timestamps are decoded from their fixed-width digits.

[Note: fast path equals slow path]
For every line the fast path accepts, each value equals what the per-line reader gives:

- a value is accepted only if its bytes are in the column's class: ``[0-9.eE+-]`` for floats,
  ``[0-9+-]`` for integers (JSON: no ``+``, no leading zeros, digits on both sides of ``.``, as
  ``json.loads`` requires). On these strings pandas' C parser accepts and rejects exactly what
  ``float()`` does and rounds identically (checked on 1.2M random tokens); anything else
  (``nan``, ``N/A``, ``1_000``, ``5.0`` as an integer) goes to the per-line reader;
- a timestamp is accepted only in its exact fixed-width form with a valid calendar date;
- a line whose delimiter count or any label byte differs goes to the per-line reader;
- if pandas refuses the compact CSV at all (a malformed number such as ``1.2.3``, an integer
  beyond int64), the whole file is left to the per-line reader.

tests/logs/test_fast_path.py checks the equality on generated and damaged logs.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "FLOAT",
    "FLOAT_JSON",
    "INT",
    "INT_JSON",
    "FastRows",
    "Lines",
    "delimiters",
    "first_byte",
    "match_bytes",
    "parse_timestamps",
    "read_spans",
    "split_lines",
    "window",
]

FLOAT, INT, FLOAT_JSON, INT_JSON = 0, 1, 2, 3
"""Value classes of :func:`read_spans`."""



def _class_table() -> np.ndarray:
    table = np.zeros((4, 256), dtype=bool)
    digits = [ord(c) for c in "0123456789"]
    for cls, extra in ((FLOAT, ".eE+-"), (INT, "+-"), (FLOAT_JSON, ".eE+-"), (INT_JSON, "-")):
        table[cls, digits] = True
        table[cls, [ord(c) for c in extra]] = True
    return table


_ALLOWED = _class_table()


@dataclass(kw_only=True, slots=True)
class Lines:
    """Line boundaries of a byte buffer (``\\n`` separated; a last line without newline counts)."""

    buf: np.ndarray
    """The bytes as uint8."""
    starts: np.ndarray
    """Offset of each line's first byte."""
    ends: np.ndarray
    """Offset one past each line's last byte (the newline excluded)."""
    words: np.ndarray
    """Overlapping little-endian uint64 view: ``words[i]`` holds bytes i..i+7 (zero past the end)."""

    def __len__(self) -> int:
        return int(self.starts.size)


def split_lines(data: bytes) -> Lines:
    """Line boundaries of ``data``, numbered as the per-line readers number them."""
    padded = np.zeros(len(data) + _PAD, dtype=np.uint8)
    padded[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    buf = padded[: len(data)]
    words = np.ndarray(shape=(len(data) + _PAD - 8,), dtype="<u8", buffer=padded, offset=0, strides=(1,))
    nl = np.flatnonzero(buf == 10)
    starts = np.empty(nl.size + 1, dtype=np.int64)
    starts[0] = 0
    starts[1:] = nl + 1
    ends = np.empty(nl.size + 1, dtype=np.int64)
    ends[:-1] = nl
    ends[-1] = buf.size
    if buf.size and buf[-1] == 10:  # text ending in a newline has no extra empty last line
        starts, ends = starts[:-1], ends[:-1]
    return Lines(buf=buf, starts=starts, ends=ends, words=words)


def delimiters(lines: Lines, byte: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions of ``byte`` in the buffer, count per line, index of each line's first one)."""
    pos = np.flatnonzero(lines.buf == byte)
    first = np.searchsorted(pos, lines.starts)
    last = np.searchsorted(pos, lines.ends)
    return pos, last - first, first


_PAD = 64
"""Zero bytes after the data, so a window of up to 48 bytes at any offset stays in the buffer."""


def window(lines: Lines, at: np.ndarray, width: int) -> np.ndarray:
    """(n, width) bytes starting at each offset (``width`` a multiple of 8, at most 48; zero past the end)."""
    if width > _PAD - 16:
        raise ValueError(f"window: width {width} > {_PAD - 16}")
    at = np.clip(at, 0, lines.buf.size)
    cols = [lines.words[at + 8 * k] for k in range(width // 8)]
    return np.ascontiguousarray(np.stack(cols, axis=1)).view(np.uint8).reshape(at.size, width)


def match_bytes(lines: Lines, at: np.ndarray, expected: bytes) -> np.ndarray:
    """True where the bytes at ``at`` equal ``expected``."""
    ok = (at >= 0) & (at + len(expected) <= lines.buf.size)
    at = np.clip(at, 0, lines.buf.size)
    for k in range(0, len(expected), 8):
        chunk = expected[k : k + 8]
        mask = np.uint64((1 << (8 * len(chunk))) - 1)
        ok &= (lines.words[at + k] & mask) == np.uint64(int.from_bytes(chunk, "little"))
    return ok


def first_byte(lines: Lines, starts: np.ndarray, ends: np.ndarray, byte: int, width: int = 32) -> np.ndarray:
    """Offset of the first ``byte`` in each span (within ``width`` bytes), or -1."""
    if starts.size == 0:
        return np.zeros(0, dtype=np.int64)
    b = window(lines, starts, width)
    hit = (b == byte) & (np.arange(width)[None, :] < (ends - starts)[:, None])
    return np.where(hit.any(axis=1), starts + hit.argmax(axis=1), -1)


_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def parse_timestamps(lines: Lines, starts: np.ndarray, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """Fixed-width timestamps at ``starts``; ``pattern`` uses Y M D h m s f for digits, other chars literal.

    E.g. ``YYYY-MM-DD hh:mm:ss`` or ``"YYYY-MM-DDThh:mm:ss.fffZ"``. Returns (datetime64[ns], ok).
    """
    width = -(-len(pattern) // 8) * 8
    b = window(lines, starts, width)
    ok = (starts >= 0) & (starts + len(pattern) <= lines.buf.size)
    parts: dict[str, np.ndarray] = {}
    for i, ch in enumerate(pattern):
        col = b[:, i]
        if ch in "YMDhmsf":
            d = col.astype(np.int64) - 48
            ok &= (d >= 0) & (d <= 9)
            parts[ch] = parts.get(ch, np.zeros(starts.size, dtype=np.int64)) * 10 + d
        else:
            ok &= col == ord(ch)
    y, mo, d = parts["Y"], parts["M"], parts["D"]
    hh, mi, ss = parts["h"], parts["m"], parts["s"]
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    dim = _DAYS_IN_MONTH[np.clip(mo, 0, 12)] + ((mo == 2) & leap)
    ok &= (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= dim) & (hh <= 23) & (mi <= 59) & (ss <= 59) & (y >= 1678) & (y <= 2261)
    yy = y - (mo <= 2)  # days from civil (proleptic Gregorian)
    era = np.floor_divide(yy, 400)
    yoe = yy - era * 400
    doy = (153 * (mo + np.where(mo > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    days = era * 146097 + doe - 719468
    ns = (days * 86400 + hh * 3600 + mi * 60 + ss) * 1_000_000_000
    if "f" in parts:
        ns = ns + parts["f"] * 10 ** (9 - pattern.count("f"))
    ns = np.where(ok, ns, np.iinfo(np.int64).min)  # NaT where not ok
    return ns.astype(np.int64).view("datetime64[ns]"), ok


def _json_ok(b: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Rows whose field bytes (n, width) follow JSON number syntax where pandas would be laxer."""
    n, width = b.shape
    col = np.arange(width)[None, :]
    inside = col < lens[:, None]
    digit = (b >= 48) & (b <= 57) & inside
    prev = np.zeros_like(b)
    prev[:, 1:] = b[:, :-1]
    nxt = np.zeros_like(b)
    nxt[:, :-1] = b[:, 1:]
    ndig = np.zeros_like(digit)
    ndig[:, :-1] = digit[:, 1:]
    pdig = np.zeros_like(digit)
    pdig[:, 1:] = digit[:, :-1]
    bad = (b == ord("+")) & inside & ~((prev == ord("e")) | (prev == ord("E")))
    bad |= (b == ord(".")) & inside & ~(pdig & ndig)
    lead = (b[:, 0] == ord("-")).astype(np.int64)
    first = b[np.arange(n), lead]
    second = b[np.arange(n), np.minimum(lead + 1, width - 1)]
    leading_zero = (first == ord("0")) & (lead + 1 < lens) & (second >= 48) & (second <= 57)
    not_digit_first = ~((first >= 48) & (first <= 57))
    return ~bad.any(axis=1) & ~leading_zero & ~not_digit_first


def read_spans(
    lines: Lines,
    starts: np.ndarray,
    ends: np.ndarray,
    classes: list[int],
    names: list[str],
    *,
    nullable: tuple[str, ...] = (),
) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """Convert value spans (``starts``/``ends``: rows x fields) to typed columns.

    Returns (columns for the accepted rows, indices of the accepted rows), or None when pandas
    refuses the values (the caller then leaves the file to the per-line reader). A field of a
    ``nullable`` column that is exactly ``null`` reads as NaN. See [Note: fast path equals slow path].
    """
    import pandas as pd

    n, f = starts.shape
    lens = ends - starts
    ok = ((lens >= 1) & (lens <= 32)).all(axis=1)
    pieces: list[np.ndarray] = []
    null_cols: list[str] = []
    for j in range(f):
        width = 8 * max(1, -(-int(lens[:, j][ok].max(initial=1)) // 8))
        b = window(lines, starts[:, j], width)
        inside = np.arange(width)[None, :] < lens[:, j][:, None]
        valid = (_ALLOWED[classes[j]][b] | ~inside).all(axis=1)
        if names[j] in nullable:
            is_null = (lens[:, j] == 4) & (b[:, :4] == np.frombuffer(b"null", dtype=np.uint8)).all(axis=1)
            inside &= ~is_null[:, None]
            valid |= is_null
            null_cols.append(names[j])
        if classes[j] in (FLOAT_JSON, INT_JSON):
            valid &= _json_ok(b, lens[:, j]) | (valid & ~inside.any(axis=1))
        ok &= valid
        b[~inside] = 32  # pad with spaces (pandas reads ' 9.5  ' as 9.5; a null becomes an empty field)
        pieces.append(b)
        sep = np.full((n, 1), ord(","), dtype=np.uint8)
        if j == f - 1:
            sep[:] = 10
        pieces.append(sep)
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return {name: np.zeros(0) for name in names}, rows
    dense = np.concatenate(pieces, axis=1)[rows]
    dtypes = {name: ("int64" if c in (INT, INT_JSON) else "float64") for name, c in zip(names, classes, strict=True)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # pandas warns on the way to refusing an int64 overflow
        try:
            frame = pd.read_csv(
                io.BytesIO(dense.tobytes()), header=None, names=names, dtype=dtypes, engine="c", skipinitialspace=True,
                na_filter=bool(null_cols), keep_default_na=False,
                na_values=dict.fromkeys(null_cols, [""]) if null_cols else None,
            )
        except (ValueError, OverflowError):
            return None
    if len(frame) != rows.size:  # pragma: no cover - one CSV row per accepted line by construction
        return None
    return {name: frame[name].to_numpy() for name in names}, rows


@dataclass(kw_only=True, slots=True)
class FastRows:
    """Rows read by the fast path: column arrays and the 0-based index of the line each came from."""

    line_index: np.ndarray
    """0-based line index of each row."""
    columns: dict[str, Any] = field(default_factory=dict)
    """Column name -> numpy array."""
    keys: tuple[str, ...] = ()
    """The field names of the canonical layout, in order (for the truncated-line check)."""
    kind: str = "train"
    """'train' or 'val' for every fast row."""

    def __len__(self) -> int:
        return int(self.line_index.size)
