"""Randomized model fuzzing of the pool on real gloo ranks: pooled vs stock, bitwise or loud.

[Note: fuzz verdicts]
Each case is one model (stage bodies drawn from :data:`pooltk.parity.models.BODIES`, some
of which hand back or keep views of their received buffers), one schedule, one shape and
one mode (training steps, or forward-only ``schedule.eval`` steps), run twice in the same
launch: stock torch and pooled. Its verdict is

- ``equal``: final parameters, every loss, every merged output and every tensor a hook
  kept are bitwise equal to stock;
- ``loud``: the pooled run raised a pooltk error that names its cause
  (:class:`~pooltk.pool.guard.PoolOverrunError`, :class:`~pooltk.pool.gating.PoolSetupError`);
- ``silent``: anything else that differs. The pool's promise is that this count is zero.

A case whose *stock* run fails (a shape torch itself refuses) is ``invalid`` and reported,
never counted as a pass. Cases are batched many to a launch (ranks are forked from one
zygote); a launch that fails is rerun one case at a time to attribute the failure.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from pooltk._validate import check_int
from pooltk.config import PoolConfig
from pooltk.parity.launch import ParityRankError, ParityTimeoutError, run_parity
from pooltk.parity.models import AUX_MODES, BODIES
from pooltk.parity.spec import ParitySpec, Variant

__all__ = ["SCHEDULES", "FuzzCase", "FuzzResult", "FuzzSummary", "draw_cases", "run_fuzz", "summarize"]

SCHEDULES: tuple[tuple[str, int, str], ...] = (
    ("1F1B", 1, "1f1b"),
    ("Interleaved1F1B", 2, "auto"),
    ("LoopedBFS", 2, "auto"),
    ("InterleavedZeroBubble", 2, "auto"),
    ("ZBVZeroBubble", 2, "auto"),
    ("DualPipeV", 2, "auto"),
)
"""Every schedule pooltk pools: (torch name, stages per rank, name given to ``install``)."""

_LOUD = ("PoolOverrunError", "PoolSetupError")


@dataclass(kw_only=True, slots=True, frozen=True)
class FuzzCase:
    """One drawn case (see [Note: fuzz verdicts])."""

    case: int
    """Index in the draw (stable for a seed)."""
    pp: int
    """Ranks (2-4)."""
    schedule: str
    """torch schedule name."""
    stages_per_rank: int
    install_schedule: str
    """``1f1b`` or ``auto``, as given to ``pooltk.install``."""
    microbatches: int
    bodies: tuple[str, ...]
    """One body per global stage."""
    aux: str | None
    """Second boundary tensor (float64): ``pass``, ``mix`` or None."""
    eval_only: bool
    """Forward-only steps instead of training steps."""
    slack: int
    grad_slack: int

    @property
    def label(self) -> str:
        mode = "eval" if self.eval_only else "train"
        return (f"c{self.case}-pp{self.pp}-{self.schedule}-m{self.microbatches}-{mode}-s{self.slack}g{self.grad_slack}"
                f"-{'.'.join(self.bodies)}" + (f"-aux{self.aux}" if self.aux else ""))

    def variants(self) -> tuple[Variant, Variant]:
        common: dict[str, Any] = dict(schedule=self.schedule, stages_per_rank=self.stages_per_rank, bodies=self.bodies,
                                      aux=self.aux, microbatches=self.microbatches, eval_only=self.eval_only)
        return (Variant(name=f"stock/{self.label}", **common),
                Variant(name=f"pooled/{self.label}", pooled=True, install_schedule=self.install_schedule,
                        config=PoolConfig(slack=self.slack, grad_slack=self.grad_slack), **common))


@dataclass(kw_only=True, slots=True)
class FuzzResult:
    """The verdict of one case."""

    case: FuzzCase
    verdict: str
    """``equal``, ``loud``, ``silent`` or ``invalid`` (see [Note: fuzz verdicts])."""
    detail: str = ""
    """Error type and message for ``loud``/``invalid``; the differing quantities for ``silent``."""
    rehomes: int = 0
    """Copy-on-conflict re-homes over all stages of the pooled run."""
    rehomed_bytes: int = 0
    pooled_bytes: int = 0
    """Receive-buffer bytes the pooled run's stages hold at the end (measured)."""
    stock_bytes: int = 0

    def row(self) -> dict[str, Any]:
        c = self.case
        return {"case": c.case, "pp": c.pp, "schedule": c.schedule, "microbatches": c.microbatches,
                "mode": "eval" if c.eval_only else "train", "slack": c.slack, "grad_slack": c.grad_slack,
                "bodies": ".".join(c.bodies), "aux": c.aux or "", "verdict": self.verdict,
                "rehomes": self.rehomes, "rehomed_bytes": self.rehomed_bytes, "pooled_recv_bytes": self.pooled_bytes,
                "stock_recv_bytes": self.stock_bytes, "detail": self.detail}


def draw_cases(n: int, seed: int = 0, *, pp_choices: tuple[int, ...] = (2, 3, 4)) -> list[FuzzCase]:
    """``n`` cases drawn from ``seed``: every schedule in turn, random pp, M, bodies, aux, mode and slack."""
    check_int("fuzz cases", n, low=1)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sched, spr, inst = SCHEDULES[i % len(SCHEDULES)]
        pp = rng.choice(pp_choices)
        n_stages = pp * spr
        m = pp * rng.choice((1, 2)) if spr == 1 else n_stages * rng.choice((1, 2))
        if sched == "1F1B":
            m = max(m, pp)
        bodies = tuple(rng.choice(BODIES) for _ in range(n_stages))
        out.append(FuzzCase(
            case=i, pp=pp, schedule=sched, stages_per_rank=spr, install_schedule=inst, microbatches=m,
            bodies=bodies, aux=rng.choice((None,) + AUX_MODES),
            # torch 2.13 refuses forward-only steps on the V schedules (same-rank handoff needs backward)
            eval_only=rng.random() < 0.35 and sched not in ("ZBVZeroBubble", "DualPipeV"),
            slack=rng.choice((0, 0, 1, 2)), grad_slack=rng.choice((0, 0, 1)),
        ))
    return out


