"""Runs inside a file: restarts split apart, identical rank copies folded, the pool a run used.

[Note: run boundaries]
One file can hold several runs (a job that restarted into the same output, logs pasted together).
Rows are split into *streams* (one per rank the decoration or the record named; one for rows
without a rank) and a stream starts a new run where:

- its train step goes back (with a rank: below the stream's highest; in a JSONL file, which one
  process writes and where each train step is logged once: to or below it; without a rank, where
  several ranks may print into one stream a step late, more than one logging interval below it);
- its clock goes back more than :data:`CLOCK_BACK_MAX_S` below the latest time of its run so far
  (the stream's own latest; for a stream's first row, the latest of the run it would join: a run
  pasted below another under another prefix);
- a start-up banner (:data:`BANNERS`) appears after the stream logged a step (a banner without
  a rank applies to every stream, one with a rank to its stream and the rank-less one: a plain
  launch then a ``[rankN]:`` one). A stream first seen after a boundary is in the newest run.

A rank whose rows hold copies (one record, the same kind, step and loss, three times or more, or
several records twice) is a prefix several ranks' output carries alike: ``srun -l`` of one task,
``mpirun --tag-output`` or SkyPilot naming the launcher's process, one torchrun role, every rank
printing the same unprefixed lines behind it. Its stream is read as the rank-less one is (a step
one logging interval late starts no run; copies fold), so the decorated log reads as the same log
undecorated (tests/logs/test_shared_prefixes.py). One record logged twice is what a restart does:
a rank stays one writer. Each stream is cut where its first boundary falls, then from there again
(numpy over its rows, one pass per run it starts); the cuts are then numbered in line order.

The clock rule: within one run a clock goes back at most by a daylight-saving fall-back plus the
disagreement of two nodes. :data:`DST_SHIFT_MAX_S` (2 h) is the largest fall-back in the tz
database (Antarctica/Troll, +02 to +00; 1 h nearly everywhere); :data:`NODE_SKEW_MAX_S` is two
nodes each within ntpd's default panic threshold (1000 s) of the true time, past which ntpd stops
correcting a clock. So a clock going back up to 2 h 33 min 20 s while the steps go on is one run,
with a note saying where; further (86 days: another run pasted below) it is another run. A clock
going forward is never a boundary (a hang, a checkpoint, an evaluation: time passing). Limit: ranks
without a prefix on nodes logging local time in different zones look like pasted runs; the
boundary says how far the clock went back. The clock is the record's own timestamp (the
collector's time where no record has one).

A row belongs to the run its stream is in at that line; runs are numbered in file order and
named ``<run>#1``, ``<run>#2`` when there is more than one. Two runs are never merged and a step
is never deduplicated across runs. Within a run, rows without a rank (or of a rank holding
copies) identical in every column but the line, the collector's time and a timestamp within
:data:`NODE_SKEW_MAX_S` of each other (one line printed by several ranks, on nodes whose clocks
differ) are folded into the first and counted (``FileReport.n_folded``); rows that differ in any
other value are all kept. A JSONL file
has one writer (Automodel's rank 0, one torchtitan rank), so there only rows equal in their
timestamp too fold: the same values logged later are a relaunch's, never a copy.

[Note: pooled runs]
Pool install lines (:data:`POOL_RE`): NeMo Automodel's ``recv_buffer_pool: installed (slack=N,
layout=L)`` and pooltk's ``pooltk: installed (policy=P, slack=N, grad_slack=G, schedule=S,
layout=L)`` / ``pooltk: not installed (reason=...)``, both on rank 0, inside any logging prefix
(the lines :mod:`pooltk.pool.events` writes; per stage ``pooltk: stage I pooled (fwd ring K/M,
grad ring K/M)`` or ``pooltk: stage I kept stock (reason=...)`` go to the run's facts, and a
ring's warnings, logged on the rank where they happen (``pooltk: [rank R] stage I forward slot S
re-homed ...`` / ``... ring saved nothing ...`` / ``stage I kept graph ...``; rank 0 names no rank),
to its ``pool_warnings``).
The last one in a run's span of lines sets its ``pooled``, ``pool_impl``, ``slack``, ``layout``
columns; a run with none has them missing (unknown: the log does not say), never False. A run whose
install line is followed only by ``kept stock`` stage lines (the gate refused its schedule) is not
pooled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BANNERS",
    "CLOCK_BACK_MAX_S",
    "CLOCK_SLACK_S",
    "DST_SHIFT_MAX_S",
    "NODE_SKEW_MAX_S",
    "POOL_RE",
    "PoolLine",
    "Segments",
    "find_pool_lines",
    "fold_copies",
    "segment",
]

CLOCK_SLACK_S = 5.0
"""A stream's clock going back more than this (and at most :data:`CLOCK_BACK_MAX_S`) is noted."""
DST_SHIFT_MAX_S = 2 * 3600.0
"""The largest daylight-saving shift in the tz database (Antarctica/Troll, +00 <-> +02)."""
NODE_SKEW_MAX_S = 2 * 1000.0
"""Two nodes' clocks apart: each within ntpd's default panic threshold (1000 s) of the true time."""
CLOCK_BACK_MAX_S = DST_SHIFT_MAX_S + NODE_SKEW_MAX_S
"""The furthest a run's clock goes back (see [Note: run boundaries]); further is another run."""

