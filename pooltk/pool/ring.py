"""The ring: K buffer sets for one direction, the fresh alias each receive gets, and who owns each slot.

A ring serves one stage (chunk ``c`` uses slot ``c mod K``) or several stages of one rank (a slot map
coloured from the schedule's action order: [Note: rank-shared rings] in pooltk/analysis/sharing.py).
A *user* is one (stage, microbatch); every record below is per slot, so stages that share a slot share
its owner, its holders' check and its re-homes.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import Callable

import torch

from pooltk.analysis.stage_sets import formula_live
from pooltk.config import PoolConfig
from pooltk.pool.guard import PoolOverrunError, bump_version

__all__ = ["DirectionRing", "RingUse", "live_1f1b", "recv_positions", "ring_size"]

# [Note: ring sizes]
# Under torch's ``Schedule1F1B`` stage ``i`` of ``N`` runs ``W = min(M, N - i)`` warmup forwards; the
# forward receive for microbatch ``k + W`` is posted only after the backward of microbatch ``k``. So at
# most ``W`` activation buffers are live on stage ``i`` (none on stage 0, whose inputs are the root
# arguments) and one gradient buffer (none on the last stage): :func:`live_1f1b`. Chunk ``c`` uses slot
# ``c mod K``, safe exactly when ``K`` is at least the live set. :func:`ring_size` is the one slack rule
# that turns a live set into ``K``: ``min(receives, live + slack)`` forward, ``min(receives, live +
# grad_slack)`` grad, 0 (stock) where nothing is received. ``receives`` is ``M`` for a per-stage ring,
# or the receives into a rank-shared ring ([Note: rank-shared rings]). Other schedules bring their
# smallest safe ring from their own action order (:mod:`pooltk.analysis.plans`, [Note: auto rings]),
# sized by the same :func:`ring_size`. Stock keeps ``M`` each; Automodel's single ring
# ``max(2, min(M, max(1, N - i) + slack))`` for both directions is the memory model's
# (:func:`pooltk.memory.model.automodel_ring`) and the harness's, never the pool's.


def live_1f1b(num_stages: int, stage_index: int, n_microbatches: int, direction: str) -> int:
    """1F1B's live set: forward W = min(M, N - i) (0 on stage 0), grad 1 (0 on the last stage).

    Raises ValueError (an :class:`~pooltk._validate.InputError`) unless (N, i, M) describe a real stage.
    See [Note: ring sizes].
    """
    return formula_live(num_stages, stage_index, direction, n_microbatches)


def ring_size(live: int, receives: int, direction: str, config: PoolConfig) -> int:
    """The one slack rule: 0 where nothing is received (live == 0), else min(receives, live + slack)
    with config.slack forward and config.grad_slack for "grad". See [Note: ring sizes]."""
    if live == 0:
        return 0
    return min(receives, live + (config.slack if direction == "forward" else config.grad_slack))


# [Note: fresh aliases]
# Chunks that map to one slot share the slot's *storage*, never a tensor object or a ``_RecvInfo``.
# Each receive hands its ``_RecvInfo`` a fresh ``detach()`` alias of the slot tensor: same storage and
# version counter (so the version bump reaches it), its own ``.grad``, ``requires_grad`` and hooks. A
# hook on microbatch k's input never fires for k + K. Between uses a chunk's ``_RecvInfo`` holds the
# slot's one *resting* alias, never read (the chunk's next post replaces it first).
#
# [Note: slot ownership]
# A slot is owned from its receive post until the stage is done reading it: a forward slot until that
# microbatch's backward (its weight pass, if split; its forward, in a forward-only step), a grad slot until
# the backward returns (or the weight pass). Receives do not bump the version counter, so a post into a
# slot another user owns would overwrite silently: :class:`PoolOverrunError` is raised before it.
#
# [Note: copy on conflict]
# A receive never lands in storage something outside the pool still holds. Right before a re-post the ring
# counts, per tensor, who holds the previous user's data now: tensors on the storage beyond the pool's three
# (slot, resting alias, previous alias), and Python and C++ references to the previous alias (bases
# calibrated once per ring on an anchor's ``.grad``). A held tensor is re-homed alone: the holders keep the
# old storage, the slot gets a new one. Not holders: torch's receive ops (pointed back at the resting alias)
# and [Note: finished sends]. An address is not a holder (docs/safety.md, "The contract"). Every other
# re-post bumps the version counter, so a reader nothing counts fails in autograd ([Note: naming the reuse]).
#
# [Note: finished sends]. An address is not a holder (docs/safety.md, "The contract"). Every other
# re-post bumps the slot's version counter, so a reader the counts cannot see (a Python
# ``UntypedStorage`` object kept by user code) fails in autograd, named by [Note: naming the reuse].
#
# [Note: finished sends]
# Multi-stage schedules keep every send's work, and its tensor, until the step ends. On the forward
# ring of a training step the previous user's sends are finished when its slot is re-posted: the slot
# was released after its backward, which needed the gradient the next stage computed from that very
# activation. So those send tensors (recorded by weak reference) are not counted. In a forward-only
# step, and on the grad ring (its sends go upstream), nothing proves a send finished: there it holds.

_OWN = 3
"""Tensors the pool itself keeps on a slot's storage at a re-post: slot, resting alias, previous alias."""


