"""Every schedule torch ships, pooled with ``schedule="auto"`` on real gloo ranks.

For each (pp, M) one launch runs, per schedule, a stock reference, a ``measure`` variant
(rings of M: the guard's ownership records how many buffers are really live) and the
tightest safe per-stage ring (slack 0, ``sharing="stage"``), and for a schedule that puts
several stages on a rank the tightest rank-shared ring (slack 0, ``sharing="rank"``: [Note:
rank-shared rings] in pooltk/analysis/sharing.py). Then, per schedule, one launch with the
forward ring one short of the analysed minimum must be stopped by the guard. The result is
two tidy tables: per (stage, direction) stock buffers, pooltk buffers, analysed minimum,
measured peak, parity; and per (rank, direction) the rank-shared ring's distinct storages
measured against the analysis, and the most buffers its guard saw owned against the rank's
live set.

[Note: the claims of a validation]
``pooltk schedules --validate`` writes ``--csv`` only when :meth:`ScheduleCheck.broken` is empty
(the summary is printed either way, the broken claims on stderr, exit 1), so a table it wrote holds
every claim; ``python -m pooltk.parity.schedule_check --check CSV`` re-checks a written table with
:func:`check_rows` (the per-stage claims; the rank rows and guard results are not in the file).
Claims:

- ``covers_the_grid``: every (schedule, pp, M) launched (the grid asked for, less the shapes torch
  rejects), each with every stage and direction once;
- ``every_pooled_run_bitwise_equal``: measure, slack-0 and rank-shared variants equal stock bit for
  bit;
- ``measured_peaks_equal_the_analysis``: the most buffers the guard saw owned = the analysed live
  set (and ``peak_matches`` says so);
- ``slack0_ring_is_the_analysed_minimum``: where a direction is pooled, the slack-0 ring holds the
  analysed minimum; ``pooled_never_holds_more_than_stock``;
- ``analysed_columns_equal_the_analysis``: ``analysed_peak`` and ``analysed_min`` are this code's
  analysis;
- ``rank_rings_match_the_analysis``: a rank-shared ring's storages = the analysed rank rings and its
  guard saw exactly the rank's live set;
- ``guard_catches_a_short_ring``: no guard check reads ``NOT caught``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pooltk.analysis.lifetimes import DIRECTIONS, min_safe_ring
from pooltk.analysis.programs import CATALOG
from pooltk.parity.experiments import Harness
from pooltk.pool.errors import PoolOverrunError
from pooltk.parity.launch import ParityRankError, ParityTimeoutError, run_parity
from pooltk.parity.measured import claim_lines, is_true, read_csv
from pooltk.parity.spec import ParitySpec, Variant

__all__ = [
    "CLAIMS",
    "GRID_FLAGS",
    "STAGES_PER_RANK",
    "ScheduleCheck",
    "check_rows",
    "check_schedules",
    "guard_catch",
    "planned_shapes",
]

STAGES_PER_RANK: dict[str, int] = {name: entry.stages_per_rank for name, entry in CATALOG.items()}
"""Stages per rank each schedule is validated with (from the one catalog,
:data:`pooltk.analysis.programs.CATALOG`): single-stage schedules 1, the others 2 (V schedules
require 2; the looped ones run interleaved)."""

_POOLED: dict[str, Harness] = {
    "measure": Harness(policy="measure", sharing="stage"),
    "tight0": Harness(slack=0, grad_slack=0, sharing="stage"),
    "rank0": Harness(slack=0, grad_slack=0, sharing="rank"),
}
"""The pooled variants of each schedule beside stock, by the name's suffix."""


def _variants(schedule: str) -> list[Variant]:
    vpp = STAGES_PER_RANK[schedule]
    base = dict(schedule=schedule, stages_per_rank=vpp)
    out = [Variant(name=f"{schedule}/stock", **base)]
    for key, harness in _POOLED.items():
        if key == "rank0" and vpp == 1:  # one stage per rank: the rank ring is the stage ring
            continue
        out.append(
            Variant(
                name=f"{schedule}/{key}",
                pooled=True,
                config=harness,
                install_schedule="auto",
                **base,
            )
        )
    return out


