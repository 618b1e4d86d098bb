"""Randomized model fuzzing of the pool on real gloo ranks: pooled vs stock vs fresh, bitwise or
loud.

[Note: fuzz verdicts]
Each case is one model (stage bodies drawn from :data:`pooltk.parity.models.BODIES`: some hand back
or keep views of their received buffers, some keep what they received beyond its forward: hooks on
it, the previous microbatch's input with or without its graph, the previous step's inputs, a cache
keyed by its address, DLPack exports), one schedule, one shape and one mode (training steps, or
forward-only ``schedule.eval`` steps), run three times in the same launch: fresh (a new buffer per
receive), stock torch and pooled. Its verdict is the one of [Note: three-way verdicts]
(pooltk/parity/summary.py): ``equal``, ``explained`` (pooled == fresh while stock's own numbers
depend on its buffer reuse), ``loud``, ``unnamed`` (an error that does not name pooltk), ``outside``
(a model outside the contract, such as an address-keyed cache, that differs), ``silent`` (must be
zero), ``invalid`` (fresh or stock failed).

Bodies are drawn so that torch accepts them and stock is reproducible: on the split-backward
schedules (zero-bubble, V) training never draws a body whose output is a view, which torch's
``stage_backward_input`` refuses, nor one whose backward adds into the previous microbatch's
input gradient, which makes stock itself nondeterministic there
(:data:`~pooltk.parity.models.SPLIT_BACKWARD_BODIES`). Cases are batched
many to a launch (ranks are forked from one zygote); a launch that fails is rerun one case at
a time to attribute the failure; cases where pooled and fresh both differ from stock get a
second launch, pooled vs fresh.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from pooltk._validate import InputError, check_int, check_number
from pooltk.config import PoolConfig
from pooltk.parity.launch import ParityRankError, ParityTimeoutError, run_parity
from pooltk.parity.models import AUX_MODES, BODIES, SPLIT_BACKWARD_BODIES
from pooltk.parity.spec import ParitySpec, Variant
from pooltk.parity.summary import (
    VERDICTS,
    fresh_followup,
    judge,
    names_pooltk,
    needs_fresh_comparison,
)
from pooltk.parity.rank import failed_variant

__all__ = [
    "SCHEDULES",
    "SPLIT_BACKWARD",
    "FuzzCase",
    "FuzzResult",
    "FuzzSummary",
    "draw_cases",
    "run_fuzz",
    "summarize",
]

SCHEDULES: tuple[tuple[str, int, str], ...] = (
    ("1F1B", 1, "1f1b"),
    ("Interleaved1F1B", 2, "auto"),
    ("LoopedBFS", 2, "auto"),
    ("InterleavedZeroBubble", 2, "auto"),
    ("ZBVZeroBubble", 2, "auto"),
    ("DualPipeV", 2, "auto"),
)
"""Every schedule pooltk pools: (torch name, stages per rank, name given to ``install``)."""

SPLIT_BACKWARD: frozenset[str] = frozenset({"InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"})
"""Schedules that run torch's split backward (input gradients, then weight gradients)."""


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
        return (
            f"c{self.case}-pp{self.pp}-{self.schedule}-m{self.microbatches}-{mode}"
            f"-s{self.slack}g{self.grad_slack}"
            f"-{'.'.join(self.bodies)}" + (f"-aux{self.aux}" if self.aux else "")
        )

    def variants(self) -> tuple[Variant, Variant, Variant]:
        """fresh, stock, pooled (in this order: see [Note: three-way verdicts])."""
        common: dict[str, Any] = dict(
            schedule=self.schedule,
            stages_per_rank=self.stages_per_rank,
            bodies=self.bodies,
            aux=self.aux,
            microbatches=self.microbatches,
            eval_only=self.eval_only,
        )
        return (
            Variant(name=f"fresh/{self.label}", buffers="fresh", **common),
            Variant(name=f"stock/{self.label}", **common),
            Variant(
                name=f"pooled/{self.label}",
                pooled=True,
                install_schedule=self.install_schedule,
                config=PoolConfig(slack=self.slack, grad_slack=self.grad_slack),
                **common,
            ),
        )


