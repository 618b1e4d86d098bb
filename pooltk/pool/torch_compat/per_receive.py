"""torch 2.15's receive buffers, stated once: a new buffer per receive, let go once consumed.

[Note: per-receive buffers]
From torch 2.15 a receive descriptor (``_RecvInfo``) keeps only tensor metadata. Its buffer is
allocated right before the irecv is posted (``_RecvInfo.allocate_buffer``, called in
``_get_recv_ops``) and handed to the computation when the chunk consumes it (``take_buffer``): the
stage keeps no reference of its own, so a buffer lives exactly as long as its other holders (the
chunk's autograd graph, the schedule's kept loss, a local of the step). Source: torch 2.15.0's
``torch/distributed/pipelining/_recv_buffers.py``, from pytorch/pytorch#193872.

On torch 2.11-2.14 (buffers made once at setup, one per microbatch) the same semantics is two
verbs on a chunk's recv infos: :func:`fresh_buffers` before its receive is built, and
:func:`drop_buffers` after the compute that consumes it; ``per_receive_hooks`` binds them. The
fresh-buffer reference (:mod:`pooltk.parity.fresh`) uses the first: every receive lands in a
storage nothing else has seen, which is what the pool must be bitwise equal to. The whole-stage
replay's stock-lazy column uses both, to count what 2.15 holds.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from pooltk.pool.torch_compat import stage_api as api
from pooltk.pool.torch_compat.bind import Hooks
from pooltk.pool.torch_compat.placeholders import placeholder, real_buffer
from pooltk.pool.torch_compat.stage_api import Call, receive_buffer, recv_infos

Posted = Callable[[str, torch.Tensor], None]  # told (direction, buffer) for each new buffer


def fresh_buffers(stage: Any, direction: str, chunk: int, posted: Posted | None = None) -> None:
    """Give each receive buffer of ``chunk`` a new storage (2.15's ``allocate_buffer``)."""
    for info in recv_infos(stage, direction).get(chunk, ()):
        if isinstance(receive_buffer(info), torch.Tensor):
            _renew(stage, info)
            if posted is not None:
                posted(direction, info.buffer)


def drop_buffers(stage: Any, direction: str, chunk: int) -> None:
    """The stage lets go of ``chunk``'s receive buffers (2.15's ``take_buffer``): placeholders."""
    for info in recv_infos(stage, direction).get(chunk, ()):
        buf = receive_buffer(info)
        if isinstance(buf, torch.Tensor) and not buf.is_meta:
            info.buffer = placeholder(buf)


def _renew(stage: Any, info: Any) -> None:
    """A new storage for ``info``'s buffer (on the stage's device where it was a placeholder)."""
    buf = info.buffer
    info.buffer = real_buffer(buf, device=stage.device if buf.is_meta else None)


def per_receive_hooks(*, drop_after_use: bool, posted: Posted | None = None) -> dict[str, Hooks]:
    """The hooks that give a stage [Note: per-receive buffers] (bind them on the stage object)."""
    hooks = {
        api.POST_FORWARD_RECV: Hooks(before=partial(_before_recv, "forward", posted)),
        api.POST_GRAD_RECV: Hooks(before=partial(_before_recv, "grad", posted)),
        api.LOCAL_GRAD: Hooks(before=_fresh_for_none_grads),
    }
    if drop_after_use:
        hooks[api.FORWARD] = Hooks(after=partial(_drop_after, "forward"))
        hooks[api.BACKWARD] = hooks[api.BACKWARD_WEIGHT] = Hooks(after=partial(_drop_after, "grad"))
    return hooks


def _before_recv(direction: str, posted: Posted | None, stage: Any, call: Call) -> None:
    if direction == "forward" or (stage.has_backward and not stage.is_last):
        fresh_buffers(stage, direction, call.chunk, posted)


def _drop_after(direction: str, stage: Any, call: Call, result: Any) -> Any:
    drop_buffers(stage, direction, call.chunk)
    return result


def _fresh_for_none_grads(stage: Any, call: Call) -> None:
    """A V schedule's same-rank handoff zeroes the buffer of a None gradient: a new one first."""
    infos = recv_infos(stage, "grad").get(call.chunk, ())
    for info, grad in zip(infos, call.local_grads or ()):
        if grad is None and isinstance(receive_buffer(info), torch.Tensor):
            _renew(stage, info)