@dataclass(slots=True)
class ScheduleCheck:
    """Rows per (schedule, pp, M, stage, direction) and one guard result per schedule.

    Columns: ``stock`` sets torch allocates; ``pooltk`` sets with the slack-0 ring;
    ``analysed_peak`` most buffers live at once by the analysis; ``analysed_min`` smallest
    safe ``c mod K`` ring; ``measured_peak`` most buffers the guard saw owned in the run;
    ``parity`` both pooled variants bitwise equal to stock.
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    rank_rows: list[dict[str, Any]] = field(default_factory=list)
    """Per (schedule, pp, M, rank, direction) for multi-stage schedules: ``stock`` distinct sets on
    the rank, ``per_stage`` with per-stage rings, ``rank_shared`` with the rank-shared ring (all
    slack 0, measured), ``analysed`` the rank rings' sizes, ``rank_live`` the rank's live set,
    ``measured_peak`` the most buffers the shared ring's guard saw owned, ``parity``."""
    guard: dict[str, str] = field(default_factory=dict)
    """schedule -> ``caught`` | ``NOT caught`` | ``n/a: ...``."""
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """Shapes torch itself rejects for a schedule (schedule, pp, M, reason)."""
    shapes: list[tuple[str, int, int, int]] | None = None
    """(schedule, pp, vpp, M) of every shape launched; None: not known (the rows are not checked
    against it)."""

    def to_frame(self):  # -> pandas.DataFrame
        import pandas as pd

        return pd.DataFrame(self.rows)

    def rank_frame(self):  # -> pandas.DataFrame
        import pandas as pd

        return pd.DataFrame(self.rank_rows)

    def summary(self):  # -> pandas.DataFrame
        """One row per (schedule, pp, M): totals, parity, whether measured peaks equal the analysis,
        guard.

        ``rank_shared_buffers`` is the rank-shared rings' measured total (equal to
        ``pooltk_buffers``, the per-stage rings, for single-stage schedules)."""
        df = self.to_frame()
        g = df.groupby(["schedule", "pp", "vpp", "n_microbatches"], sort=False)
        out = g.agg(
            stock_buffers=("stock", "sum"),
            pooltk_buffers=("pooltk", "sum"),
            analysed_peak=("analysed_peak", "sum"),
            live_min_ring=("analysed_min", "sum"),
            measured_peak=("measured_peak", "sum"),
            parity=("parity", "all"),
            peaks_match=("peak_matches", "all"),
        ).reset_index()
        ranks = self.rank_frame()
        shared = (
            ranks.groupby(["schedule", "pp", "n_microbatches"], sort=False)["rank_shared"]
            .sum()
            .to_dict()
            if not ranks.empty
            else {}
        )
        out["rank_shared_buffers"] = [
            int(shared.get((r.schedule, r.pp, r.n_microbatches), r.pooltk_buffers))
            for r in out.itertuples()
        ]
        # a plain lookup: mapping through an empty dict gives float NaN, which pandas refuses to
        # fill with text
        out["guard"] = [self.guard.get(name, "not run") for name in out["schedule"]]
        return out

    def broken(self) -> list[str]:
        """The broken claims of this validation, one line each; see [Note: the claims of a
        validation]."""
        found = _row_findings(self.to_frame(), self.shapes)
        for r in self.rank_rows:
            where = (
                f"{r['schedule']} pp{r['pp']} M{r['n_microbatches']} rank {r['rank']} "
                f"{r['direction']}"
            )
            if not r["parity"]:
                found["every_pooled_run_bitwise_equal"].append(
                    f"{where} (rank-shared): parity False"
                )
            if not (
                r["matches_analysis"]
                and r["rank_shared"] == r["analysed"]
                and r["measured_peak"] == r["rank_live"]
            ):
                found["rank_rings_match_the_analysis"].append(
                    f"{where}: {r['rank_shared']} storages (analysed {r['analysed']}), peak "
                    f"{r['measured_peak']} (live {r['rank_live']})"
                )
        found["guard_catches_a_short_ring"] = [
            f"{k}: {v}" for k, v in self.guard.items() if v.startswith("NOT")
        ]
        return claim_lines(CLAIMS, found)

    @property
    def ok(self) -> bool:
        """No claim broken (see :meth:`broken`)."""
        return not self.broken()


