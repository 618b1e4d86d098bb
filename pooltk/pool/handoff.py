"""Same-rank handoffs (the V schedules' turn): no receive buffers, and what a handoff gave let go early.

A (stage, direction) whose neighbour runs on the same rank receives nothing (torch hands the tensor over
locally): it keeps shape-only placeholders instead of M buffers, a None gradient gets a fresh zero buffer
where torch reads one, and what a handoff gave a chunk is let go after the chunk's backward.
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
    device = (
        factory.device_of(buf)
        if factory is not None and factory.is_placeholder(buf)
        else buf.device
    )
    return (tuple(buf.shape), buf.dtype, torch.device(device), bool(buf.requires_grad))


def drop_handoff_buffers(
    stage: Any, target: SetupTarget, factory: PlaceholderFactory | None
) -> dict[int, tuple]:
    """Leave a handoff-fed direction shape-only placeholders; position -> template, for the one read torch makes
    (``set_local_bwd_input`` zeroes the buffer of a None gradient: the wrapper gives it a real one first)."""
    infos_by_chunk: dict[int, tuple] = getattr(stage, target.infos_attr, {}) or {}
    if not infos_by_chunk:
        return {}
    positions = recv_positions(infos_by_chunk[0])
    templates = {j: template(infos_by_chunk[0][j].buffer, factory) for j in positions}
    for infos in infos_by_chunk.values():
        for j in positions:
            buf = infos[
                j
            ].buffer  # a layout that allocated (no placeholder from the factory): let it go
            if isinstance(buf, torch.Tensor) and not buf.is_meta:
                infos[j].buffer = _placeholder(tuple(buf.shape), buf.dtype, buf.requires_grad)
    return templates


def drop_handed(stage: Any, st: StageState, chunk: int, kept: list | None = None) -> None:
    """The chunk is done with what a handoff gave it (torch would keep all M until the next step's handoff):
    its recv info, and ``kept`` (torch's ``fwd_cache`` list, in a forward-only step), get a placeholder."""
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
