"""Launcher and collector decoration before a framework's log record: found, kept as columns, removed.

[Note: line decoration]
Between a training script's ``logging`` record and the file a user reads, launchers and log
collectors put prefixes on every line. Read from the tools' documented output:

- Slurm ``srun --label``: the task id, right-aligned, then ``": "`` (``  3: ``);
- ``kubectl logs --timestamps``: an RFC 3339 time with up to nine fractional digits and a
  space (``2026-05-20T02:22:58.123456789Z ``); the node's CRI files add ``stdout F `` after it;
- ``docker compose logs``: the service and replica, padding, ``"| "`` (``trainer-1  | ``);
- torchrun ``--tee``/``--role``: ``[default3]:`` or ``[rank3]:``, sometimes doubled;
- indentation (a log pasted into a document), ANSI colour, CRLF.

They stack (``12: [rank3]:``) and never change the record after them. A file up to 4 MiB is
searched whole for a decoration; a larger one is taken as decorated when 1 MiB at its head,
middle or tail is (a launcher decorates every line it writes); lines of an undecorated file are
never touched. :func:`strip` removes
them from every line *in place of the bytes* (line numbers stay the file's) and returns, per
line, the rank and task they named: ``rank`` from torchrun's prefix, ``task`` from srun's label
or compose's replica number. A prefix the record itself starts with (a date with a space, not a
``T``; ``[titan]``; ``INFO:root:``; ``{``) never matches, so an undecorated file is unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DECORATION_RE", "Decoration", "strip"]

_PARTS = (
    rb"[ \t]+",  # indentation, srun's right-alignment
    rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? (?:(?:stdout|stderr) [FP] )?",  # kubectl / CRI
    rb"(?P<task>\d{1,7}): ",  # srun --label
    rb"[A-Za-z0-9][A-Za-z0-9_.-]*?[-_](?P<replica>\d{1,5}) *\| ",  # docker compose service-N  |
    rb"\[(?:rank|default)(?P<rank>\d{1,7})\]:",  # torchrun --tee
)
DECORATION_RE = re.compile(rb"^(?:" + rb"|".join(_PARTS) + rb")+", re.MULTILINE)
"""One or more stacked decorations at the start of a line (bytes, multiline)."""

_ANY_RE = re.compile(rb"^(?:" + rb"|".join(re.sub(rb"\?P<\w+>", b"", p) for p in _PARTS) + rb")+", re.MULTILINE)
"""The same without groups (a cheap search for whether a file is decorated at all)."""

_PER_LINE_RE = re.compile(rb"^(?:" + rb"|".join(_PARTS) + rb")*", re.MULTILINE)
"""Like DECORATION_RE but also matching nothing, so ``findall`` gives exactly one match per line."""

_KINDS = (
    ("torchrun", re.compile(rb"(?m)^[^\n]{0,60}?\[(?:rank|default)\d+\]:")),
    ("srun", re.compile(rb"(?m)^ *\d{1,7}: ")),
    ("kubectl", re.compile(rb"(?m)^[^\n]{0,20}?\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")),
    ("compose", re.compile(rb"(?m)^[^\n]{0,48}?[A-Za-z0-9][-_]\d{1,5} *\| ")),
)

_ANSI_RE = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


@dataclass(kw_only=True, slots=True)
class Decoration:
    """What :func:`strip` found: per-line rank and task, and how many lines carried a decoration."""

    n_lines: int
    """Lines in the data."""
    n_decorated: int
    """Lines that carried a decoration (removed)."""
    rank: Any = None
    """int64 array, one per line: the rank a torchrun prefix named, -1 where none; None when no line named one."""
    task: Any = None
    """int64 array, one per line: srun task id or compose replica, -1 where none; None when no line named one."""
    kinds: tuple[str, ...] = ()
    """Which decorations were seen ('srun', 'kubectl', 'compose', 'torchrun', 'indent')."""

    def rank_of(self, line: int) -> int | None:
        """The rank named on 1-based ``line``, or None."""
        if self.rank is None:
            return None
        value = int(self.rank[line - 1])
        return None if value < 0 else value


def strip(data: bytes) -> tuple[bytes, Decoration]:
    """``data`` with ANSI colour, carriage returns before newlines and every line decoration removed.

    Line count and order are unchanged. See [Note: line decoration].
    """
    import numpy as np

    if b"\x1b" in data:
        data = _ANSI_RE.sub(b"", data)
    if b"\r\n" in data:
        data = data.replace(b"\r\n", b"\n")
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    if not _decorated(data):
        return data, Decoration(n_lines=n_lines, n_decorated=0)
    # one match per line (empty where undecorated); groups in pattern order: task, replica, rank
    groups = _PER_LINE_RE.findall(data)[:n_lines]
    task, replica, rank = (_ints(col, n_lines) for col in zip(*groups, strict=True)) if groups else (None, None, None)
    if task is not None and replica is not None:
        task = np.where(task >= 0, task, replica)
    stripped, n_decorated = DECORATION_RE.subn(b"", data)
    kinds = tuple(label for label, probe in _KINDS if probe.search(data[: 1 << 20]) is not None)
    return stripped, Decoration(n_lines=n_lines, n_decorated=n_decorated, rank=_or_none(rank), task=_or_none(task),
                                kinds=kinds)


_SAMPLE = 2000
"""Lines checked at the head, middle and tail of a large file before it is taken as undecorated."""


def _decorated(data: bytes) -> bool:
    """Whether lines carry a decoration: a whole-file search up to 4 MiB, else head, middle and tail samples."""
    if len(data) <= 1 << 22:
        return _ANY_RE.search(data) is not None
    chunk = 1 << 20
    for at in (0, len(data) // 2, max(0, len(data) - chunk)):
        piece = data[at : at + chunk]
        if at:  # start at a line boundary
            piece = piece[piece.find(b"\n") + 1 :]
        if _ANY_RE.search(piece) is not None:
            return True
    return False


def _ints(col: Any, n: int) -> Any:
    """Byte strings (b'' where absent) as int64, -1 where absent."""
    import numpy as np

    raw = np.array(col, dtype="S8")
    out = np.full(n, -1, dtype=np.int64)
    present = raw != b""
    out[: raw.size][present] = raw[present].astype(np.int64)
    return out


def _or_none(values: Any) -> Any:
    return values if values is not None and (values >= 0).any() else None
