"""The guard: slot ownership between receive post and release, and PoolOverrunError.

[Note: slot ownership]
A slot of a ring is *owned* by one microbatch from the moment its receive is posted
until the stage is done reading it:

- forward (activation) slot: until that microbatch's backward has finished (the input
  is the autograd leaf and is read again by the weight gradient; with a split backward,
  until the weight step), or until its forward finished in a forward-only step;
- grad slot: until that microbatch's backward returned; with a split backward (zero-bubble
  schedules: input gradient ``I`` now, weight gradient ``W`` later) until ``W``, because
  autograd may pass the received gradient through unchanged to the weight step.

Posting a receive into a slot owned by another microbatch means the ring is smaller than
the schedule's live set: the incoming data would overwrite an activation that autograd
still needs. gloo (and NCCL) receives do not bump the tensor's version counter, so
without this check the corruption is silent. The guard raises instead, before the
receive is posted.

[Note: version bump]
Ownership catches overruns that the schedule makes visible through the stage API. As a
second line, every re-post of a slot bumps the slot's version counter
(``torch.autograd.graph.increment_version``): any autograd graph that still saved the old
contents (a hook, a retained graph, code outside the schedule) then fails in backward
with "modified by an inplace operation" rather than reading new data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

__all__ = ["PoolOverrunError", "PoolReuseError", "SlotOwnership", "bump_version", "find_overrun", "is_version_error",
           "name_reuse"]


class PoolOverrunError(RuntimeError):
    """A receive was about to be posted into a ring slot another microbatch still owns.

    Its fields (``stage``, ``direction``, ``slot``, ``ring``, ``owner``, ``incoming`` and, once a
    launcher knows it, ``rank``) survive pickling and :meth:`to_dict` / :meth:`from_dict`, so a
    rank's overrun reaches the launcher intact: nothing parses the message.
    """

    FIELDS = ("stage", "direction", "slot", "ring", "owner", "incoming", "rank", "owner_stage")
    """The structured fields, in :meth:`to_dict` order."""

    def __init__(self, *, stage: int, direction: str, slot: int, ring: int, owner: int, incoming: int,
                 rank: int | None = None, owner_stage: int | None = None) -> None:
        self.stage, self.direction, self.slot, self.ring = stage, direction, slot, ring
        self.owner, self.incoming, self.rank = owner, incoming, rank
        self.owner_stage = owner_stage
        """The owner's stage where a rank-shared ring's slot is owned by another stage (else None)."""
        where = "" if rank is None else f"[rank {rank}] "
        whose = "" if owner_stage is None else f" of stage {owner_stage} (the ring is shared by the rank's stages)"
        super().__init__(
            f"{where}pooltk: stage {stage} {direction} ring overrun: slot {slot} of {ring} is still owned by "
            f"microbatch {owner}{whose} when microbatch {incoming} posts its receive into it. The schedule keeps more "
            f"{direction} buffers live than the ring holds, so this receive would silently overwrite data "
            f"autograd still needs. Fix: raise the slack (PoolConfig(slack=...) / grad_slack=...), or do not pool "
            f"this schedule (only schedules whose in-flight depth is proven are allowlisted; force=True bypasses "
            f"that check)."
        )

    def to_dict(self) -> dict[str, int | str | None]:
        """The fields as plain JSON-able values."""
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, fields: dict[str, int | str | None]) -> PoolOverrunError:
        """Rebuild the error from :meth:`to_dict` (e.g. in a launcher, with ``rank`` filled in)."""
        return cls(**{name: fields.get(name) for name in cls.FIELDS})  # type: ignore[arg-type]

    def __reduce__(self):  # noqa: ANN204 - picklable across spawned ranks
        return _rebuild_overrun, (self.to_dict(),)


def _rebuild_overrun(fields: dict[str, int | str | None]) -> PoolOverrunError:
    return PoolOverrunError.from_dict(fields)


def find_overrun(exc: BaseException | None) -> PoolOverrunError | None:
    """The :class:`PoolOverrunError` ``exc`` is or was raised from (its cause/context chain), else None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, PoolOverrunError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


# [Note: naming the reuse]
# The version bump turns a read of overwritten data into autograd's own error ("one of the
# variables needed for gradient computation has been modified by an inplace operation"), which
# names neither pooltk nor the slot. Copy on conflict re-homes every slot it sees held, so a bump
# reaches saved data only through a holder it cannot see. When a backward on a pooled stage raises
# that error and a slot of that stage was bumped in this step, the wrapper re-raises it as
# :class:`PoolReuseError` with the stage, direction, slot, the microbatch that re-used it and the
# one that had received there, and the fix; autograd's error is chained. Which slot: the one whose
# version autograd quotes ("is at version N") where that is readable, else every slot bumped in
# the step is listed.

_VERSION = re.compile(r"is at version (\d+); expected version (\d+)")


