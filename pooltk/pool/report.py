"""What ``install()`` / ``pool_stage()`` / ``probe()`` found and did: the report, made in one place."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from pooltk.config import PoolConfig
from pooltk.pool.events import PoolEvent

__all__ = ["InstallReport", "PoolWarning", "make_report"]


class PoolWarning(UserWarning):
    """pooltk left stock behaviour in place (unknown torch layout, schedule not allowlisted, ...)."""


@dataclass(frozen=True, slots=True)
class InstallReport:
    """What ``install()`` / ``pool_stage()`` / ``probe()`` found and did."""

    installed: bool
    """True when pooltk is active: rings for allowlisted schedules and/or the last-stage release."""
    layout: str | None
    """Layout family detected (``prepare-infra``, ``setup-recv-info``, ``lazy``) or None."""
    reason: str
    """Why: the layout's description when installed, else why not."""
    torch_version: str
    config: PoolConfig | None = None
    schedule: str | None = None
    """Schedule name given at install (the observed schedule decides per stage where visible)."""
    force: bool = False
    alloc_free: bool = False
    """True when only K buffer sets are ever allocated (no transient of all M at setup)."""
    scope: str = "process"
    """``process`` (class-level install), ``stage`` (one stage object) or ``probe``."""
    rings: bool = False
    """True when receive buffers are pooled in rings (eager layouts). False on the lazy layout, where
    torch already allocates each buffer per receive and pooltk installs only the release."""
    release: bool = False
    """True when the last stage's kept losses and outputs let go of their graphs after each backward
    (see [Note: releasing what the schedule keeps] in pooltk/pool/release.py)."""
    events: list = field(default_factory=list, compare=False)
    """Every decision and per-stage outcome since this install, in order (:class:`PoolEvent`):
    pooled with which rings, kept stock and why, slots re-homed by copy on conflict. The same
    lines go to the ``pooltk`` logger on rank 0 (see [Note: pool log lines] in events.py)."""
    stages: weakref.WeakSet = field(default_factory=weakref.WeakSet, compare=False, repr=False)
    """The live stages this install gave a ring (what :meth:`usage` reads)."""

    @property
    def mode(self) -> str:
        """``rings+release``, ``rings``, ``release`` or ``stock``: what pooltk does here, in one word."""
        parts = [name for name, on in (("rings", self.rings), ("release", self.release)) if on]
        return "+".join(parts) if self.installed and parts else "stock"

    def usage(self) -> list:
        """What every ring of this install held during its last step, beside stock and the live set.

        One :class:`pooltk.pool.ring.RingUse` per live pooled stage and direction, by stage. A row whose
        ``held_sets`` reaches ``stock`` saved nothing (a WARNING said why when it happened).
        """
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
        return {
            "installed": self.installed,
            "layout": self.layout,
            "reason": self.reason,
            "torch_version": self.torch_version,
            "config": self.config.to_dict() if self.config else None,
            "schedule": self.schedule,
            "force": self.force,
            "alloc_free": self.alloc_free,
            "scope": self.scope,
            "rings": self.rings,
            "release": self.release,
            "mode": self.mode,
            "events": [e.to_dict() for e in self.events],
        }


def make_report(*, installed: bool, layout: Any, reason: str, config: PoolConfig | None = None,
                schedule: str | None = None, force: bool = False, scope: str = "process") -> InstallReport:
    """The one way a report is made: what the layout allows follows from the layout itself.

    ``layout`` is a :class:`pooltk.pool.adapters.Layout` or None. On an installed report, rings are on
    for an eager layout, the release follows ``config.release``, and ``alloc_free`` is true when every
    setup target can make its buffers lazily.
    """
    name = getattr(layout, "name", None)
    eager = layout is not None and not getattr(layout, "per_receive", False)
    targets = getattr(layout, "setup_targets", ()) or ()
    release = bool(installed and layout is not None and (config is None or config.release))
    return InstallReport(
        installed=installed, layout=name, reason=reason, torch_version=str(getattr(torch, "__version__", "unknown")),
        config=config, schedule=schedule, force=bool(force), scope=scope,
        alloc_free=bool(installed and eager and targets and all(t.alloc_free for t in targets)),
        rings=bool(installed and eager), release=release,
    )
