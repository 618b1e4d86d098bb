"""What the pool decided, as report entries and as lines in the training log.

[Note: pool log lines]
Every decision and per-stage outcome goes into ``InstallReport.events`` (:class:`PoolEvent`) and
to the ``pooltk`` logger, so ``pooltk logs`` reads it back from the training log. Rank 0 (or a
single process) logs every level; in a group of more than one rank the others log all but INFO,
naming themselves: ``pooltk: [rank R] stage 3 forward slot 0 re-homed ...`` (the stages that
re-home or save nothing mostly run on other ranks; INFO would repeat rank 0's decisions).
:data:`LINES` is every line's form; ``installed``, ``not installed``, ``pooled`` and ``kept
stock`` are a contract with ``pooltk/logs/runs.py``. The first ``re-homed`` line of a stage's
direction is a WARNING, later ones DEBUG.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

LOGGER = logging.getLogger("pooltk")

LINES: dict[str, str] = {
    "installed": "installed (policy={policy}, slack={slack}, grad_slack={grad_slack}, "
    "schedule={schedule}, layout={layout}, mode={mode})",
    "not-installed": "not installed (reason={reason})",
    "pooled": "stage {stage} pooled (fwd ring {forward}/{n_microbatches}, grad ring "
    "{grad}/{n_microbatches})",
    "kept-stock": "stage {stage} kept stock (reason={reason})",
    "unpooled": "stage {stage} unpooled (reason={reason})",
    "shared": "stage {stage} {direction} ring shared (stages {names} on this rank, {ring} sets for "
    "{receives} receives)",
    "handoff": "stage {stage} {direction} handoff (no receive buffers: the {peer} stage runs on "
    "this rank and hands its tensors over locally)",
    "released": "stage {stage} releases kept graphs (layout={layout}: after each microbatch's "
    "backward the schedule's kept loss and output stay as values without their graph, so the "
    "received input is not held until the step ends)",
    "kept-graph": "stage {stage} kept graph (reason={reason})",
    "re-homed": "stage {stage} {direction} slot {slot} re-homed ({bytes} bytes): {holders} "
    "{holder} outside the pool still hold it when microbatch {incoming}{whose} posts its "
    "receive; the holders keep the old storage, the tensor gets a fresh one (copy on conflict); "
    "later re-homes of this ring are logged at DEBUG and counted",
    "no-saving": "stage {stage} {direction} ring saved nothing (held {held_sets} sets at once, "
    "stock holds {stock}; ring {ring}, {rehomes} re-homes this step: {holder} kept received "
    "tensors). Fix: {fix}.",
}
"""kind -> the line after ``pooltk: ``."""
WARNINGS = frozenset({"not-installed", "kept-stock", "kept-graph", "re-homed", "no-saving"})
"""The kinds logged at WARNING; the others at INFO."""

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
    """One decision or outcome, exactly as logged; ``fields`` hold its details, so nothing parses
    ``message``."""

    kind: str
    message: str
    level: int = logging.INFO
    stage: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in self.__slots__}
        return out | {"level": logging.getLevelName(self.level), "fields": dict(self.fields)}


def event(kind: str, *, stage: Any = None, quiet: bool = False, **fields: Any) -> PoolEvent:
    """The :class:`PoolEvent` of ``kind`` (``quiet``: at DEBUG, as a ring's later re-homes are)."""
    check, forward = fields.get("check", ""), fields.get("direction") == "forward"
    poster = fields.get("incoming_stage", stage)  # a rank-shared ring: another stage may post
    text = LINES[kind].format(
        stage=stage,
        whose="" if poster == stage else f" of stage {poster}",
        holder=_HOLDER.get(check, "holders"),
        peer="previous" if forward else "next",
        fix=_FIX.get(check, "let go of received tensors once used"),
        names=",".join(map(str, fields.get("stages", ()))),
        **fields,
    )
    level = logging.DEBUG if quiet else logging.WARNING if kind in WARNINGS else logging.INFO
    where = stage if isinstance(stage, int) else None
    return PoolEvent(kind=kind, message=f"pooltk: {text}", level=level, stage=where, fields=fields)


def _rank() -> int | None:
    """This process's rank in an initialized group of more than one, else None."""
    dist = torch.distributed
    try:
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            return dist.get_rank()
    except (RuntimeError, ValueError):  # a group being torn down: the only rank left
        pass
    return None


def emit(sink: list | None, said: PoolEvent) -> PoolEvent:
    """Append ``said`` to ``sink`` (a report's events) and log it ([Note: pool log lines])."""
    if sink is not None:
        sink.append(said)
    rank = _rank()
    if not rank:  # rank 0, or no group of more than one
        LOGGER.log(said.level, "%s", said.message)
    elif said.level != logging.INFO:
        LOGGER.log(said.level, "pooltk: [rank %d]%s", rank, said.message.removeprefix("pooltk:"))
    return said


def say(state: Any, kind: str, *, key: tuple = (), again: bool = False, **fields: Any) -> None:
    """Emit ``kind`` for the stage whose pool state is ``state``, once per ``key`` (default: the
    kind and its fields); ``again``: later ones too, at DEBUG."""
    key = key or (kind, *((k, str(v)) for k, v in fields.items()))
    first = key not in state.said
    if first or again:
        state.said.add(key)
        sink = state.install.events if state.install is not None else None
        emit(sink, event(kind, quiet=not first, **fields))