class PoolReuseError(RuntimeError):
    """A backward read a tensor that a pooled slot's re-use had bumped: autograd's error, named.

    Fields: ``stage``, ``direction``, ``slots`` (``[(slot, reused_by, previous)]``), ``microbatch``
    (the backward that failed), ``rank``; ``cause`` is autograd's message. Picklable.
    """

    FIELDS = ("stage", "direction", "slots", "microbatch", "cause", "rank")

    def __init__(self, *, stage: int, direction: str, slots: list, microbatch: int | None, cause: str,
                 rank: int | None = None) -> None:
        self.stage, self.direction, self.slots, self.microbatch = stage, direction, [tuple(x) for x in slots], microbatch
        self.cause, self.rank = cause, rank
        where = "" if rank is None else f"[rank {rank}] "
        which = "; ".join(f"slot {s} re-used by microbatch {r} (microbatch {p} had received there)"
                          for s, r, p in self.slots)
        super().__init__(
            f"{where}pooltk: stage {stage} {direction} ring: the backward of microbatch {microbatch} read a "
            f"received tensor after pooltk re-used its buffer ({which}); the version bump made autograd refuse "
            "instead of reading the next microbatch's data. Something the pool cannot see still held that tensor "
            "with its graph (a tensor the model keeps across microbatches or steps, e.g. self.prev = x). "
            "Fix: keep it without its graph (x.detach(), or x.detach().clone() to keep the values), or raise "
            f"the slack (PoolConfig(slack=...)) so the slot is re-used later. Autograd said: {cause}"
        )

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, fields: dict) -> "PoolReuseError":
        return cls(**{name: fields.get(name) for name in cls.FIELDS})

    def __reduce__(self):  # noqa: ANN204 - picklable across spawned ranks
        return _rebuild_reuse, (self.to_dict(),)


def _rebuild_reuse(fields: dict) -> PoolReuseError:
    return PoolReuseError.from_dict(fields)


def is_version_error(exc: BaseException) -> bool:
    """True for autograd's "modified by an inplace operation" error."""
    return isinstance(exc, RuntimeError) and "modified by an inplace operation" in str(exc)


def name_reuse(exc: RuntimeError, *, stage: int, rings: dict, microbatch: int | None) -> PoolReuseError | None:
    """The :class:`PoolReuseError` for autograd's ``exc`` on a stage with ``rings``, or None if no slot was bumped.

    ``rings`` maps direction -> ring (with ``bumps``: slot -> (reused_by, previous) this step, and ``slots``).
    """
    quoted = _VERSION.search(str(exc))
    version = int(quoted.group(1)) if quoted else None
    for direction, ring in rings.items():
        bumped = [(slot, r, p) for slot, (r, p) in sorted(ring.bumps.items())]
        if version is not None:
            exact = [b for b in bumped if any(t._version == version for t in ring.slots[b[0]])]
            bumped = exact or bumped
        if bumped:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return PoolReuseError(stage=stage, direction=direction, slots=bumped, microbatch=microbatch, cause=first)
    return None


def bump_version(tensors: list[torch.Tensor]) -> None:
    """Bump the version counter of each tensor (see [Note: version bump])."""
    for t in tensors:
        torch.autograd.graph.increment_version(t)


@dataclass(slots=True)
class SlotOwnership:
    """Which (stage, microbatch) owns each slot of one ring. See [Note: slot ownership].

    A ring of one stage maps microbatch ``c`` to slot ``c mod K``; a rank-shared ring passes the
    slot its colouring gives (``slot=``) and the stage of the receive (``stage=``).
    """

    stage: int
    direction: str
    ring: int
    owners: list[tuple[int, int] | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.owners = [None] * self.ring

    def acquire(self, chunk: int, *, slot: int | None = None, stage: int | None = None) -> int:
        """Claim the slot of (``stage``, ``chunk``); raise PoolOverrunError if another receive owns it."""
        slot = chunk % self.ring if slot is None else slot
        user = (self.stage if stage is None else stage, chunk)
        owner = self.owners[slot]
        if owner is not None and owner != user:
            raise PoolOverrunError(
                stage=user[0], direction=self.direction, slot=slot, ring=self.ring, owner=owner[1], incoming=chunk,
                owner_stage=owner[0] if owner[0] != user[0] else None,
            )
        self.owners[slot] = user
        return slot

    def release(self, chunk: int, *, slot: int | None = None, stage: int | None = None) -> None:
        """Give the slot of (``stage``, ``chunk``) back, if it still owns it."""
        slot = chunk % self.ring if slot is None else slot
        if self.owners[slot] == (self.stage if stage is None else stage, chunk):
            self.owners[slot] = None

    def reset(self) -> None:
        """Forget all owners (a new step starts; nothing from the last one is read again)."""
        self.owners = [None] * self.ring

    @property
    def owned(self) -> int:
        return sum(o is not None for o in self.owners)
