"""Launch a parity run on real gloo ranks (127.0.0.1), bounded in time, and read the results.

The ranks are forked from one process that imported torch once and start through the one rank
entry ([Note: one rank entry] in pooltk/parity/rank.py); a failed launch raises the root cause
(an overrun first, then the earliest error that is no peer's echo), never the peers' echoes.
"""

from __future__ import annotations

import signal
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from pooltk.parity.rank import RankLaunch, launch_ranks
from pooltk.parity.spec import ParitySpec, Variant
from pooltk.pool.errors import PoolOverrunError

__all__ = [
    "ParityRankError",
    "ParityReport",
    "ParityTimeoutError",
    "VariantResult",
    "gather_report",
    "run_parity",
]


class ParityRankError(RuntimeError):
    """A rank of a parity launch failed; ``rank``, ``error_type`` and ``message`` describe the root
    cause."""

    def __init__(self, *, rank: int, error_type: str, message: str, traceback_text: str) -> None:
        self.rank, self.error_type, self.message = rank, error_type, message
        self.traceback_text = traceback_text
        where = _last_frame(traceback_text)
        super().__init__(
            f"parity rank {rank} failed with {error_type}: {message}"
            + (f" (at {where})" if where else "")
        )


def _last_frame(traceback_text: str) -> str:
    """``file:line in func`` of the innermost frame of a formatted traceback, or ''."""
    frames = [ln.strip() for ln in traceback_text.splitlines() if ln.strip().startswith("File ")]
    return frames[-1].replace("File ", "", 1) if frames else ""


class ParityTimeoutError(TimeoutError):
    """The launch did not finish within ``ParitySpec.timeout_s``; every rank was killed."""


@dataclass(slots=True)
class VariantResult:
    """One variant, gathered over all ranks."""

    name: str
    frontend: str
    schedule: str
    pooled: bool
    config: dict[str, Any] | None
    reference: str | None
    """Stock variant it is compared with (None for a stock variant)."""
    losses: list[list[float]]
    """Per step, the last stage's per-microbatch losses."""
    param_sums: dict[int, list[float]]
    """Per rank, the sum of its stages' parameters after each optimizer step."""
    grad_norm: list[float]
    """Per step, global L2 norm of the gradients over all stages."""
    step_times_s: dict[int, list[float]]
    """Per rank, wall time of each step."""
    recv: dict[int, dict[str, dict[str, int]]]
    """Per stage and direction: measured ``bytes``, ``sets``, ``storages``."""
    rings: dict[int, dict[str, int]]
    setup_alloc_bytes: dict[int, int | None]
    """Per rank, bytes torch's stage module allocated from metadata during the first step
    (setup)."""
    params_bitwise_equal: bool | None
    params_max_abs_diff: float | None
    losses_bitwise_equal: bool | None
    losses_max_abs_diff: float | None
    gate: dict[int, str | None]
    peak_live: dict[int, dict[str, int]] = field(default_factory=dict)
    """Per stage and direction, the most buffers the guard saw owned at once (pooled, guard on):
    the live set measured in this run."""
    stages_per_rank: int = 1
    rank_recv: dict[int, dict[str, dict[str, int]]] = field(default_factory=dict)
    """Per rank and direction: distinct storages over all the rank's stages (a shared ring counted
    once)."""
    rank_rings: dict[int, dict[str, list]] = field(default_factory=dict)
    """Per rank and direction: the rings held (``stages`` and ``size``), each once."""
    rank_peak_live: dict[int, dict[str, int]] = field(default_factory=dict)
    """Per rank and direction: the most buffers the guard saw owned at once, summed over its
    distinct rings."""
    usage: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Per stage, what each of its rings held during the last step (``pooltk.pool.ring.RingUse``
    fields)."""
    outputs_bitwise_equal: bool | None = None
    """Every step's merged output and every tensor a stage's hook kept, bitwise equal to the
    reference on every rank (None for a stock variant; records without digests count as equal)."""

    @property
    def bitwise_equal(self) -> bool | None:
        if self.reference is None:
            return None
        return bool(
            self.params_bitwise_equal
            and self.losses_bitwise_equal
            and self.outputs_bitwise_equal is not False
        )

    @property
    def median_step_time_s(self) -> float:
        """Median over steps after the first (which includes setup) of the slowest rank's time."""
        per_step = [max(ranks) for ranks in zip(*self.step_times_s.values())]
        return statistics.median(per_step[1:] if len(per_step) > 1 else per_step)


