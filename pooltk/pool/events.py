"""What the pool decided, as report entries and as lines in the training log.

[Note: pool log lines]
Every install decision and per-stage outcome goes two ways at once: into the report object
(:class:`PoolEvent` entries of :class:`pooltk.pool.install.InstallReport`) and to the standard
``logging`` logger ``pooltk`` on rank 0 (rank from ``torch.distributed`` when it is
initialised, else the process counts as rank 0), so it lands in the training log that
``pooltk logs`` reads. The line formats are a contract with :mod:`pooltk.logs`:

- INFO    ``pooltk: installed (policy=P, slack=N, grad_slack=G, schedule=S, layout=L)``
- WARNING ``pooltk: not installed (reason=TEXT)``
- INFO    ``pooltk: stage I pooled (fwd ring K/M, grad ring K/M)`` (K = sets held; 0: no receives)
- WARNING ``pooltk: stage I kept stock (reason=TEXT)``
- WARNING ``pooltk: stage I DIRECTION slot S re-homed ...`` (copy on conflict, first per ring;
  later ones at DEBUG, all counted on the ring)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["LOGGER", "PoolEvent", "emit", "is_rank0"]

LOGGER = logging.getLogger("pooltk")


def is_rank0() -> bool:
    """True on global rank 0, or when no process group is initialised."""
    dist = torch.distributed
    try:
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank() == 0
    except (RuntimeError, ValueError):  # a group being torn down: treat as the only rank
        return True
    return True


@dataclass(kw_only=True, slots=True, frozen=True)
class PoolEvent:
    """One decision or outcome, exactly as logged."""

    kind: str
    """``installed``, ``not-installed``, ``pooled``, ``kept-stock``, ``re-homed`` or ``uninstalled``."""
    message: str
    """The log line (see [Note: pool log lines])."""
    level: int = logging.INFO
    """The ``logging`` level it was emitted at."""
    stage: int | None = None
    """Stage index, for per-stage events."""
    fields: dict[str, Any] = field(default_factory=dict)
    """Structured details (ring sizes, slot, bytes, reason), so nothing parses ``message``."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "level": logging.getLevelName(self.level),
                "stage": self.stage, "fields": dict(self.fields)}


def emit(sink: list | None, event: PoolEvent) -> PoolEvent:
    """Append ``event`` to ``sink`` (a report's event list) and log it on rank 0."""
    if sink is not None:
        sink.append(event)
    if is_rank0():
        LOGGER.log(event.level, "%s", event.message)
    return event
