"""Same-rank handoffs (the V schedules' turn): no receive buffers, and what a handoff gave let go early.

A (stage, direction) whose neighbour runs on the same rank receives nothing: torch hands the tensor over
with ``set_local_fwd_input`` / ``set_local_bwd_input``. The pool leaves such a direction shape-only
placeholders instead of M real buffers, gives a None gradient a fresh zero buffer where torch reads one,
and lets go of what a handoff gave a chunk after the chunk's backward ([Note: rank-shared rings] in
pooltk/analysis/sharing.py). The wrappers that call these are in :mod:`pooltk.pool._patch`.
"""

from __future__ import annotations

from typing import Any

import torch

from pooltk.pool.adapters import SetupTarget
from pooltk.pool.adapters.placeholders import PlaceholderFactory
from pooltk.pool.adapters.stage_api import RECV_INFO_ATTRS
from pooltk.pool.ring import recv_positions
from pooltk.pool.state import StageState

__all__ = ["drop_handed", "drop_handoff_buffers", "real_buffer", "template"]


def template(buf: torch.Tensor, factory: PlaceholderFactory | None) -> tuple:
    """(shape, dtype, device, requires_grad) of the real buffer ``buf`` stands for."""
    device = factory.device_of(buf) if factory is not None and factory.is_placeholder(buf) else buf.device
    return (tuple(buf.shape), buf.dtype, torch.device(device), bool(buf.requires_grad))


def drop_handoff_buffers(stage: Any, target: SetupTarget, factory: PlaceholderFactory | None) -> dict[int, tuple]:
    """A direction fed by a same-rank handoff gets no receive buffers: shape-only placeholders stay.

    Returns position -> template (shape, dtype, device, requires_grad) for the rare read torch still
    makes (``set_local_bwd_input`` zeroes the buffer of a gradient that is None: the wrapper gives that
    one entry a fresh zero tensor first). See [Note: rank-shared rings].
    """
    infos_by_chunk: dict[int, tuple] = getattr(stage, target.infos_attr, {}) or {}
    if not infos_by_chunk:
        return {}
    positions = recv_positions(infos_by_chunk[0])
    templates = {j: template(infos_by_chunk[0][j].buffer, factory) for j in positions}
    for infos in infos_by_chunk.values():
        for j in positions:
            buf = infos[j].buffer
            if factory is not None and factory.is_placeholder(buf):
                continue
            if isinstance(buf, torch.Tensor) and not buf.is_meta:  # a layout that allocated: let it go
                infos[j].buffer = _placeholder(tuple(buf.shape), buf.dtype, buf.requires_grad)
    return templates


def drop_handed(stage: Any, st: StageState, chunk: int, kept: list | None = None) -> None:
    """``chunk`` is done with what a same-rank handoff gave it: let go of it now, not at the next step.

    torch leaves each handed-over tensor in the chunk's recv info until the next step's handoff
    replaces it, so a stage fed by a handoff keeps all M of them between steps (measured: 8 of 8 on
    ZBVZeroBubble pp2 M8). After the chunk's backward (its weight pass for a split backward; its
    forward in a forward-only step, where ``kept``, torch's ``fwd_cache`` list, is swapped too)
    nothing reads them again; the entry gets a shape-only placeholder back.
    """
    for direction, templates in st.handoff.items():
        infos = getattr(stage, RECV_INFO_ATTRS[direction], {}).get(chunk)
        if infos is None:
            continue
        for j, template in templates.items():
            buf = infos[j].buffer
            if not isinstance(buf, torch.Tensor) or buf.is_meta:
                continue
            placeholder = _placeholder(template[0], template[1])
            if kept is not None:
                for i, v in enumerate(kept):
                    if v is buf:
                        kept[i] = placeholder
            infos[j].buffer = placeholder


def real_buffer(template: tuple, zero: bool = False) -> torch.Tensor:
    """A real buffer from a template of :func:`drop_handoff_buffers`."""
    shape, dtype, device, requires_grad = template
    t = (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=device)
    return t.requires_grad_(True) if requires_grad else t


def _placeholder(shape: tuple, dtype: torch.dtype, requires_grad: bool = False) -> torch.Tensor:
    """A shape-only stand-in for a receive buffer (no storage)."""
    t = torch.empty(shape, dtype=dtype, device="meta")
    return t.requires_grad_(True) if requires_grad else t