BANNERS: tuple[str, ...] = (
    "torchtitan version: ",
    "Starting job: ",
    "cfg-path: ",
    "Library versions:",
    "Benchmarking setup",
    "Running with args:",
    "Training starts at step ",
    "Launching job locally on ",
)
"""Text a framework prints once per process start (torchtitan, Automodel and its CLI's launch line,
the benchmark recipe)."""

POOL_RE = re.compile(
    r"(?m)^[^\n]*?(?:(?P<am>recv_buffer_pool: installed "
    r"\(slack=(?P<am_slack>-?\d+), layout=(?P<am_layout>[^)\n]*)\))"
    r"|(?P<pk>pooltk: installed \(policy=(?P<pk_policy>[^,\n]*), "
    r"slack=(?P<pk_slack>-?\d+), grad_slack=(?P<pk_grad_slack>-?\d+), "
    r"schedule=(?P<pk_schedule>[^,\n]*), layout=(?P<pk_layout>[^,)\n]*)(?:, [a-z_]+=[^,)\n]*)*\))"
    r"|(?P<no>pooltk: not installed \(reason=(?P<no_reason>[^\n]*)\))"
    r"|(?P<am_no>(?P<am_no_reason>recv_buffer_pool: "
    r"(?:torch internals mismatch, not installing|no known recv-infra entry points)[^\n]*))"
    r"|(?P<stage>pooltk: stage (?P<stage_stage>\d+) pooled "
    r"\(fwd ring (?P<stage_fwd_ring>\d+/\d+), grad ring (?P<stage_grad_ring>\d+/\d+)\))"
    r"|(?P<kept>pooltk: stage (?P<kept_stage>\d+) kept stock \(reason=(?P<kept_reason>[^\n]*)\))"
    r"|(?P<rehome>pooltk: stage (?P<rehome_stage>\d+) (?P<rehome_direction>\w+) slot \d+ re-homed "
    r"\((?P<rehome_bytes>\d+) bytes\))"
    r"|(?P<nosave>pooltk: stage (?P<nosave_stage>\d+) (?P<nosave_direction>\w+) ring saved nothing "
    r"\(held (?P<nosave_held>\d+) sets"
    r" at once, stock holds (?P<nosave_stock>\d+))"
    r"|(?P<graph>pooltk: stage (?P<graph_stage>\d+) kept graph "
    r"\(reason=(?P<graph_reason>[^\n]*)\)))"
)
"""Pool install lines of NeMo Automodel and pooltk (see [Note: pooled runs])."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PoolLine:
    """One pool line found in a log."""

    line: int
    """1-based line number."""
    kind: str
    """'installed', 'not_installed', 'stage' or 'warning' (a ring re-homed, saved nothing, kept a
    graph)."""
    impl: str
    """'automodel' or 'pooltk'."""
    facts: dict[str, Any] = field(default_factory=dict)
    """slack, layout, policy, grad_slack, schedule, reason, or the stage's rings; ``rank`` where the
    line named one (``pooltk: [rank R] ...``: a rank other than 0)."""


_MARKS = ["recv_buffer_pool: ", "pooltk: "]


def find_pool_lines(lines: Any, among: Any = None) -> list[PoolLine]:
    """Every pool line among ``lines`` (a polars String Series; ``among``: the 0-based indices to
    look at), wherever it stands in its line, in file order."""
    if among is None:
        hit = lines.str.contains_any(_MARKS).arg_true()
    else:
        hit = among.filter(lines.gather(among).str.contains_any(_MARKS))
    if hit.len() == 0:
        return []
    out: list[PoolLine] = []
    for n, text in zip((hit + 1).to_list(), lines.gather(hit).to_list(), strict=True):
        rank = _RANK_RE.search(text)
        m = POOL_RE.search(
            text if rank is None else text[: rank.start()] + "pooltk: " + text[rank.end() :]
        )
        if m is None:
            continue
        line = _pool_line(n, m.groupdict())
        if rank:
            line.facts["rank"] = int(rank["rank"])
        out.append(line)
    return out


_RANK_RE = re.compile(r"pooltk: \[rank (?P<rank>\d+)\] ")
"""The rank pooltk names in a line logged on a rank other than 0 ([Note: pool log lines])."""


@dataclass(frozen=True, slots=True)
class _PoolForm:
    """One :data:`POOL_RE` alternative: what kind of line it is, whose pool, and its facts."""

    kind: str
    impl: str
    facts: tuple[str, ...]
    """Fact names in order, each read from the group ``<alternative>_<fact>`` unless ``fixed``
    gives it."""
    fixed: dict[str, Any] = field(default_factory=dict)
    """Facts the alternative itself states (a 'kept stock' line is ``pooled=False``)."""


_POOL_FORMS: dict[str, _PoolForm] = {
    "am": _PoolForm("installed", "automodel", ("slack", "layout")),
    "pk": _PoolForm("installed", "pooltk", ("slack", "layout", "policy", "grad_slack", "schedule")),
    "no": _PoolForm("not_installed", "pooltk", ("reason",)),
    "am_no": _PoolForm("not_installed", "automodel", ("reason",)),
    "kept": _PoolForm("stage", "pooltk", ("stage", "pooled", "reason"), {"pooled": False}),
    "stage": _PoolForm(
        "stage", "pooltk", ("stage", "pooled", "fwd_ring", "grad_ring"), {"pooled": True}
    ),
    "rehome": _PoolForm(
        "warning", "pooltk", ("what", "stage", "direction", "bytes"), {"what": "re-homed"}
    ),
    "nosave": _PoolForm(
        "warning",
        "pooltk",
        ("what", "stage", "direction", "held", "stock"),
        {"what": "saved nothing"},
    ),
    "graph": _PoolForm("warning", "pooltk", ("what", "stage", "reason"), {"what": "kept graph"}),
}
"""Each :data:`POOL_RE` alternative by its group name."""
_POOL_INTS = frozenset({"slack", "grad_slack", "stage", "bytes", "held", "stock"})


def _pool_line(n: int, g: dict[str, Any]) -> PoolLine:
    """The :class:`PoolLine` at 1-based line ``n`` whose :data:`POOL_RE` groups are ``g``."""
    alt = next(a for a in _POOL_FORMS if g[a])
    form = _POOL_FORMS[alt]
    facts = {}
    for name in form.facts:
        value = form.fixed[name] if name in form.fixed else g[f"{alt}_{name}"]
        facts[name] = int(value) if name in _POOL_INTS else value
    return PoolLine(line=n, kind=form.kind, impl=form.impl, facts=facts)


@dataclass(kw_only=True, slots=True)
class Segments:
    """The run (0-based, file order) of each row, and why each new run began."""

    index: Any
    """int64 array, one per row of the frame given to :func:`segment`."""
    reasons: list[str]
    """One line per boundary: 'line N: <why>'."""
    notes: list[str] = field(default_factory=list)
    """Clock anomalies that were not made boundaries (the steps went on)."""
    shared: frozenset[int] = frozenset()
    """Ranks whose rows are several writers' copies (one prefix on several ranks' output): read
    like the rows without a rank."""

    @property
    def n_runs(self) -> int:
        """Runs found."""
        return int(self.index.max()) + 1 if len(self.index) else 1


def segment(
    frame: Any, *, banners: list[int] = (), banner_ranks: Any = None, one_writer: bool = False
) -> Segments:
    """Split a file's rows (sorted by ``line``) into runs; see [Note: run boundaries].

    ``banners``: 1-based lines of start-up banners; ``banner_ranks``: the rank each banner line
    named (-1 or None for none); ``one_writer``: one process wrote the file (JSONL), so no row is a
    rank's late print.
    """
    import numpy as np

    if len(frame) == 0:
        return Segments(index=np.zeros(0, dtype=np.int64), reasons=[])
    rows = _Rows.of(frame, one_writer)
    b_lines = np.asarray(sorted(banners), dtype=np.int64)
    b_rank = np.full(b_lines.size, -1) if banner_ranks is None else np.asarray(banner_ranks)
    notes = _clock_notes(rows)
    epochs: list[_Epoch] = []
    shared = set()
    by_stream = np.argsort(rows.stream, kind="stable")
    streams = np.split(by_stream, np.flatnonzero(np.diff(rows.stream[by_stream])) + 1)
    for mine in sorted(streams, key=lambda rows_of: rows_of[0]):  # in the order they first log
        s = int(rows.stream[mine[0]])
        if s >= 0 and _holds_copies(rows, mine):
            shared.add(s)
        heard = b_lines[(b_rank < 0) | (b_rank == s) | (s < 0)]  # a rank's banner: its stream's
        heard = heard[heard < rows.line.max()]  # and the rank-less one's; read before a row
        epochs += _epochs(rows, s, mine, heard, one_writer=s >= 0 and s not in shared)
    index, reasons = _number(rows, epochs)
    return Segments(index=index, reasons=reasons, notes=notes, shared=frozenset(shared))


@dataclass(kw_only=True, slots=True)
class _Rows:
    """A file's rows as the segmenter reads them (numpy arrays, one value per row)."""

    line: Any
    """1-based line numbers (non-decreasing)."""
    stream: Any
    """The rank, or -1 for rows without one."""
    step: Any
    """Steps (int64)."""
    loss: Any
    """Losses (float64)."""
    train: Any
    """Rows whose step counts (train rows; a validation file's val rows)."""
    clock: Any
    """int64 ns of each row's time (see :func:`_clock`), where ``timed``."""
    timed: Any
    """Rows with a time."""
    clock_back: bool
    """Whether any row is more than :data:`CLOCK_BACK_MAX_S` below the latest before it (the only
    case the clock rule can split; it is not applied otherwise)."""
    exact: bool
    """No lag tolerated (one writer, or a validation file)."""
    again: bool
    """A train step logged again is a restart (one writer logs each train step once)."""

    @classmethod
    def of(cls, frame: Any, one_writer: bool) -> _Rows:
        import numpy as np

        rank = frame["rank"].to_numpy(dtype=np.float64, na_value=np.nan)
        train = (frame["kind"] == "train").to_numpy()
        val_only = not train.any()
        if val_only:  # a validation file (Automodel's validation.jsonl): its val steps split it
            train = (frame["kind"] == "val").to_numpy()
        clock, timed = _clock(frame)
        t = clock[timed]
        bound = int(CLOCK_BACK_MAX_S * 1e9)
        back = t.size > 1 and bool((t[1:] < np.maximum.accumulate(t)[:-1] - bound).any())
        return cls(
            line=frame["line"].to_numpy(dtype=np.int64),
            stream=np.where(np.isnan(rank), -1, rank).astype(np.int64),
            step=frame["step"].to_numpy(dtype=np.int64),
            loss=frame["loss"].to_numpy(dtype=np.float64, na_value=np.nan),
            train=train,
            clock=clock,
            timed=timed,
            clock_back=back,
            exact=val_only or one_writer,
            again=one_writer and not val_only,
        )


