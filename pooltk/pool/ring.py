"""Ring sizes per stage and direction, and the chunk -> slot map.

[Note: ring sizes]
Under torch's ``Schedule1F1B`` stage ``i`` of ``N`` runs ``W = min(M, N - i)`` warmup
forwards; the forward receive for microbatch ``k + W`` is posted only after the backward
of microbatch ``k`` has finished. So at most ``W`` activation buffers are live on stage
``i`` (none on stage 0, whose inputs are the root arguments), and one gradient buffer
(none on the last stage, which computes its gradient from the loss). Chunk ``c`` uses slot
``c mod K``; the ring is safe exactly when ``K`` is at least the live set:

- ``tight``     forward ``K_f = min(M, W + slack)``, grad ``K_g = min(M, 1 + grad_slack)``
- ``automodel`` one ``K = max(2, min(M, max(1, N - i) + slack))`` for both directions
- stock torch   ``M`` sets per direction

The memory model (:mod:`pooltk.memory.model`) calls these same functions, so the model and
the pool cannot disagree about how many sets a stage holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from pooltk.config import PoolConfig

__all__ = [
    "RingSizes",
    "automodel_ring_size",
    "check_shape",
    "inflight_1f1b",
    "live_set_1f1b",
    "ring_sizes",
    "slot_of",
    "stock_sets",
]


def check_shape(num_stages: int, stage_index: int, n_microbatches: int) -> None:
    """Raise ValueError unless (N, i, M) describe a real pipeline stage."""
    for name, value, low in (("num_stages", num_stages, 1), ("n_microbatches", n_microbatches, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name}: found {value!r}; required an integer >= {low}.")
    if isinstance(stage_index, bool) or not isinstance(stage_index, int) or not 0 <= stage_index < num_stages:
        raise ValueError(
            f"stage_index: found {stage_index!r}; required an integer in [0, {num_stages - 1}] for {num_stages} stages."
        )


def inflight_1f1b(num_stages: int, stage_index: int, n_microbatches: int) -> int:
    """1F1B warmup depth ``W = min(M, N - i)``: forwards in flight before the first backward."""
    check_shape(num_stages, stage_index, n_microbatches)
    return min(n_microbatches, num_stages - stage_index)


@dataclass(frozen=True, slots=True)
class RingSizes:
    """Buffer sets a stage holds per direction. 0 means the direction has no receives."""

    forward: int
    """Activation (forward receive) buffer sets."""
    grad: int
    """Gradient (backward receive) buffer sets."""

    @property
    def total(self) -> int:
        return self.forward + self.grad


def stock_sets(num_stages: int, stage_index: int, n_microbatches: int) -> RingSizes:
    """What stock torch allocates: one set per microbatch and direction."""
    check_shape(num_stages, stage_index, n_microbatches)
    first, last = stage_index == 0, stage_index == num_stages - 1
    return RingSizes(forward=0 if first else n_microbatches, grad=0 if last else n_microbatches)


def live_set_1f1b(num_stages: int, stage_index: int, n_microbatches: int) -> RingSizes:
    """The most buffer sets ever live at once under 1F1B (the slack-0 tight ring)."""
    w = inflight_1f1b(num_stages, stage_index, n_microbatches)
    first, last = stage_index == 0, stage_index == num_stages - 1
    return RingSizes(forward=0 if first else w, grad=0 if last else 1)


def automodel_ring_size(num_stages: int, stage_index: int, n_microbatches: int, slack: int) -> int:
    """The original single ring size ``max(2, min(M, max(1, N - i) + slack))``."""
    check_shape(num_stages, stage_index, n_microbatches)
    return max(2, min(n_microbatches, max(1, num_stages - stage_index) + slack))


def ring_sizes(num_stages: int, stage_index: int, n_microbatches: int, config: PoolConfig) -> RingSizes:
    """Sets per direction that a pooled stage holds under ``config``. See [Note: ring sizes]."""
    m = n_microbatches
    w = inflight_1f1b(num_stages, stage_index, m)
    first, last = stage_index == 0, stage_index == num_stages - 1
    if config.policy == "automodel":
        k = automodel_ring_size(num_stages, stage_index, m, config.slack)
        k_f, k_g = k, k
    elif config.policy == "measure":
        k_f, k_g = m, m
    else:
        k_f, k_g = min(m, w + config.slack), min(m, 1 + config.grad_slack)
    if config.forward_shortfall:
        k_f = max(1, k_f - config.forward_shortfall)
    return RingSizes(forward=0 if first else k_f, grad=0 if last else k_g)


def slot_of(chunk: int, ring: int) -> int:
    """Slot that microbatch ``chunk`` uses in a ring of ``ring`` sets."""
    if ring < 1:
        raise ValueError(f"ring size: found {ring}; required >= 1.")
    return chunk % ring


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

import torch  # noqa: E402  (kept below the pure-arithmetic half, which needs no torch)

from pooltk.pool.guard import SlotOwnership, bump_version  # noqa: E402


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
