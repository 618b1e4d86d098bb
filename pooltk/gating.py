"""Which schedules may be pooled, and how the schedule driving a stage is observed.

[Note: gating]
A ring is safe only when its size covers the schedule's live set. pooltk proves that
bound for torch's ``Schedule1F1B`` alone (see [Note: ring sizes] in :mod:`pooltk.ring`),
so the allowlist is ``{"1f1b"}``, matched the way torch's ``get_schedule_class`` matches
names (case-insensitive), or the class ``Schedule1F1B`` itself (not subclasses, which may
reorder actions). GPipe posts all M forward receives before any backward, so any ring
smaller than M silently corrupts gradients; every other schedule has its own, deeper
in-flight depth.

The name given at install is only a default. The schedule that actually drives a stage
is observed when it sets the stage up: the setup call is made from the schedule's own
``_initialize_pp_stages``, so the schedule object is on the call stack. When it can be
observed, the observed class decides; when it cannot (a caller set the stage up by hand),
the install-time name decides.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

__all__ = ["ALLOWLIST", "GateDecision", "decide", "normalize_schedule_name", "observe_schedule", "schedule_allowed"]

ALLOWLIST: frozenset[str] = frozenset({"1f1b"})


def normalize_schedule_name(schedule: str | type | object | None) -> str | None:
    """Lower-case schedule name as torch's ``get_schedule_class`` keys it ("1f1b", "gpipe", ...).

    Accepts a name, a schedule class or instance; None stays None.
    """
    if schedule is None:
        return None
    if isinstance(schedule, str):
        return schedule.strip().lower()
    cls = schedule if isinstance(schedule, type) else type(schedule)
    name = cls.__name__
    return (name[len("Schedule"):] if name.startswith("Schedule") else name).lower()


def _schedule_1f1b_class() -> type | None:
    try:
        from torch.distributed.pipelining.schedules import Schedule1F1B
    except ImportError:  # pragma: no cover - torch without pipelining
        return None
    return Schedule1F1B


def schedule_allowed(schedule: str | type | object | None) -> bool:
    """True if ``schedule`` (name, class or instance) is on the allowlist."""
    if schedule is None:
        return False
    if isinstance(schedule, str):
        return normalize_schedule_name(schedule) in ALLOWLIST
    cls = schedule if isinstance(schedule, type) else type(schedule)
    return cls is _schedule_1f1b_class()


def observe_schedule(max_depth: int = 24) -> object | None:
    """The torch pipeline schedule object on the current call stack, if any."""
    try:
        from torch.distributed.pipelining.schedules import _PipelineSchedule
    except ImportError:  # pragma: no cover
        return None
    frame = sys._getframe(1)
    depth = 0
    while frame is not None and depth < max_depth:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, _PipelineSchedule):
            return candidate
        frame = frame.f_back
        depth += 1
    return None


@dataclass(frozen=True, slots=True)
class GateDecision:
    """Whether one stage setup is pooled, and why."""

    pool: bool
    schedule: str | None
    """Normalized name of the schedule that decided (observed, or given at install)."""
    observed: bool
    """True when the driving schedule was seen on the call stack."""
    reason: str


def decide(*, install_schedule: str | None, force: bool) -> GateDecision:
    """Decide for the stage being set up right now. See [Note: gating]."""
    observed = observe_schedule()
    if observed is not None:
        name, allowed, how = normalize_schedule_name(observed), schedule_allowed(observed), "observed"
    else:
        name, allowed, how = normalize_schedule_name(install_schedule), schedule_allowed(install_schedule), "given at install"
    if allowed:
        return GateDecision(pool=True, schedule=name, observed=observed is not None, reason=f"schedule {name!r} ({how}) is allowlisted")
    if force:
        return GateDecision(
            pool=True, schedule=name, observed=observed is not None,
            reason=f"schedule {name!r} ({how}) is not allowlisted; pooled anyway because force=True",
        )
    return GateDecision(
        pool=False, schedule=name, observed=observed is not None,
        reason=(
            f"schedule {name!r} ({how}) has no proven in-flight bound (allowlist: {sorted(ALLOWLIST)}); "
            "stock receive buffers kept. Pass force=True only for experiments."
        ),
    )