@dataclass(kw_only=True, slots=True)
class _Epoch:
    """A stretch of one stream's rows inside one run, and what began it."""

    stream: int
    rows: Any
    """The rows (frame positions, in line order)."""
    line: int
    """Where it began: the line of its first row, or of the banner that began it."""
    order: tuple[int, int]
    """Ties at one line: a banner before the rows after it, then rows in frame order."""
    reason: str | None = None
    """Why the run before it ended (None: the stream's first rows)."""


def _epochs(rows: _Rows, s: int, mine: Any, banners: Any, *, one_writer: bool) -> list[_Epoch]:
    """The stream ``s`` (rows ``mine``) cut where a boundary falls: from each epoch's start, the
    first row whose clock or step goes back, or the first banner after it logged a step. Several
    writers' rows (``one_writer`` False) may print a step one logging interval late."""
    import numpy as np

    line, step, train = rows.line[mine], rows.step[mine], rows.train[mine]
    gaps = np.diff(step[train])
    gaps = gaps[gaps > 0]
    lag = 0 if rows.exact or one_writer else int(np.median(gaps)) if gaps.size else 1
    first = int(mine[0])
    out = [_Epoch(stream=s, rows=None, line=int(line[0]), order=(1, first))]
    k0 = 0
    while k0 < mine.size:
        k, why = _first_back(rows, mine[k0:], lag, s)
        end = k0 + k if k is not None else mine.size
        stepped = np.flatnonzero(train[k0:end])
        after = banners[banners > line[k0 + stepped[0]]] if stepped.size else banners[:0]
        if after.size and (end == mine.size or after[0] < line[end]):
            b = int(after[0])
            out[-1].rows = mine[k0 : k0 + int(np.searchsorted(line[k0:], b))]
            k0 += out[-1].rows.size
            why = f"start-up banner at line {b} after steps were logged"
            out.append(_Epoch(stream=s, rows=None, line=b, order=(0, first), reason=why))
            continue
        out[-1].rows = mine[k0:end]
        if k is None:
            break
        at = int(mine[end])
        out.append(_Epoch(stream=s, rows=None, line=int(line[end]), order=(1, at), reason=why))
        k0 = end
    out[-1].rows = mine[k0:] if out[-1].rows is None else out[-1].rows
    return out


