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
    "words",
]

FLOAT, INT, FLOAT_JSON, INT_JSON = 0, 1, 2, 3
"""Value classes of :func:`read_spans`."""






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
    has_cr: bool
    """Whether any carriage return occurs in the data (lines with one are left to the per-line reader)."""

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
    return Lines(buf=buf, starts=starts, ends=ends, words=words, has_cr=b"\r" in data)


def delimiters(lines: Lines, byte: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions of ``byte`` in the buffer, count per line, index of each line's first one)."""
    pos = np.flatnonzero(lines.buf == byte)
    first = np.searchsorted(pos, lines.starts)
    last = np.searchsorted(pos, lines.ends)
    return pos, last - first, first


_PAD = 64
"""Zero bytes after the data, so a window of up to 48 bytes at any offset stays in the buffer."""

_H = np.uint64(0x8080808080808080)
_L = np.uint64(0x0101010101010101)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_SPACES = np.uint64(0x2020202020202020)
_KEEP = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
"""_KEEP[c]: the low c bytes of a word."""


def words(lines: Lines, at: np.ndarray, k: int) -> np.ndarray:
    """(n, k) little-endian uint64 words covering the 8k bytes from each offset (zero past the end)."""
    if 8 * k > _PAD - 16:
        raise ValueError(f"words: {8 * k} bytes > {_PAD - 16}")
    at = np.clip(at, 0, lines.buf.size)
    out = np.empty((at.size, k), dtype=np.uint64)
    for j in range(k):
        out[:, j] = lines.words[at + 8 * j]
    return out


def window(lines: Lines, at: np.ndarray, width: int) -> np.ndarray:
    """(n, width) bytes starting at each offset (``width`` a multiple of 8, at most 48; zero past the end)."""
    return words(lines, at, width // 8).view(np.uint8).reshape(at.size, width)


def match_bytes(lines: Lines, at: np.ndarray, expected: bytes) -> np.ndarray:
    """True where the bytes at ``at`` equal ``expected``."""
    ok = (at >= 0) & (at + len(expected) <= lines.buf.size)
    at = np.clip(at, 0, lines.buf.size)
    for k in range(0, len(expected), 8):
        chunk = expected[k : k + 8]
        ok &= (lines.words[at + k] & _KEEP[len(chunk)]) == np.uint64(int.from_bytes(chunk, "little"))
    return ok


# [Note: SWAR byte classes]
# A uint64 holds 8 bytes; these return a word whose byte i has its high bit set when byte i is
# in the class. Exact for every byte value: the 7-bit parts never carry across bytes, and bytes
# with the high bit set (non-ASCII) are in no class.


def _nonzero(t: np.ndarray) -> np.ndarray:
    return (((t & _LOW7) + _LOW7) | t) & _H


def _eq(w: np.ndarray, byte: int) -> np.ndarray:
    return ~_nonzero(w ^ (_L * np.uint64(byte))) & _H


def _digit(w: np.ndarray) -> np.ndarray:
    x = w & _LOW7
    ge = ((x | _H) - _L * np.uint64(0x30)) & _H
    le = ((_L * np.uint64(0x39) | _H) - x) & _H
    return ge & le & ~(w & _H)


def _lowest_byte(flags: np.ndarray) -> np.ndarray:
    """Index (0-7) of the lowest byte whose flag is set, per word; 8 where none is."""
    low = flags & (~flags + np.uint64(1))  # the lowest set bit alone
    bit = np.log2(np.where(low == 0, np.uint64(1), low).astype(np.float64)).astype(np.int64)  # exact for powers of 2
    return np.where(flags == 0, 8, bit // 8)


def first_byte(lines: Lines, starts: np.ndarray, ends: np.ndarray, byte: int, width: int = 32) -> np.ndarray:
    """Offset of the first ``byte`` in each span (within ``width`` bytes), or -1."""
    k = width // 8
    w = words(lines, starts, k)
    lens = ends - starts
    pos = np.full(starts.size, -1, dtype=np.int64)
    for j in range(k - 1, -1, -1):  # the lowest word with a hit wins
        inside = _KEEP[np.clip(lens - 8 * j, 0, 8)]
        idx = _lowest_byte(_eq(w[:, j], byte) & inside)
        pos = np.where(idx < 8, starts + 8 * j + idx, pos)
    return pos


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


def _shift_up(flags: np.ndarray) -> np.ndarray:
    """Each byte's flag moved to the next byte (the byte after it), across the words of a field."""
    out = flags << np.uint64(8)
    out[:, 1:] |= flags[:, :-1] >> np.uint64(56)
    return out


def _shift_down(flags: np.ndarray) -> np.ndarray:
    """Each byte's flag moved to the previous byte."""
    out = flags >> np.uint64(8)
    out[:, :-1] |= flags[:, 1:] << np.uint64(56)
    return out


def _byte_at(w0: np.ndarray, i: np.ndarray) -> np.ndarray:
    return (w0 >> (np.uint64(8) * i.astype(np.uint64))) & np.uint64(0xFF)


def _check_field(w: np.ndarray, lens: np.ndarray, cls: int, nullable: bool) -> tuple[np.ndarray, np.ndarray]:
    """(valid rows, words padded with spaces) for one field's (n, k) words. See [Note: SWAR byte classes]."""
    n, k = w.shape
    counts = np.clip(lens[:, None] - 8 * np.arange(k)[None, :], 0, 8)
    keep = _KEEP[counts]
    digit = _digit(w)
    allowed = digit | _eq(w, ord("-"))
    if cls != INT_JSON:
        allowed |= _eq(w, ord("+"))
    if cls in (FLOAT, FLOAT_JSON):
        allowed |= _eq(w, ord(".")) | _eq(w, ord("e")) | _eq(w, ord("E"))
    valid = (((allowed | ~keep) & _H) == _H).all(axis=1) & (lens >= 1)
    if cls in (FLOAT_JSON, INT_JSON):
        inside = keep & _H
        e_flags = (_eq(w, ord("e")) | _eq(w, ord("E"))) & inside
        digits = digit & inside
        bad = _eq(w, ord("+")) & inside & ~_shift_up(e_flags)
        bad |= _eq(w, ord(".")) & inside & ~(_shift_up(digits) & _shift_down(digits))
        w0 = w[:, 0]
        lead = (_byte_at(w0, np.zeros(n, np.int64)) == ord("-")).astype(np.int64)
        first = _byte_at(w0, lead)
        second = _byte_at(w0, lead + 1)
        first_digit = (first >= 48) & (first <= 57)
        leading_zero = (first == ord("0")) & (lead + 1 < lens) & (second >= 48) & (second <= 57)
        valid &= ~bad.any(axis=1) & first_digit & ~leading_zero
    if nullable:
        is_null = (lens == 4) & ((w[:, 0] & _KEEP[4]) == np.uint64(int.from_bytes(b"null", "little")))
        valid |= is_null
        keep[is_null] = 0  # a null becomes an empty field, read as NaN
    return valid, (w & keep) | (_SPACES & ~keep)


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
    ok = ((lens >= 0) & (lens <= 32)).all(axis=1)
    padded: list[np.ndarray] = []
    for j in range(f):
        k = max(1, -(-int(lens[:, j][ok].max(initial=1)) // 8))
        valid, w = _check_field(words(lines, starts[:, j], k), lens[:, j], classes[j], names[j] in nullable)
        ok &= valid
        padded.append(w)
    rows = np.flatnonzero(ok)
    if rows.size == 0:
        return {name: np.zeros(0) for name in names}, rows
    width = sum(8 * w.shape[1] + 1 for w in padded)
    dense = np.empty((rows.size, width), dtype=np.uint8)
    col = 0
    for j, w in enumerate(padded):
        b = w[rows].view(np.uint8).reshape(rows.size, -1)
        dense[:, col : col + b.shape[1]] = b
        col += b.shape[1]
        dense[:, col] = ord(",") if j + 1 < f else ord("\n")
        col += 1
    null_cols = [name for name in names if name in nullable]
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
    n_placeholder: int = 0
    """Rows whose logged loss was a placeholder stored as NaN (torchtitan's -1 on non-last PP stages)."""

    def __len__(self) -> int:
        return int(self.line_index.size)
