"""What the pool keeps: one object per stage behind one attribute, and the install in force.

[Note: a stage's life]
A stage's :class:`StageState` lives in its ``__dict__`` under :data:`ATTR`. Its ``phase``: ``new`` (first
met by a wrapper); ``set-up`` (a setup ran under pooltk and the gate decided; the first compute logs the
rings and decides the release); ``running``; ``late`` (computing without a setup under pooltk: set up before
``install()``, stock until its next setup). Every setup (each eval/train switch) starts again at ``set-up``.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pooltk.pool.report import InstallReport
    from pooltk.pool.ring import DirectionRing

__all__ = [
    "ATTR",
    "CURRENT",
    "LATE",
    "LOCK",
    "MISSING",
    "NEW",
    "RUNNING",
    "SET_UP",
    "StageState",
    "stage_state",
    "state_for",
]

ATTR = "_pooltk"
NEW, SET_UP, RUNNING, LATE = "new", "set-up", "running", "late"


@dataclass(slots=True)
class StageState:
    """The pool's view of one stage (see [Note: a stage's life])."""

    phase: str = NEW
    pooled: bool = False
    """The gate's answer at the last setup: rings for this stage (the release is separate)."""
    reason: str = ""
    """Why pooled or kept stock."""
    schedule: str | None = None
    """The schedule that decided (seen driving the setup, or given at install)."""
    plan: Any = None
    """The ring plan of a schedule pooled with ``schedule="auto"`` (pooltk.analysis.plans.RingPlan)."""
    report: "InstallReport | None" = None
    n_microbatches: int | None = None
    forward: "DirectionRing | None" = None
    grad: "DirectionRing | None" = None
    handoff: dict = field(default_factory=dict)
    """direction -> {position: template} where a same-rank handoff feeds the stage (no receive buffers)."""
    release: bool = False
    """The last stage lets the schedule's kept graphs go after each backward (release.py)."""
    observed: "weakref.ref | None" = None
    """The schedule object seen driving the last setup (the release finds its kept losses there)."""
    outputs: dict = field(default_factory=dict)
    """chunk -> the output forward returned, until its backward (release)."""
    losses: dict = field(default_factory=dict)
    """chunk -> loss of a split backward, until its weight pass (release)."""
    released: int = 0
    kept_graphs: int = 0
    said: set = field(default_factory=set)
    """Log lines already emitted for this stage (each is said once)."""
    instance_methods: tuple[str, ...] = ()
    bound: "InstallReport | None" = None
    """The install :func:`pooltk.pool_stage` made for this stage and the methods it bound (``unpool_stage``)."""

    def rings(self) -> dict[str, "DirectionRing"]:
        return {d: r for d, r in (("forward", self.forward), ("grad", self.grad)) if r is not None}

    def ring(self, direction: str) -> "DirectionRing | None":
        return self.forward if direction == "forward" else self.grad

    def set_ring(self, direction: str, ring: "DirectionRing | None") -> None:
        if direction == "forward":
            self.forward = ring
        else:
            self.grad = ring

    def release_slots(self, chunk: int, stage: int) -> None:
        """The chunk is done with its slots in both directions ([Note: slot ownership])."""
        for ring in (self.forward, self.grad):
            if ring is not None:
                ring.release(chunk, stage)

    def usage(self, stage: int | None = None) -> list:
        """What each ring held during the last step, beside stock and the live set (``RingUse``)."""
        return [
            ring.usage(ring.stage if stage is None else stage) for ring in self.rings().values()
        ]


def stage_state(stage: Any) -> StageState | None:
    """The pool's state of ``stage``, or None for a stage pooltk has never seen."""
    d = getattr(stage, "__dict__", None)
    return d.get(ATTR) if d is not None else None


def state_for(stage: Any) -> StageState:
    """The state of ``stage``, made on first use."""
    st = stage.__dict__.get(ATTR)
    if st is None:
        st = stage.__dict__[ATTR] = StageState()
    return st


MISSING = object()
LOCK = threading.RLock()
"""Guards install, uninstall, pool_stage and the registry of pooled stages."""
CURRENT: list["InstallReport | None"] = [None]
"""The process-wide install in force, if any (a one-element list: rebinding stays inside this module)."""
