"""pooltk.pool.handoff: a same-rank handoff needs no receive buffers, and what it gave a chunk goes after its backward."""

from __future__ import annotations

import weakref

import pytest
import torch

from pooltk.pool.handoff import drop_handed
from pooltk.pool.state import state_for


class _Info:
    def __init__(self, buffer):
        self.buffer, self.is_root_arg = buffer, False


def test_what_a_handoff_gave_a_chunk_is_let_go_after_its_backward():
    class Stage:
        stage_index = 2

    stage = Stage()
    handed = [torch.ones(2, 3), torch.ones(2, 3)]
    stage.args_recv_info = {c: (_Info(handed[c]),) for c in range(2)}
    st = state_for(stage)
    st.handoff["forward"] = {0: ((2, 3), torch.float32, torch.device("cpu"), True)}
    handed[1].data_ptr()  # an address read holds nothing: no reason to keep the tensor
    for c in range(2):
        drop_handed(stage, st, c)
    assert all(stage.args_recv_info[c][0].buffer.is_meta for c in range(2))
    alive = [weakref.ref(t) for t in handed]
    del handed
    assert [r() is None for r in alive] == [True, True]  # nothing of the pool keeps them


def _handoff_stage(buffer):
    from torch.distributed.pipelining.stage import _RecvInfo

    class Stage:
        has_backward, is_last, stage_index = True, False, 1

    stage, info = (
        Stage(),
        _RecvInfo.__new__(_RecvInfo),
    )  # a real _RecvInfo: torch checks the type on some releases
    info.input_name, info.source, info.buffer, info.tensor_meta, info.is_root_arg = (
        "x",
        2,
        buffer,
        None,
        False,
    )
    stage.grad_recv_info = {0: (info,)}
    state_for(stage).handoff["grad"] = {0: ((2, 3), torch.float32, torch.device("cpu"), False)}
    return stage, info


def test_a_none_gradient_handed_over_locally_reads_a_fresh_zero_buffer_or_is_refused_as_stock_refuses_it():
    from torch.distributed.pipelining.stage import _PipelineStageBase

    from pooltk.pool._patch import runtime_wrappers
    from pooltk.pool.report import make_report

    originals = {
        n: getattr(_PipelineStageBase, n)
        for n in (
            "set_local_bwd_input",
            "forward_one_chunk",
            "backward_one_chunk",
            "clear_runtime_states",
        )
    }
    install = make_report(installed=True, layout=None, reason="test")
    wrapped = runtime_wrappers(originals, install)["set_local_bwd_input"]
    stock_stage, _ = _handoff_stage(torch.ones(2, 3))
    try:
        originals["set_local_bwd_input"](stock_stage, (None,), 0)
        stock_refusal = None
    except AssertionError as e:  # torch <= 2.11 refuses a None gradient itself
        stock_refusal = str(e)
    stage, info = _handoff_stage(torch.empty(2, 3, device="meta"))
    if stock_refusal is None:
        wrapped(stage, (None,), 0)
        assert not info.buffer.is_meta and torch.equal(info.buffer, torch.zeros(2, 3))
    else:
        with pytest.raises(AssertionError) as refused:
            wrapped(stage, (None,), 0)
        assert str(refused.value) == stock_refusal
    g = torch.ones(2, 3)
    wrapped(stage, (g,), 0)
    assert info.buffer is g
