"""The ring: K buffer sets one direction of a stage receives into, in turn.

[Note: the ring]
slot(c) = c mod K, and chunk c is posted only after chunk c - K released it.

Stock torch keeps one set of receive buffers per microbatch (chunk) and direction, M in all. Only
the live set is in use at once, so the ring keeps K = live + slack sets ([Note: ring sizes]). A
slot is claimed when its receive is posted and released once the stage is done reading it
([Note: slot ownership]); a post into a slot another chunk still owns raises
:class:`PoolOverrunError` before anything is received, so a ring too small is loud, never silent.
Under ``schedule="auto"`` a rank's stages with the same boundary tensors may share one ring, its
slots coloured from the schedule's action order instead of c mod K ([Note: rank-shared rings] in
pooltk/analysis/sharing.py); the invariant is the same.

[Note: ring sizes]
Under torch's ``Schedule1F1B`` stage i of N runs W = min(M, N - i) forwards before its first
backward, and chunk k + W's receive is posted only after chunk k's backward: at most W activation
sets are live (none on stage 0, whose inputs are the data) and one gradient set (none on the last
stage). K is ``min(M, live + slack)`` forward and ``min(M, live + grad_slack)`` grad. Other
schedules bring, as their live set, the smallest safe c-mod-K ring of their own action order
(pooltk/analysis/plans.py: the peak of receives in use at once, or more where c mod K needs it).

[Note: fresh aliases]
Chunks that map to one slot share its storage, never a tensor object: each receive gets a fresh
``detach()`` alias of the slot's tensor (same storage and version counter, its own ``.grad``,
``requires_grad`` and hooks), so a hook on chunk k never fires for k + K. Between uses a chunk's
``_RecvInfo`` holds the slot's one resting alias, never read.

[Note: slot ownership]
A slot is owned from its receive post until the chunk's backward is done (its weight pass, if
split), in a forward-only step until its forward is; each step's reset releases every slot (a step
aborted midway owns nothing into the next: what still holds its data is a holder, [Note: copy on
conflict]). Receives do not bump the version counter, so a post into an owned slot would overwrite
silently.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from pooltk._validate import check_int
from pooltk.config import PoolConfig
from pooltk.pool import holders
from pooltk.pool.errors import PoolOverrunError
from pooltk.pool.torch_compat import tensor_counts as tc
from pooltk.pool.torch_compat.placeholders import real_buffer
from pooltk.pool.torch_compat.stage_api import replace_by_identity

User = tuple[int, int]
"""(stage, chunk): who receives into a slot."""


def live_1f1b(num_stages: int, stage_index: int, n_microbatches: int, direction: str) -> int:
    """1F1B's live set: forward W = min(M, N - i) (0 on stage 0), grad 1 (0 on the last stage)."""
    check_int("num_stages", num_stages, low=1)
    check_int("n_microbatches", n_microbatches, low=1)
    check_int("stage_index", stage_index, low=0, high=num_stages - 1)
    if direction == "forward":
        return 0 if stage_index == 0 else min(n_microbatches, num_stages - stage_index)
    return 0 if stage_index == num_stages - 1 else 1


def ring_size(live: int, receives: int, direction: str, config: PoolConfig) -> int:
    """K = live + slack, at most ``receives``; 0 for a live set of 0 (no ring: the stage keeps
    stock)."""
    if live == 0:
        return 0
    return min(receives, live + (config.slack if direction == "forward" else config.grad_slack))


