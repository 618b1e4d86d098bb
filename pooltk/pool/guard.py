"""The pool's loud errors: a receive into a slot still owned, and autograd's version error named.

[Note: version bump]
Every re-post of a slot bumps its version counter: a graph that still saved the old contents fails in
backward with "modified by an inplace operation" instead of reading the next microbatch's data.

[Note: naming the reuse]
Autograd's version error names neither pooltk nor the slot. When a backward on a pooled stage raises it and
a slot of that stage was bumped this step, the wrapper re-raises it as :class:`PoolReuseError` with the
stage, direction, slots and microbatches (the slot autograd quotes by version where readable).
"""

from __future__ import annotations

import re
from typing import Any

import torch

__all__ = ["PoolOverrunError", "PoolReuseError", "bump_version", "is_version_error", "name_reuse"]


def _fields(self: Any) -> dict[str, Any]:
    return {name: getattr(self, name) for name in self.FIELDS}


def _rebuild(cls: type, fields: dict) -> Any:
    return cls(**{name: fields.get(name) for name in cls.FIELDS})


class PoolOverrunError(RuntimeError):
    """A receive was about to land in a slot another microbatch still owns ([Note: slot ownership]).

    Its fields survive pickling and ``to_dict``/``from_dict``: a rank's error reaches a launcher intact.
    """

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
        where = "" if rank is None else f"[rank {rank}] "
        whose = "" if owner_stage is None else f" of stage {owner_stage}"
        super().__init__(
            f"{where}pooltk: stage {stage} {direction} ring overrun: found slot {slot} of {ring} still owned by "
            f"microbatch {owner}{whose} when microbatch {incoming} posts into it; required a ring of the live set.\n"
            "Fix: raise the slack (PoolConfig(slack=...), grad_slack=...) or leave this schedule unpooled."
        )

    to_dict = _fields
    from_dict = classmethod(_rebuild)

    def __reduce__(self):  # noqa: ANN204 - picklable across spawned ranks
        return _rebuild, (type(self), self.to_dict())


class PoolReuseError(RuntimeError):
    """A backward read a received tensor after its slot was re-used ([Note: naming the reuse]); picklable.

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
        self.stage, self.direction, self.slots = stage, direction, [tuple(x) for x in slots]
        self.microbatch, self.cause, self.rank = microbatch, cause, rank
        where = "" if rank is None else f"[rank {rank}] "
        which = "; ".join(f"slot {s} re-used by microbatch {r} after {p}" for s, r, p in self.slots)
        super().__init__(
            f"{where}pooltk: stage {stage} {direction} ring: found the backward of microbatch {microbatch} reading a "
            f"received tensor after its buffer was re-used ({which}); required: nothing keeps it with its graph.\n"
            f"Fix: keep x.detach().clone(), or raise the slack. Autograd said: {cause}"
        )

    to_dict = _fields
    from_dict = classmethod(_rebuild)

    def __reduce__(self):  # noqa: ANN204 - picklable across spawned ranks
        return _rebuild, (type(self), self.to_dict())


def is_version_error(exc: BaseException) -> bool:
    """True for autograd's "modified by an inplace operation" error."""
    return isinstance(exc, RuntimeError) and "modified by an inplace operation" in str(exc)


def name_reuse(
    exc: RuntimeError, *, stage: int, rings: dict, microbatch: int | None
) -> PoolReuseError | None:
    """The :class:`PoolReuseError` for autograd's ``exc`` on a stage with ``rings``; None if no slot was bumped."""
    quoted = re.search(r"is at version (\d+); expected version (\d+)", str(exc))
    for direction, ring in rings.items():
        bumped = [(slot, r, p) for slot, (r, p) in sorted(ring.bumps.items())]
        if quoted:
            bumped = [
                b
                for b in bumped
                if any(t._version == int(quoted.group(1)) for t in ring.slots[b[0]])
            ] or bumped
        if bumped:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return PoolReuseError(
                stage=stage, direction=direction, slots=bumped, microbatch=microbatch, cause=first
            )
    return None


def bump_version(tensors: list[torch.Tensor]) -> None:
    """Bump the version counter of each tensor (see [Note: version bump])."""
    for t in tensors:
        torch.autograd.graph.increment_version(t)