CLAIMS: dict[str, str] = {
    "covers_the_grid": "every (schedule, pp, M) launched, each with every stage and direction once",
    "every_pooled_run_bitwise_equal": "parity True on every row",
    "measured_peaks_equal_the_analysis": "measured_peak = analysed_peak and peak_matches True on "
    "every row",
    "slack0_ring_is_the_analysed_minimum": "pooltk = analysed_min wherever analysed_min > 0",
    "pooled_never_holds_more_than_stock": "pooltk <= stock on every row",
    "analysed_columns_equal_the_analysis": "analysed_peak = live_sets(...), analysed_min = "
    "min_safe_ring(...) of pooltk.analysis.lifetimes",
    "rank_rings_match_the_analysis": "rank-shared storages = the analysed rank rings, the guard's "
    "peak = the rank's live set",
    "guard_catches_a_short_ring": "no guard check NOT caught",
}
"""Claim name -> what it requires. See [Note: the claims of a validation]."""

_ROW_COLUMNS = (
    "schedule",
    "pp",
    "vpp",
    "n_microbatches",
    "stage",
    "direction",
    "stock",
    "pooltk",
    "analysed_peak",
    "analysed_min",
    "measured_peak",
    "peak_matches",
    "parity",
)


def _row_findings(frame: Any, shapes: Any) -> dict[str, list[str]]:
    """Per claim, what each row that breaks it found (the claims a per-stage table can hold)."""
    from pooltk.analysis.lifetimes import lifetimes, live_sets
    from pooltk.analysis.programs import ScheduleAnalysisError

    found: dict[str, list[str]] = {name: [] for name in CLAIMS}
    missing = [c for c in _ROW_COLUMNS if c not in frame.columns]
    if missing or frame.empty:
        found["covers_the_grid"].append(
            f"no column(s) {', '.join(missing)}" if missing else "no rows"
        )
        return found
    keys = ["schedule", "pp", "vpp", "n_microbatches"]
    held = [tuple(k) for k in frame[keys].drop_duplicates().itertuples(index=False)]
    if shapes is not None:
        want = [tuple(x) for x in shapes]
        found["covers_the_grid"] += [f"{_shape(k)} missing" for k in want if k not in held]
        found["covers_the_grid"] += [f"{_shape(k)} not asked for" for k in held if k not in want]
    for key, part in frame.groupby(keys, sort=False):
        name, pp, vpp, m = key
        cells = sorted(zip(part["stage"], part["direction"]))
        if cells != sorted((st, d) for st in range(int(pp) * int(vpp)) for d in DIRECTIONS):
            found["covers_the_grid"].append(f"{_shape(key)}: stages and directions {cells}")
        try:
            spans = lifetimes(name, pp=int(pp), n_microbatches=int(m), stages_per_rank=int(vpp))
            live = live_sets(name, pp=int(pp), n_microbatches=int(m), stages_per_rank=int(vpp))
        except ScheduleAnalysisError as exc:
            found["analysed_columns_equal_the_analysis"].append(
                f"{_shape(key)}: not analysable here ({exc})"
            )
            spans = live = None
        for r in part.itertuples():
            _check_row(found, f"{_shape(key)} stage {r.stage} {r.direction}", r, spans, live)
    return found


def _check_row(found: dict[str, list[str]], where: str, r: Any, spans: Any, live: Any) -> None:
    """What one (stage, direction) row breaks, added to ``found`` per claim; ``spans`` and
    ``live`` are its shape's analysis (None: not analysable here)."""
    if not is_true(r.parity):
        found["every_pooled_run_bitwise_equal"].append(f"{where}: parity {r.parity}")
    if r.measured_peak != r.analysed_peak or not is_true(r.peak_matches):
        found["measured_peaks_equal_the_analysis"].append(
            f"{where}: measured {r.measured_peak}, analysed {r.analysed_peak}, peak_matches "
            f"{r.peak_matches}"
        )
    if r.analysed_min > 0 and r.pooltk != r.analysed_min:
        found["slack0_ring_is_the_analysed_minimum"].append(
            f"{where}: {r.pooltk} sets, minimum {r.analysed_min}"
        )
    if r.pooltk > r.stock:
        found["pooled_never_holds_more_than_stock"].append(
            f"{where}: {r.pooltk} sets, stock {r.stock}"
        )
    if live is not None and (r.stage, r.direction) in live:
        want_peak = live[(r.stage, r.direction)]
        want_min = min_safe_ring(spans, r.stage, r.direction, int(r.n_microbatches))
        if (r.analysed_peak, r.analysed_min) != (want_peak, want_min):
            found["analysed_columns_equal_the_analysis"].append(
                f"{where}: peak {r.analysed_peak}, minimum {r.analysed_min} (analysis {want_peak}, "
                f"{want_min})"
            )


