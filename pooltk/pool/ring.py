"""The K buffer sets of one direction of one stage, and the fresh aliases handed out per receive.

How many sets (K) is :mod:`pooltk.pool.sizing`'s question; this module holds them. Chunk ``c``
uses slot ``c mod K`` (:func:`pooltk.pool.sizing.slot_of`).
"""

from __future__ import annotations

import functools
import sys
from typing import Callable

import torch

from pooltk.pool.addresses import forget, watch_alias
from pooltk.pool.guard import SlotOwnership, bump_version

__all__ = ["DirectionRing", "Rehome", "recv_positions", "storage_holders"]

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
# Invariant: a receive is never posted into storage that anything outside the pool may still
# read. Ownership ([Note: slot ownership] in pooltk/pool/guard.py) covers what the schedule
# tells the pool; it cannot see a stage output that is (a view of) its input, kept in
# ``output_chunks`` until the step ends or sent downstream; an input gradient that is a view
# of the received gradient, sent upstream; or a tensor a hook stored. So, with the guard on,
# before re-posting slot ``s`` the ring checks these things about the previous microbatch
# ``p`` that used it, and if any holds it *re-homes* the slot:
#
# 1. *lent*: one of ``p``'s stage outputs (forward ring) or input gradients (grad ring)
#    shared the slot's storage (recorded by data pointer right after the forward / backward;
#    see install.py). Such a tensor may be in ``output_chunks`` or in a send that only the
#    communication library holds, so it counts whatever happened since;
# 2. *views*: torch counts the tensors sharing a storage (``torch._C._storage_Use_Count``).
#    The pool keeps exactly three there: the slot, its resting alias, and ``p``'s alias
#    (``p``'s ``_RecvInfo`` entries go back to the resting alias first). Any more is a view
#    or another tensor on the storage that someone outside the pool holds;
# 3. *the alias itself*: a holder of ``p``'s alias object (a hook that kept its input, a
#    list) shares no new tensor, so its Python references are counted instead; and a holder
#    from C++ (a DLPack export: ``torch.from_dlpack(x)``, ``np.from_dlpack(x)``, which raise
#    neither the storage's use count nor the alias's Python references; a saved tensor of a
#    graph that is still alive, such as the next microbatch's forward saving ``self.prev``)
#    raises the alias's own use count (``Tensor._use_count``). The ring parks the alias as the
#    ``.grad`` of a private anchor tensor so both counts have a fixed base, calibrated once per
#    ring with the same code path. These C++ holders could be counted only once the schedule's
#    own kept graphs stopped holding every input until step end ([Note: releasing what the
#    schedule keeps] in release.py): before that, every last-stage alias looked held.
#
# Two references torch's own step keeps are not holders: the receive ops it built for ``p``
# (``P2POp.tensor`` is ``p``'s alias; the step keeps the list in a local until its next receive,
# which with a one-slot ring is this very re-post) are done before ``p``'s forward ran, so the
# ring points them at the resting alias before counting; and the loss the step keeps in a local
# lost its graph in the release ([Note: releasing what the schedule keeps]).
#
# 4. *the address*: an address outlives every reference, so a cache keyed by ``x.data_ptr()``
#    holds nothing the counts above see. While pooltk is installed ``Tensor.data_ptr`` records
#    when it is called on an alias the ring handed out ([Note: taken addresses] in
#    addresses.py); such a slot is re-homed at its next re-post and its old storage is kept by the
#    ring until the step ends, so no two receives of a step share an address (as with stock or a
#    fresh buffer per receive). Addresses taken from a view, or in C++, are not seen. A slot whose
#    address was taken is pinned whichever check re-homes it: a storage re-homed for another holder
#    (a DLPack export, say) is freed when that holder lets go, and its address would come back
#    (measured: fuzz case 466 of seed 2026, ZBVZeroBubble pp4, silent before this rule).
#
# Re-homing leaves the old storage to its holders (it lives exactly as long as they do) and
# gives the slot a fresh storage of the same shape, dtype and device, which the receive
# fills completely: nothing is copied and no holder ever sees a later microbatch's data.
# The cost is one allocation per conflict, only where a model keeps aliases, counted in
# ``rehomes`` / ``rehomed_bytes`` and reported per event. In a forward-only step torch keeps
# each input in ``fwd_cache`` but never reads it again; those entries are swapped for the
# resting alias right after the forward (install.py), so they are not holders. With
# ``guard=False`` none of this runs (the negative controls show what an unchecked ring does).
#
# What the checks cannot see: a Python ``UntypedStorage`` object for the slot kept by user
# code; an address taken from a view or in C++ (above).
# Where a re-post still bumps the version of something autograd saved, the backward's error is
# re-raised as :class:`pooltk.pool.guard.PoolReuseError` naming the stage, slot and microbatch
# ([Note: naming the reuse] in guard.py).
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

    __slots__ = ("stage", "direction", "slot", "position", "incoming", "nbytes", "holders", "lent", "why")

    def __init__(self, *, stage: int, direction: str, slot: int, position: int, incoming: int, nbytes: int,
                 holders: int, lent: bool, why: str = "") -> None:
        self.stage, self.direction, self.slot, self.position = stage, direction, slot, position
        self.incoming, self.nbytes = incoming, nbytes
        self.holders = holders
        """References from outside the pool found on the old storage (views, or to the alias itself)."""
        self.lent = lent
        """True when the previous microbatch's output / input gradient shared the slot's storage."""
        self.why = why
        """Which check saw the holder: ``lent``, ``views``, ``python``, ``c++`` or ``address``."""


