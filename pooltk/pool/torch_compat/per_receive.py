"""torch 2.15's receive buffers, stated once: a new buffer per receive, let go once consumed.

[Note: per-receive buffers]
From torch 2.15 a receive descriptor (``_RecvInfo``) keeps only tensor metadata. Its buffer is
allocated right before the irecv is posted (``_RecvInfo.allocate_buffer``, called in
``_get_recv_ops``) and handed to the computation when the chunk consumes it (``take_buffer``): the
stage keeps no reference of its own, so a buffer lives exactly as long as its other holders (the
chunk's autograd graph, the schedule's kept loss, a local of the step). Source: torch's
``torch/distributed/pipelining/_recv_buffers.py`` in 2.15.0, and pytorch/pytorch#193872 ("keep only
tensor metadata in the receive descriptors, allocate storage immediately before posting an irecv,
and transfer the buffer out of the descriptor when microbatch compute consumes it").

On torch 2.11-2.14 (buffers made once at setup, one per microbatch) the same semantics is two
verbs on a chunk's recv infos: :func:`fresh_buffers` before its receive is built, and
:func:`drop_buffers` after the compute that consumes it. The fresh-buffer reference
(:mod:`pooltk.parity.fresh`) uses the first: every receive lands in a storage nothing else has
seen, which is what the pool must be bitwise equal to. The whole-stage replay's stock-lazy
column uses both, to count what 2.15 holds. ``per_receive_hooks`` returns them as the binder's
hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from pooltk.pool.torch_compat import stage_api as api
from pooltk.pool.torch_compat.bind import Hooks
from pooltk.pool.torch_compat.placeholders import placeholder, real_buffer
from pooltk.pool.torch_compat.stage_api import Call, receive_buffer, recv_infos

Posted = Callable[[str, torch.Tensor], None]
"""Told ``(direction, buffer)`` for each new buffer handed to a receive."""


def fresh_buffers(stage: Any, direction: str, chunk: int, posted: Posted | None = None) -> None:
    """Give each receive buffer of ``chunk`` a new storage (2.15's ``allocate_buffer``)."""
    for info in recv_infos(stage, direction).get(chunk, ()):
        buf = receive_buffer(info)
        if isinstance(buf, torch.Tensor):
            info.buffer = real_buffer(buf, device=stage.device if buf.is_meta else None)
            if posted is not None:
                posted(direction, info.buffer)


def drop_buffers(stage: Any, direction: str, chunk: int) -> None:
    """The stage lets go of ``chunk``'s receive buffers (2.15's ``take_buffer``): placeholders."""
    for info in recv_infos(stage, direction).get(chunk, ()):
        buf = receive_buffer(info)
        if isinstance(buf, torch.Tensor) and not buf.is_meta:
            info.buffer = placeholder(buf)


def _fresh_for_none_grads(stage: Any, call: Call) -> None:
    """A V schedule's same-rank handoff zeroes the buffer of a None gradient: a new one first."""
    grads = call.local_grads or ()
    infos = recv_infos(stage, "grad").get(call.chunk, ())
    for info, grad in zip(infos, grads):
        buf = receive_buffer(info)
        if grad is None and isinstance(buf, torch.Tensor):
            info.buffer = real_buffer(buf, device=stage.device if buf.is_meta else None)


def per_receive_hooks(*, drop_after_use: bool, posted: Posted | None = None) -> dict[str, Hooks]:
    """The hooks that give a stage [Note: per-receive buffers] (bind them on the stage object)."""

    def before_recv(direction: str) -> Callable[[Any, Call], None]:
        def hook(stage: Any, call: Call) -> None:
            if direction == "forward" or (stage.has_backward and not stage.is_last):
                fresh_buffers(stage, direction, call.chunk, posted)

        return hook

    hooks = {
        api.POST_FORWARD_RECV: Hooks(before=before_recv("forward")),
        api.POST_GRAD_RECV: Hooks(before=before_recv("grad")),
        api.LOCAL_GRAD: Hooks(before=_fresh_for_none_grads),
    }
    if drop_after_use:
        for name, direction in (
            (api.FORWARD, "forward"),
            (api.BACKWARD, "grad"),
            (api.BACKWARD_WEIGHT, "grad"),
        ):
            hooks[name] = Hooks(after=_dropping(direction))
    return hooks


def _dropping(direction: str) -> Callable[[Any, Call, Any], Any]:
    def hook(stage: Any, call: Call, result: Any) -> Any:
        drop_buffers(stage, direction, call.chunk)
        return result

    return hook
