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

from dataclasses import dataclass, fields
from typing import Any

from pooltk.pool.torch_compat.tensor_counts import quoted_version

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
NOT_A_FIELD = (
    "pooltk: found {fields}, which PoolConfig does not have; required some of {known}.\n"
    "Fix: check the spelling, e.g. pooltk.install(slack=2)."
)
NOT_A_SCHEDULE = (
    "pooltk: schedule found {kind}; required a schedule's name (such as '1f1b' or 'auto'), a "
    "torch pipeline schedule class or instance, or None."
)
NOT_INSTALLED = "pooltk: not installed: {reason}"
INFOS_DIFFER = "recv infos differ in structure between microbatches"
ALREADY_BOUND = "pooltk: found {tag!r} already bound on {target!r}; undo it first."
ON_NO_CLASS = "pooltk: found {cls}.{name} on no class of its MRO"
MISSING_ARGUMENT = "pooltk: {method}() was called without its {name!r} argument"
STAGE_UNDER_PROCESS = (
    "pooltk.pool_stage: found pooltk installed process-wide, which pools every stage.\n"
    "Fix: pooltk.uninstall() first, or rely on the process-wide install."
)


class PoolWarning(UserWarning):
    """pooltk left stock behaviour in place (an unknown torch layout, or nothing to do)."""


@dataclass(kw_only=True, eq=False, repr=False)
class _PoolError(RuntimeError):
    """A pool error whose fields survive pickling and ``to_dict`` / ``from_dict``: a rank's error
    reaches its launcher whole. Its text is :meth:`message` of those fields."""

    def __post_init__(self) -> None:
        super().__init__(self.message())

    def message(self) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, found: dict) -> Any:
        return cls(**{f.name: found.get(f.name) for f in fields(cls)})

    def __reduce__(self) -> tuple:
        return type(self).from_dict, (self.to_dict(),)


def _where(rank: int | None) -> str:
    return "" if rank is None else f"[rank {rank}] "


@dataclass(kw_only=True, eq=False, repr=False)
class PoolOverrunError(_PoolError):
    """A receive was about to land in a slot another chunk still owns ([Note: slot ownership])."""

    stage: int
    direction: str
    slot: int
    ring: int
    owner: int  # the chunk that owns the slot
    incoming: int  # the chunk posting into it
    rank: int | None = None
    owner_stage: int | None = None  # the owner's stage, where another shares the ring

    def message(self) -> str:
        whose = "" if self.owner_stage is None else f" of stage {self.owner_stage}"
        return OVERRUN.format(where=_where(self.rank), whose=whose, **self.to_dict())


@dataclass(kw_only=True, eq=False, repr=False)
class PoolReuseError(_PoolError):
    """A backward read a received tensor after its slot was re-used ([Note: naming the reuse])."""

    stage: int
    direction: str
    slots: list  # [(slot, reused_by, previous)], each user (stage, microbatch)
    microbatch: int | None
    cause: str  # autograd's first line
    rank: int | None = None

    def __post_init__(self) -> None:
        self.slots = [(slot, tuple(by), tuple(prev)) for slot, by, prev in self.slots]
        super().__post_init__()

    def message(self) -> str:
        which = "; ".join(
            f"slot {s} re-used by {self._who(by)} after {self._who(prev)}"
            for s, by, prev in self.slots
        )
        return REUSE.format(where=_where(self.rank), which=which, **self.to_dict())

    def _who(self, user: tuple[int, int]) -> str:
        """A user of the slot: its microbatch, and its stage where another shares the ring."""
        stage, microbatch = user
        if stage == self.stage:
            return f"microbatch {microbatch}"
        return f"stage {stage} microbatch {microbatch}"


class PoolSetupError(RuntimeError):
    """pooltk failed inside a layout it recognises (never a silent fallback)."""

    def __init__(
        self, *, stage: int | None, direction: str | None, cause: BaseException, what: str
    ) -> None:
        self.stage, self.direction, self.cause, self.what = stage, direction, cause, what
        where = f"stage {stage}" + (f" {direction}" if direction else "")
        kind = type(cause).__name__
        super().__init__(SETUP_FAILED.format(what=what, where=where, kind=kind, cause=cause))


def name_reuse(exc: RuntimeError, *, stage: int, rings: dict, microbatch: int | None) -> Any:
    """The :class:`PoolReuseError` for autograd's ``exc`` on a stage, naming the bumped slots at the
    version autograd quotes (a slot's aliases share its version counter); every bumped slot where
    no version is quoted. None where no slot is at it: the model's own in-place write, not ours."""
    version = quoted_version(exc)
    cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    for direction, ring in rings.items():
        bumped = ring.bumped(version)
        if bumped:
            return PoolReuseError(
                stage=stage, direction=direction, slots=bumped, microbatch=microbatch, cause=cause
            )
    return None