@dataclass(kw_only=True, slots=True)
class FuzzResult:
    """The verdict of one case."""

    case: FuzzCase
    verdict: str
    """One of :data:`VERDICTS` (see [Note: fuzz verdicts])."""
    detail: str = ""
    """Error type and message for ``loud``/``unnamed``/``invalid``; the differing quantities for
    ``silent``; for ``explained``, why stock's numbers depend on buffer reuse."""
    equal_stock: bool | None = None
    """pooled == stock bitwise (None: the pooled run raised, or stock/fresh failed)."""
    equal_fresh: bool | None = None
    """pooled == fresh bitwise."""
    stock_equal_fresh: bool | None = None
    """stock == fresh bitwise (False: stock's own numbers depend on its buffer reuse)."""
    rehomes: int = 0
    """Copy-on-conflict re-homes over all stages of the pooled run."""
    rehomed_bytes: int = 0
    pooled_bytes: int = 0
    """Receive-buffer bytes the pooled run's stages hold at the end (measured)."""
    stock_bytes: int = 0

    def row(self) -> dict[str, Any]:
        c = self.case
        return {
            "case": c.case,
            "pp": c.pp,
            "schedule": c.schedule,
            "microbatches": c.microbatches,
            "mode": "eval" if c.eval_only else "train",
            "slack": c.slack,
            "grad_slack": c.grad_slack,
            "bodies": ".".join(c.bodies),
            "aux": c.aux or "",
            "verdict": self.verdict,
            "equal_stock": self.equal_stock,
            "equal_fresh": self.equal_fresh,
            "stock_equal_fresh": self.stock_equal_fresh,
            "rehomes": self.rehomes,
            "rehomed_bytes": self.rehomed_bytes,
            "pooled_recv_bytes": self.pooled_bytes,
            "stock_recv_bytes": self.stock_bytes,
            "detail": self.detail,
        }


def draw_cases(n: int, seed: int = 0, *, pp_choices: tuple[int, ...] = (2, 3, 4)) -> list[FuzzCase]:
    """``n`` cases drawn from ``seed``: every schedule in turn, random pp, M, bodies, aux, mode and
    slack."""
    check_int("fuzz cases", n, low=1)
    fix = "rank counts of 2 or more, e.g. pp_choices=(2, 3, 4) (the default)."
    if isinstance(pp_choices, (str, int)) or not pp_choices:  # one count, its digits, or none
        required = "a sequence of integers >= 2"
        raise InputError("fuzz pp_choices", found=repr(pp_choices), required=required, fix=fix)
    for pp in pp_choices:
        check_int("fuzz pp_choices", pp, low=2, fix=fix)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sched, spr, inst = SCHEDULES[i % len(SCHEDULES)]
        pp = rng.choice(pp_choices)
        n_stages = pp * spr
        m = pp * rng.choice((1, 2)) if spr == 1 else n_stages * rng.choice((1, 2))
        if sched == "1F1B":
            m = max(m, pp)
        # torch 2.13 refuses forward-only steps on the V schedules (same-rank handoff needs
        # backward)
        eval_only = rng.random() < 0.35 and sched not in ("ZBVZeroBubble", "DualPipeV")
        pool = SPLIT_BACKWARD_BODIES if sched in SPLIT_BACKWARD and not eval_only else BODIES
        bodies = tuple(rng.choice(pool) for _ in range(n_stages))
        out.append(
            FuzzCase(
                case=i,
                pp=pp,
                schedule=sched,
                stages_per_rank=spr,
                install_schedule=inst,
                microbatches=m,
                bodies=bodies,
                aux=rng.choice((None,) + AUX_MODES),
                eval_only=eval_only,
                slack=rng.choice((0, 0, 1, 2)),
                grad_slack=rng.choice((0, 0, 1)),
            )
        )
    return out


def _bytes(case: FuzzCase, report: Any) -> dict[str, int]:
    _, stock, pooled = (report.variant(v.name) for v in case.variants())
    return {
        "rehomes": sum(d.get("rehomes", 0) for s in pooled.recv.values() for d in s.values()),
        "rehomed_bytes": sum(
            d.get("rehomed_bytes", 0) for s in pooled.recv.values() for d in s.values()
        ),
        "pooled_bytes": sum(d["bytes"] for s in pooled.recv.values() for d in s.values()),
        "stock_bytes": sum(d["bytes"] for s in stock.recv.values() for d in s.values()),
    }