@dataclass(slots=True)
class ParityReport:
    spec: ParitySpec
    variants: list[VariantResult]
    wall_s: float
    boundary_bytes: int
    """Bytes of the one tensor crossing each stage boundary (per microbatch, per direction)."""

    @property
    def bitwise_equal(self) -> bool:
        """True when every pooled variant is bitwise equal to its stock reference."""
        pooled = [v for v in self.variants if v.reference is not None]
        return bool(pooled) and all(v.bitwise_equal for v in pooled)

    def variant(self, name: str) -> VariantResult:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(f"no variant {name!r}; have {[v.name for v in self.variants]}")

    def to_dict(self) -> dict[str, Any]:
        out = {
            "bitwise_equal": self.bitwise_equal,
            "wall_s": self.wall_s,
            "boundary_bytes": self.boundary_bytes,
            "spec": self.spec.to_dict(),
            "variants": [],
        }
        for v in self.variants:
            out["variants"].append(
                {
                    "name": v.name,
                    "frontend": v.frontend,
                    "schedule": v.schedule,
                    "pooled": v.pooled,
                    "config": v.config,
                    "reference": v.reference,
                    "bitwise_equal": v.bitwise_equal,
                    "params_bitwise_equal": v.params_bitwise_equal,
                    "params_max_abs_diff": v.params_max_abs_diff,
                    "losses_bitwise_equal": v.losses_bitwise_equal,
                    "losses_max_abs_diff": v.losses_max_abs_diff,
                    "median_step_time_s": v.median_step_time_s,
                    "losses": v.losses,
                    "grad_norm": v.grad_norm,
                    "stages": {
                        str(s): {
                            "recv": v.recv[s],
                            "rings": v.rings.get(s, {}),
                            "peak_live": v.peak_live.get(s, {}),
                            "gate": v.gate[s],
                        }
                        for s in sorted(v.recv)
                    },
                    "ranks": {
                        str(r): {
                            "param_sums": v.param_sums[r],
                            "setup_alloc_bytes": v.setup_alloc_bytes[r],
                            "step_times_s": v.step_times_s[r],
                            "recv": v.rank_recv.get(r, {}),
                            "rings": v.rank_rings.get(r, {}),
                            "peak_live": v.rank_peak_live.get(r, {}),
                        }
                        for r in sorted(v.param_sums)
                    },
                }
            )
        return out


def run_parity(
    spec: ParitySpec, *, grace_s: float = 3.0, prelude: str | None = None
) -> ParityReport:
    """Run ``spec`` on ``spec.pp`` spawned gloo ranks and gather a :class:`ParityReport`.

    Raises:
        PoolOverrunError: a rank's guard caught a ring overrun (the rank's own message).
        ParityRankError: a rank failed for another reason (root cause, not peer echoes).
        ParityTimeoutError: the launch ran past ``spec.timeout_s``; all ranks were killed.

    ``prelude`` names a module every rank imports before it starts (to register models, or to
    simulate a torch whose layout pooltk does not know); its errors are the rank's errors.
    """
    t0 = time.perf_counter()
    ranks = launch_ranks(
        "parity",
        spec.to_dict(),
        world=spec.pp,
        timeout_s=spec.timeout_s,
        grace_s=grace_s,
        fork=True,
        prelude=prelude,
    )
    _raise_if_failed(ranks, spec.timeout_s)
    return gather_report(spec, ranks.results, time.perf_counter() - t0)


