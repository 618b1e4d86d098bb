"""An install and what it found and did: the object ``install()``, ``pool_stage()`` and ``probe()`` return."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from pooltk.config import PoolConfig
from pooltk.pool.events import PoolEvent
from pooltk.pool.ring import ring_size

__all__ = ["InstallReport", "PoolWarning", "make_report"]


class PoolWarning(UserWarning):
    """pooltk left stock behaviour in place (unknown torch layout, release turned off on the lazy layout)."""


@dataclass(slots=True, eq=False)
class InstallReport:
    """One install (process-wide, or one stage's; or a probe): what it found, what it does, what happened."""

    installed: bool
    """True when pooltk is active: rings for allowlisted schedules and/or the last-stage release."""
    layout: str | None
    """Layout family detected (``prepare-infra``, ``setup-recv-info``, ``lazy``) or None."""
    reason: str
    """Why: the layout's description when installed, else why not."""
    torch_version: str
    config: PoolConfig | None = None
    schedule: str | None = None
    """Schedule name given at install (the schedule seen driving a setup decides where there is one)."""
    force: bool = False
    alloc_free: bool = False
    """True when only K buffer sets are ever allocated (no transient of all M at setup)."""
    scope: str = "process"
    """``process`` (class-level install), ``stage`` (one stage object) or ``probe``."""
    rings: bool = False
    """True when receive buffers are pooled in rings (eager layouts); False on the lazy layout (release only)."""
    release: bool = False
    """True when the last stage's kept losses and outputs let go of their graphs after each backward."""
    events: list = field(default_factory=list)
    """Every decision and per-stage outcome, in order (:class:`PoolEvent`); the same lines go to the ``pooltk``
    logger on rank 0 ([Note: pool log lines] in events.py)."""
    stages: weakref.WeakSet = field(default_factory=weakref.WeakSet, repr=False)
    """The live stages this install gave a ring (what :meth:`usage` reads; uninstall gives them stock buffers)."""
    active: bool = False
    """True while this install's wrappers act (an uninstalled one's wrappers pass through)."""
    experiment: Any = field(default=None, repr=False)
    """The harness's rings (:class:`pooltk.parity.experiments.Harness`): guard, ring sizes, sharing. None for
    users."""
    found: Any = field(default=None, repr=False)
    """The :class:`~pooltk.pool.adapters.Layout` installed on."""
    originals: list = field(default_factory=list, repr=False)
    """(class, attribute, original object or MISSING) replaced, in patch order."""
    groups: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, repr=False)
    """schedule -> {boundary key: rank-shared ring group} ([Note: rank-shared rings])."""

    @property
    def mode(self) -> str:
        """``rings+release``, ``rings``, ``release`` or ``stock``: what pooltk does here, in one word."""
        parts = [name for name, on in (("rings", self.rings), ("release", self.release)) if on]
        return "+".join(parts) if self.installed and parts else "stock"

    @property
    def guard(self) -> bool:
        return getattr(self.experiment, "guard", True)

    @property
    def sharing(self) -> str:
        return getattr(self.experiment, "sharing", "rank")

    def ring_size(
        self,
        *,
        live: int,
        receives: int,
        direction: str,
        stage: int | None = None,
        num_stages: int | None = None,
    ) -> int:
        """K for a ring whose live set is ``live``: the harness's rings where one is set, else the user's
        config by the one slack rule (:func:`pooltk.pool.ring.ring_size`, [Note: ring sizes])."""
        if self.experiment is not None:
            return self.experiment.ring_size(
                live=live,
                receives=receives,
                direction=direction,
                stage=stage,
                num_stages=num_stages,
            )
        return ring_size(live, receives, direction, self.config)

    def usage(self) -> list:
        """One :class:`~pooltk.pool.ring.RingUse` per live pooled stage and direction: what it held in its last step.

        A row whose ``held_sets`` reaches ``stock`` saved nothing (a WARNING said why when it happened)."""
        from pooltk.pool.state import stage_state

        rows = []
        for stage in sorted(self.stages, key=lambda s: getattr(s, "stage_index", 0)):
            st = stage_state(stage)
            if st is not None:
                rows.extend(st.usage(stage.stage_index))
        return rows

    def stage_events(self, kind: str | None = None) -> list[PoolEvent]:
        """Per-stage events, optionally of one ``kind`` (``pooled``, ``kept-stock``, ``re-homed``, ...)."""
        return [e for e in self.events if e.stage is not None and (kind is None or e.kind == kind)]

    def to_dict(self) -> dict[str, Any]:
        names = (
            "installed",
            "layout",
            "reason",
            "torch_version",
            "schedule",
            "force",
            "alloc_free",
            "scope",
            "rings",
            "release",
            "mode",
        )
        return {
            **{n: getattr(self, n) for n in names},
            "config": self.config.to_dict() if self.config else None,
            "events": [e.to_dict() for e in self.events],
        }


def make_report(
    *,
    installed: bool,
    layout: Any,
    reason: str,
    config: PoolConfig | None = None,
    schedule: str | None = None,
    force: bool = False,
    scope: str = "process",
    experiment: Any = None,
) -> InstallReport:
    """The one way a report is made: what the layout allows follows from the layout itself."""
    eager = layout is not None and not layout.per_receive
    targets = layout.setup_targets if layout is not None else ()
    return InstallReport(
        installed=installed,
        layout=getattr(layout, "name", None),
        reason=reason,
        torch_version=torch.__version__,
        config=config,
        schedule=schedule,
        force=bool(force),
        scope=scope,
        alloc_free=bool(installed and eager and targets and all(t.alloc_free for t in targets)),
        rings=bool(installed and eager),
        release=bool(installed and layout is not None and (config is None or config.release)),
        active=installed and scope != "probe",
        experiment=experiment,
        found=layout,
    )