def _verdict(case: FuzzCase, report: Any, followup: Any = None) -> FuzzResult:
    """The three-way verdict of one case from its launch (and the pooled-vs-fresh follow-up, if
    run)."""
    name = case.variants()[2].name
    j = next(j for j in judge(report, followup, {name: case.bodies}) if j.variant == name)
    return FuzzResult(
        case=case,
        verdict=j.verdict,
        detail=j.reason[:400],
        equal_stock=j.equal_stock,
        equal_fresh=j.equal_fresh,
        stock_equal_fresh=j.stock_equal_fresh,
        **_bytes(case, report),
    )


def _spec(pp: int, variants: tuple[Variant, ...], steps: int, timeout_s: float) -> ParitySpec:
    return ParitySpec(
        pp=pp,
        microbatches=max(v.microbatches or 1 for v in variants),
        steps=steps,
        hidden=8,
        seq_len=3,
        rows_per_microbatch=2,
        timeout_s=timeout_s,
        variants=variants,
    )


def _failed(case: FuzzCase, exc: Exception, variant: int = 2) -> FuzzResult:
    """The verdict of a case whose ``variant`` (0 fresh, 1 stock, 2 pooled) made its launch fail."""
    kind = exc.error_type if isinstance(exc, ParityRankError) else type(exc).__name__
    detail = f"{kind}: {exc}"
    if variant < 2:
        detail = f"{('fresh', 'stock')[variant]} run failed: {detail}"
        return FuzzResult(case=case, verdict="invalid", detail=detail[:400])
    verdict = "loud" if names_pooltk(kind, str(exc)) else "unnamed"
    return FuzzResult(case=case, verdict=verdict, detail=detail[:400])


def _followups(cases: list[FuzzCase], report: Any, steps: int, timeout_s: float) -> dict[int, Any]:
    """Pooled vs fresh for the cases of ``report`` where both differ from stock: case -> follow-up
    report."""
    open_names = set(needs_fresh_comparison(report))
    todo = [c for c in cases if c.variants()[2].name in open_names]
    if not todo:
        return {}
    variants = fresh_followup(report, [c.variants()[2].name for c in todo])
    try:
        follow = run_parity(_spec(todo[0].pp, variants, steps, timeout_s))
    except Exception:  # noqa: BLE001 - attribute it: one case at a time
        out = {}
        for c in todo:
            try:
                out[c.case] = run_parity(
                    _spec(c.pp, fresh_followup(report, [c.variants()[2].name]), steps, timeout_s)
                )
            except Exception:  # noqa: BLE001 - left unmeasured: judge() reports it as silent
                out[c.case] = None
        return out
    return {c.case: follow for c in todo}


def _run_one(case: FuzzCase, steps: int, timeout_s: float) -> FuzzResult:
    """One case alone: fresh and stock first in their own launch (to tell invalid from loud), then
    all three."""
    fresh, stock, pooled = case.variants()
    try:
        run_parity(_spec(case.pp, (fresh, stock), steps, timeout_s))
    except (ParityRankError, ParityTimeoutError) as exc:
        return FuzzResult(
            case=case, verdict="invalid", detail=f"fresh/stock run failed: {exc}"[:400]
        )
    try:
        report = run_parity(_spec(case.pp, (fresh, stock, pooled), steps, timeout_s))
    except Exception as exc:  # noqa: BLE001 - classified: the verdict keeps the type and message
        return _failed(case, exc)
    follow = _followups([case], report, steps, timeout_s)
    return _verdict(case, report, follow.get(case.case))


def _owner(exc: Exception, chunk: list[FuzzCase]) -> tuple[FuzzCase, int] | None:
    """The case (and which of its variants: 0 fresh, 1 stock, 2 pooled) whose run made a launch
    fail."""
    name = failed_variant(getattr(exc, "traceback_text", "") or "")
    for c in chunk:
        for k, v in enumerate(c.variants()):
            if v.name == name:
                return c, k
    return None