def _first_back(rows: _Rows, mine: Any, lag: int, s: int) -> tuple[int | None, str]:
    """(the first of the rows ``mine`` after the first whose clock goes back past the bound or
    whose train step goes back more than ``lag`` below the highest before it (or is logged again
    where ``rows.again``), and why), from a fresh state at ``mine[0]``."""
    import numpy as np

    none = np.iinfo(np.int64).min
    step, train = rows.step[mine], rows.train[mine]
    top = np.maximum.accumulate(np.where(train, step, none))
    top = np.r_[none, top[:-1]]
    fire = train & (top != none) & ((step < top - lag) | (rows.again & (step == top)))
    clock = np.zeros(mine.size, dtype=bool)
    if rows.clock_back:
        t, timed = rows.clock[mine], rows.timed[mine]
        latest = np.maximum.accumulate(np.where(timed, t, none))
        latest = np.r_[none, latest[:-1]]
        clock = timed & (latest != none) & (t < latest - int(CLOCK_BACK_MAX_S * 1e9))
    hit = np.flatnonzero(fire | clock)
    if hit.size == 0:
        return None, ""
    k = int(hit[0])
    rank = f" (rank {s})" if s >= 0 else ""
    if clock[k]:
        return k, _clock_reason(int(latest[k]) - int(rows.clock[mine[k]]), rank)
    was, now = int(top[k]), int(step[k])
    why = f"step went back from {was} to {now}" if now < was else f"step {was} logged again"
    return k, why + rank