def _verdict(case: FuzzCase, report: Any) -> FuzzResult:
    stock, pooled = report.variant(case.variants()[0].name), report.variant(case.variants()[1].name)
    rehomes = sum(d.get("rehomes", 0) for s in pooled.recv.values() for d in s.values())
    rbytes = sum(d.get("rehomed_bytes", 0) for s in pooled.recv.values() for d in s.values())
    pb = sum(d["bytes"] for s in pooled.recv.values() for d in s.values())
    sb = sum(d["bytes"] for s in stock.recv.values() for d in s.values())
    if pooled.bitwise_equal:
        return FuzzResult(case=case, verdict="equal", rehomes=rehomes, rehomed_bytes=rbytes, pooled_bytes=pb,
                          stock_bytes=sb)
    detail = (f"params_equal={pooled.params_bitwise_equal} (max diff {pooled.params_max_abs_diff}), "
              f"losses_equal={pooled.losses_bitwise_equal}, outputs_equal={pooled.outputs_bitwise_equal}")
    return FuzzResult(case=case, verdict="silent", detail=detail, rehomes=rehomes, rehomed_bytes=rbytes,
                      pooled_bytes=pb, stock_bytes=sb)


def _spec(pp: int, variants: tuple[Variant, ...], steps: int, timeout_s: float) -> ParitySpec:
    return ParitySpec(pp=pp, microbatches=max(v.microbatches or 1 for v in variants), steps=steps, hidden=8,
                      seq_len=3, rows_per_microbatch=2, timeout_s=timeout_s, variants=variants)


def _run_one(case: FuzzCase, steps: int, timeout_s: float) -> FuzzResult:
    """One case alone: stock first in its own launch (to tell invalid from loud), then both."""
    stock, pooled = case.variants()
    try:
        run_parity(_spec(case.pp, (stock,), steps, timeout_s))
    except (ParityRankError, ParityTimeoutError) as exc:
        return FuzzResult(case=case, verdict="invalid", detail=f"stock run failed: {exc}"[:400])
    try:
        report = run_parity(_spec(case.pp, (stock, pooled), steps, timeout_s))
    except Exception as exc:  # noqa: BLE001 - classified below; the verdict keeps the type and message
        kind = type(exc).__name__ if not isinstance(exc, ParityRankError) else exc.error_type
        verdict = "loud" if kind in _LOUD else "silent"
        return FuzzResult(case=case, verdict=verdict, detail=f"{kind}: {exc}"[:400])
    return _verdict(case, report)


def run_fuzz(cases: list[FuzzCase], *, steps: int = 2, batch: int = 8, timeout_s: float = 600.0,
             progress: Any = None) -> list[FuzzResult]:
    """Run ``cases`` (``batch`` per launch, grouped by pp) and return one verdict each.

    ``steps`` >= 2 checks what hooks kept (step 0 also runs torch's shape inference).
    """
    check_int("fuzz steps", steps, low=1)
    check_int("fuzz batch", batch, low=1)
    results: dict[int, FuzzResult] = {}
    by_pp: dict[int, list[FuzzCase]] = {}
    for c in cases:
        by_pp.setdefault(c.pp, []).append(c)
    for pp, group in sorted(by_pp.items()):
        for i in range(0, len(group), batch):
            chunk = group[i:i + batch]
            variants = tuple(v for c in chunk for v in c.variants())
            try:
                report = run_parity(_spec(pp, variants, steps, timeout_s))
            except Exception:  # noqa: BLE001 - attribute it: rerun case by case
                for c in chunk:
                    results[c.case] = _run_one(c, steps, timeout_s)
            else:
                for c in chunk:
                    results[c.case] = _verdict(c, report)
            if progress is not None:
                progress(len(results), len(cases))
    return [results[c.case] for c in cases]


@dataclass(kw_only=True, slots=True)
class FuzzSummary:
    """Counts over a fuzz run (the table ``pooltk fuzz`` prints and records)."""

    cases: int
    equal: int
    loud: int
    silent: int
    invalid: int
    rehomed_cases: int
    """Cases in which copy on conflict re-homed at least one slot."""
    rehomes: int
    rehomed_bytes: int
    by_schedule: dict[str, dict[str, int]] = field(default_factory=dict)


def summarize(results: list[FuzzResult]) -> FuzzSummary:
    counts = {k: sum(r.verdict == k for r in results) for k in ("equal", "loud", "silent", "invalid")}
    by: dict[str, dict[str, int]] = {}
    for r in results:
        row = by.setdefault(r.case.schedule, {"cases": 0, "equal": 0, "loud": 0, "silent": 0, "invalid": 0})
        row["cases"] += 1
        row[r.verdict] += 1
    return FuzzSummary(cases=len(results), rehomed_cases=sum(r.rehomes > 0 for r in results),
                       rehomes=sum(r.rehomes for r in results), rehomed_bytes=sum(r.rehomed_bytes for r in results),
                       by_schedule=by, **counts)
