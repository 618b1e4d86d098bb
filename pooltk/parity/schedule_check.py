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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.analysis.programs import CATALOG
from pooltk.parity.experiments import Rings
from pooltk.pool.guard import PoolOverrunError
from pooltk.parity.launch import ParityRankError, ParityTimeoutError, run_parity
from pooltk.parity.spec import ParitySpec, Variant

__all__ = ["STAGES_PER_RANK", "ScheduleCheck", "check_schedules", "guard_catch"]

# Stages per rank used for each schedule: single-stage schedules run 1, the others 2
# (V schedules require 2; the looped ones are run interleaved).
STAGES_PER_RANK: dict[str, int] = {name: entry.stages_per_rank for name, entry in CATALOG.items()}
"""Stages per rank each schedule is validated with (from the one catalog, :data:`pooltk.analysis.programs.CATALOG`)."""

_MEASURE = Rings(policy="measure", sharing="stage")
_TIGHT0 = Rings(slack=0, grad_slack=0, sharing="stage")
_RANK0 = Rings(slack=0, grad_slack=0, sharing="rank")


def _variants(schedule: str) -> list[Variant]:
    vpp = STAGES_PER_RANK[schedule]
    base = dict(schedule=schedule, stages_per_rank=vpp)
    out = [
        Variant(name=f"{schedule}/stock", **base),
        Variant(name=f"{schedule}/measure", pooled=True, config=_MEASURE, install_schedule="auto", **base),
        Variant(name=f"{schedule}/tight0", pooled=True, config=_TIGHT0, install_schedule="auto", **base),
    ]
    if vpp > 1:  # one stage per rank: the rank ring is the stage ring
        out.append(Variant(name=f"{schedule}/rank0", pooled=True, config=_RANK0, install_schedule="auto", **base))
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
    """Per (schedule, pp, M, rank, direction) for multi-stage schedules: ``stock`` distinct sets on the
    rank, ``per_stage`` with per-stage rings, ``rank_shared`` with the rank-shared ring (all slack 0,
    measured), ``analysed`` the rank rings' sizes, ``rank_live`` the rank's live set, ``measured_peak``
    the most buffers the shared ring's guard saw owned, ``parity``."""
    guard: dict[str, str] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """Shapes torch itself rejects for a schedule (schedule, pp, M, reason)."""
    """schedule -> ``caught`` | ``NOT caught`` | ``n/a: ...``."""

    def to_frame(self):  # -> pandas.DataFrame
        import pandas as pd

        return pd.DataFrame(self.rows)

    def rank_frame(self):  # -> pandas.DataFrame
        import pandas as pd

        return pd.DataFrame(self.rank_rows)

    def summary(self):  # -> pandas.DataFrame
        """One row per (schedule, pp, M): totals, parity, whether measured peaks equal the analysis, guard.

        ``rank_shared_buffers`` is the rank-shared rings' measured total (equal to ``pooltk_buffers``, the
        per-stage rings, for single-stage schedules)."""
        df = self.to_frame()
        g = df.groupby(["schedule", "pp", "vpp", "n_microbatches"], sort=False)
        out = g.agg(stock_buffers=("stock", "sum"), pooltk_buffers=("pooltk", "sum"),
                    analysed_peak=("analysed_peak", "sum"), live_min_ring=("analysed_min", "sum"),
                    measured_peak=("measured_peak", "sum"),
                    parity=("parity", "all"), peaks_match=("peak_matches", "all")).reset_index()
        ranks = self.rank_frame()
        shared = (ranks.groupby(["schedule", "pp", "n_microbatches"], sort=False)["rank_shared"].sum().to_dict()
                  if not ranks.empty else {})
        out["rank_shared_buffers"] = [int(shared.get((r.schedule, r.pp, r.n_microbatches), r.pooltk_buffers))
                                      for r in out.itertuples()]
        # a plain lookup: mapping through an empty dict gives float NaN, which pandas refuses to fill with text
        out["guard"] = [self.guard.get(name, "not run") for name in out["schedule"]]
        return out

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r["parity"] and r["peak_matches"] for r in self.rows) and all(
            r["parity"] and r["matches_analysis"] for r in self.rank_rows) and all(
            not v.startswith("NOT") for v in self.guard.values())