def _shape(key: Any) -> str:
    name, pp, vpp, m = key
    return f"{name} pp{pp} vpp{vpp} M{m}"


def check_rows(frame: Any, shapes: Any = None) -> list[str]:
    """The broken claims of a per-stage validation table (``ScheduleCheck.to_frame()`` or its CSV),
    one line each.

    ``shapes``: the (schedule, pp, vpp, M) the table must cover (:func:`planned_shapes`); None:
    those it holds.
    """
    return claim_lines(CLAIMS, _row_findings(frame, shapes))


def planned_shapes(
    pps: tuple[int, ...],
    factors: tuple[int, ...],
    schedules: tuple[str, ...] | None = None,
) -> tuple[list[tuple[str, int, int, int]], list[dict[str, Any]]]:
    """(schedule, pp, vpp, M) the grid launches, in launch order, and the shapes torch rejects (with
    the reason).

    ``M = factor x (pp x 2)``; see :func:`check_schedules`. ``schedules``: torch names in any case
    (one name alone is one schedule); an unknown one is a :class:`ScheduleAnalysisError`.
    """
    from pooltk.analysis.programs import (
        ScheduleAnalysisError,
        analysable_schedules,
        resolve_schedule,
    )
    from pooltk.analysis.lifetimes import lifetimes

    fix = "rank counts of 2 or more (one gloo rank per stage), e.g. 2 4 (the default)."
    _check_grid("pps", pps, low=2, fix=fix)
    fix = "factors of 1 or more (M = factor x 2pp), e.g. 1 2 4 (the default)."
    _check_grid("factors", factors, low=1, fix=fix)
    if isinstance(schedules, str):
        schedules = (schedules,)
    names = tuple(resolve_schedule(n)[0] for n in schedules or analysable_schedules())
    shapes, skipped = [], []
    for pp in pps:
        for factor in factors:
            m = factor * pp * 2
            for name in names:
                try:
                    lifetimes(name, pp=pp, n_microbatches=m, stages_per_rank=STAGES_PER_RANK[name])
                    shapes.append((name, pp, STAGES_PER_RANK[name], m))
                except ScheduleAnalysisError as exc:
                    skipped.append(
                        {"schedule": name, "pp": pp, "n_microbatches": m, "reason": str(exc)}
                    )
    return shapes, skipped


GRID_FLAGS: dict[str, str] = {"pps": "--pp", "factors": "--factors"}
"""The flag that sets each grid argument of :func:`planned_shapes`, for an error a command line
prints (``pooltk schedules --validate``, ``python -m pooltk.parity.schedule_check``)."""


def _check_grid(what: str, values: Any, *, low: int, fix: str) -> None:
    """``values`` is a non-empty sequence of integers >= ``low``, else :class:`InputError` (a
    command line maps ``what`` to its flag: :data:`GRID_FLAGS`)."""
    from pooltk._validate import InputError, check_int

    if isinstance(values, (str, int)) or not values:
        required = f"a sequence of integers >= {low}"
        raise InputError(what, found=repr(values), required=required, fix=fix)
    for value in values:
        check_int(what, value, low=low, fix=fix)


