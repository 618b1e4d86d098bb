"""The K buffer sets of one direction of one stage, and the fresh aliases handed out per receive.

How many sets (K) is :mod:`pooltk.pool.sizing`'s question; this module holds them. Chunk ``c``
uses slot ``c mod K`` (:func:`pooltk.pool.sizing.slot_of`).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import Callable

import torch

from pooltk.pool.guard import SlotOwnership, bump_version

__all__ = ["DirectionRing", "Rehome", "RingUse", "recv_positions", "storage_holders"]

# ----------------------------------------------------------------------------------------
# The buffers themselves.
#
# [Note: fresh aliases]
# All chunks that map to one slot share the slot's *storage*, never a tensor object or a
# ``_RecvInfo``. Each receive post hands the chunk's ``_RecvInfo`` a fresh ``detach()``
# alias of the slot tensor: the alias shares storage and version counter with the slot
# (so the guard's version bump reaches it), but has its own ``.grad``, ``requires_grad``
# and hook list. A hook registered on the stage input of microbatch k therefore never
# fires for microbatch k + K, and a same-rank V-schedule handoff that replaces
# ``info.buffer`` (or zeroes it) touches only that chunk's alias.
#
# Between uses a chunk's ``_RecvInfo`` holds the slot's one *resting* alias (never read:
# the chunk's next post replaces it before torch reads the buffer). So, with the guard on,
# the tensors the pool itself keeps on a slot's storage are exactly two: the slot tensor
# and its resting alias. See [Note: copy on conflict].
#
# [Note: copy on conflict]
# Invariant: a receive is never posted into storage that anything outside the pool still holds, and a
# storage nothing holds is reused, whatever was done with it before. Ownership ([Note: slot ownership]
# in pooltk/pool/guard.py) covers what the schedule tells the pool; it cannot see a stage output that
# is (a view of) its input, an input gradient that is a view of the received gradient, a tensor a hook
# stored, or a send still in flight. So, with the guard on, right before slot ``s`` is re-posted the
# ring asks, for each tensor ``k`` of the slot and the previous microbatch ``p`` that used it, who holds
# it *now*, and re-homes that tensor alone when anyone does:
#
# 1. *views*: torch counts the tensors sharing a storage (``torch._C._storage_Use_Count``). The pool
#    keeps exactly three there: the slot, its resting alias, and ``p``'s alias (``p``'s ``_RecvInfo``
#    entries go back to the resting alias first). Any more is a view, an output that shares the
#    storage, or a send's tensor still referenced by torch;
# 2. *the alias itself*: a holder of ``p``'s alias object (a hook that kept its input, a list, an
#    output that is the input itself) shares no new tensor, so its Python references are counted
#    instead; and a holder from C++ (a DLPack export, a saved tensor of a graph that is still alive)
#    raises the alias's own use count (``Tensor._use_count``). The ring parks the alias as the
#    ``.grad`` of a private anchor tensor so both counts have a fixed base, calibrated once per ring
#    with the same code path.
#
# References torch's own step keeps that read nothing again are not holders: the receive ops it built
# for ``p`` (done before ``p``'s forward ran; the ring points them at the resting alias before
# counting), and, on the forward ring of a training step, the sends of ``p``'s outputs (``[Note:
# finished sends]``). A tensor passed on, or whose address was read, costs nothing when nobody holds
# it at the re-post: an address is not an identity (docs/safety.md, "The contract").
#
# Re-homing leaves the old storage to its holders (it lives exactly as long as they do) and gives the
# tensor a fresh storage of the same shape, dtype and device, which the receive fills completely:
# nothing is copied and no holder ever sees a later microbatch's data. The cost is one allocation per
# conflict, only where a model keeps what it received, counted in ``rehomes`` and in the sets the ring
# holds (:meth:`DirectionRing.usage`). In a forward-only step torch keeps each input in ``fwd_cache``
# but never reads it again; those entries are swapped for the resting alias right after the forward
# (_patch.py), so they are not holders. With ``guard=False`` none of this runs (the negative controls
# show what an unchecked ring does). Not seen: a Python ``UntypedStorage`` object for the slot kept by
# user code. Where a re-post still bumps the version of something autograd saved, the backward's
# error is re-raised as :class:`pooltk.pool.guard.PoolReuseError` ([Note: naming the reuse]).
#
# [Note: finished sends]
# torch's multi-stage schedules keep every send's work (and its tensor, ``out.detach()``) until the
# step ends. On the forward ring of a training step those sends are finished by the time the slot is
# re-posted: ``p``'s slot is released only after ``p``'s backward, which needed the gradient the next
# stage computed from ``p``'s activation, so that stage had received it. The ring records the tensors
# of ``p``'s forward sends that share a slot tensor's storage (weak references) and does not count them.
# In a forward-only step there is no such signal (torch waits for its forward sends at the step's
# end), and the grad ring's sends go upstream, whose receipt nothing on this stage proves: there a
# send still referenced is a holder.
# ----------------------------------------------------------------------------------------

_OWN_HOLDERS = 3
"""Tensors the pool itself keeps on a slot's storage at a re-post: slot, resting alias, previous alias."""


