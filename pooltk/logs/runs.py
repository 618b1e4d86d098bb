"""Runs inside a file: restarts split apart, identical rank copies folded, the pool a run used.

[Note: run boundaries]
One file can hold several runs (a job that restarted into the same output, two logs
concatenated). Rows are split into *streams* (one per rank the decoration or the record named;
one for rows without a rank) and a stream starts a new run where:

- its train step goes back (with a rank: any step below the stream's highest; without a rank,
  where several ranks may print into one stream a step late, more than one logging interval
  below it);
- (not a clock: a timestamp going back -- a DST fall-back, nodes whose clocks differ by seconds --
  while the steps go on is one run, and a note says where the clock went back);
- a start-up banner (:data:`BANNERS`) appears after the stream already logged a step (a banner
  without a rank applies to every stream, one with a rank to its stream and the rank-less one: a
  plain launch then a ``[rankN]:`` one). A stream first seen after a boundary is in the newest run.

A row belongs to the run its stream is in at that line; runs are numbered in file order and
named ``<run>#1``, ``<run>#2`` when there is more than one. Two runs are never merged and a step
is never deduplicated across runs. Within a run, rows identical in every column but the line
number (copies of one line printed by several ranks without a prefix) are folded into one and
counted (``FileReport.n_folded``); rows that differ in any value are all kept.

[Note: pooled runs]
Pool install lines (:data:`POOL_RE`): NeMo Automodel's ``recv_buffer_pool: installed (slack=N,
layout=L)`` and pooltk's ``pooltk: installed (policy=P, slack=N, grad_slack=G, schedule=S,
layout=L)`` / ``pooltk: not installed (reason=...)``, both on rank 0, inside any logging prefix
(the lines :mod:`pooltk.pool.events` writes; per stage ``pooltk: stage I pooled (fwd ring K/M,
grad ring K/M)`` or ``pooltk: stage I kept stock (reason=...)`` go to the run's facts).
The last one in a run's span of lines sets its ``pooled``, ``pool_impl``, ``slack``, ``layout``
columns; a run with none has them missing (unknown: the log does not say), never False. A run whose
install line is followed only by ``kept stock`` stage lines (the gate refused its schedule) is not pooled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BANNERS", "CLOCK_SLACK_S", "POOL_RE", "PoolLine", "Segments", "find_pool_lines",
           "fold_copies", "segment"]

CLOCK_SLACK_S = 5.0
"""A stream's timestamps going back more than this is noted (never a boundary while its steps go on)."""

BANNERS: tuple[bytes, ...] = (b"torchtitan version: ", b"Starting job: ", b"cfg-path: ", b"Library versions:",
                              b"Benchmarking setup", b"Running with args:", b"Training starts at step ")
"""Text a framework prints once per process start (torchtitan, Automodel, the benchmark recipe)."""

POOL_RE = re.compile(
    r"(?m)^[^\n]*?(?:(?P<am>recv_buffer_pool: installed \(slack=(?P<am_slack>-?\d+), layout=(?P<am_layout>[^)\n]*)\))"
    r"|(?P<pk>pooltk: installed \(policy=(?P<pk_policy>[^,\n]*), slack=(?P<pk_slack>-?\d+), grad_slack=(?P<pk_grad>-?\d+), "
    r"schedule=(?P<pk_schedule>[^,\n]*), layout=(?P<pk_layout>[^,)\n]*)(?:, [a-z_]+=[^,)\n]*)*\))"
    r"|(?P<no>pooltk: not installed \(reason=(?P<no_reason>[^\n]*)\))"
    r"|(?P<am_no>recv_buffer_pool: (?:torch internals mismatch, not installing|no known recv-infra entry points)[^\n]*)"
    r"|(?P<stage>pooltk: stage (?P<st_i>\d+) pooled \(fwd ring (?P<st_fk>\d+)/(?P<st_fm>\d+), grad ring (?P<st_gk>\d+)/(?P<st_gm>\d+)\))"
    r"|(?P<kept>pooltk: stage (?P<kp_i>\d+) kept stock \(reason=(?P<kp_reason>[^\n]*)\)))"
)
"""Pool install lines of NeMo Automodel and pooltk (see [Note: pooled runs])."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PoolLine:
    """One pool line found in a log."""

    line: int
    """1-based line number."""
    kind: str
    """'installed', 'not_installed' or 'stage'."""
    impl: str
    """'automodel' or 'pooltk'."""
    facts: dict[str, Any] = field(default_factory=dict)
    """slack, layout, policy, grad_slack, schedule, reason, or the stage's rings."""


def find_pool_lines(lines: Any, among: Any = None) -> list[PoolLine]:
    """Every pool line among ``lines`` (a polars String Series; ``among``: the 0-based indices to look at),
    wherever it stands in its line, in file order."""
    if among is None:
        hit = lines.str.contains_any(["recv_buffer_pool: ", "pooltk: "]).arg_true()
    else:
        hit = among.filter(lines.gather(among).str.contains_any(["recv_buffer_pool: ", "pooltk: "]))
    if hit.len() == 0:
        return []
    out: list[PoolLine] = []
    for n, text in zip((hit + 1).to_list(), lines.gather(hit).to_list(), strict=True):
        m = POOL_RE.search(text)
        if m is None:
            continue
        g = m.groupdict()
        if g["am"]:
            out.append(PoolLine(line=n, kind="installed", impl="automodel",
                                facts={"slack": int(g["am_slack"]), "layout": g["am_layout"]}))
        elif g["pk"]:
            out.append(PoolLine(line=n, kind="installed", impl="pooltk", facts={
                "slack": int(g["pk_slack"]), "layout": g["pk_layout"], "policy": g["pk_policy"],
                "grad_slack": int(g["pk_grad"]), "schedule": g["pk_schedule"]}))
        elif g["no"]:
            out.append(PoolLine(line=n, kind="not_installed", impl="pooltk", facts={"reason": g["no_reason"]}))
        elif g["am_no"]:
            out.append(PoolLine(line=n, kind="not_installed", impl="automodel", facts={"reason": g["am_no"]}))
        elif g["kept"]:
            out.append(PoolLine(line=n, kind="stage", impl="pooltk", facts={
                "stage": int(g["kp_i"]), "pooled": False, "reason": g["kp_reason"]}))
        else:
            out.append(PoolLine(line=n, kind="stage", impl="pooltk", facts={
                "stage": int(g["st_i"]), "pooled": True, "fwd_ring": f"{g['st_fk']}/{g['st_fm']}",
                "grad_ring": f"{g['st_gk']}/{g['st_gm']}"}))
    return out


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


