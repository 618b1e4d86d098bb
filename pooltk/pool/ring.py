"""The K buffer sets of one direction of one stage, and the fresh aliases handed out per receive.

How many sets (K) is :mod:`pooltk.pool.sizing`'s question; this module holds them. Chunk ``c``
uses slot ``c mod K`` (:func:`pooltk.pool.sizing.slot_of`).
"""

from __future__ import annotations

import torch

from pooltk.pool.guard import SlotOwnership, bump_version

__all__ = ["DirectionRing", "recv_positions"]

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
# ----------------------------------------------------------------------------------------


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


class DirectionRing:
    """K buffer sets for one direction of one stage, reused round-robin by M microbatches."""

    __slots__ = ("stage", "direction", "size", "n_microbatches", "positions", "slots", "ownership", "_posted",
                 "peak_owned")

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
    ) -> None:
        if len(slots) != size:
            raise AssertionError(f"ring of {size} sets built with {len(slots)} slots")
        self.stage, self.direction, self.size = stage, direction, size
        self.n_microbatches = n_microbatches
        self.positions = positions
        self.slots = slots
        self.ownership = SlotOwnership(stage=stage, direction=direction, ring=size) if guard else None
        self._posted = [False] * size
        self.peak_owned = 0
        """Most slots owned at once since setup (guard on): the live set this run really had."""

    # -- setup -----------------------------------------------------------------------
    def bind(self, infos_by_chunk: dict[int, tuple]) -> None:
        """Point every chunk's recv infos at an alias of its slot (chunk c -> slot c mod K)."""
        for chunk in range(self.n_microbatches):
            self._rebind(chunk, infos_by_chunk[chunk])

    def _rebind(self, chunk: int, infos: tuple) -> None:
        tensors = self.slots[chunk % self.size]
        for t, j in zip(tensors, self.positions):
            info = infos[j]
            old = info.buffer
            info.buffer = _alias(t, bool(getattr(old, "requires_grad", False)))

    # -- runtime ---------------------------------------------------------------------
    def post(self, chunk: int, infos: tuple) -> None:
        """A receive for ``chunk`` is about to be posted: claim its slot, hand out fresh aliases."""
        slot = chunk % self.size
        if self.ownership is not None:
            self.ownership.acquire(chunk)
            self.peak_owned = max(self.peak_owned, self.ownership.owned)
            if self._posted[slot]:
                bump_version(self.slots[slot])
        self._posted[slot] = True
        self._rebind(chunk, infos)

    def release(self, chunk: int) -> None:
        if self.ownership is not None:
            self.ownership.release(chunk)

    def reset(self) -> None:
        if self.ownership is not None:
            self.ownership.reset()

    # -- accounting ------------------------------------------------------------------
    @property
    def set_bytes(self) -> int:
        """Bytes of one buffer set (all tensors one microbatch receives in this direction)."""
        return sum(t.untyped_storage().nbytes() for t in self.slots[0]) if self.slots else 0

    @property
    def nbytes(self) -> int:
        return self.size * self.set_bytes
