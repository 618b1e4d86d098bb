"""Copy on conflict: who still holds a slot's previous data when the slot is posted again.

[Note: copy on conflict]
A receive never lands in storage something outside the pool still holds. Right before a re-post
the ring counts, per tensor of the slot, who holds the previous user's data now: tensors on the
storage beyond the pool's own three (the slot's tensor, its resting alias, the previous alias),
and Python and C++ references to the previous alias beyond [Note: calibration]'s baselines. A
held tensor is re-homed alone: its holders keep the old storage, the slot gets a new one. Not
holders: torch's receive ops (pointed back at the resting alias first) and [Note: finished
sends]. An address is not a holder: a freed storage's address goes to the next allocation (as
under torch 2.15), so reading ``data_ptr()`` holds nothing. Every other re-post bumps the version
counter ([Note: version bump]), so a reader nothing counts (a Python ``UntypedStorage`` kept by
user code) fails in autograd, named by [Note: naming the reuse].

[Note: calibration]
Each alias handed out is also kept as an anchor's ``.grad`` (an anchor: a tiny tensor expanded
to the slot's shape, so ``.grad`` accepts the alias). That puts every alias in one state of
torch's Python-object bookkeeping, whatever the model did with it, so its Python reference count
and its C++ use count at a re-post compare with fixed baselines. The baselines are measured once
per ring on a probe alias held exactly as a handed-out alias is (one list, one anchor): any count
above them is a holder outside the pool. They count references, not bytes, so they are the same
for every tensor of a set.

[Note: finished sends]
torch keeps a send's work, and its tensor, past the send: multi-stage schedules until the step
ends, and ``Schedule1F1B`` its last warm-up send's until the cooldown, so a tensor a stage passes
on unchanged (int64 positions, a mask) stays held by sends long finished. On the forward ring of a
training step every earlier user's sends are finished when its slot is re-posted: the slot was
released after that user's backward, which needed the gradient the next stage computed from that
very activation. So the sends of training steps (recorded by weak reference, per slot, until they
go) are not counted. In a forward-only step nothing proves a send finished: there a send holds.
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from pooltk.pool.torch_compat.stage_api import op_tensor, point_op_at
from pooltk.pool.torch_compat.tensor_counts import cpp_users, storage_key, storage_users

if TYPE_CHECKING:
    from pooltk.pool.ring import Slot

OWN = 3
"""Tensors the pool keeps on a slot's storage at a re-post: slot, resting alias, previous alias."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Reference counts of an alias nobody outside the pool holds ([Note: calibration])."""

    python: int
    cpp: int


def anchors_for(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """One anchor per tensor: a one-element tensor expanded to its shape (no share of the slot's
    storage)."""
    return [torch.empty((), dtype=t.dtype, device=t.device).expand(t.shape) for t in tensors]


def anchor(anchors: list[torch.Tensor], aliases: list[torch.Tensor]) -> None:
    for k in range(len(aliases)):
        anchors[k].grad = aliases[k]


def calibrate(slot: Slot) -> Calibration:
    """The baselines, on a probe alias held as a handed-out one is ([Note: calibration])."""
    probe = slot.fresh_aliases()
    slot.anchors[0].grad = probe[0]
    baseline = Calibration(python=sys.getrefcount(probe[0]), cpp=cpp_users(probe[0]))
    slot.anchors[0].grad = None
    return baseline


def note_sends(slot: Slot, ops: Any) -> None:
    """Remember, by weak reference, the forward sends of a training step that carry the slot's
    storage on ([Note: finished sends]); references to sends gone are dropped. A send of the
    alias object itself is not one: it adds no tensor on the storage, and its references to the
    alias are counted as holders (the safe side)."""
    storages = [storage_key(t) for t in slot.tensors]
    for k in range(len(storages)):
        slot.sends[k] = [r for r in slot.sends[k] if r() is not None]
    for op in ops or ():
        t = op_tensor(op)
        if not isinstance(t, torch.Tensor) or any(t is alias for alias in slot.aliases):
            continue
        if storage_key(t) in storages:
            slot.sends[storages.index(storage_key(t))].append(weakref.ref(t))


def let_go_of_recv_ops(slot: Slot) -> None:
    """torch's receive ops of the last post hold its aliases, and are not holders: they point at
    the resting aliases from now on."""
    for op in slot.recv_ops:
        for k in range(len(slot.aliases)):  # index loops: a loop variable would hold an alias
            if op_tensor(op) is slot.aliases[k]:
                point_op_at(op, slot.resting[k])
    slot.recv_ops = []


def count(slot: Slot, calibration: Calibration) -> list[tuple[int, str]]:
    """Per tensor, (holders outside the pool, the check that found them: "views", "python",
    "c++", or "" for none), right before ``slot`` is posted again ([Note: copy on conflict])."""
    out = []
    for k in range(len(slot.tensors)):
        finished_sends = sum(r() is not None for r in slot.sends[k])
        # 1: the storage object asked
        views = storage_users(slot.tensors[k]) - 1 - OWN - finished_sends
        python = sys.getrefcount(slot.aliases[k]) - calibration.python
        cpp = cpp_users(slot.aliases[k]) - calibration.cpp
        why = "views" if views > 0 else "python" if python > 0 else "c++" if cpp > 0 else ""
        out.append((max(views, 0) + max(python, 0) + max(cpp, 0), why))
    return out
