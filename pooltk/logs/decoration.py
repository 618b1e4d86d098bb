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

__all__ = ["DECORATION_RE", "Decoration", "strip", "strip_reference"]

_PARTS = (
    rb"[ \t]+",  # indentation, srun's right-alignment
    rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)? (?:(?:stdout|stderr) [FP] )?",  # kubectl / CRI
    rb"(?P<task>\d{1,7}): ",  # srun --label
    rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,48}?[-_](?P<replica>\d{1,5}) {0,8}\| ",  # docker compose service-N  |
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

    Line count and order are unchanged. See [Note: line decoration]. The prefixes are found with
    numpy, a few vector operations per decoration layer over all lines at once; the result
    equals :func:`strip_reference` (the same grammar as one regular expression), which the tests
    compare it with.
    """
    data, n_lines = _normalise(data)
    if not _decorated(data):
        return data, Decoration(n_lines=n_lines, n_decorated=0)
    return _strip_vectorised(data, n_lines)


def strip_reference(data: bytes) -> tuple[bytes, Decoration]:
    """:func:`strip` by :data:`DECORATION_RE` line by line: the definition the vectorised scan is checked against."""
    import numpy as np

    data, n_lines = _normalise(data)
    if not _decorated(data):
        return data, Decoration(n_lines=n_lines, n_decorated=0)
    # one match per line (empty where undecorated); groups in pattern order: task, replica, rank
    groups = _PER_LINE_RE.findall(data)[:n_lines]
    task, replica, rank = (_ints(col, n_lines) for col in zip(*groups, strict=True)) if groups else (None, None, None)
    if task is not None and replica is not None:
        task = np.where(task >= 0, task, replica)
    stripped, n_decorated = DECORATION_RE.subn(b"", data)
    return stripped, Decoration(n_lines=n_lines, n_decorated=n_decorated, rank=_or_none(rank), task=_or_none(task),
                                kinds=_kinds(data))


def _normalise(data: bytes) -> tuple[bytes, int]:
    if b"\x1b" in data:
        data = _ANSI_RE.sub(b"", data)
    if b"\r\n" in data:
        data = data.replace(b"\r\n", b"\n")
    return data, data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)


def _kinds(data: bytes) -> tuple[str, ...]:
    return tuple(label for label, probe in _KINDS if probe.search(data[: 1 << 20]) is not None)


def _strip_vectorised(data: bytes, n_lines: int) -> tuple[bytes, Decoration]:  # noqa: C901 - one grammar, layer by layer
    import numpy as np

    buf = np.frombuffer(data, dtype=np.uint8)
    padded = np.zeros(buf.size + 64, dtype=np.uint8)
    padded[: buf.size] = buf
    nl = np.flatnonzero(buf == 10)
    starts = np.concatenate(([0], nl + 1))[:n_lines].astype(np.int64)
    ends = np.concatenate((nl, [buf.size]))[:n_lines].astype(np.int64)
    pos = starts.copy()
    rank = np.full(n_lines, -1, dtype=np.int64)
    task = np.full(n_lines, -1, dtype=np.int64)
    replica = np.full(n_lines, -1, dtype=np.int64)

    def at(p: np.ndarray, k: int = 0) -> np.ndarray:
        return padded[np.minimum(p + k, buf.size)]  # the zero padding is past every line end

    def is_digit(b: np.ndarray) -> np.ndarray:
        return (b >= 48) & (b <= 57)

    def digits(p: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
        """(length of the digit run at p, capped at most + 1 to detect a longer run; its value)."""
        n = np.zeros(p.size, dtype=np.int64)
        value = np.zeros(p.size, dtype=np.int64)
        going = np.ones(p.size, dtype=bool)
        for k in range(most + 1):
            b = at(p, k)
            going &= is_digit(b)
            if not going.any():
                break
            n += going
            value = np.where(going & (k < most), value * 10 + (b.astype(np.int64) - 48), value)
        return n, value

    def literal(p: np.ndarray, text: bytes) -> np.ndarray:
        ok = np.ones(p.size, dtype=bool)
        for k, ch in enumerate(text):
            ok &= at(p, k) == ch
        return ok

    alnum = np.zeros(256, dtype=bool)
    for lo, hi in ((48, 57), (65, 90), (97, 122)):
        alnum[lo : hi + 1] = True
    name = alnum.copy()
    name[[ord("_"), ord("."), ord("-")]] = True
    idx = np.arange(n_lines)
    active = idx
    for _ in range(64):  # one decoration layer per round (indentation counts as one)
        if active.size == 0:
            break
        p = pos[active]
        b0 = at(p)
        new = np.full(active.size, -1, dtype=np.int64)
        # 1. indentation
        ws = (b0 == 32) | (b0 == 9)
        if ws.any():
            q = p[ws].copy()
            while True:
                more = (at(q) == 32) | (at(q) == 9)
                if not more.any():
                    break
                q = q + more
            new[ws] = q
        # 2. kubectl / CRI timestamp
        todo = (new < 0) & is_digit(b0)
        if todo.any():
            sel = np.flatnonzero(todo)
            q = p[sel]
            ok = np.ones(sel.size, dtype=bool)
            for k, ch in enumerate(b"dddd-dd-ddTdd:dd:dd"):
                b = at(q, k)
                ok &= is_digit(b) if ch == ord("d") else (b == ch)
            q = q + 19
            frac = ok & ((at(q) == ord(".")) | (at(q) == ord(",")))
            nd, _ = digits(q + 1, 9)
            frac &= (nd >= 1) & (nd <= 9)
            q = np.where(frac, q + 1 + nd, q)
            z = ok & (at(q) == ord("Z"))
            sign = ok & ~z & ((at(q) == ord("+")) | (at(q) == ord("-"))) & is_digit(at(q, 1)) & is_digit(at(q, 2))
            colon = sign & (at(q, 3) == ord(":")) & is_digit(at(q, 4)) & is_digit(at(q, 5))
            plain = sign & ~colon & is_digit(at(q, 3)) & is_digit(at(q, 4))
            q = np.where(z, q + 1, np.where(colon, q + 6, np.where(plain, q + 5, q)))
            ok &= at(q) == 32
            q = q + 1
            cri = ok & (literal(q, b"stdout ") | literal(q, b"stderr ")) & ((at(q, 7) == ord("F")) | (at(q, 7) == ord("P"))) & (at(q, 8) == 32)
            q = np.where(cri, q + 9, q)
            new[sel[ok]] = q[ok]
        # 3. srun --label
        todo = (new < 0) & is_digit(b0)
        if todo.any():
            sel = np.flatnonzero(todo)
            q = p[sel]
            nd, value = digits(q, 7)
            ok = (nd >= 1) & (nd <= 7) & (at(q + nd) == ord(":")) & (at(q + nd, 1) == 32)
            new[sel[ok]] = (q + nd + 2)[ok]
            task[active[sel[ok]]] = value[ok]
        # 4. docker compose: name[-_]N *| ; the first '|' within 64 bytes ends it
        todo = (new < 0) & alnum[b0]
        if todo.any():
            sel = np.flatnonzero(todo)
            q = p[sel]
            bar = np.full(sel.size, -1, dtype=np.int64)
            nonname_seen = np.zeros(sel.size, dtype=bool)
            for k in range(64):
                b = at(q, k)
                hit = (bar < 0) & ~nonname_seen & (b == ord("|"))
                bar = np.where(hit, q + k, bar)
                nonname_seen |= (bar < 0) & ~name[b] & (b != 32)
                if ((bar >= 0) | nonname_seen).all():
                    break
            ok = (bar > q) & (at(bar, 1) == 32)
            r = np.where(ok, bar - 1, q)
            n_sp = np.zeros(sel.size, dtype=np.int64)
            while True:  # spaces before the bar (at most 8)
                sp = ok & (r >= q) & (at(r) == 32)
                if not sp.any():
                    break
                r = r - sp
                n_sp += sp
            ok &= n_sp <= 8
            # digits back from r (1..5), then [-_]
            n_d = np.zeros(sel.size, dtype=np.int64)
            going = ok.copy()
            for k in range(6):
                b = at(np.maximum(r - k, 0))
                going &= (r - k >= q) & is_digit(b)
                n_d += going
            ok &= (n_d >= 1) & (n_d <= 5)
            sep = r - n_d
            ok &= (sep > q) & (sep - q <= 49) & ((at(np.maximum(sep, 0)) == ord("-")) | (at(np.maximum(sep, 0)) == ord("_")))
            # no space between the name start and the digits (spaces only after them)
            span_ok = np.ones(sel.size, dtype=bool)
            for k in range(64):
                inside = ok & (q + k < sep)
                if not inside.any():
                    break
                span_ok &= ~inside | name[at(q, k)]
            ok &= span_ok
            value = np.zeros(sel.size, dtype=np.int64)
            for k in range(5):
                use = ok & (k < n_d)
                value = np.where(use, value * 10 + (at(sep + 1 + k).astype(np.int64) - 48), value)
            new[sel[ok]] = (bar + 2)[ok]
            replica[active[sel[ok]]] = value[ok]
        # 5. torchrun
        todo = (new < 0) & (b0 == ord("["))
        if todo.any():
            sel = np.flatnonzero(todo)
            q = p[sel]
            is_rank, is_default = literal(q, b"[rank"), literal(q, b"[default")
            q2 = np.where(is_rank, q + 5, q + 8)
            nd, value = digits(q2, 7)
            ok = (is_rank | is_default) & (nd >= 1) & (nd <= 7) & (at(q2 + nd) == ord("]")) & (at(q2 + nd, 1) == ord(":"))
            new[sel[ok]] = (q2 + nd + 2)[ok]
            rank[active[sel[ok]]] = value[ok]
        moved = (new >= 0) & (new <= ends[active])
        pos[active[moved]] = new[moved]
        active = active[moved]
    decorated = pos > starts
    n_decorated = int(decorated.sum())
    if n_decorated:  # drop [start, pos) of every decorated line: the dropped offsets, built without a Python loop
        lo, cut = starts[decorated], (pos - starts)[decorated]
        first = np.repeat(lo - np.concatenate(([0], np.cumsum(cut)[:-1])), cut)
        keep = np.ones(buf.size, dtype=bool)
        keep[first + np.arange(int(cut.sum()))] = False
        data = buf[keep].tobytes()
    task = np.where(task >= 0, task, replica)
    return data, Decoration(n_lines=n_lines, n_decorated=n_decorated, rank=_or_none(rank), task=_or_none(task),
                            kinds=_kinds(bytes(padded[: min(buf.size, 1 << 20)])) if n_decorated else ())


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
