"""pooltk.pool.handoff: a same-rank handoff needs no receive buffers, what it gave a chunk goes
after its backward, and a None gradient reads a new zero buffer."""

from __future__ import annotations

import weakref

import pytest
import torch

from pooltk.pool.handoff import drop_handed, template, zero_for_none
from pooltk.pool.torch_compat.stage_api import Call


class _Info:
    def __init__(self, buffer):
        self.buffer, self.is_root_arg = buffer, False


def test_what_a_handoff_gave_a_chunk_is_let_go_after_its_backward():
    class Stage:
        stage_index = 2

    stage = Stage()
    handed = [torch.ones(2, 3), torch.ones(2, 3)]
    stage.args_recv_info = {c: (_Info(handed[c]),) for c in range(2)}
    templates = {"forward": {0: template(torch.ones(2, 3, requires_grad=True), None)}}
    handed[1].data_ptr()  # an address read holds nothing: no reason to keep the tensor
    kept = [handed[0]]  # torch's fwd_cache inputs, in a forward-only step
    for c in range(2):
        drop_handed(stage, templates, c, kept if c == 0 else None)
    assert all(stage.args_recv_info[c][0].buffer.is_meta for c in range(2)) and kept[0].is_meta
    alive = [weakref.ref(t) for t in handed]
    del handed
    assert [r() is None for r in alive] == [True, True]  # nothing of the pool keeps them


def _handoff_stage(buffer):
    from torch.distributed.pipelining.stage import _RecvInfo

    class Stage:
        has_backward, is_last, stage_index = True, False, 1

    stage, info = Stage(), _RecvInfo.__new__(_RecvInfo)  # a real _RecvInfo: torch checks the type
    info.input_name, info.source, info.buffer = "x", 2, buffer
    info.tensor_meta, info.is_root_arg = None, False
    stage.grad_recv_info = {0: (info,)}
    return stage, info


def test_a_none_gradient_handed_over_locally_reads_a_fresh_zero_buffer_or_is_refused_as_stock():
    from torch.distributed.pipelining.stage import _PipelineStageBase

    torchs = _PipelineStageBase.set_local_bwd_input
    templates = {0: template(torch.empty(2, 3), None)}
    stock_stage, _ = _handoff_stage(torch.ones(2, 3))
    try:
        torchs(stock_stage, (None,), 0)
        stock_refusal = None
    except AssertionError as e:  # torch <= 2.11 refuses a None gradient itself
        stock_refusal = str(e)
    stage, info = _handoff_stage(torch.empty(2, 3, device="meta"))

    def set_local(grads):
        zero_for_none(stage, Call("set_local_bwd_input", (grads, 0), {}), templates)
        torchs(stage, grads, 0)

    if stock_refusal is None:
        set_local((None,))
        assert not info.buffer.is_meta and torch.equal(info.buffer, torch.zeros(2, 3))
    else:
        with pytest.raises(AssertionError) as refused:
            set_local((None,))
        assert str(refused.value) == stock_refusal
    g = torch.ones(2, 3)
    set_local((g,))
    assert info.buffer is g