def recv_positions(infos: tuple) -> list[int]:
    """Indices of a chunk's recv infos that receive into a tensor (root arguments and absent grads skipped)."""
    return [
        j
        for j, info in enumerate(infos)
        if not getattr(info, "is_root_arg", False)
        and isinstance(getattr(info, "buffer", None), torch.Tensor)
    ]


def _alias(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    alias = t.detach()
    return alias.requires_grad_(True) if requires_grad else alias


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
    """The live set: the most sets the schedule can need at once (K is ``live`` plus slack, at most ``stock``)."""
    stock: int
    """Sets stock torch keeps for the same receives (one per microbatch and stage)."""
    tensors: int
    """Tensors per set."""
    held_sets: int
    """The most sets held at once during the last step: K plus re-homed storages still held, rounded up."""
    held_bytes: int
    """Bytes of the storages held at that peak."""
    rehomes: int
    """Tensors re-homed during the last step (copy on conflict)."""

    @property
    def saved_sets(self) -> int:
        """Sets stock would hold beyond what the ring held (0 or less: the ring saved nothing)."""
        return self.stock - self.held_sets

    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in self.__slots__} | {
            "saved_sets": self.saved_sets
        }


class DirectionRing:
    """K buffer sets for one direction of one stage, or of a rank's stages (see the module docstring)."""

    __slots__ = (
        "stage",
        "direction",
        "size",
        "live",
        "n_microbatches",
        "slots",
        "slot_map",
        "members",
        "guard",
        "owners",
        "_owned",
        "peak_owned",
        "bumps",
        "rehomes",
        "step_rehomes",
        "say",
        "_infos",
        "_resting",
        "_current",
        "_anchors",
        "_requires_grad",
        "_ops",
        "_sends",
        "_py_base",
        "_cpp_base",
        "_rehomed_alive",
        "_step_peak",
        "__weakref__",
    )

    def __init__(
        self,
        *,
        stage: int,
        direction: str,
        live: int,
        n_microbatches: int,
        slots: list[list[torch.Tensor]],
        slot_map: dict[tuple[int, int], int] | None = None,
        guard: bool = True,
        say: Callable[..., None] | None = None,
    ) -> None:
        self.stage, self.direction, self.size, self.live = stage, direction, len(slots), live
        """``stage``: the first member; ``live``: the live set K was sized from."""
        self.n_microbatches, self.slots, self.slot_map = n_microbatches, slots, slot_map
        self.members: dict[int, list[int]] = {}
        """stage -> positions of its recv infos that receive into this ring."""
        self.guard = guard
        """False only for negative controls (pooltk.parity): no ownership, no holders' check, no version bump."""
        self.owners: list[tuple[int, int] | None] = [None] * self.size
        self._owned = 0
        self.peak_owned = 0
        """Most slots owned at once: the live set this run really had."""
        self.bumps: dict[int, tuple[int, int]] = {}
        """slot -> (microbatch that re-used it, its previous owner), this step ([Note: naming the reuse])."""
        self.rehomes = self.step_rehomes = self._rehomed_alive = 0
        self.say = say
        """``say(kind, **fields)``: a ``re-homed`` or ``no-saving`` event (pooltk.pool.events.LINES)."""
        self._infos: dict[tuple[int, int], tuple] = {}
        self._resting: list[list[torch.Tensor]] = []
        self._current: list[tuple | None] = [None] * self.size
        """slot -> (user, aliases handed out, trained) of its last post."""
        self._anchors: list[list[torch.Tensor]] = []
        self._requires_grad: list[bool] = []
        self._ops: dict[int, list] = {}
        self._sends: dict[int, list[list[weakref.ref]]] = {}
        self._py_base = self._cpp_base = 0
        self._step_peak = self.size * self.tensors

    @property
    def tensors(self) -> int:
        return len(self.slots[0]) if self.slots else 0

    @property
    def shared(self) -> bool:
        return len(self.members) > 1

    def slot_of(self, chunk: int, stage: int) -> int:
        """The slot (``stage``, ``chunk``) receives into: ``chunk mod K``, or the rank-shared ring's colouring."""
        return chunk % self.size if self.slot_map is None else self.slot_map[(stage, chunk)]

    def bind(self, stage: int, infos_by_chunk: dict[int, tuple], positions: list[int]) -> None:
        """Point every chunk's recv infos of ``stage`` at its slot's resting alias."""
        self.members[stage] = positions
        if not self._resting:
            self._requires_grad = [
                bool(infos_by_chunk[0][j].buffer.requires_grad) for j in positions
            ]
            self._resting = [self._hand_out(s) for s in range(self.size)]
            self._anchors = [
                [torch.empty((), dtype=t.dtype, device=t.device).expand(t.shape) for t in ts]
                for ts in self.slots
            ]
            probe = self._hand_out(0)
            self._anchors[0][0].grad = probe[0]
            self._py_base, self._cpp_base = sys.getrefcount(probe[0]), probe[0]._use_count()
            self._anchors[0][0].grad = None
        for chunk, infos in infos_by_chunk.items():
            self._infos[(stage, chunk)] = infos
            for r, j in zip(self._resting[self.slot_of(chunk, stage)], positions):
                infos[j].buffer = r

    def _hand_out(self, slot: int) -> list[torch.Tensor]:
        return [_alias(t, rg) for t, rg in zip(self.slots[slot], self._requires_grad)]

    # -- the receive: claim, check the previous user, hand out ------------------------------
    def post(self, chunk: int, stage: int, infos: tuple, *, training: bool) -> None:
        """A receive for (``stage``, ``chunk``) is about to be posted into ``infos``."""
        slot = self.slot_of(chunk, stage)
        if self.guard:
            owner = self.owners[slot]
            if owner is not None and owner != (stage, chunk):
                raise PoolOverrunError(
                    stage=stage,
                    direction=self.direction,
                    slot=slot,
                    ring=self.size,
                    owner=owner[1],
                    incoming=chunk,
                    owner_stage=owner[0] if owner[0] != stage else None,
                )
            if owner is None:
                self.owners[slot] = (stage, chunk)
                self._owned += 1
                self.peak_owned = max(self.peak_owned, self._owned)
            if self._current[slot] is not None:
                self._retire(slot)
                self._check(slot, chunk)
        aliases = self._hand_out(slot)
        self._current[slot] = ((stage, chunk), aliases, training)
        if self.guard:
            for anchor, a in zip(self._anchors[slot], aliases):
                anchor.grad = a
        for a, j in zip(aliases, self.members[stage]):
            infos[j].buffer = a

    def note_ops(self, chunk: int, stage: int, recvs: object = None, sends: object = None) -> None:
        """Remember the receive ops torch built for the chunk, or the tensors of its forward sends on its slot."""
        if not self.guard:
            return
        slot = self.slot_of(chunk, stage)
        if recvs is not None:
            self._ops[slot] = list(recvs)
            return
        cur = self._current[slot]
        if cur is None or cur[0] != (stage, chunk):
            return
        storages = [t.untyped_storage()._cdata for t in self.slots[slot]]
        kept: list[list[weakref.ref]] = [[] for _ in storages]
        for op in sends or ():
            t = getattr(op, "tensor", None)
            if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata in storages:
                kept[storages.index(t.untyped_storage()._cdata)].append(weakref.ref(t))
        self._sends[slot] = kept

    def release(self, chunk: int, stage: int) -> None:
        """(``stage``, ``chunk``) is done reading its slot (see [Note: slot ownership])."""
        slot = self.slot_of(chunk, stage)
        if self.owners[slot] == (stage, chunk):
            self.owners[slot] = None
            self._owned -= 1

    def retire_inputs(self, chunk: int, stage: int, values: list) -> None:
        """Swap the aliases handed to the chunk in ``values`` (a list torch keeps) for the resting alias."""
        slot = self.slot_of(chunk, stage)
        cur = self._current[slot]
        if cur is not None and cur[0] == (stage, chunk):
            for i, v in enumerate(values):
                for a, r in zip(cur[1], self._resting[slot]):
                    if v is a:
                        values[i] = r

    def reset(self) -> None:
        """A new step: nobody owns a slot, every alias handed out is retired, the step's counts restart."""
        self.owners, self._owned = [None] * self.size, 0
        for slot, cur in enumerate(self._current):
            if cur is not None:
                self._retire(slot)
        self.bumps.clear()
        self.step_rehomes = 0
        self._step_peak = self.size * self.tensors + self._rehomed_alive

    def _retire(self, slot: int) -> None:
        (stage, chunk), aliases, _ = self._current[slot]
        infos = self._infos.get((stage, chunk))
        for a, r, j in zip(aliases, self._resting[slot], self.members.get(stage, ())):
            if infos is not None and infos[j].buffer is a:
                infos[j].buffer = r

    def _check(self, slot: int, incoming: int) -> None:
        """[Note: copy on conflict]: re-home each tensor of the slot someone outside the pool still holds."""
        (stage, previous), aliases, trained = self._current[slot]
        for op in self._ops.pop(slot, ()):
            for k in range(
                len(aliases)
            ):  # an index loop: a loop variable bound to an alias would count
                if getattr(op, "tensor", None) is aliases[k]:
                    op.tensor = self._resting[slot][k]
        sends = self._sends.pop(slot, None)
        reused = []
        for k, t in enumerate(self.slots[slot]):
            finished = (
                sum(r() is not None for r in sends[k]) if sends is not None and trained else 0
            )
            views = torch._C._storage_Use_Count(t.untyped_storage()._cdata) - 1 - _OWN - finished
            held = sys.getrefcount(aliases[k]) - self._py_base
            cpp = aliases[k]._use_count() - self._cpp_base
            why = "views" if views > 0 else "python" if held > 0 else "c++" if cpp > 0 else ""
            if why:
                self._rehome(
                    slot, k, stage, incoming, max(views, 0) + max(held, 0) + max(cpp, 0), why
                )
            else:
                reused.append(t)
        if reused:
            self.bumps[slot] = (incoming, previous)
            bump_version(reused)

    def _rehome(self, slot: int, k: int, stage: int, incoming: int, holders: int, why: str) -> None:
        old, old_resting = self.slots[slot][k], self._resting[slot][k]
        new = self.slots[slot][k] = torch.empty_like(old, memory_format=torch.preserve_format)
        new_resting = self._resting[slot][k] = _alias(new, self._requires_grad[k])
        for (user_stage, _), infos in self._infos.items():
            j = self.members[user_stage][k]
            if infos[j].buffer is old_resting:
                infos[j].buffer = new_resting
        self.rehomes += 1
        self.step_rehomes += 1
        self._rehomed_alive += 1
        weakref.finalize(old.untyped_storage(), _let_go, weakref.ref(self))
        held = self.size * self.tensors + self._rehomed_alive
        if held > self._step_peak:
            self._step_peak = held
            if (
                self.say is not None
                and -(-held // self.tensors) >= self.stock_sets
                and (self.size < self.stock_sets or held > self.size * self.tensors)
            ):
                use = self.usage(self.stage)
                self.say(
                    "no-saving",
                    stage=self.stage,
                    direction=self.direction,
                    held=use.held_sets,
                    stock=use.stock,
                    ring=use.ring,
                    rehomes=use.rehomes,
                    check=why,
                )
        if self.say is not None:
            self.say(
                "re-homed",
                stage=stage,
                direction=self.direction,
                slot=slot,
                position=self.members[stage][k],
                incoming=incoming,
                bytes=new.untyped_storage().nbytes(),
                holders=holders,
                check=why,
            )

    # -- what it holds --------------------------------------------------------------------
    @property
    def stock_sets(self) -> int:
        """Sets stock torch would keep for this ring's receives (one per microbatch of each member)."""
        return self.n_microbatches * max(1, len(self.members))

    @property
    def set_bytes(self) -> int:
        return sum(t.untyped_storage().nbytes() for t in self.slots[0]) if self.slots else 0

    def usage(self, stage: int) -> RingUse:
        """What the ring held during the last step (see :class:`RingUse`)."""
        per = self.tensors or 1
        return RingUse(
            stage=stage,
            direction=self.direction,
            stages=tuple(sorted(self.members)),
            ring=self.size,
            live=self.live,
            stock=self.stock_sets,
            tensors=self.tensors,
            held_sets=-(-self._step_peak // per),
            held_bytes=self._step_peak * self.set_bytes // per,
            rehomes=self.step_rehomes,
        )


def _let_go(ring_ref: weakref.ref) -> None:
    """A re-homed storage's last holder let go of it."""
    ring = ring_ref()
    if ring is not None:
        ring._rehomed_alive -= 1