def check_schedules(
    *,
    pps: tuple[int, ...] = (2, 4),
    factors: tuple[int, ...] = (1, 2, 4),
    schedules: tuple[str, ...] | None = None,
    steps: int = 1,
    guard_checks: bool = True,
    timeout_s: float = 600.0,
    progress: Any = None,
) -> ScheduleCheck:
    """Run the validation grid; see the module docstring. ``progress(msg)`` is called per launch.

    ``M = factor x (pp x 2)``: a multiple of the stage count of the two-stages-per-rank
    schedules (DualPipeV needs M >= stages), so M is N, 2N, 4N for those and 2N, 4N, 8N
    for 1F1B and GPipe. A shape torch rejects for a schedule is recorded in ``skipped``.
    """
    shapes, skipped = planned_shapes(pps, factors, schedules)
    result = ScheduleCheck(skipped=skipped, shapes=shapes)
    for pp in pps:
        for factor in factors:
            m = factor * pp * 2
            names = [name for name, p, _, mb in shapes if (p, mb) == (pp, m)]
            if not names:
                continue
            variants = [v for name in names for v in _variants(name)]
            if progress:
                progress(f"pp{pp} M{m}: {len(variants)} variants ({', '.join(names)})")
            report = run_parity(
                ParitySpec(
                    pp=pp,
                    microbatches=m,
                    steps=steps,
                    timeout_s=timeout_s,
                    variants=tuple(variants),
                )
            )
            for name in names:
                result.rows.extend(_stage_rows(name, pp, m, report))
                if STAGES_PER_RANK[name] > 1:
                    result.rank_rows.extend(_rank_rows(name, pp, m, report))
    if guard_checks:  # once per schedule the grid launched
        for name in dict.fromkeys(name for name, *_ in shapes):
            if progress:
                progress(f"guard check: {name} with the forward ring one short")
            result.guard[name] = guard_catch(name, timeout_s=timeout_s)
    return result


