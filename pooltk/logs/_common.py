"""What every reader shares: number parsing and the per-file parse result.

[Note: what happens to a line]
Each line of a file ends up in exactly one bucket, and the buckets are counted:

- a *row* line: it holds one or more step (or validation) records read completely;
- *skipped*: a record of the file's format (its signature is there) that cannot be read
  completely -- truncated by a crash, garbled by two ranks writing at once, a number that is
  not a number. Counted by reason; the first few kept with line number;
- *meta*: a line the reader takes run facts from (batch sizes, device capacity, peak FLOP/s);
- *other*: anything else (warnings, config dumps, tracebacks). Not an error: logs are noisy.

A file that yields no row at all is an error (:class:`LogFormatError`), never an empty table.
"""

from __future__ import annotations

import bisect

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pooltk.logs.schema import RowBuilder

__all__ = [
    "ANSI_RE",
    "MAX_KEPT_SKIPS",
    "ParseResult",
    "SkippedLine",
    "clean_line",
    "parse_float",
    "parse_int",
    "read_facts",
]

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
"""CSI escape sequences (colours such as ESC[31m, ESC[38;2;R;G;Bm, ESC[39m)."""

_RANK_PREFIX_RE = re.compile(r"^(?:\[(?:rank|default)?\d+\]:)+")
"""torchrun ``--tee`` prefixes, possibly repeated (``[rank0]:[rank0]:``)."""

MAX_KEPT_SKIPS = 20
"""How many skipped lines a parse result keeps verbatim (all are counted)."""


def clean_line(raw: str) -> str:
    """``raw`` without colour escapes, carriage returns and torchrun rank prefixes."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line:
        line = ANSI_RE.sub("", line)
    if "\r" in line:  # progress bars redraw with CR: the last redraw is what was shown
        line = line.rsplit("\r", 1)[-1]
    return _RANK_PREFIX_RE.sub("", line, count=1)


def parse_float(text: str) -> float:
    """A float from a log token: thousands commas allowed, ``N/A`` is NaN; raises ValueError.

    ``nan``/``inf`` parse (a diverged run logs them and they are data, counted as non-finite).
    """
    t = text.strip()
    if "," in t:
        t = t.replace(",", "")
    if t in ("N/A", "None", "null", ""):
        if t == "":
            raise ValueError("empty number")
        return math.nan
    return float(t)


_INT64 = (-(2**63), 2**63 - 1)


def parse_int(text: str) -> int:
    """An int64 from a log token (thousands commas allowed); raises ValueError."""
    value = int(text.strip().replace(",", ""))
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueError(f"{value} is outside int64")
    return value


def read_facts(table: Any, text: str, n: int, result: ParseResult) -> bool:
    """Run facts from line ``n`` by a table of (regex, (fact, type) per group); True when one was
    found."""
    found = False
    for regex, facts in table:
        m = regex.search(text)
        if m is not None:
            found = True
            for (key, cast), value in zip(facts, m.groups(), strict=True):
                result.set_meta(key, cast(value), n)
    return found


@dataclass(kw_only=True, slots=True, frozen=True)
class SkippedLine:
    """A line that looked like a step line but could not be parsed."""

    line: int
    """1-based line number in the file."""
    reason: str
    """Why it was skipped (short, stable wording; counted by this key)."""
    text: str
    """The line (shortened for display)."""


@dataclass(kw_only=True, slots=True)
class ParseResult:
    """What one reader made of one file, before it becomes a table."""

    rows: RowBuilder = field(default_factory=RowBuilder)
    """The parsed rows, column-wise."""
    timestamp_format: str | None = None
    """strftime pattern of the raw timestamp strings in ``rows``."""
    mem_basis: str | None = None
    """Which allocator peak ``mem_gib`` is ('max_allocated', 'max_reserved')."""
    n_lines: int = 0
    """Lines in the file."""
    n_meta: int = 0
    """Lines a run fact was taken from."""
    n_other: int = 0
    """Lines that are none of row, skipped or meta."""
    skipped: Counter[str] = field(default_factory=Counter)
    """Skipped lines counted by reason."""
    skipped_examples: list[SkippedLine] = field(default_factory=list)
    """The first :data:`MAX_KEPT_SKIPS` skipped lines."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Run facts found in the file (``global_batch_size``, ``peak_flops`` ...)."""
    meta_lines: dict[str, int] = field(default_factory=dict)
    """Line each run fact came from (0: the file as a whole)."""
    n_placeholder_loss: int = 0
    """Rows whose logged loss was a placeholder stored as NaN (torchtitan's -1 on non-last PP
    stages)."""
    notes: list[str] = field(default_factory=list)
    """Things a reader of the table must know (e.g. 'loss -1 on a non-last PP stage stored as
    NaN')."""

    skip_lines: set[int] = field(default_factory=set)
    """Lines holding a skipped record."""
    n_row_lines: int | None = None
    """Lines holding at least one row (None: one per row, for readers with one record per line)."""

    def skip(self, line: int, reason: str, text: str) -> None:
        """Count a skipped record, and keep it if it is among the first MAX_KEPT_SKIPS by line
        (whatever order a reading engine meets them in)."""
        self.skipped[reason] += 1
        self.skip_lines.add(line)
        kept = self.skipped_examples
        if len(kept) < MAX_KEPT_SKIPS or line < kept[-1].line:
            shown = text if len(text) <= 200 else text[:200] + "..."
            bisect.insort(kept, SkippedLine(line=line, reason=reason, text=shown), key=_line)
            del kept[MAX_KEPT_SKIPS:]

    def set_meta(self, key: str, value: Any, line: int) -> None:
        """Record a run fact; the first occurrence wins (later lines repeat per rank)."""
        if key not in self.meta:
            self.meta[key] = value
            self.meta_lines[key] = line

    @property
    def n_skipped(self) -> int:
        """Total skipped lines."""
        return sum(self.skipped.values())


def _line(skipped: SkippedLine) -> int:
    return skipped.line
