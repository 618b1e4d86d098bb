"""The negative controls: a ring one short of the 1F1B live set, and GPipe with the pool forced.

Guard off, both diverge silently from stock (one launch); guard on, each is stopped by
:class:`~pooltk.PoolOverrunError` (one launch each), whose fields arrive here intact from the
rank that raised it. The three launches run side by side. Each control is judged three ways
([Note: three-way verdicts] in pooltk/parity/summary.py): the guard-off launch also runs the
fresh reference (a new buffer per receive), so a control's divergence is shown to be the
pool's (``silent``: stock and fresh agree, pooled does not), and a guarded run is ``loud``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pooltk.parity.experiments import Harness
from pooltk.parity.launch import ParityRankError, ParityReport, ParityTimeoutError, run_parity
from pooltk.parity.spec import ParitySpec, default_variants, with_fresh
from pooltk.parity.summary import Judgement, judge, names_pooltk
from pooltk.pool.errors import PoolOverrunError

__all__ = [
    "CONTROLS",
    "ControlOutcome",
    "NegativeControls",
    "control_variants",
    "run_negative_controls",
]


CONTROLS: dict[str, tuple[str, dict[str, Any]]] = {
    "ring one short": ("1F1B", dict(slack=0, forward_shortfall=1)),
    "GPipe forced": ("GPipe", dict(slack=0)),
}
"""The two negative controls: schedule and pool config (guard set per run), both with
``force=True``.

Ring one short: 1F1B with every forward ring one set below the live set (``W - 1``).
GPipe forced: GPipe keeps all M activations live; the 1F1B-sized ring cannot hold them."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ControlOutcome:
    """A negative control run with the guard on."""

    control: str
    """Key of :data:`CONTROLS`."""
    caught: bool
    """True when the run stopped with ``PoolOverrunError`` (the guard did its job)."""
    error_type: str | None
    """Type of the error the run ended with, ``None`` when it completed."""
    message: str
    """The error message (or what the completed run found)."""
    rank: int | None = None
    stage: int | None = None
    direction: str | None = None
    slot: int | None = None
    ring: int | None = None
    owner: int | None = None
    """Microbatch that still owned the slot."""
    incoming: int | None = None
    """Microbatch whose receive was about to overwrite it."""
    owner_stage: int | None = None
    """The owner's stage, where a rank-shared ring's slot was owned by another stage of the rank."""
    wall_s: float = 0.0

    @property
    def verdict(self) -> str:
        """``loud`` when the run stopped with an error naming pooltk, ``unnamed`` for another error,
        ``silent`` when the guarded run completed (the guard missed the overrun)."""
        if self.error_type is None:
            return "silent"
        return "loud" if names_pooltk(self.error_type, self.message) else "unnamed"


@dataclass(kw_only=True, slots=True)
class NegativeControls:
    """Both negative controls, guard off and guard on."""

    unguarded: ParityReport | None
    """One launch: stock and each control with the guard off (``None`` if that launch failed)."""
    unguarded_error: str | None
    """Why the guard-off launch failed, else ``None``."""
    guarded: list[ControlOutcome]
    """One launch per control with the guard on."""
    wall_s: float
    """Wall time of the three launches (run side by side)."""
    judgements: list[Judgement]
    """Three-way verdict of each guard-off control (expected ``silent``: the negative result)."""

    def verdicts(self) -> dict[tuple[str, str], str]:
        """``(control, "guard off" | "guard on") -> verdict`` for every run."""
        out = {}
        for j in self.judgements:
            control = "GPipe forced" if "/gpipe/" in j.variant else "ring one short"
            out[(control, "guard off")] = j.verdict
        for o in self.guarded:
            out[(o.control, "guard on")] = o.verdict
        return out


def control_variants(*, guard: bool, controls: tuple[str, ...] = tuple(CONTROLS)) -> tuple:
    """Stock plus the pooled control, ``force=True``, for each named control (keys of
    :data:`CONTROLS`)."""
    out: tuple = ()
    for name in controls:
        schedule, fields = CONTROLS[name]
        out += default_variants([Harness(guard=guard, **fields)], schedule=schedule, force=True)
    return out


def _guarded(
    name: str, *, pp: int, microbatches: int, steps: int, timeout_s: float
) -> ControlOutcome:
    spec = ParitySpec(
        pp=pp,
        microbatches=microbatches,
        steps=steps,
        timeout_s=timeout_s,
        variants=control_variants(guard=True, controls=(name,)),
    )
    t0 = time.perf_counter()
    try:
        report = run_parity(spec)
    except PoolOverrunError as exc:
        ended = dict(caught=True, error_type=type(exc).__name__, message=str(exc), **exc.to_dict())
    except (ParityRankError, ParityTimeoutError) as exc:
        ended = dict(caught=False, error_type=type(exc).__name__, message=str(exc))
    else:
        ended = dict(
            caught=False,
            error_type=None,
            message=f"the run completed with the guard on; bitwise_equal={report.bitwise_equal}",
        )
    return ControlOutcome(control=name, wall_s=time.perf_counter() - t0, **ended)


def run_negative_controls(
    *, pp: int = 3, microbatches: int = 6, steps: int = 3, timeout_s: float = 240.0
) -> NegativeControls:
    """Run both controls with the guard off (one launch) and on (one launch each), side by side.

    ``pp`` must be at least 3: with 2 stages the 1F1B live set of the receiving stage is 1
    and a ring cannot be one short of it.
    """
    if pp < 3:
        raise ValueError(
            f"negative controls pp: found {pp}; required >= 3 (with pp=2 the forward live set is "
            "1, so no ring is one short of it). Fix: pp=3 or more."
        )
    from pooltk.memory.model import PipelineShape

    PipelineShape(pp=pp, n_microbatches=microbatches, schedule="1f1b")
    off = ParitySpec(
        pp=pp,
        microbatches=microbatches,
        steps=steps,
        timeout_s=timeout_s,
        variants=with_fresh(control_variants(guard=False)),
    )
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=1 + len(CONTROLS)) as pool:
        fut_off = pool.submit(run_parity, off)
        futs_on = [
            pool.submit(
                _guarded, name, pp=pp, microbatches=microbatches, steps=steps, timeout_s=timeout_s
            )
            for name in CONTROLS
        ]
        guarded = [f.result() for f in futs_on]
        try:
            unguarded, error = fut_off.result(), None
        except (ParityRankError, ParityTimeoutError, PoolOverrunError) as exc:
            unguarded, error = None, f"{type(exc).__name__}: {exc}"
    return NegativeControls(
        unguarded=unguarded,
        unguarded_error=error,
        guarded=guarded,
        wall_s=time.perf_counter() - t0,
        judgements=judge(unguarded) if unguarded else [],
    )