def check_schedules(
    *, pps: tuple[int, ...] = (2, 4), factors: tuple[int, ...] = (1, 2, 4), schedules: tuple[str, ...] | None = None,
    steps: int = 1, guard_checks: bool = True, timeout_s: float = 600.0, progress: Any = None,
) -> ScheduleCheck:
    """Run the validation grid; see the module docstring. ``progress(msg)`` is called per launch.

    ``M = factor x (pp x 2)``: a multiple of the stage count of the two-stages-per-rank
    schedules (DualPipeV needs M >= stages), so M is N, 2N, 4N for those and 2N, 4N, 8N
    for 1F1B and GPipe. A shape torch rejects for a schedule is recorded in ``skipped``.
    """
    from pooltk.analysis.programs import ScheduleAnalysisError, analysable_schedules
    from pooltk.analysis.lifetimes import lifetimes, live_sets, min_safe_ring

    all_names = tuple(schedules or analysable_schedules())
    result = ScheduleCheck()
    for pp in pps:
        for factor in factors:
            m = factor * pp * 2
            names = []
            for name in all_names:
                try:
                    lifetimes(name, pp=pp, n_microbatches=m, stages_per_rank=STAGES_PER_RANK[name])
                    names.append(name)
                except ScheduleAnalysisError as exc:
                    result.skipped.append({"schedule": name, "pp": pp, "n_microbatches": m, "reason": str(exc)})
            variants = [v for name in names for v in _variants(name)]
            if progress:
                progress(f"pp{pp} M{m}: {len(variants)} variants ({', '.join(names)})")
            report = run_parity(ParitySpec(pp=pp, microbatches=m, steps=steps, timeout_s=timeout_s,
                                           variants=tuple(variants)))
            for name in names:
                stock, meas, tight = (report.variant(f"{name}/{k}") for k in ("stock", "measure", "tight0"))
                vpp = STAGES_PER_RANK[name]
                spans = lifetimes(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
                live = live_sets(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
                for stage in sorted(stock.recv):
                    for d in DIRECTIONS:
                        analysed = min_safe_ring(spans, stage, d, m)
                        peak = meas.peak_live.get(stage, {}).get(d, 0)
                        result.rows.append({
                            "schedule": name, "pp": pp, "vpp": STAGES_PER_RANK[name], "n_microbatches": m,
                            "stage": stage, "direction": d,
                            "stock": stock.recv[stage][d]["sets"],
                            "pooltk": tight.recv[stage][d]["sets"],
                            "analysed_peak": live[(stage, d)],
                            "analysed_min": analysed,
                            "measured_peak": peak,
                            "peak_matches": peak == live[(stage, d)],
                            "parity": bool(tight.bitwise_equal and meas.bitwise_equal),
                        })
                if STAGES_PER_RANK[name] > 1:
                    result.rank_rows.extend(_rank_rows(name, pp, m, stock, tight, report.variant(f"{name}/rank0")))
    if guard_checks:
        for name in names:
            if progress:
                progress(f"guard check: {name} with the forward ring one short")
            result.guard[name] = guard_catch(name, timeout_s=timeout_s)
    return result


def _rank_rows(name: str, pp: int, m: int, stock: Any, tight: Any, rank0: Any) -> list[dict[str, Any]]:
    """Per (rank, direction): the rank-shared ring measured against the analysis ([Note: rank-shared rings])."""
    from pooltk.analysis.lifetimes import ScheduleShape, analyse
    from pooltk.analysis.programs import resolve_schedule
    from pooltk.analysis.sharing import rank_rings

    prog, spans = analyse(ScheduleShape(schedule=resolve_schedule(name)[1], pp=pp, n_microbatches=m,
                                        stages_per_rank=STAGES_PER_RANK[name]))
    rings = rank_rings(prog, spans, _RANK0)
    rows = []
    for rank in sorted(rank0.rank_recv):
        for d in DIRECTIONS:
            mine = [r for r in rings if r.rank == rank and r.direction == d]
            analysed, live = sum(r.size for r in mine), sum(r.live for r in mine)
            measured = rank0.rank_recv[rank].get(d, {}).get("sets", 0)
            peak = rank0.rank_peak_live.get(rank, {}).get(d, 0)
            rows.append({
                "schedule": name, "pp": pp, "vpp": STAGES_PER_RANK[name], "n_microbatches": m, "rank": rank,
                "direction": d, "stock": stock.rank_recv[rank].get(d, {}).get("sets", 0),
                "per_stage": tight.rank_recv[rank].get(d, {}).get("sets", 0), "rank_shared": measured,
                "analysed": analysed, "rank_live": live, "measured_peak": peak,
                "matches_analysis": measured == analysed and peak == live,
                "parity": bool(rank0.bitwise_equal),
            })
    return rows


def guard_catch(schedule: str, *, timeout_s: float = 300.0) -> str:
    """Run ``schedule`` with every forward ring one below the analysed minimum; the guard must stop it."""
    from pooltk.analysis.lifetimes import lifetimes, min_safe_ring

    vpp = STAGES_PER_RANK[schedule]
    for pp in (2, 4):
        m = 2 * pp
        spans = lifetimes(schedule, pp=pp, n_microbatches=m, stages_per_rank=vpp)
        if any(min_safe_ring(spans, s, "forward", m) >= 2 for s in range(pp * vpp)):
            break
    else:
        return "n/a: every forward live set is 1 at pp2/pp4, no smaller ring exists"
    cfg = Rings(slack=0, grad_slack=0, forward_shortfall=1)
    spec = ParitySpec(pp=pp, microbatches=m, steps=1, timeout_s=timeout_s, variants=(
        Variant(name="stock", schedule=schedule, stages_per_rank=vpp),
        Variant(name="short", schedule=schedule, stages_per_rank=vpp, pooled=True, config=cfg, force=True,
                install_schedule="auto"),
    ))
    try:
        run_parity(spec)
    except PoolOverrunError as exc:
        return f"caught (pp{pp} M{m}): {str(exc).split(':', 2)[1].strip().split('.')[0]}"
    except (ParityRankError, ParityTimeoutError) as exc:
        return f"NOT caught: failed otherwise ({exc})"
    return f"NOT caught (pp{pp} M{m}): the run finished"
