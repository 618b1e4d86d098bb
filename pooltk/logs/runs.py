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
is never deduplicated across runs. Within a run, rows identical in every column but the line, the
collector's time and a timestamp within :data:`NODE_SKEW_MAX_S` of each other (one line printed
by several ranks without a prefix, on nodes whose clocks differ) are folded into the first and
counted (``FileReport.n_folded``); rows that differ in any other value are all kept. A JSONL file
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

BANNERS: tuple[bytes, ...] = (
    b"torchtitan version: ",
    b"Starting job: ",
    b"cfg-path: ",
    b"Library versions:",
    b"Benchmarking setup",
    b"Running with args:",
    b"Training starts at step ",
    b"Launching job locally on ",
)
"""Text a framework prints once per process start (torchtitan, Automodel and its CLI's launch line,
the benchmark recipe)."""

POOL_RE = re.compile(
    r"(?m)^[^\n]*?(?:(?P<am>recv_buffer_pool: installed "
    r"\(slack=(?P<am_slack>-?\d+), layout=(?P<am_layout>[^)\n]*)\))"
    r"|(?P<pk>pooltk: installed \(policy=(?P<pk_policy>[^,\n]*), "
    r"slack=(?P<pk_slack>-?\d+), grad_slack=(?P<pk_grad>-?\d+), "
    r"schedule=(?P<pk_schedule>[^,\n]*), layout=(?P<pk_layout>[^,)\n]*)(?:, [a-z_]+=[^,)\n]*)*\))"
    r"|(?P<no>pooltk: not installed \(reason=(?P<no_reason>[^\n]*)\))"
    r"|(?P<am_no>recv_buffer_pool: "
    r"(?:torch internals mismatch, not installing|no known recv-infra entry points)[^\n]*)"
    r"|(?P<stage>pooltk: stage (?P<st_i>\d+) pooled "
    r"\(fwd ring (?P<st_fk>\d+)/(?P<st_fm>\d+), grad ring (?P<st_gk>\d+)/(?P<st_gm>\d+)\))"
    r"|(?P<kept>pooltk: stage (?P<kp_i>\d+) kept stock \(reason=(?P<kp_reason>[^\n]*)\))"
    r"|(?P<rehome>pooltk: stage (?P<rh_i>\d+) (?P<rh_dir>\w+) slot \d+ re-homed "
    r"\((?P<rh_bytes>\d+) bytes\))"
    r"|(?P<nosave>pooltk: stage (?P<ns_i>\d+) (?P<ns_dir>\w+) ring saved nothing "
    r"\(held (?P<ns_held>\d+) sets"
    r" at once, stock holds (?P<ns_stock>\d+))"
    r"|(?P<graph>pooltk: stage (?P<kg_i>\d+) kept graph \(reason=(?P<kg_reason>[^\n]*)\)))"
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


def _pool_line(n: int, g: dict[str, Any]) -> PoolLine:  # noqa: C901
    """The :class:`PoolLine` at 1-based line ``n`` whose :data:`POOL_RE` groups are ``g``."""
    if g["am"]:
        return PoolLine(
            line=n,
            kind="installed",
            impl="automodel",
            facts={"slack": int(g["am_slack"]), "layout": g["am_layout"]},
        )
    if g["pk"]:
        return PoolLine(
            line=n,
            kind="installed",
            impl="pooltk",
            facts={
                "slack": int(g["pk_slack"]),
                "layout": g["pk_layout"],
                "policy": g["pk_policy"],
                "grad_slack": int(g["pk_grad"]),
                "schedule": g["pk_schedule"],
            },
        )
    if g["no"]:
        return PoolLine(
            line=n, kind="not_installed", impl="pooltk", facts={"reason": g["no_reason"]}
        )
    if g["am_no"]:
        return PoolLine(
            line=n, kind="not_installed", impl="automodel", facts={"reason": g["am_no"]}
        )
    if g["kept"]:
        return PoolLine(
            line=n,
            kind="stage",
            impl="pooltk",
            facts={"stage": int(g["kp_i"]), "pooled": False, "reason": g["kp_reason"]},
        )
    if g["stage"]:
        return PoolLine(
            line=n,
            kind="stage",
            impl="pooltk",
            facts={
                "stage": int(g["st_i"]),
                "pooled": True,
                "fwd_ring": f"{g['st_fk']}/{g['st_fm']}",
                "grad_ring": f"{g['st_gk']}/{g['st_gm']}",
            },
        )
    if g["rehome"]:
        facts = {
            "what": "re-homed",
            "stage": int(g["rh_i"]),
            "direction": g["rh_dir"],
            "bytes": int(g["rh_bytes"]),
        }
    elif g["nosave"]:
        facts = {
            "what": "saved nothing",
            "stage": int(g["ns_i"]),
            "direction": g["ns_dir"],
            "held": int(g["ns_held"]),
            "stock": int(g["ns_stock"]),
        }
    else:
        facts = {"what": "kept graph", "stage": int(g["kg_i"]), "reason": g["kg_reason"]}
    return PoolLine(line=n, kind="warning", impl="pooltk", facts=facts)


@dataclass(kw_only=True, slots=True)
class Segments:
    """The run (0-based, file order) of each row, and why each new run began."""

    index: Any
    """int64 array, one per row of the frame given to :func:`segment`."""
    reasons: list[str]
    """One line per boundary: 'line N: <why>'."""
    notes: list[str] = field(default_factory=list)
    """Clock anomalies that were not made boundaries (the steps went on)."""

    @property
    def n_runs(self) -> int:
        """Runs found."""
        return int(self.index.max()) + 1 if len(self.index) else 1


def segment(
    frame: Any, *, banners: list[int] = (), banner_ranks: Any = None, one_writer: bool = False
) -> Segments:  # noqa: C901
    """Split a file's rows (sorted by ``line``) into runs; see [Note: run boundaries].

    ``banners``: 1-based lines of start-up banners; ``banner_ranks``: the rank each banner line
    named (-1 or None for none); ``one_writer``: one process wrote the file (JSONL), so no row is a
    rank's late print.
    """
    import numpy as np

    n = len(frame)
    if n == 0:
        return Segments(index=np.zeros(0, dtype=np.int64), reasons=[])
    lines = frame["line"].to_numpy(dtype=np.int64)
    rank = frame["rank"].to_numpy(dtype=np.float64, na_value=np.nan)
    stream = np.where(np.isnan(rank), -1, rank).astype(np.int64)
    step = frame["step"].to_numpy(dtype=np.int64)
    train = (frame["kind"] == "train").to_numpy()
    val_only = not train.any()
    if (
        val_only
    ):  # a validation file (Automodel's validation.jsonl): its val steps going back split it
        train = (frame["kind"] == "val").to_numpy()
    ts, has_ts = _clock(frame)
    banner_lines = np.asarray(sorted(banners), dtype=np.int64)
    b_rank = (
        np.full(banner_lines.size, -1, dtype=np.int64)
        if banner_ranks is None
        else np.asarray(banner_ranks, dtype=np.int64)
    )
    # quick exit: no step goes back, no clock goes back past the bound, no banner after a step in
    # any stream
    order = np.lexsort((lines, stream))
    s_stream, s_step, s_train, s_ts, s_has = (
        stream[order],
        step[order],
        train[order],
        ts[order],
        has_ts[order],
    )
    same = np.r_[False, s_stream[1:] == s_stream[:-1]]
    again = (
        one_writer and not val_only
    )  # one process logs each train step once: the same step again is a restart
    d_step = np.r_[1, np.diff(s_step)]
    back = same & s_train & np.r_[False, s_train[:-1]] & ((d_step < 0) | ((d_step == 0) & again))
    s_back_ns = np.r_[0, -np.diff(s_ts)]
    clock = same & s_has & np.r_[False, s_has[:-1]] & (s_back_ns > int(CLOCK_SLACK_S * 1e9))
    clock &= (
        s_back_ns <= int(CLOCK_BACK_MAX_S * 1e9)
    ) & ~back  # a step going back is a restart, noted as one
    notes = []
    if clock.any():
        where = np.flatnonzero(clock)
        worst = float(s_back_ns[where].max() / 1e9)
        notes.append(
            f"timestamps went back {where.size} time(s) (by up to {worst:,.0f} s; "
            f"first at line {int(lines[order][where].min())}) "
            "while the steps went on: a clock change or skew between nodes, not a restart, "
            "so no run boundary"
        )
    late_banner = (
        banner_lines.size > 0 and bool(train.any()) and banner_lines.max() > lines[train].min()
    )
    # a clock boundary needs a row further back than the bound from some earlier row of the file
    # (the latest so far bounds every stream's and every run's latest, so this one cumulative
    # maximum rules all of them out)
    far_back = False
    if has_ts.any():
        t = ts[has_ts]
        far_back = (
            bool((t[1:] < np.maximum.accumulate(t)[:-1] - int(CLOCK_BACK_MAX_S * 1e9)).any())
            if t.size > 1
            else False
        )
    if not back.any() and not late_banner and not far_back:
        return Segments(index=np.zeros(n, dtype=np.int64), reasons=[], notes=notes)
    seg = _segment_slow(
        lines,
        stream,
        step,
        train,
        banner_lines,
        b_rank,
        ts if far_back else None,
        has_ts,
        exact=val_only or one_writer,
        again=again,
    )
    seg.notes = notes
    return seg


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


def _segment_slow(
    lines: Any,
    stream: Any,
    step: Any,
    train: Any,
    banner_lines: Any,
    b_rank: Any,
    ts: Any = None,  # noqa: C901
    has_ts: Any = None,
    *,
    exact: bool = False,
    again: bool = False,
) -> Segments:
    """Walk the rows in line order (only for files where a boundary is possible); ``exact``: no lag
    tolerated; ``again``: a train step logged again is a restart; ``ts``: the clock (int64 ns,
    ``has_ts`` where present) when it may go back past the bound, else None."""
    import numpy as np

    order = np.argsort(lines, kind="stable")
    state: dict[int, dict[str, Any]] = {}
    seg_of_stream: dict[int, int] = {}
    run_latest: dict[int, int] = {}  # the latest clock of each run so far
    index = np.zeros(lines.size, dtype=np.int64)
    reasons: list[str] = []
    n_runs = 1
    bi = 0
    bound = int(CLOCK_BACK_MAX_S * 1e9)
    # interval per stream (for rank-less streams, which tolerate one interval of lag)
    interval: dict[int, int] = {}
    for s in np.unique(stream):
        st = step[(stream == s) & train]
        d = np.diff(st)
        d = d[d > 0]
        interval[int(s)] = int(np.median(d)) if d.size else 1

    def start_new(s: int, why: str, at: int) -> None:
        nonlocal n_runs
        current = seg_of_stream.get(s, 0)
        # the stream joins the next run (a later stream restarting joins the run another stream
        # already began)
        target = current + 1
        if target >= n_runs:
            n_runs = target + 1
            reasons.append(f"line {at}: {why}")
        seg_of_stream[s] = target
        state[s] = {}

    for i in order.tolist():
        ln = int(lines[i])
        while bi < banner_lines.size and banner_lines[bi] < ln:
            br = int(b_rank[bi])
            for s, st in list(state.items()):
                if st.get("stepped") and (
                    br < 0 or br == s or s < 0
                ):  # a rank's banner restarts the rank-less stream too
                    start_new(
                        s,
                        f"start-up banner at line {int(banner_lines[bi])} after steps were logged",
                        int(banner_lines[bi]),
                    )
            bi += 1
        s = int(stream[i])
        st = state.setdefault(s, {})
        if ts is not None and has_ts[i]:
            t = int(ts[i])
            fresh = s not in seg_of_stream
            if fresh:  # a stream's first row joins the newest run: held to that run's latest clock
                seg_of_stream[s] = n_runs - 1
            top = st.get("latest") if not fresh else run_latest.get(n_runs - 1)
            if top is not None and t < top - bound:
                start_new(
                    s,
                    f"the clock went back {_span(top - t)} (more than a DST shift plus node skew, "
                    f"{CLOCK_BACK_MAX_S / 3600:.2f} h)"
                    + (f" (rank {s})" if s >= 0 else "")
                    + ": another run",
                    ln,
                )
                st = state[s]
            st["latest"] = t if st.get("latest") is None else max(st["latest"], t)
            k = seg_of_stream[s]
            run_latest[k] = t if k not in run_latest else max(run_latest[k], t)
        if train[i]:
            top = st.get("max_step")
            tol = 0 if s >= 0 or exact else interval.get(s, 1)
            if top is not None and (step[i] < top - tol or (again and step[i] == top)):
                why = (
                    f"step went back from {top} to {int(step[i])}"
                    if step[i] < top
                    else f"step {top} logged again"
                )
                start_new(s, why + (f" (rank {s})" if s >= 0 else ""), ln)
                st = state[s]
                if ts is not None and has_ts[i]:
                    st["latest"] = int(ts[i])
            st["max_step"] = (
                int(step[i]) if st.get("max_step") is None else max(st["max_step"], int(step[i]))
            )
            st["stepped"] = True
        index[i] = seg_of_stream.setdefault(
            s, n_runs - 1
        )  # a stream first seen after a boundary is in the newest run
    return Segments(index=index, reasons=reasons)


def fold_copies(frame: Any, skew_s: float = NODE_SKEW_MAX_S) -> tuple[Any, int]:
    """Rows identical in every column but ``line``, ``collector_time`` and a ``timestamp`` within
    ``skew_s`` (within one run) folded into the first; (frame, folded)."""
    import numpy as np
    import pandas as pd

    for kind in (
        "train",
        "val",
    ):  # no step logged twice: no copies to fold (the usual case, checked cheaply)
        steps = frame["step"].to_numpy(dtype=np.int64)[(frame["kind"] == kind).to_numpy()]
        if steps.size > 1 and not (np.diff(steps) > 0).all() and np.unique(steps).size < steps.size:
            break
    else:
        return frame, 0
    cols = [c for c in frame.columns if c not in ("line", "collector_time", "timestamp")]
    dup = frame.duplicated(subset=[*cols, "timestamp"], keep="first").to_numpy(
        copy=True
    )  # copies stamped alike (usual)
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
        dup[idx] = (
            sub[cols].assign(_cluster=cluster).duplicated(keep="first").to_numpy()
        )  # every value compared here
    n = int(dup.sum())
    if n == 0:
        return frame, 0
    return frame[~dup].reset_index(drop=True), n
