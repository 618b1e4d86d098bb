"""Same-rank handoffs (the V schedules' turn): no receive buffers, and what was handed over let go.

A (stage, direction) whose neighbour runs on the same rank receives nothing: torch hands the
tensor over locally. It keeps shape-only placeholders instead of M buffers; a None gradient gets
a new zero buffer where torch reads one; and what a handoff gave a chunk is let go after the
chunk's backward (torch would keep all M until the next step's handoff).
"""

from __future__ import annotations

from typing import Any

import torch

from pooltk.pool.torch_compat.placeholders import PlaceholderFactory, placeholder, real_buffer
from pooltk.pool.torch_compat.stage_api import Call, recv_infos, recv_positions, replace_by_identity

Template = tuple[torch.Tensor, torch.device]
"""A buffer's shape, dtype and ``requires_grad`` (a placeholder) and the device it belongs on."""


def template(buf: torch.Tensor, factory: PlaceholderFactory | None) -> Template:
    """The template of the real buffer ``buf`` is, or stands for."""
    device = factory.device_of(buf) if factory and factory.is_placeholder(buf) else buf.device
    return placeholder(buf), torch.device(device)


def boundary_key(buf: torch.Tensor, factory: PlaceholderFactory | None) -> tuple:
    """What stages must share to share a ring: the shape, dtype, device and ``requires_grad`` of
    the buffer ``buf`` is, or stands for."""
    like, device = template(buf, factory)
    return tuple(like.shape), like.dtype, device, bool(like.requires_grad)


def drop_handoff_buffers(stage: Any, direction: str, factory: PlaceholderFactory | None) -> dict:
    """Leave a handoff-fed direction placeholders; ``{position: Template}`` for the one read
    torch makes (``set_local_bwd_input`` zeroes a None gradient's buffer: :func:`zero_for_none`)."""
    infos_by_chunk = recv_infos(stage, direction)
    if not infos_by_chunk:
        return {}
    positions = recv_positions(infos_by_chunk[0])
    templates = {j: template(infos_by_chunk[0][j].buffer, factory) for j in positions}
    for infos in infos_by_chunk.values():
        for j in positions:
            buf = infos[j].buffer  # a layout that allocated (no factory): let it go
            if isinstance(buf, torch.Tensor) and not buf.is_meta:
                infos[j].buffer = placeholder(buf)
    return templates


def drop_handed(stage: Any, handoff: dict, chunk: int, kept: list | None = None) -> None:
    """The chunk is done with what a handoff gave it: its recv info, and ``kept`` (torch's
    ``fwd_cache`` inputs, in a forward-only step), get a placeholder instead."""
    for direction, templates in handoff.items():
        infos = recv_infos(stage, direction).get(chunk)
        for j in templates if infos is not None else ():
            handed = infos[j].buffer
            if isinstance(handed, torch.Tensor) and not handed.is_meta:
                infos[j].buffer = placeholder(templates[j][0])
                replace_by_identity(kept, handed, infos[j].buffer)


def zero_for_none(stage: Any, call: Call, templates: dict) -> None:
    """Before ``set_local_bwd_input``: a None gradient makes torch zero the buffer it reads, so a
    position that holds a placeholder gets a real buffer first."""
    grads = call.local_grads
    infos = recv_infos(stage, "grad").get(call.chunk, ()) if isinstance(grads, tuple) else ()
    for j, info in enumerate(infos):
        meta = getattr(info.buffer, "is_meta", False)
        if j < len(grads) and grads[j] is None and j in templates and meta:
            like, device = templates[j]
            info.buffer = real_buffer(like, device=device, zero=True)