def _stage_rows(name: str, pp: int, m: int, report: Any) -> list[dict[str, Any]]:
    """Per (stage, direction): stock and slack-0 buffers, the analysed live set and minimum ring,
    and the peak the measure variant's guard saw owned."""
    from pooltk.analysis.lifetimes import lifetimes, live_sets, min_safe_ring

    stock, meas, tight = (report.variant(f"{name}/{k}") for k in ("stock", "measure", "tight0"))
    vpp = STAGES_PER_RANK[name]
    spans = lifetimes(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
    live = live_sets(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
    rows = []
    for stage in sorted(stock.recv):
        for d in DIRECTIONS:
            peak = meas.peak_live.get(stage, {}).get(d, 0)
            rows.append(
                {
                    "schedule": name,
                    "pp": pp,
                    "vpp": vpp,
                    "n_microbatches": m,
                    "stage": stage,
                    "direction": d,
                    "stock": stock.recv[stage][d]["sets"],
                    "pooltk": tight.recv[stage][d]["sets"],
                    "analysed_peak": live[(stage, d)],
                    "analysed_min": min_safe_ring(spans, stage, d, m),
                    "measured_peak": peak,
                    "peak_matches": peak == live[(stage, d)],
                    "parity": bool(tight.bitwise_equal and meas.bitwise_equal),
                }
            )
    return rows


def _rank_rows(name: str, pp: int, m: int, report: Any) -> list[dict[str, Any]]:
    """Per (rank, direction): the rank-shared ring measured against the analysis ([Note: rank-shared
    rings])."""
    from pooltk.analysis.lifetimes import ScheduleShape, analyse
    from pooltk.analysis.programs import resolve_schedule
    from pooltk.analysis.sharing import rank_rings

    prog, spans = analyse(
        ScheduleShape(
            schedule=resolve_schedule(name)[1],
            pp=pp,
            n_microbatches=m,
            stages_per_rank=STAGES_PER_RANK[name],
        )
    )
    rings = rank_rings(
        prog,
        spans,
        lambda live, receives, d: _POOLED["rank0"].ring_size(
            live=live, receives=receives, direction=d
        ),
    )
    stock, tight, rank0 = (report.variant(f"{name}/{k}") for k in ("stock", "tight0", "rank0"))
    rows = []
    for rank in sorted(rank0.rank_recv):
        for d in DIRECTIONS:
            mine = [r for r in rings if r.rank == rank and r.direction == d]
            analysed, live = sum(r.size for r in mine), sum(r.live for r in mine)
            measured = rank0.rank_recv[rank].get(d, {}).get("sets", 0)
            peak = rank0.rank_peak_live.get(rank, {}).get(d, 0)
            rows.append(
                {
                    "schedule": name,
                    "pp": pp,
                    "vpp": STAGES_PER_RANK[name],
                    "n_microbatches": m,
                    "rank": rank,
                    "direction": d,
                    "stock": stock.rank_recv[rank].get(d, {}).get("sets", 0),
                    "per_stage": tight.rank_recv[rank].get(d, {}).get("sets", 0),
                    "rank_shared": measured,
                    "analysed": analysed,
                    "rank_live": live,
                    "measured_peak": peak,
                    "matches_analysis": measured == analysed and peak == live,
                    "parity": bool(rank0.bitwise_equal),
                }
            )
    return rows


def guard_catch(schedule: str, *, timeout_s: float = 300.0) -> str:
    """Run ``schedule`` with every forward ring one below the analysed minimum; the guard must stop
    it."""
    from pooltk.analysis.lifetimes import lifetimes, min_safe_ring

    vpp = STAGES_PER_RANK[schedule]
    for pp in (2, 4):
        m = 2 * pp
        spans = lifetimes(schedule, pp=pp, n_microbatches=m, stages_per_rank=vpp)
        if any(min_safe_ring(spans, s, "forward", m) >= 2 for s in range(pp * vpp)):
            break
    else:
        return "n/a: every forward live set is 1 at pp2/pp4, no smaller ring exists"
    cfg = Harness(slack=0, grad_slack=0, forward_shortfall=1)
    spec = ParitySpec(
        pp=pp,
        microbatches=m,
        steps=1,
        timeout_s=timeout_s,
        variants=(
            Variant(name="stock", schedule=schedule, stages_per_rank=vpp),
            Variant(
                name="short",
                schedule=schedule,
                stages_per_rank=vpp,
                pooled=True,
                config=cfg,
                force=True,
                install_schedule="auto",
            ),
        ),
    )
    try:
        run_parity(spec)
    except PoolOverrunError as exc:
        return f"caught (pp{pp} M{m}): {str(exc).split(':', 2)[1].strip().split('.')[0]}"
    except (ParityRankError, ParityTimeoutError) as exc:
        return f"NOT caught: failed otherwise ({exc})"
    return f"NOT caught (pp{pp} M{m}): the run finished"


def _parser() -> Any:
    import argparse

    p = argparse.ArgumentParser(
        prog="python -m pooltk.parity.schedule_check", description=main.__doc__
    )
    p.add_argument(
        "--check",
        metavar="CSV",
        required=True,
        help="a CSV written by pooltk schedules --validate --csv",
    )
    p.add_argument(
        "--pp", nargs="+", type=int, default=[2, 4], help="the grid it must cover (default 2 4)"
    )
    p.add_argument(
        "--factors", nargs="+", type=int, default=[1, 2, 4], help="M = F x 2pp (default 1 2 4)"
    )
    p.add_argument(
        "--schedule",
        nargs="+",
        default=None,
        help="schedules (default: every one this torch analyses)",
    )
    p.add_argument(
        "--any-shapes", action="store_true", help="check the shapes the file holds, not a grid"
    )
    return p


def main(argv: Any = None) -> int:
    """``python -m pooltk.parity.schedule_check --check CSV``: check a written validation; 0 holds,
    1 breaks, 2 unreadable."""
    import sys

    p = _parser()
    a = p.parse_args(argv)
    from pooltk._validate import InputError, problem
    from pooltk.analysis.programs import ScheduleAnalysisError

    try:
        frame = read_csv(
            a.check,
            what="--check",
            required="a CSV written by `pooltk schedules --validate --csv PATH`",
            error=InputError,
        )
    except InputError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        shapes = None if a.any_shapes else planned_shapes(a.pp, a.factors, a.schedule)[0]
    except InputError as exc:  # a grid flag: named as the flag
        text = problem(GRID_FLAGS[exc.what], found=exc.found, required=exc.required, fix=exc.fix)
        print(f"{p.prog}: error: {text}", file=sys.stderr)
        return 2
    except ScheduleAnalysisError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    broken = check_rows(frame, shapes)
    if broken:
        print(
            f"{p.prog}: error: {a.check} ({len(frame)} rows) breaks {len(broken)} claim(s):",
            file=sys.stderr,
        )
        print("\n".join(f"  {b}" for b in broken), file=sys.stderr)
        return 1
    print(f"{a.check}: {len(frame)} rows hold every claim")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
