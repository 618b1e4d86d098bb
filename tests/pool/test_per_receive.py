"""pooltk.pool.torch_compat.per_receive: torch 2.15's semantics on 2.11-2.14's receive infos, a
new buffer right before each receive, the stage's own reference let go once consumed."""

from __future__ import annotations

import torch

from pooltk.pool.torch_compat.bind import bind
from pooltk.pool.torch_compat.per_receive import drop_buffers, fresh_buffers, per_receive_hooks


class _Info:
    def __init__(self, buffer, root=False):
        self.buffer, self.is_root_arg = buffer, root


class _Stage:
    device, has_backward, is_last = torch.device("cpu"), True, False

    def __init__(self):
        self.args_recv_info = {
            c: (_Info(None, root=True), _Info(torch.zeros(2, requires_grad=True))) for c in range(2)
        }
        self.grad_recv_info = {c: (_Info(torch.zeros(3)),) for c in range(2)}

    def get_fwd_recv_ops(self, fwd_chunk_id):
        return [self.args_recv_info[fwd_chunk_id][1].buffer]

    def get_bwd_recv_ops(self, bwd_chunk_id):
        return [self.grad_recv_info[bwd_chunk_id][0].buffer]

    def forward_one_chunk(self, fwd_chunk_id, args, kwargs=None):
        return self.args_recv_info[fwd_chunk_id][1].buffer * 2


def test_every_receive_lands_in_a_storage_nothing_else_has_seen():
    stage, posted = _Stage(), []
    before = stage.args_recv_info[0][1].buffer
    bind(
        stage,
        per_receive_hooks(drop_after_use=False, posted=lambda d, b: posted.append(d)),
        tag="fresh",
    )
    first = stage.get_fwd_recv_ops(0)[0]
    again = stage.get_fwd_recv_ops(0)[0]
    assert first is not before and again is not first and first.requires_grad
    assert first.untyped_storage().data_ptr() != again.untyped_storage().data_ptr()
    assert stage.args_recv_info[0][0].buffer is None  # a root argument receives nothing
    stage.get_bwd_recv_ops(1)
    assert posted == ["forward", "forward", "grad"]


def test_dropping_leaves_a_placeholder_and_the_next_receive_a_real_buffer_again():
    stage = _Stage()
    drop_buffers(stage, "forward", 0)
    assert stage.args_recv_info[0][1].buffer.is_meta
    assert stage.args_recv_info[0][1].buffer.requires_grad
    fresh_buffers(stage, "forward", 0)
    assert not stage.args_recv_info[0][1].buffer.is_meta
    bind(stage, per_receive_hooks(drop_after_use=True), tag="lazy")
    stage.get_fwd_recv_ops(1)
    out = stage.forward_one_chunk(1, ())
    assert stage.args_recv_info[1][1].buffer.is_meta and not out.is_meta