def segment(frame: Any, *, banners: list[int] = (), banner_ranks: Any = None) -> Segments:  # noqa: C901
    """Split a file's rows (sorted by ``line``) into runs; see [Note: run boundaries].

    ``banners``: 1-based lines of start-up banners; ``banner_ranks``: the rank each banner line
    named (-1 or None for none).
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
    if val_only:  # a validation file (Automodel's validation.jsonl): its val steps going back split it
        train = (frame["kind"] == "val").to_numpy()
    ts = frame["timestamp"].to_numpy(dtype="datetime64[ns]").astype(np.int64)
    has_ts = ts != np.iinfo(np.int64).min
    banner_lines = np.asarray(sorted(banners), dtype=np.int64)
    b_rank = np.full(banner_lines.size, -1, dtype=np.int64) if banner_ranks is None else np.asarray(banner_ranks, dtype=np.int64)
    # quick exit: no step goes back, no clock goes back, no banner after a step in any stream
    order = np.lexsort((lines, stream))
    s_stream, s_step, s_train, s_ts, s_has = stream[order], step[order], train[order], ts[order], has_ts[order]
    same = np.r_[False, s_stream[1:] == s_stream[:-1]]
    back = same & s_train & np.r_[False, s_train[:-1]] & (np.r_[0, np.diff(s_step)] < 0)
    clock = same & s_has & np.r_[False, s_has[:-1]] & (np.r_[0, np.diff(s_ts)] < -int(CLOCK_SLACK_S * 1e9))
    notes = []
    if clock.any():
        where = np.flatnonzero(clock)
        worst = float(-np.diff(s_ts)[where - 1].min() / 1e9)
        notes.append(f"timestamps went back {where.size} time(s) (by up to {worst:,.0f} s; first at line {int(lines[order][where[0]])}) "
                     "while the steps went on: a clock change or skew between nodes, not a restart, so no run boundary")
    late_banner = banner_lines.size > 0 and bool(train.any()) and banner_lines.max() > lines[train].min()
    if not back.any() and not late_banner:
        return Segments(index=np.zeros(n, dtype=np.int64), reasons=[], notes=notes)
    seg = _segment_slow(lines, stream, step, train, banner_lines, b_rank, exact=val_only)
    seg.notes = notes
    return seg


def _segment_slow(lines: Any, stream: Any, step: Any, train: Any, banner_lines: Any, b_rank: Any, *,
                  exact: bool = False) -> Segments:
    """Walk the rows in line order (only for files where a boundary is possible); ``exact``: no lag tolerated."""
    import numpy as np

    order = np.argsort(lines, kind="stable")
    state: dict[int, dict[str, Any]] = {}
    seg_of_stream: dict[int, int] = {}
    index = np.zeros(lines.size, dtype=np.int64)
    reasons: list[str] = []
    n_runs = 1
    bi = 0
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
        # the stream joins the next run (a later stream restarting joins the run another stream already began)
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
                if st.get("stepped") and (br < 0 or br == s or s < 0):  # a rank's banner restarts the rank-less stream too
                    start_new(s, f"start-up banner at line {int(banner_lines[bi])} after steps were logged", int(banner_lines[bi]))
            bi += 1
        s = int(stream[i])
        st = state.setdefault(s, {})
        if train[i]:
            top = st.get("max_step")
            tol = 0 if s >= 0 or exact else interval.get(s, 1)
            if top is not None and step[i] < top - tol:
                start_new(s, f"step went back from {top} to {int(step[i])}" + (f" (rank {s})" if s >= 0 else ""), ln)
                st = state[s]
            st["max_step"] = int(step[i]) if st.get("max_step") is None else max(st["max_step"], int(step[i]))
            st["stepped"] = True
        index[i] = seg_of_stream.setdefault(s, n_runs - 1)  # a stream first seen after a boundary is in the newest run
    return Segments(index=index, reasons=reasons)


def fold_copies(frame: Any) -> tuple[Any, int]:
    """Rows identical in every column but ``line`` folded into the first (within one run); (frame, folded)."""
    import numpy as np

    for kind in ("train", "val"):  # no step logged twice: no copies to fold (the usual case, checked cheaply)
        steps = frame["step"].to_numpy(dtype=np.int64)[(frame["kind"] == kind).to_numpy()]
        if steps.size > 1 and not (np.diff(steps) > 0).all() and np.unique(steps).size < steps.size:
            break
    else:
        return frame, 0
    cols = [c for c in frame.columns if c not in ("line", "collector_time")]
    dup = frame.duplicated(subset=cols, keep="first")
    n = int(dup.sum())
    if n == 0:
        return frame, 0
    return frame[~dup.to_numpy()].reset_index(drop=True), n