def _clock_reason(back_ns: int, rank: str) -> str:
    return (
        f"the clock went back {_span(back_ns)} (more than a DST shift plus node skew, "
        f"{CLOCK_BACK_MAX_S / 3600:.2f} h){rank}: another run"
    )


def _holds_copies(rows: _Rows, mine: Any) -> bool:
    """Whether a rank's rows hold copies (the same kind, step and loss): one record three times or
    more, or several records twice. That is a prefix every copy of a line carries alike (``srun
    -l`` of one task, a launcher's rank, a torchrun role) on several ranks' output; one record
    logged twice is what a restart does."""
    import numpy as np

    step, train = rows.step[mine], rows.train[mine]
    if all((np.diff(step[kind]) > 0).all() for kind in (train, ~train)):  # no step twice
        return False
    keys = np.stack([train, step, rows.loss[mine].view(np.int64)], axis=1)
    counts = np.unique(keys, axis=0, return_counts=True)[1]
    return bool(counts.max() > 2 or (counts > 1).sum() > 1)


def _number(rows: _Rows, epochs: list[_Epoch]) -> tuple[Any, list[str]]:
    """(the run of each row, why each run after the first began): the epochs in line order, each
    boundary moving its stream one run on (a new run where it passes the newest); a stream's
    first rows join the newest run, or start the next where their clock is further back than the
    bound from that run's latest time (another run pasted below)."""
    import numpy as np

    index = np.zeros(rows.line.size, dtype=np.int64)
    reasons: list[str] = []
    n_runs, run_of = 1, {}
    for e in sorted(epochs, key=lambda e: (e.line, *e.order)):
        if e.reason is None:  # the stream's first rows
            k = n_runs - 1
            first = int(e.rows[0])
            if rows.clock_back and rows.timed[first]:
                top = _latest(rows, run_of, k, first)
                if top is not None and rows.clock[first] < top - int(CLOCK_BACK_MAX_S * 1e9):
                    rank = f" (rank {e.stream})" if e.stream >= 0 else ""
                    reasons.append(f"line {e.line}: {_clock_reason(top - rows.clock[first], rank)}")
                    k = n_runs
                    n_runs += 1
        else:
            k = run_of[e.stream][-1][1] + 1
            if k >= n_runs:
                n_runs = k + 1
                reasons.append(f"line {e.line}: {e.reason}")
        run_of.setdefault(e.stream, []).append((e, k))
        index[e.rows] = k
    return index, reasons


