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
- WARNING ``pooltk: stage I DIRECTION ring saved nothing (held H sets at once, stock holds S; ...)`` (re-homes
  made a ring hold as much as stock or more; once per stage and direction, with the cause and the fix)
- INFO    ``pooltk: stage I releases kept graphs (...)`` (the last stage: the schedule's kept losses
  and outputs let go of their graphs after each backward; once per stage)
- WARNING ``pooltk: stage I kept graph (reason=TEXT)`` (the release had to keep one; once per reason)
- INFO    ``pooltk: stage I DIRECTION ring shared (stages A,B on this rank, K sets for R receives)`` (a
  rank-shared ring, once per member stage after its pooled line: [Note: rank-shared rings])
- INFO    ``pooltk: stage I DIRECTION handoff (no receive buffers ...)`` (a V schedule's same-rank turn)
- INFO    ``pooltk: stage I unpooled (reason=TEXT)`` (uninstall or unpool_stage gave a stage that was
  pooled stock buffers back: the run WAS pooled until then, so this is not ``kept stock``)

The installed line ends with ``mode=rings+release`` (eager layouts), ``mode=release`` (the lazy
layout, where torch already allocates per receive) or ``mode=rings`` (release turned off).
Every line is built by a function of this module; nothing else formats them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["LOGGER", "PoolEvent", "emit", "handoff_event", "installed_event", "is_rank0", "kept_graph_event",
           "kept_stock_event", "no_saving_event", "not_installed_event", "pooled_event", "rehome_event", "released_event",
           "shared_event", "unpooled_event"]

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
    """``installed``, ``not-installed``, ``pooled``, ``shared``, ``handoff``, ``kept-stock``, ``re-homed``,
    ``no-saving``, ``released``, ``kept-graph`` or ``unpooled``."""
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


# ---------------------------------------------------------------------------------------
# The lines themselves (see [Note: pool log lines]): one builder per kind.
# ---------------------------------------------------------------------------------------


def installed_event(*, policy: str, slack: int, grad_slack: int, schedule: str | None, layout: str,
                    mode: str) -> PoolEvent:
    return PoolEvent(kind="installed", message=(
        f"pooltk: installed (policy={policy}, slack={slack}, grad_slack={grad_slack}, schedule={schedule}, "
        f"layout={layout}, mode={mode})"),
        fields={"policy": policy, "slack": slack, "grad_slack": grad_slack, "schedule": schedule, "layout": layout,
                "mode": mode})


def not_installed_event(reason: str) -> PoolEvent:
    return PoolEvent(kind="not-installed", level=logging.WARNING, message=f"pooltk: not installed (reason={reason})",
                     fields={"reason": reason})


def kept_stock_event(stage: object, reason: str) -> PoolEvent:
    return PoolEvent(kind="kept-stock", stage=stage if isinstance(stage, int) else None, level=logging.WARNING,
                     message=f"pooltk: stage {stage} kept stock (reason={reason})", fields={"reason": reason})


def unpooled_event(stage: object, reason: str) -> PoolEvent:
    return PoolEvent(kind="unpooled", stage=stage if isinstance(stage, int) else None,
                     message=f"pooltk: stage {stage} unpooled (reason={reason})", fields={"reason": reason})


def pooled_event(stage: int, forward: int, grad: int, n_microbatches: int) -> PoolEvent:
    return PoolEvent(kind="pooled", stage=stage,
                     message=f"pooltk: stage {stage} pooled (fwd ring {forward}/{n_microbatches}, "
                             f"grad ring {grad}/{n_microbatches})",
                     fields={"forward": forward, "grad": grad, "n_microbatches": n_microbatches})


def shared_event(stage: int, direction: str, stages: list[int], size: int, receives: int) -> PoolEvent:
    names = ",".join(str(s) for s in stages)
    return PoolEvent(kind="shared", stage=stage, message=(
        f"pooltk: stage {stage} {direction} ring shared (stages {names} on this rank, {size} sets for {receives} "
        "receives)"), fields={"direction": direction, "stages": list(stages), "size": size, "receives": receives})


def handoff_event(stage: int, direction: str) -> PoolEvent:
    src = "the previous" if direction == "forward" else "the next"
    return PoolEvent(kind="handoff", stage=stage, message=(
        f"pooltk: stage {stage} {direction} handoff (no receive buffers: {src} stage runs on this rank and hands "
        "its tensors over locally)"), fields={"direction": direction})


def released_event(stage: int, layout: str | None) -> PoolEvent:
    return PoolEvent(kind="released", stage=stage, message=(
        f"pooltk: stage {stage} releases kept graphs (layout={layout}: after each microbatch's backward the loss "
        "the schedule keeps and the stage's kept output are kept as values without their autograd graph, so the "
        "received input is not held until the step ends)"), fields={"layout": layout})


def kept_graph_event(stage: int, reason: str) -> PoolEvent:
    return PoolEvent(kind="kept-graph", stage=stage, level=logging.WARNING,
                     message=f"pooltk: stage {stage} kept graph (reason={reason})", fields={"reason": reason})


_HOLDER = {"views": "view(s) or tensor(s) sharing its storage (an output that is a view of it, a send still in flight)",
           "python": "Python reference(s) to the received tensor (a hook, a list, an output kept past its backward)",
           "c++": "C++ reference(s) to the received tensor (a DLPack export, or a saved tensor of a graph still alive)"}

_FIX = {"views": "return or keep a copy (x.clone()) rather than a view of the received tensor; in a forward-only "
                 "step torch keeps every send until the step ends, so a tensor passed on unchanged stays held there",
        "python": "drop references to the received tensor once its microbatch is done (keep x.detach().clone())",
        "c++": "let go of DLPack exports and graphs of earlier microbatches (keep x.detach().clone())"}


def rehome_event(*, stage: int, direction: str, slot: int, position: int, incoming: int, nbytes: int, holders: int,
                 first: bool, check: str) -> PoolEvent:
    msg = (f"pooltk: stage {stage} {direction} slot {slot} re-homed ({nbytes} bytes): {holders} "
           f"{_HOLDER.get(check, 'reference(s)')} outside the pool still hold it when microbatch {incoming} posts "
           "its receive; the holders keep the old storage and the tensor gets a fresh one (copy on conflict). "
           "Later re-homes of this ring are logged at DEBUG and counted.")
    return PoolEvent(kind="re-homed", stage=stage, level=logging.WARNING if first else logging.DEBUG, message=msg,
                     fields={"direction": direction, "slot": slot, "position": position, "bytes": nbytes,
                             "incoming": incoming, "holders": holders, "check": check})


def no_saving_event(*, stage: int, direction: str, held: int, stock: int, ring: int, rehomes: int,
                    check: str) -> PoolEvent:
    msg = (f"pooltk: stage {stage} {direction} ring saved nothing (held {held} sets at once, stock holds {stock}; "
           f"ring {ring}, {rehomes} re-homes this step: {_HOLDER.get(check, 'holders')} kept received tensors). "
           f"Fix: {_FIX.get(check, 'let go of received tensors once their microbatch is done')}.")
    return PoolEvent(kind="no-saving", stage=stage, level=logging.WARNING, message=msg,
                     fields={"direction": direction, "held": held, "stock": stock, "ring": ring, "rehomes": rehomes,
                             "check": check})
