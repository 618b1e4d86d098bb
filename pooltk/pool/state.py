"""What the pool keeps: one slotted object per stage behind one attribute, and the process state.

[Note: per-stage state]
Everything the pool knows about a stage lives in one :class:`StageState`, stored in the stage's
``__dict__`` under :data:`ATTR` and read through :func:`stage_state` (the public accessor; the
parity harness and the notebooks use it, nothing outside ``pooltk/pool`` reads the attribute).
A stage without it is a stage the pool has never seen. The object holds the gate's decision,
the rings, what the first use still has to log, what was already logged, and what the release
([Note: releasing what the schedule keeps] in release.py) is holding until a chunk's backward.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pooltk.config import PoolConfig
    from pooltk.pool.gating import GateDecision
    from pooltk.pool.report import InstallReport
    from pooltk.pool.ring import DirectionRing

__all__ = ["ATTR", "LOCK", "STATE", "Context", "ProcessState", "Settings", "StageState", "stage_state",
           "state_for"]

ATTR = "_pooltk"
"""The one attribute of a stage the pool owns (see [Note: per-stage state])."""


@dataclass(slots=True)
class StageState:
    """The pool's view of one stage (see [Note: per-stage state])."""

    report: "InstallReport | None" = None
    """The report this stage's events go to."""
    gate: "GateDecision | None" = None
    """The gate's decision at the stage's last setup (None: never set up under pooltk)."""
    n_microbatches: int | None = None
    """Microbatches per step at the last pooled setup."""
    forward: "DirectionRing | None" = None
    """The activation ring, or None (stock, or nothing received)."""
    grad: "DirectionRing | None" = None
    """The gradient ring, or None."""
    pending: bool = False
    """A setup happened whose rings are not logged yet (logged at first use)."""
    seen: bool = False
    """The stage has computed under pooltk at least once."""
    late: bool = False
    """Seen computing without a setup under pooltk (set up before install)."""
    said: set = field(default_factory=set)
    """Log lines already emitted for this stage (each is said once per distinct content)."""
    rehomed: set = field(default_factory=set)
    """Directions whose first re-home was logged at WARNING."""
    instance_methods: tuple[str, ...] = ()
    """Names :func:`pooltk.pool_stage` bound on the instance."""
    schedule: "weakref.ref | None" = None
    """The schedule observed driving the stage's last setup (for the release)."""
    release: bool = False
    """Let the schedule's kept graphs go after each backward (last stage; see release.py)."""
    outputs: dict = field(default_factory=dict)
    """chunk -> the output object forward returned, until its backward (release)."""
    losses: dict = field(default_factory=dict)
    """chunk -> loss of a split backward, until its weight pass (release)."""
    released: int = 0
    """Microbatches whose kept loss / output the release let go of their graph."""
    kept_graphs: int = 0
    """Microbatches whose graph the release had to keep (the reason is logged)."""
    handoff: dict = field(default_factory=dict)
    """direction -> {position: template} where a same-rank handoff feeds the stage (no receive buffers)."""

    def rings(self) -> dict[str, "DirectionRing"]:
        """The rings the stage holds now, by direction."""
        return {d: r for d, r in (("forward", self.forward), ("grad", self.grad)) if r is not None}

    def release_slots(self, chunk: int, stage: int) -> None:
        """``chunk`` of ``stage`` is done with its slots in both directions (see [Note: slot ownership] in guard.py)."""
        for ring in (self.forward, self.grad):
            if ring is not None:
                ring.release(chunk, stage)

    def usage(self, stage: int | None = None) -> list:
        """What each ring held during the last step, beside stock and the live set (:class:`pooltk.pool.ring.RingUse`)."""
        return [ring.usage(stage) for ring in self.rings().values()]

    def ring(self, direction: str) -> "DirectionRing | None":
        return self.forward if direction == "forward" else self.grad

    def set_ring(self, direction: str, ring: "DirectionRing | None") -> None:
        if direction == "forward":
            self.forward = ring
        else:
            self.grad = ring


def stage_state(stage: Any) -> StageState | None:
    """The pool's state of ``stage``, or None for a stage pooltk has never seen."""
    d = getattr(stage, "__dict__", None)
    return d.get(ATTR) if d is not None else None


def state_for(stage: Any) -> StageState:
    """The state of ``stage``, made empty on first use."""
    d = stage.__dict__
    st = d.get(ATTR)
    if st is None:
        st = d[ATTR] = StageState()
    return st


@dataclass(slots=True)
class Settings:
    """What one install pools with (compared to refuse a second install that differs)."""

    config: "PoolConfig"
    schedule: str | None
    force: bool


@dataclass(slots=True)
class Context:
    """What a wrapper needs: the settings it pools with, and the report it records into."""

    settings: Settings
    report: "InstallReport"
    rings: bool = True
    """False on a layout whose buffers are made per receive (lazy): only the release is installed."""
    groups: "weakref.WeakKeyDictionary" = field(default_factory=weakref.WeakKeyDictionary)
    """schedule -> its rank-shared ring groups (see ``join_rank_ring`` in _patch.py)."""


@dataclass(slots=True)
class ProcessState:
    """The process-wide install (see [Note: install state and late stages] in install.py)."""

    report: "InstallReport | None" = None
    settings: Settings | None = None
    originals: list = field(default_factory=list)
    """(owner class, attribute name, original object or MISSING), in patch order."""
    stages: "weakref.WeakSet[Any]" = field(default_factory=weakref.WeakSet)
    """Live stages that hold a ring (given stock buffers back at uninstall)."""


MISSING = object()
STATE = ProcessState()
LOCK = threading.RLock()
"""Guards patching, install and uninstall, and the registry of pooled stages."""