def _latest(rows: _Rows, run_of: dict, k: int, before: int) -> int | None:
    """The latest time of run ``k`` over the rows before row ``before`` (in line order) of the
    epochs placed so far."""
    import numpy as np

    placed = [e.rows for runs_of_stream in run_of.values() for e, run in runs_of_stream if run == k]
    mine = np.concatenate(placed) if placed else np.zeros(0, dtype=np.int64)
    mine = mine[(mine < before) & rows.timed[mine]]  # rows are in line order
    return int(rows.clock[mine].max()) if mine.size else None


def _clock_notes(rows: _Rows) -> list[str]:
    """A note where a stream's clock goes back more than :data:`CLOCK_SLACK_S` (and at most the
    bound) while its steps go on: a clock change or skew, no boundary."""
    import numpy as np

    one = (rows.stream == rows.stream[0]).all()
    order = np.arange(rows.line.size) if one else np.lexsort((rows.line, rows.stream))
    s, step, train = rows.stream[order], rows.step[order], rows.train[order]
    t, timed = rows.clock[order], rows.timed[order]
    same = np.r_[False, s[1:] == s[:-1]]
    d_step = np.r_[1, np.diff(step)]
    back = same & train & np.r_[False, train[:-1]] & ((d_step < 0) | ((d_step == 0) & rows.again))
    back_ns = np.r_[0, -np.diff(t)]
    clock = same & timed & np.r_[False, timed[:-1]] & (back_ns > int(CLOCK_SLACK_S * 1e9))
    clock &= (back_ns <= int(CLOCK_BACK_MAX_S * 1e9)) & ~back
    if not clock.any():
        return []
    where = np.flatnonzero(clock)
    worst = float(back_ns[where].max() / 1e9)
    return [
        f"timestamps went back {where.size} time(s) (by up to {worst:,.0f} s; first at line "
        f"{int(rows.line[order][where].min())}) while the steps went on: a clock change or skew "
        "between nodes, not a restart, so no run boundary"
    ]