def _run_chunk(
    chunk: list[FuzzCase], steps: int, timeout_s: float, results: dict[int, FuzzResult]
) -> None:
    """One launch for ``chunk``; on a failure, the failing case is judged from its error and the
    rest rerun.

    Variants run in order with a barrier between them, so the variant a failed rank names is
    the first that failed: a fresh or stock failure makes its case ``invalid``, a pooled one
    ``loud`` or ``unnamed``. A failure without an owner (an overrun rebuilt from its fields)
    splits the chunk in halves, down to one case (:func:`_run_one`).
    """
    if not chunk:
        return
    variants = tuple(v for c in chunk for v in c.variants())
    try:
        report = run_parity(_spec(chunk[0].pp, variants, steps, timeout_s))
    except Exception as exc:  # noqa: BLE001 - attribute it
        owner = _owner(exc, chunk)
        if owner is None:
            if len(chunk) == 1:
                results[chunk[0].case] = _run_one(chunk[0], steps, timeout_s)
                return
            half = len(chunk) // 2
            _run_chunk(chunk[:half], steps, timeout_s, results)
            _run_chunk(chunk[half:], steps, timeout_s, results)
            return
        case, k = owner
        results[case.case] = _failed(case, exc, k)
        _run_chunk([c for c in chunk if c is not case], steps, timeout_s, results)
        return
    follow = _followups(chunk, report, steps, timeout_s)
    for c in chunk:
        results[c.case] = _verdict(c, report, follow.get(c.case))


def run_fuzz(
    cases: list[FuzzCase],
    *,
    steps: int = 2,
    batch: int = 8,
    timeout_s: float = 600.0,
    progress: Any = None,
) -> list[FuzzResult]:
    """Run ``cases`` (``batch`` per launch, grouped by pp) and return one verdict each.

    ``steps`` >= 2 checks what hooks kept and what stock's reuse changed (step 0 also runs
    torch's shape inference).
    """
    check_int("fuzz steps", steps, low=1)
    check_int("fuzz batch", batch, low=1)
    check_number("fuzz timeout_s", timeout_s, fix="seconds per launch, e.g. 600 (the default).")
    results: dict[int, FuzzResult] = {}
    by_pp: dict[int, list[FuzzCase]] = {}
    for c in cases:
        by_pp.setdefault(c.pp, []).append(c)
    for _pp, group in sorted(by_pp.items()):
        for i in range(0, len(group), batch):
            _run_chunk(group[i : i + batch], steps, timeout_s, results)
            if progress is not None:
                progress(len(results), len(cases))
    return [results[c.case] for c in cases]


@dataclass(kw_only=True, slots=True)
class FuzzSummary:
    """Counts over a fuzz run (the table ``pooltk fuzz`` prints and records)."""

    cases: int
    equal: int
    explained: int
    """pooled == fresh while stock differs (stock's numbers depend on its buffer reuse)."""
    loud: int
    outside: int
    """pooled differs from fresh for a model outside the contract (an address-keyed cache): not a
    defect, not a pass."""
    unnamed: int
    """The pooled run raised an error that does not name pooltk (a defect)."""
    silent: int
    invalid: int
    rehomed_cases: int
    """Cases in which copy on conflict re-homed at least one slot."""
    rehomes: int
    rehomed_bytes: int
    by_schedule: dict[str, dict[str, int]] = field(default_factory=dict)


def summarize(results: list[FuzzResult]) -> FuzzSummary:
    counts = {k: sum(r.verdict == k for r in results) for k in VERDICTS}
    by: dict[str, dict[str, int]] = {}
    for r in results:
        row = by.setdefault(r.case.schedule, {"cases": 0, **{k: 0 for k in VERDICTS}})
        row["cases"] += 1
        row[r.verdict] += 1
    return FuzzSummary(
        cases=len(results),
        rehomed_cases=sum(r.rehomes > 0 for r in results),
        rehomes=sum(r.rehomes for r in results),
        rehomed_bytes=sum(r.rehomed_bytes for r in results),
        by_schedule=by,
        **counts,
    )