def _alias(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    alias = t.detach()
    return alias.requires_grad_(True) if requires_grad else alias


@dataclass(slots=True, eq=False)
class Slot:
    """One buffer set and who uses it: claimed at a receive post, released when its chunk is done
    with it ([Note: slot ownership])."""

    tensors: list[torch.Tensor]
    requires_grad: list[bool]
    resting: list[torch.Tensor] = field(init=False)  # what a chunk's _RecvInfo holds between uses
    anchors: list[torch.Tensor] = field(init=False)  # [Note: calibration]
    owner: User | None = None  # [Note: slot ownership]
    handed_to: User | None = None  # who got the last aliases: whose data a re-post checks
    aliases: list[torch.Tensor] = field(default_factory=list)
    training: bool = False  # the last post was a training step's
    recv_ops: list = field(default_factory=list)  # torch's receive ops of the last post
    sends: list[list[weakref.ref]] = field(init=False)  # [Note: finished sends], per tensor

    def __post_init__(self) -> None:
        self.resting = self.fresh_aliases()
        self.anchors = holders.anchors_for(self.tensors)
        self.sends = [[] for _ in self.tensors]

    def fresh_aliases(self) -> list[torch.Tensor]:
        return [_alias(t, rg) for t, rg in zip(self.tensors, self.requires_grad)]

    def claim(self, user: User) -> None:
        self.owner = user

    def release(self, user: User) -> bool:
        """``user`` is done reading the slot; False if it did not own it."""
        if self.owner != user:
            return False
        self.owner = None
        return True

    def take(self, user: User, training: bool, count_holders: bool) -> list[torch.Tensor]:
        """The fresh aliases ``user``'s receive gets (anchored where holders are counted)."""
        self.handed_to, self.aliases, self.training = user, self.fresh_aliases(), training
        if count_holders:
            holders.anchor(self.anchors, self.aliases)
        return self.aliases

    def rehome(self, k: int) -> None:
        """Tensor ``k`` gets a new storage; its holders keep the old one."""
        self.tensors[k] = real_buffer(self.tensors[k])
        self.resting[k] = _alias(self.tensors[k], self.requires_grad[k])
        self.sends[k] = []  # they carry the old storage


@dataclass(slots=True)
class _Stats:
    """Ownership now and at its peak; this step's bumps, re-homes and peak of storages held."""

    owned: int = 0
    peak_owned: int = 0
    bumps: dict[int, list[tuple[User, User]]] = field(default_factory=dict)  # slot -> [(by, prev)]
    rehomes: int = 0
    step_rehomes: int = 0
    rehomed_alive: int = 0  # re-homed storages someone outside the pool still holds
    rehomed_alive_bytes: int = 0
    step_peak_tensors: int = 0  # K sets' tensors plus re-homed ones alive, at most, this step
    step_peak_bytes: int = 0  # their bytes, at most, this step

    def count_rehome(self, old: torch.UntypedStorage) -> None:
        """A tensor was re-homed: its old storage is held until its last holder lets go."""
        self.rehomes += 1
        self.step_rehomes += 1
        self.rehomed_alive += 1
        self.rehomed_alive_bytes += old.nbytes()
        # torch keeps a storage's Python object while the storage lives
        weakref.finalize(old, self._let_go, old.nbytes())

    def _let_go(self, nbytes: int) -> None:
        self.rehomed_alive -= 1
        self.rehomed_alive_bytes -= nbytes


@dataclass(frozen=True, slots=True, kw_only=True)
class RingUse:
    """What one ring held during the last step, beside what stock and the live set would hold."""

    stage: int
    direction: str
    stages: tuple[int, ...]  # every stage receiving into the ring (several: rank-shared)
    ring: int  # K
    live: int
    stock: int  # sets stock torch keeps for the same receives
    tensors: int  # per set
    held_sets: int  # the most sets held at once: K plus re-homed storages, rounded up
    held_bytes: int
    rehomes: int  # tensors re-homed (copy on conflict)

    @property
    def saved_sets(self) -> int:
        """Sets stock would hold beyond what the ring held (0 or less: it saved nothing)."""
        return self.stock - self.held_sets

    def to_dict(self) -> dict:
        fields = {name: getattr(self, name) for name in self.__slots__}
        return fields | {"saved_sets": self.saved_sets}


@dataclass(eq=False, slots=True, kw_only=True)
class Ring:
    """K buffer sets for one direction of one stage, or of a rank's stages ([Note: the ring])."""

    stage: int  # the first stage receiving into the ring
    direction: str
    live: int  # the live set K was sized from
    n_microbatches: int
    slots: list[Slot]
    slot_map: dict[User, int] | None = None  # a rank-shared ring's colouring; None: chunk mod K
    guard: bool = True  # False only for negative controls: no ownership, holders or bump
    say: Callable[..., None] | None = None  # say(kind, **fields): pooltk/pool/events.py
    members: dict[int, list[int]] = field(default_factory=dict)  # stage -> its infos' positions
    infos: dict[User, tuple] = field(default_factory=dict)
    calibration: holders.Calibration = field(init=False)
    stats: _Stats = field(init=False)

    def __post_init__(self) -> None:
        self.calibration = holders.calibrate(self.slots[0])
        self.stats = _Stats()
        self._raise_peaks(new_step=True)

    size = property(lambda self: len(self.slots), doc="K: the sets the ring keeps.")
    per_set = property(lambda self: len(self.slots[0].tensors), doc="Tensors per buffer set.")
    shared = property(lambda self: len(self.members) > 1, doc="More than one stage receives here.")
    stock_sets = property(lambda self: self.n_microbatches * max(1, len(self.members)))
    peak_owned = property(lambda self: self.stats.peak_owned, doc="The live set this run had.")
    rehomes = property(lambda self: self.stats.rehomes, doc="Tensors re-homed over the run.")

    @property
    def ring_bytes(self) -> int:
        """The K sets' bytes (a re-home keeps each tensor's size)."""
        return sum(t.untyped_storage().nbytes() for slot in self.slots for t in slot.tensors)

    def slot_of(self, user: User) -> int:
        return user[1] % self.size if self.slot_map is None else self.slot_map[user]

    def add_member(
        self, stage: int, infos_by_chunk: dict[int, tuple], positions: list[int]
    ) -> None:
        """``stage`` receives into this ring: every chunk's recv infos rest on its slot's alias."""
        self.members[stage] = positions
        for chunk, infos in infos_by_chunk.items():
            self.infos[(stage, chunk)] = infos
            for alias, j in zip(self.slots[self.slot_of((stage, chunk))].resting, positions):
                infos[j].buffer = alias

    def post(self, user: User, infos: tuple, *, training: bool) -> None:
        """``user`` is about to post its receive into ``infos``: claim, check, hand out."""
        index = self.slot_of(user)
        slot = self.slots[index]
        if self.guard:
            self._claim(index, user)
            if slot.handed_to is not None:
                self._retire(slot)
                self._check(index, incoming=user)
        aliases = slot.take(user, training, count_holders=self.guard)
        for alias, j in zip(aliases, self.members[user[0]]):
            infos[j].buffer = alias

    def _claim(self, index: int, user: User) -> None:
        owner = self.slots[index].owner
        if owner == user:
            return
        if owner is not None:
            raise PoolOverrunError(
                stage=user[0],
                direction=self.direction,
                slot=index,
                ring=self.size,
                owner=owner[1],
                incoming=user[1],
                owner_stage=None if owner[0] == user[0] else owner[0],
            )
        self.slots[index].claim(user)
        self.stats.owned += 1
        self.stats.peak_owned = max(self.stats.peak_owned, self.stats.owned)

    def note_recvs(self, user: User, ops: Any) -> None:
        """The receive ops torch built for ``user``'s post (they hold its aliases)."""
        if self.guard:
            self.slots[self.slot_of(user)].recv_ops = list(ops or ())

    def note_sends(self, user: User, ops: Any) -> None:
        """``user``'s forward sends that pass its received tensors on ([Note: finished sends])."""
        slot = self.slots[self.slot_of(user)]
        if self.guard and slot.handed_to == user and slot.training:
            holders.note_sends(slot, ops)

    def release(self, user: User) -> None:
        if self.slots[self.slot_of(user)].release(user):
            self.stats.owned -= 1

    def unread(self, user: User) -> list[torch.Tensor]:
        """The aliases ``user`` was handed and still owns: its received data, not yet read."""
        slot = self.slots[self.slot_of(user)]
        return slot.aliases if slot.owner == user and slot.handed_to == user else []

    def retire_inputs(self, user: User, values: list) -> None:
        """In ``values`` (a list torch keeps), ``user``'s aliases become the resting ones."""
        slot = self.slots[self.slot_of(user)]
        if slot.handed_to == user:
            for k in range(self.per_set):
                replace_by_identity(values, slot.aliases[k], slot.resting[k])

    def reset(self) -> None:
        """A new step: no slot is owned, every alias handed out is retired, the counts restart."""
        for slot in self.slots:
            if slot.owner is not None:
                slot.release(slot.owner)
            if slot.handed_to is not None:
                self._retire(slot)
        stats = self.stats
        stats.owned, stats.step_rehomes = 0, 0
        stats.bumps.clear()
        self._raise_peaks(new_step=True)

    def _raise_peaks(self, *, new_step: bool = False) -> bool:
        """The step's peaks of storages held (the K sets' and re-homed ones still alive), started
        again at a ``new_step``; True if the count rose."""
        stats = self.stats
        held = self.size * self.per_set + stats.rehomed_alive
        held_bytes = self.ring_bytes + stats.rehomed_alive_bytes
        stats.step_peak_bytes = held_bytes if new_step else max(stats.step_peak_bytes, held_bytes)
        rose = held > stats.step_peak_tensors
        if new_step or rose:
            stats.step_peak_tensors = held
        return rose

    def _retire(self, slot: Slot) -> None:
        """The previous user's recv infos go back to the resting aliases."""
        stage, chunk = slot.handed_to
        infos = self.infos.get((stage, chunk))
        for k, j in enumerate(self.members.get(stage, ())):
            if infos is not None and infos[j].buffer is slot.aliases[k]:
                infos[j].buffer = slot.resting[k]

    def _check(self, index: int, *, incoming: User) -> None:
        """[Note: copy on conflict]: re-home what is still held, bump the rest."""
        slot = self.slots[index]
        reused = []
        holders.let_go_of_recv_ops(slot)
        for k, (n_holders, why) in enumerate(holders.count(slot, self.calibration)):
            if why:
                self._rehome(index, k, incoming=incoming, n_holders=n_holders, why=why)
            else:
                reused.append(slot.tensors[k])
        if reused:
            self.stats.bumps.setdefault(index, []).append((incoming, slot.handed_to))
            tc.bump_version(reused)

    def _rehome(self, index: int, k: int, *, incoming: User, n_holders: int, why: str) -> None:
        """Tensor ``k`` of slot ``index`` is still held: the slot gets a new one."""
        slot, stats = self.slots[index], self.stats
        old, old_resting, stage = slot.tensors[k], slot.resting[k], slot.handed_to[0]
        slot.rehome(k)
        for (member, _), infos in self.infos.items():
            j = self.members[member][k]
            if infos[j].buffer is old_resting:
                infos[j].buffer = slot.resting[k]
        stats.count_rehome(old.untyped_storage())
        if self._raise_peaks():
            self._say_if_no_saving(why)
        if self.say is not None:
            self.say(
                "re-homed",
                stage=stage,
                direction=self.direction,
                slot=index,
                position=self.members[stage][k],
                incoming=incoming[1],
                incoming_stage=incoming[0],
                bytes=slot.tensors[k].untyped_storage().nbytes(),
                holders=n_holders,
                check=why,
            )

    def _say_if_no_saving(self, why: str) -> None:
        """At a new step peak: say once the ring holds as many sets as stock would."""
        use = self.usage(self.stage)
        beyond_ring = self.size < self.stock_sets or use.held_sets > self.size
        if self.say is not None and use.held_sets >= self.stock_sets and beyond_ring:
            self.say("no-saving", check=why, **use.to_dict())

    def bumped(self, version: int | None = None) -> list[tuple[int, User, User]]:
        """(slot, reused by, previous user) bumped this step; with ``version``, only slots at it."""
        bumped = [(s, r, p) for s, pairs in sorted(self.stats.bumps.items()) for r, p in pairs]
        if version is None:
            return bumped
        return [
            b for b in bumped if any(tc.version(t) == version for t in self.slots[b[0]].tensors)
        ]

    def usage(self, stage: int) -> RingUse:
        """What the ring held during the last step (see :class:`RingUse`)."""
        peak, per = self.stats.step_peak_tensors, self.per_set or 1
        return RingUse(
            stage=stage,
            direction=self.direction,
            stages=tuple(sorted(self.members)),
            ring=self.size,
            live=self.live,
            stock=self.stock_sets,
            tensors=self.per_set,
            held_sets=math.ceil(peak / per),
            held_bytes=self.stats.step_peak_bytes,
            rehomes=self.stats.step_rehomes,
        )