def storage_holders(t: torch.Tensor) -> int:
    """Tensors sharing ``t``'s storage, ``t`` included (the temporary storage object is not counted)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata) - 1


def _anchor(t: torch.Tensor) -> torch.Tensor:
    """A storage-less stand-in whose ``.grad`` parks an alias (see [Note: copy on conflict], 3)."""
    return torch.empty((), dtype=t.dtype, device=t.device).expand(t.shape)


def recv_positions(infos: tuple) -> list[int]:
    """Indices of the entries of one chunk's recv-info tuple that receive into a tensor.

    Root-argument entries (stage 0's inputs, ``_RootArgPlaceholder`` on old torch,
    ``is_root_arg=True`` on newer) and entries without a buffer (no gradient) are skipped.
    """
    out = []
    for j, info in enumerate(infos):
        if getattr(info, "is_root_arg", False):
            continue
        if isinstance(getattr(info, "buffer", None), torch.Tensor):
            out.append(j)
    return out


def _alias(slot: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    alias = slot.detach()
    if requires_grad:
        alias.requires_grad_(True)
    return alias


class Rehome:
    """One copy-on-conflict event (see [Note: copy on conflict])."""

    __slots__ = ("stage", "direction", "slot", "position", "incoming", "nbytes", "holders", "why")

    def __init__(self, *, stage: int, direction: str, slot: int, position: int, incoming: int, nbytes: int,
                 holders: int, why: str) -> None:
        self.stage, self.direction, self.slot, self.position = stage, direction, slot, position
        self.incoming, self.nbytes = incoming, nbytes
        self.holders = holders
        """References from outside the pool found on the old storage (views, or to the alias itself)."""
        self.why = why
        """Which check saw the holder: ``views``, ``python`` or ``c++``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RingUse:
    """What one ring held during the last step, beside what stock and the live set would hold."""

    stage: int
    """The stage asked about."""
    direction: str
    stages: tuple[int, ...]
    """Every stage receiving into this ring (more than one for a rank-shared ring)."""
    ring: int
    """K: the sets the ring keeps."""
    live: int
    """The live set: the most sets the schedule can need at once (the ring is ``live + slack``)."""
    stock: int
    """The sets stock torch keeps for the same receives (one per microbatch and stage)."""
    tensors: int
    """Tensors per set."""
    held_sets: int
    """The most sets held at once during the last step: the ring's K plus storages re-homed and still held
    (rounded up to whole sets)."""
    held_bytes: int
    """Bytes of the storages held at that peak."""
    rehomes: int
    """Tensors re-homed during the last step (copy on conflict)."""

    @property
    def saved_sets(self) -> int:
        """Sets stock would hold beyond what the ring held (0 or less: the ring saved nothing)."""
        return self.stock - self.held_sets

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__} | {"saved_sets": self.saved_sets}