class DirectionRing:
    """K buffer sets for one direction, reused by the receives of one stage (``c mod K``) or of
    several stages of one rank (a slot map coloured from the schedule's action order: [Note:
    rank-shared rings] in pooltk/analysis/sharing.py).

    A *user* is one (stage, microbatch). Every per-slot record below is keyed by slot, so two
    stages that share a slot share its ownership, its holders' checks and its re-homes.
    """

    __slots__ = ("stage", "direction", "size", "n_microbatches", "positions", "slots", "ownership", "_posted",
                 "peak_owned", "_infos", "_resting", "_current", "_anchors", "_lent", "_py_base", "_cpp_base",
                 "_requires_grad", "_ops", "_addressed", "_pinned", "bumps", "rehomes", "rehomed_bytes", "on_rehome",
                 "slot_map", "members", "_calibrated")

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
        on_rehome: Callable[[Rehome], None] | None = None,
        slot_map: dict[tuple[int, int], int] | None = None,
    ) -> None:
        if len(slots) != size:
            raise AssertionError(f"ring of {size} sets built with {len(slots)} slots")
        self.stage, self.direction, self.size = stage, direction, size
        """``stage``: the first stage the ring was built for (its only one unless shared)."""
        self.n_microbatches = n_microbatches
        self.positions = positions
        self.slots = slots
        self.slot_map = slot_map
        """(stage, microbatch) -> slot for a rank-shared ring; None: ``c mod K``."""
        self.members: dict[int, list[int]] = {stage: positions}
        """stage -> the positions of its recv infos that receive into this ring."""
        self.ownership = SlotOwnership(stage=stage, direction=direction, ring=size) if guard else None
        self._posted = [False] * size
        self.peak_owned = 0
        """Most slots owned at once since setup (guard on): the live set this run really had."""
        self._infos: dict[tuple[int, int], tuple] = {}
        self._resting: list[list[torch.Tensor]] = []
        self._current: list[tuple[tuple[int, int], list[torch.Tensor]] | None] = [None] * size
        self._anchors: list[list[torch.Tensor]] = []
        self._lent: set[int] = set()
        self._py_base = 0
        self._cpp_base = 0
        self._calibrated = False
        self._requires_grad: list[bool] = []
        self._ops: dict[int, list] = {}
        self._addressed: set[int] = set()
        self._pinned: list[torch.Tensor] = []
        self.bumps: dict[int, tuple[int, int]] = {}
        """slot -> (microbatch that re-used it, previous owner) at its last version bump this step."""
        self.rehomes = 0
        """Slots given fresh storage because a holder outside the pool still referenced the old one."""
        self.rehomed_bytes = 0
        """Bytes allocated by those re-homes (the old storages live on with their holders)."""
        self.on_rehome = on_rehome

    @property
    def shared(self) -> bool:
        """True when more than one stage receives into this ring."""
        return len(self.members) > 1

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
    def post(self, chunk: int, infos: tuple, stage: int | None = None) -> None:
        """A receive for (``stage``, ``chunk``) is about to be posted: claim its slot, hand out fresh aliases."""
        stage = self.stage if stage is None else stage
        slot = self.slot_of(chunk, stage)
        if self.ownership is None:
            fresh = [_alias(t, rg) for t, rg in zip(self.slots[slot], self._requires_grad)]
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
            for a in fresh:  # see [Note: copy on conflict], 4
                watch_alias(a, functools.partial(self._addressed.add, slot))
            self._current[slot] = ((stage, chunk), fresh)
            for anchor, a in zip(self._anchors[slot], fresh):
                anchor.grad = a
        self._posted[slot] = True
        for a, j in zip(fresh, self.members.get(stage, self.positions)):
            infos[j].buffer = a

    def note_ops(self, chunk: int, ops: object, stage: int | None = None) -> None:
        """Remember the receive ops torch built for ``chunk`` (they reference its alias; see [Note: copy on conflict])."""
        if self.ownership is not None and isinstance(ops, (list, tuple)):
            self._ops[self.slot_of(chunk, stage)] = list(ops)

    def release(self, chunk: int, stage: int | None = None) -> None:
        if self.ownership is not None:
            self.ownership.release(chunk, slot=self.slot_of(chunk, stage), stage=self.stage if stage is None else stage)

    def note_lent(self, chunk: int, tensors: tuple | list, stage: int | None = None) -> None:
        """Record that ``chunk`` handed out tensors sharing its slot's storage (outputs or input grads)."""
        if self.ownership is None or not tensors:
            return
        slot = self.slot_of(chunk, stage)
        ptrs = {t.untyped_storage().data_ptr() for t in self.slots[slot]}
        for t in tensors:
            if isinstance(t, torch.Tensor) and not t.is_meta and t.untyped_storage().data_ptr() in ptrs:
                self._lent.add(slot)
                return

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
            self._addressed.clear()
            self._pinned.clear()  # addresses of the last step may repeat now, as stock's do every step

    # -- internals ---------------------------------------------------------------------
    def _retire(self, cur: tuple[tuple[int, int], list[torch.Tensor]]) -> None:
        user, aliases = cur
        for a in aliases:
            forget(a)
        infos = self._infos.get(user)
        if infos is None:
            return
        resting = self._resting[self.slot_of(user[1], user[0])]
        for a, r, j in zip(aliases, resting, self.members.get(user[0], self.positions)):
            if infos[j].buffer is a:
                infos[j].buffer = r

    def _check(self, slot: int, prev: tuple[tuple[int, int], list[torch.Tensor]], incoming: int) -> None:
        """See [Note: copy on conflict]: re-home each tensor of the slot that someone outside still holds."""
        lent = slot in self._lent
        self._lent.discard(slot)
        addressed = slot in self._addressed
        self._addressed.discard(slot)
        aliases = prev[1]
        for op in self._ops.pop(slot, ()):  # done receives torch's step still references: not readers
            for k in range(len(aliases)):  # (an index loop: a loop variable bound to an alias would count)
                if getattr(op, "tensor", None) is aliases[k]:
                    op.tensor = self._resting[slot][k]
        stale = []
        for k, t in enumerate(self.slots[slot]):
            views = storage_holders(t) - _OWN_HOLDERS
            held = self._py_refs(aliases, k) - self._py_base
            cpp = aliases[k]._use_count() - self._cpp_base
            why = ("lent" if lent else "views" if views > 0 else "python" if held > 0 else "c++" if cpp > 0
                   else "address" if addressed else "")
            if why:
                self._rehome(slot, k, incoming, max(views, 0) + max(held, 0) + max(cpp, 0), lent, why, prev[0][0],
                             pin=addressed)
            else:
                stale.append(t)
        if stale:
            self.bumps[slot] = (incoming, prev[0][1])
        bump_version(stale)

    def _rehome(self, slot: int, k: int, incoming: int, holders: int, lent: bool, why: str, stage: int,
                pin: bool = False) -> None:
        old = self.slots[slot][k]
        if pin:  # its address was taken: it must not come back this step, whoever else holds the storage now
            self._pinned.append(old)  # see [Note: copy on conflict], 4
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
        self.rehomed_bytes += nbytes
        if self.on_rehome is not None:
            self.on_rehome(Rehome(stage=stage, direction=self.direction, slot=slot,
                                  position=self.members.get(stage, self.positions)[k],
                                  incoming=incoming, nbytes=nbytes, holders=holders, lent=lent, why=why))

    # -- accounting ------------------------------------------------------------------
    @property
    def set_bytes(self) -> int:
        """Bytes of one buffer set (all tensors one microbatch receives in this direction)."""
        return sum(t.untyped_storage().nbytes() for t in self.slots[0]) if self.slots else 0

    @property
    def nbytes(self) -> int:
        return self.size * self.set_bytes