def _clock(frame: Any) -> tuple[Any, Any]:
    """(int64 ns per row, which rows have one): the record's timestamp, or the collector's where no
    row has one."""
    import numpy as np

    nat = np.iinfo(np.int64).min
    for column in ("timestamp", "collector_time"):
        ts = frame[column].to_numpy(dtype="datetime64[ns]").astype(np.int64)
        has = ts != nat
        if has.any():
            return ts, has
    return ts, has


def _span(ns: int) -> str:
    """A duration for a reason line: '86 days', '3.2 h', '41 min', '12 s'."""
    s = ns / 1e9
    if s >= 2 * 86400:
        return f"{s / 86400:,.0f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.0f} min" if s >= 120 else f"{s:.0f} s"


def fold_copies(frame: Any, skew_s: float = NODE_SKEW_MAX_S) -> tuple[Any, int]:
    """Rows identical in every column but ``line``, ``collector_time`` and a ``timestamp`` within
    ``skew_s`` (within one run) folded into the first; (frame, folded)."""
    import numpy as np
    import pandas as pd

    # no step logged twice: no copies to fold (the usual case, checked cheaply)
    for kind in ("train", "val"):
        steps = frame["step"].to_numpy(dtype=np.int64)[(frame["kind"] == kind).to_numpy()]
        if steps.size > 1 and not (np.diff(steps) > 0).all() and np.unique(steps).size < steps.size:
            break
    else:
        return frame, 0
    cols = [c for c in frame.columns if c not in ("line", "collector_time", "timestamp")]
    # copies stamped alike (usual)
    dup = frame.duplicated(subset=[*cols, "timestamp"], keep="first").to_numpy(copy=True)
    rest = np.flatnonzero(~dup)
    loose = (
        frame.iloc[rest].duplicated(subset=cols, keep=False).to_numpy()
        if skew_s > 0
        else np.zeros(rest.size, bool)
    )
    if loose.any():  # copies whose clocks differ: within a group of equal values, a clock
        # within the skew of the one before (in time order) is the same cluster; the first row of
        # each cluster in file order is kept
        idx = rest[loose]
        sub = frame.iloc[idx]
        ts = sub["timestamp"].to_numpy(dtype="datetime64[ns]").astype(np.int64)
        group = pd.util.hash_pandas_object(sub[cols], index=False).to_numpy()
        order = np.lexsort((ts, group))
        g, t = group[order], ts[order]
        nat = np.iinfo(np.int64).min
        gap = (np.diff(t) > int(skew_s * 1e9)) | ((t[1:] == nat) != (t[:-1] == nat))
        cluster = np.empty(idx.size, dtype=np.int64)
        cluster[order] = np.cumsum(np.r_[True, (g[1:] != g[:-1]) | gap])
        # every value compared here
        dup[idx] = sub[cols].assign(_cluster=cluster).duplicated(keep="first").to_numpy()
    n = int(dup.sum())
    if n == 0:
        return frame, 0
    return frame[~dup].reset_index(drop=True), n
