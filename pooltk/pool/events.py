"""What the pool decided, as report entries and as lines in the training log.

[Note: pool log lines]
Every decision and per-stage outcome goes into ``InstallReport.events`` (:class:`PoolEvent`) and
to the ``pooltk`` logger, so ``pooltk logs`` reads it back from the training log. Rank 0 (or a
single process) logs every level; in a group of more than one rank the others log all but INFO,
naming themselves: ``pooltk: [rank R] stage 3 forward slot 0 re-homed ...``. The stages that
re-home or save nothing mostly run on ranks other than 0; INFO would repeat rank 0's decisions
once per rank; DEBUG is shown only to whoever turns it on. :data:`LINES` is every line's form;
``installed``, ``not installed``, ``pooled`` and ``kept stock`` are a contract with
``pooltk/logs/runs.py``. A ring's first ``re-homed`` line is a WARNING, later ones DEBUG.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

LOGGER = logging.getLogger("pooltk")
_INFO, _WARN = logging.INFO, logging.WARNING

LINES: dict[str, tuple[int, str]] = {
    "installed": (
        _INFO,
        "installed (policy={policy}, slack={slack}, grad_slack={grad_slack}, schedule={schedule}, "
        "layout={layout}, mode={mode})",
    ),
    "not-installed": (_WARN, "not installed (reason={reason})"),
    "pooled": (
        _INFO,
        "stage {stage} pooled (fwd ring {forward}/{n_microbatches}, grad ring "
        "{grad}/{n_microbatches})",
    ),
    "kept-stock": (_WARN, "stage {stage} kept stock (reason={reason})"),
    "unpooled": (_INFO, "stage {stage} unpooled (reason={reason})"),
    "shared": (
        _INFO,
        "stage {stage} {direction} ring shared (stages {names} on this rank, {size} sets for "
        "{receives} receives)",
    ),
    "handoff": (
        _INFO,
        "stage {stage} {direction} handoff (no receive buffers: the {peer} stage runs on this rank "
        "and hands its tensors over locally)",
    ),
    "released": (
        _INFO,
        "stage {stage} releases kept graphs (layout={layout}: after each microbatch's backward "
        "the schedule's kept loss and output stay as values without their graph, so the "
        "received input is not held until the step ends)",
    ),
    "kept-graph": (_WARN, "stage {stage} kept graph (reason={reason})"),
    "re-homed": (
        _WARN,
        "stage {stage} {direction} slot {slot} re-homed ({bytes} bytes): {holders} {holder} "
        "outside the pool still hold it when microbatch {incoming} posts its receive; the holders "
        "keep the old storage, the tensor gets a fresh one (copy on conflict); later re-homes of "
        "this ring are logged at DEBUG and counted",
    ),
    "no-saving": (
        _WARN,
        "stage {stage} {direction} ring saved nothing (held {held} sets at once, stock holds "
        "{stock}; ring {ring}, {rehomes} re-homes this step: {holder} kept received tensors). "
        "Fix: {fix}.",
    ),
}
"""kind -> (level, the line after ``pooltk: ``)."""

_HOLDER = {
    "views": "view(s) or tensor(s) sharing its storage (an output that is a view of it, a send "
    "in flight)",
    "python": "Python reference(s) to the received tensor (a hook, a list, an output kept past "
    "its backward)",
    "c++": "C++ reference(s) to the received tensor (a DLPack export, a saved tensor of a graph "
    "still alive)",
}
_FIX = {
    "views": "return or keep a copy (x.clone()) rather than a view of the received tensor; a "
    "forward-only step keeps every send until the step ends, so a tensor passed on unchanged stays "
    "held there",
    "python": "drop references to the received tensor once its microbatch is done (keep "
    "x.detach().clone())",
    "c++": "let go of DLPack exports and graphs of earlier microbatches (keep x.detach().clone())",
}


@dataclass(kw_only=True, slots=True, frozen=True)
class PoolEvent:
    """One decision or outcome, exactly as logged."""

    kind: str
    """A key of :data:`LINES`."""
    message: str
    level: int = _INFO
    stage: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    """Structured details (ring sizes, slot, bytes, reason), so nothing parses ``message``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "level": logging.getLevelName(self.level),
            "stage": self.stage,
            "fields": dict(self.fields),
        }


def event(kind: str, *, stage: Any = None, quiet: bool = False, **fields: Any) -> PoolEvent:
    """The :class:`PoolEvent` of ``kind`` (``quiet``: at DEBUG, as a ring's later re-homes are)."""
    level, form = LINES[kind]
    check = fields.get("check", "")
    text = form.format(
        stage=stage,
        holder=_HOLDER.get(check, "holders"),
        peer="previous" if fields.get("direction") == "forward" else "next",
        fix=_FIX.get(check, "let go of received tensors once used"),
        names=",".join(map(str, fields.get("stages", ()))),
        **fields,
    )
    return PoolEvent(
        kind=kind,
        message=f"pooltk: {text}",
        level=logging.DEBUG if quiet else level,
        stage=stage if isinstance(stage, int) else None,
        fields=fields,
    )


def _rank() -> int | None:
    """This process's rank in an initialized group of more than one, else None."""
    dist = torch.distributed
    try:
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist.get_rank()
    except (RuntimeError, ValueError):  # a group being torn down: the only rank left
        pass
    return None


def emit(sink: list | None, ev: PoolEvent) -> PoolEvent:
    """Append ``ev`` to ``sink`` (a report's event list) and log it (see [Note: pool log lines])."""
    if sink is not None:
        sink.append(ev)
    rank = _rank()
    if not rank:  # rank 0, or no group of more than one
        LOGGER.log(ev.level, "%s", ev.message)
    elif ev.level != _INFO:
        LOGGER.log(ev.level, "pooltk: [rank %d]%s", rank, ev.message.removeprefix("pooltk:"))
    return ev


def say(state: Any, key: tuple, kind: str, *, again: bool = False, **fields: Any) -> None:
    """Emit ``kind`` for the stage whose pool state is ``state``, once per ``key`` (``again``:
    later ones too, at DEBUG)."""
    first = key not in state.said
    if first or again:
        state.said.add(key)
        sink = state.install.events if state.install is not None else None
        emit(sink, event(kind, quiet=not first, **fields))