def _raise_if_failed(ranks: RankLaunch, timeout_s: float) -> None:
    """The launch's failure as the error of its root cause: an overrun, a rank's error, the
    timeout, or ranks that died without results."""
    cause = ranks.cause()
    if cause is not None:
        if cause["overrun"]:
            # the rank's own error, rebuilt from its fields with the rank filled in
            raise PoolOverrunError.from_dict({**cause["overrun"], "rank": cause["rank"]})
        raise ParityRankError(
            rank=cause["rank"],
            error_type=cause["type"],
            message=cause["message"],
            traceback_text=cause["traceback"],
        )
    if ranks.launch.timed_out:
        raise ParityTimeoutError(
            f"parity launch exceeded timeout_s={timeout_s:g}s; ranks {ranks.missing} had not "
            "finished and all ranks were killed. Fix: raise ParitySpec.timeout_s (--timeout) or "
            "use fewer microbatches/steps."
        )
    if ranks.missing:
        first = ranks.missing[0]
        code = ranks.launch.codes[0]
        raise ParityRankError(
            rank=first,
            error_type="ProcessDied",
            message=f"ranks {ranks.missing} exited without results (launcher exit code "
            f"{code if code is not None else -signal.SIGKILL}); rank {first} printed:\n"
            f"{ranks.tails[first]}",
            traceback_text=ranks.tails[first],
        )


def gather_report(
    spec: ParitySpec, per_rank: list[list[dict[str, Any]]], wall_s: float
) -> ParityReport:
    """Build the report from every rank's records (as the launcher or a torchrun rank 0 gathered
    them)."""
    results = [
        _variant_result(v, [records[vi] for records in per_rank])
        for vi, v in enumerate(spec.variants)
    ]
    # the losses' reference: the last unpooled variant of a run key
    stock_losses = {v.run_key: flat for v, (_, flat) in zip(spec.variants, results) if not v.pooled}
    for v, (res, mine) in zip(spec.variants, results):
        if res.reference is None:
            continue
        ref = stock_losses.get(v.run_key)
        res.losses_bitwise_equal = ref is not None and mine == ref
        res.losses_max_abs_diff = max((abs(a - b) for a, b in zip(mine, ref or [])), default=0.0)
    boundary = spec.rows_per_microbatch * spec.seq_len * spec.hidden * 4
    return ParityReport(
        spec=spec, variants=[res for res, _ in results], wall_s=wall_s, boundary_bytes=boundary
    )


def _variant_result(v: Variant, recs: list[dict[str, Any]]) -> tuple[VariantResult, list[float]]:
    """One variant over every rank's record, and the last stage's losses and eval sums, flat."""
    last = next(r for r in recs if r["has_last"])
    ref_name = recs[0]["reference"]
    params_equal = outputs_equal = max_diff = None
    if ref_name is not None:
        params_equal = all(r["params_bitwise_equal"] for r in recs)
        outputs_equal = all(r.get("outputs_bitwise_equal", True) for r in recs)
        max_diff = max(r["params_max_abs_diff"] for r in recs)
    stages = {int(s): d for r in recs for s, d in r["stages"].items()}
    stages = dict(sorted(stages.items()))
    by_rank = {r["rank"]: r for r in recs}
    result = VariantResult(
        name=v.name,
        frontend=v.frontend,
        schedule=v.schedule,
        pooled=v.pooled,
        config=v.config.to_dict() if v.config else None,
        reference=ref_name,
        losses=last["losses"],
        param_sums={rank: r["param_sums"] for rank, r in by_rank.items()},
        grad_norm=[sum(step) ** 0.5 for step in zip(*(r["grad_sq"] for r in recs))],
        step_times_s={rank: r["step_times_s"] for rank, r in by_rank.items()},
        recv={s: d["recv"] for s, d in stages.items()},
        rings={s: d["rings"] for s, d in stages.items()},
        peak_live={s: d["peak_live"] for s, d in stages.items()},
        usage={s: d.get("usage", []) for s, d in stages.items()},
        setup_alloc_bytes={rank: r["setup_alloc_bytes"] for rank, r in by_rank.items()},
        params_bitwise_equal=params_equal,
        outputs_bitwise_equal=outputs_equal,
        params_max_abs_diff=max_diff,
        losses_bitwise_equal=None,
        losses_max_abs_diff=None,
        gate={s: d["gate"] for s, d in stages.items()},
        stages_per_rank=v.stages_per_rank,
        rank_recv={rank: r.get("rank_recv", {}) for rank, r in by_rank.items()},
        rank_rings={rank: r.get("rank_rings", {}) for rank, r in by_rank.items()},
        rank_peak_live={rank: r.get("rank_peak_live", {}) for rank, r in by_rank.items()},
    )
    return result, [x for step in last["losses"] for x in step] + last["eval_sums"]