class DirectionRing:
    """K buffer sets for one direction, reused by the receives of one stage (``c mod K``) or of
    several stages of one rank (a slot map coloured from the schedule's action order: [Note:
    rank-shared rings] in pooltk/analysis/sharing.py).

    A *user* is one (stage, microbatch). Every per-slot record below is keyed by slot, so two
    stages that share a slot share its ownership, its holders' checks and its re-homes.
    """

    __slots__ = ("stage", "direction", "size", "n_microbatches", "positions", "slots", "ownership", "live",
                 "peak_owned", "_infos", "_resting", "_current", "_anchors", "_py_base", "_cpp_base",
                 "_requires_grad", "_ops", "_sends", "bumps", "rehomes", "step_rehomes", "on_rehome", "on_full",
                 "slot_map", "members", "_calibrated", "_rehomed_alive", "_step_peak", "__weakref__")

    def __init__(
        self,
        *,
        stage: int,
        direction: str,
        size: int,
        n_microbatches: int,
        positions: list[int],
        slots: list[list[torch.Tensor]],
        guard: bool,
        live: int = 0,
        on_rehome: Callable[[Rehome], None] | None = None,
        on_full: Callable[["DirectionRing", str], None] | None = None,
        slot_map: dict[tuple[int, int], int] | None = None,
    ) -> None:
        if len(slots) != size:
            raise AssertionError(f"ring of {size} sets built with {len(slots)} slots")
        self.stage, self.direction, self.size = stage, direction, size
        """``stage``: the first stage the ring was built for (its only one unless shared)."""
        self.n_microbatches = n_microbatches
        self.positions = positions
        self.slots = slots
        self.live = live
        """The live set this ring was sized from (``size`` is ``live`` plus slack, at most the receives)."""
        self.slot_map = slot_map
        """(stage, microbatch) -> slot for a rank-shared ring; None: ``c mod K``."""
        self.members: dict[int, list[int]] = {stage: positions}
        """stage -> the positions of its recv infos that receive into this ring."""
        self.ownership = SlotOwnership(stage=stage, direction=direction, ring=size) if guard else None
        self.peak_owned = 0
        """Most slots owned at once since setup (guard on): the live set this run really had."""
        self._infos: dict[tuple[int, int], tuple] = {}
        self._resting: list[list[torch.Tensor]] = []
        self._current: list[tuple[tuple[int, int], list[torch.Tensor], bool] | None] = [None] * size
        self._anchors: list[list[torch.Tensor]] = []
        self._py_base = 0
        self._cpp_base = 0
        self._calibrated = False
        self._requires_grad: list[bool] = []
        self._ops: dict[int, list] = {}
        self._sends: dict[int, list[list[weakref.ref]]] = {}
        """slot -> per tensor, weak references to the forward sends' tensors of its last user ([Note: finished sends])."""
        self.bumps: dict[int, tuple[int, int]] = {}
        """slot -> (microbatch that re-used it, previous owner) at its last version bump this step."""
        self.rehomes = 0
        """Tensors given fresh storage because a holder outside the pool still referenced the old one."""
        self.step_rehomes = 0
        """The same, since the last step started."""
        self._rehomed_alive = 0
        """Re-homed storages their holders still keep."""
        self._step_peak = 0
        """Most storages held at once since the last step started (the ring's own and re-homed ones alive)."""
        self.on_rehome = on_rehome
        self.on_full = on_full
        """Called once a step's re-homes make the ring hold as many sets as stock (the pool logs one WARNING)."""

    @property
    def shared(self) -> bool:
        """True when more than one stage receives into this ring."""
        return len(self.members) > 1

    @property
    def tensors(self) -> int:
        """Tensors per set."""
        return len(self.slots[0]) if self.slots else 0

    def slot_of(self, chunk: int, stage: int | None = None) -> int:
        """The slot (``stage``, ``chunk``) receives into."""
        if self.slot_map is None:
            return chunk % self.size
        return self.slot_map[(self.stage if stage is None else stage, chunk)]

    # -- setup -----------------------------------------------------------------------
    def bind(self, infos_by_chunk: dict[int, tuple], stage: int | None = None,
             positions: list[int] | None = None) -> None:
        """Point every chunk's recv infos of ``stage`` (default: the ring's first) at its slot's resting alias."""
        stage = self.stage if stage is None else stage
        positions = self.members.get(stage, self.positions) if positions is None else positions
        self.members[stage] = positions
        first = infos_by_chunk[0]
        if not self._resting:
            self._requires_grad = [bool(getattr(first[j].buffer, "requires_grad", False)) for j in positions]
            self._resting = [[_alias(t, rg) for t, rg in zip(tensors, self._requires_grad)] for tensors in self.slots]
            self._step_peak = self.size * self.tensors
        for chunk, infos in infos_by_chunk.items():
            self._infos[(stage, chunk)] = infos
            resting = self._resting[self.slot_of(chunk, stage)]
            for r, j in zip(resting, positions):
                infos[j].buffer = r
        if self.ownership is not None and not self._calibrated:
            self._calibrated = True
            self._anchors = [[_anchor(t) for t in tensors] for tensors in self.slots]
            probe = self._hand_out(0)
            self._anchors[0][0].grad = probe[0]
            self._py_base = self._py_refs(probe, 0)
            self._cpp_base = probe[0]._use_count()
            self._anchors[0][0].grad = None

    @staticmethod
    def _py_refs(aliases: list[torch.Tensor], k: int) -> int:
        return sys.getrefcount(aliases[k])

    def _hand_out(self, slot: int) -> list[torch.Tensor]:
        """Fresh aliases of ``slot``'s tensors (see [Note: fresh aliases])."""
        return [_alias(t, rg) for t, rg in zip(self.slots[slot], self._requires_grad)]

    # -- runtime ---------------------------------------------------------------------
    def post(self, chunk: int, infos: tuple, stage: int | None = None, *, training: bool = True) -> None:
        """A receive for (``stage``, ``chunk``) is about to be posted: claim its slot, hand out fresh aliases.

        ``training``: the step runs backwards (a forward slot is then released only after its backward;
        see [Note: finished sends]).
        """
        stage = self.stage if stage is None else stage
        slot = self.slot_of(chunk, stage)
        if self.ownership is None:
            fresh = self._hand_out(slot)
        else:
            self.ownership.acquire(chunk, slot=slot, stage=stage)
            owned = self.ownership.owned
            if owned > self.peak_owned:
                self.peak_owned = owned
            prev = self._current[slot]
            if prev is not None:
                self._retire(prev)
                self._check(slot, prev, chunk)
            fresh = self._hand_out(slot)
            self._current[slot] = ((stage, chunk), fresh, training)
            for anchor, a in zip(self._anchors[slot], fresh):
                anchor.grad = a
        for a, j in zip(fresh, self.members.get(stage, self.positions)):
            infos[j].buffer = a

    def note_ops(self, chunk: int, ops: object, stage: int | None = None) -> None:
        """Remember the receive ops torch built for ``chunk`` (they reference its alias; see [Note: copy on conflict])."""
        if self.ownership is not None and isinstance(ops, (list, tuple)):
            self._ops[self.slot_of(chunk, stage)] = list(ops)

    def note_sends(self, chunk: int, ops: object, stage: int | None = None) -> None:
        """Remember the tensors of ``chunk``'s forward sends that share its slot's storage ([Note: finished sends])."""
        if self.ownership is None or not isinstance(ops, (list, tuple)):
            return
        slot = self.slot_of(chunk, stage)
        cur = self._current[slot]
        if cur is None or cur[0] != (self.stage if stage is None else stage, chunk):
            return
        storages = [t.untyped_storage()._cdata for t in self.slots[slot]]
        sends: list[list[weakref.ref]] = [[] for _ in storages]
        for op in ops:
            t = getattr(op, "tensor", None)
            if isinstance(t, torch.Tensor) and not t.is_meta:
                key = t.untyped_storage()._cdata
                if key in storages:
                    sends[storages.index(key)].append(weakref.ref(t))
        self._sends[slot] = sends

    def release(self, chunk: int, stage: int | None = None) -> None:
        if self.ownership is not None:
            self.ownership.release(chunk, slot=self.slot_of(chunk, stage), stage=self.stage if stage is None else stage)

    def retire_inputs(self, chunk: int, values: list, stage: int | None = None) -> None:
        """Swap the aliases handed to ``chunk`` in ``values`` (a list torch keeps) for the resting alias."""
        stage = self.stage if stage is None else stage
        slot = self.slot_of(chunk, stage)
        cur = self._current[slot]
        if cur is None or cur[0] != (stage, chunk):
            return
        resting = self._resting[slot]
        for i, v in enumerate(values):
            for a, r in zip(cur[1], resting):
                if v is a:
                    values[i] = r
                    break

    def reset(self) -> None:
        """A new step: nobody owns a slot, and every alias handed out so far is retired."""
        if self.ownership is not None:
            self.ownership.reset()
            for cur in self._current:
                if cur is not None:
                    self._retire(cur)
            self.bumps.clear()
        self.step_rehomes = 0
        self._step_peak = self.size * self.tensors + self._rehomed_alive

    # -- internals ---------------------------------------------------------------------
    def _retire(self, cur: tuple) -> None:
        user, aliases = cur[0], cur[1]
        infos = self._infos.get(user)
        if infos is None:
            return
        resting = self._resting[self.slot_of(user[1], user[0])]
        for a, r, j in zip(aliases, resting, self.members.get(user[0], self.positions)):
            if infos[j].buffer is a:
                infos[j].buffer = r

    def _check(self, slot: int, prev: tuple, incoming: int) -> None:
        """See [Note: copy on conflict]: re-home each tensor of the slot that someone outside still holds."""
        aliases, trained = prev[1], prev[2]
        for op in self._ops.pop(slot, ()):  # done receives torch's step still references: not readers
            for k in range(len(aliases)):  # (an index loop: a loop variable bound to an alias would count)
                if getattr(op, "tensor", None) is aliases[k]:
                    op.tensor = self._resting[slot][k]
        sends = self._sends.pop(slot, None)
        stale = []
        for k, t in enumerate(self.slots[slot]):
            finished = sum(r() is not None for r in sends[k]) if sends is not None and trained else 0
            views = storage_holders(t) - _OWN_HOLDERS - finished
            held = self._py_refs(aliases, k) - self._py_base
            cpp = aliases[k]._use_count() - self._cpp_base
            why = "views" if views > 0 else "python" if held > 0 else "c++" if cpp > 0 else ""
            if why:
                self._rehome(slot, k, incoming, max(views, 0) + max(held, 0) + max(cpp, 0), why, prev[0][0])
            else:
                stale.append(t)
        if stale:
            self.bumps[slot] = (incoming, prev[0][1])
        bump_version(stale)

    def _rehome(self, slot: int, k: int, incoming: int, holders: int, why: str, stage: int) -> None:
        old = self.slots[slot][k]
        new = torch.empty_like(old, memory_format=torch.preserve_format)
        self.slots[slot][k] = new
        old_resting = self._resting[slot][k]
        new_resting = _alias(new, self._requires_grad[k])
        self._resting[slot][k] = new_resting
        for (user_stage, chunk), infos in self._infos.items():
            j = self.members.get(user_stage, self.positions)[k]
            if infos[j].buffer is old_resting:
                infos[j].buffer = new_resting
        nbytes = new.untyped_storage().nbytes()
        self.rehomes += 1
        self.step_rehomes += 1
        self._rehomed_alive += 1
        weakref.finalize(old.untyped_storage(), _let_go, weakref.ref(self))
        held = self.size * self.tensors + self._rehomed_alive
        if held > self._step_peak:
            self._step_peak = held
            if self.on_full is not None and -(-held // self.tensors) >= self.stock_sets and (
                    self.size < self.stock_sets or held > self.size * self.tensors):
                self.on_full(self, why)
        if self.on_rehome is not None:
            self.on_rehome(Rehome(stage=stage, direction=self.direction, slot=slot,
                                  position=self.members.get(stage, self.positions)[k],
                                  incoming=incoming, nbytes=nbytes, holders=holders, why=why))

    # -- accounting ------------------------------------------------------------------
    @property
    def stock_sets(self) -> int:
        """Sets stock torch would keep for this ring's receives (one per microbatch of each member stage)."""
        return self.n_microbatches * len(self.members)

    @property
    def set_bytes(self) -> int:
        """Bytes of one buffer set (all tensors one microbatch receives in this direction)."""
        return sum(t.untyped_storage().nbytes() for t in self.slots[0]) if self.slots else 0

    @property
    def nbytes(self) -> int:
        return self.size * self.set_bytes

    def usage(self, stage: int | None = None) -> RingUse:
        """What the ring held during the last step (see :class:`RingUse`)."""
        tensors = self.tensors or 1
        return RingUse(stage=self.stage if stage is None else stage, direction=self.direction,
                       stages=tuple(sorted(self.members)), ring=self.size, live=self.live, stock=self.stock_sets,
                       tensors=self.tensors, held_sets=-(-self._step_peak // tensors),
                       held_bytes=self._step_peak * self.set_bytes // tensors, rehomes=self.step_rehomes)


def _let_go(ring_ref: weakref.ref) -> None:
    """A re-homed storage's last holder let go of it."""
    ring = ring_ref()
    if ring is not None:
        ring._rehomed_alive -= 1

