"""Every error and warning the pool raises, each text a named constant.

[Note: version bump]
A re-post of a slot bumps the version counter of each tensor it reuses (not of one it re-homes;
never with the guard off): a graph that still saved the old contents fails in backward with
"modified by an inplace operation" instead of reading the next microbatch's data.

[Note: naming the reuse]
Autograd's version error names neither pooltk nor the slot. When a backward on a pooled stage
raises it and a slot of that stage was bumped this step, it is re-raised as
:class:`PoolReuseError` with the stage, direction, slots and microbatches (the slot autograd
quotes by version where it can be read).
"""

from __future__ import annotations

import re
from typing import Any

import torch

OVERRUN = (
    "{where}pooltk: stage {stage} {direction} ring overrun: found slot {slot} of {ring} still "
    "owned by microbatch {owner}{whose} when microbatch {incoming} posts into it; required a ring "
    "of the live set.\nFix: raise the slack (PoolConfig(slack=...), grad_slack=...) or leave this "
    "schedule unpooled."
)
REUSE = (
    "{where}pooltk: stage {stage} {direction} ring: found the backward of microbatch {microbatch} "
    "reading a received tensor after its buffer was re-used ({which}); required: nothing keeps it "
    "with its graph.\nFix: keep x.detach().clone(), or raise the slack. Autograd said: {cause}"
)
SETUP_FAILED = (
    "pooltk: {what} failed for {where}: found {kind}: {cause}.\n"
    "Fix: report it with the traceback; to train now, run without pooltk.install()."
)
SECOND_INSTALL = (
    "pooltk: found a second install ({config}, schedule={schedule!r}) while one is in force "
    "({current}, schedule={current_schedule!r}).\n"
    "Fix: pooltk.uninstall() first, or use the pooltk.pooled(...) context manager."
)
CONFIG_AND_FIELDS = (
    "pooltk: found config= and fields {fields}; required one or the other.\n"
    "Fix: pass PoolConfig(...) or keyword fields such as slack=2."
)
NOT_A_CONFIG = "pooltk: config found {kind}; required pooltk.PoolConfig."
STAGE_UNDER_PROCESS = (
    "pooltk.pool_stage: found pooltk installed process-wide, which pools every stage.\n"
    "Fix: pooltk.uninstall() first, or rely on the process-wide install."
)


class PoolWarning(UserWarning):
    """pooltk left stock behaviour in place (an unknown torch layout, or nothing to do)."""


class _Fields:
    """Keyword fields that survive pickling and ``to_dict`` / ``from_dict``: a rank's error
    reaches its launcher whole."""

    FIELDS: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, fields: dict) -> Any:
        return cls(**{name: fields.get(name) for name in cls.FIELDS})

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), self.to_dict())


def _rebuild(cls: type, fields: dict) -> Any:
    return cls.from_dict(fields)


def _where(rank: int | None) -> str:
    return "" if rank is None else f"[rank {rank}] "


class PoolOverrunError(_Fields, RuntimeError):
    """A receive was about to land in a slot another chunk still owns ([Note: slot ownership])."""

    FIELDS = ("stage", "direction", "slot", "ring", "owner", "incoming", "rank", "owner_stage")

    def __init__(
        self,
        *,
        stage: int,
        direction: str,
        slot: int,
        ring: int,
        owner: int,
        incoming: int,
        rank: int | None = None,
        owner_stage: int | None = None,
    ) -> None:
        self.stage, self.direction, self.slot, self.ring = stage, direction, slot, ring
        self.owner, self.incoming, self.rank, self.owner_stage = owner, incoming, rank, owner_stage
        whose = "" if owner_stage is None else f" of stage {owner_stage}"
        super().__init__(OVERRUN.format(where=_where(rank), whose=whose, **self.to_dict()))


class PoolReuseError(_Fields, RuntimeError):
    """A backward read a received tensor after its slot was re-used ([Note: naming the reuse]).

    ``slots``: ``[(slot, reused_by, previous)]``; ``cause``: autograd's first line.
    """

    FIELDS = ("stage", "direction", "slots", "microbatch", "cause", "rank")

    def __init__(
        self,
        *,
        stage: int,
        direction: str,
        slots: list,
        microbatch: int | None,
        cause: str,
        rank: int | None = None,
    ) -> None:
        self.stage, self.direction, self.slots = stage, direction, [tuple(s) for s in slots]
        self.microbatch, self.cause, self.rank = microbatch, cause, rank
        which = "; ".join(f"slot {s} re-used by microbatch {r} after {p}" for s, r, p in self.slots)
        super().__init__(REUSE.format(where=_where(rank), which=which, **self.to_dict()))


class PoolSetupError(RuntimeError):
    """pooltk failed inside a layout it recognises (never a silent fallback)."""

    def __init__(
        self, *, stage: int | None, direction: str | None, cause: BaseException, what: str
    ) -> None:
        self.stage, self.direction, self.cause, self.what = stage, direction, cause, what
        where = f"stage {stage}" + (f" {direction}" if direction else "")
        kind = type(cause).__name__
        super().__init__(SETUP_FAILED.format(what=what, where=where, kind=kind, cause=cause))


def is_version_error(exc: BaseException) -> bool:
    """True for autograd's "modified by an inplace operation" error."""
    return isinstance(exc, RuntimeError) and "modified by an inplace operation" in str(exc)


def name_reuse(exc: RuntimeError, *, stage: int, rings: dict, microbatch: int | None) -> Any:
    """The :class:`PoolReuseError` for autograd's ``exc`` on a stage; None if no slot was bumped."""
    quoted = re.search(r"is at version (\d+); expected version (\d+)", str(exc))
    for direction, ring in rings.items():
        bumped = ring.bumped(int(quoted.group(1)) if quoted else None)
        if bumped:
            cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return PoolReuseError(
                stage=stage, direction=direction, slots=bumped, microbatch=microbatch, cause=cause
            )
    return None


def bump_version(tensors: list[torch.Tensor]) -> None:
    """Bump each tensor's version counter (see [Note: version bump])."""
    for t in tensors:
        torch.autograd.graph.increment_version(t)
