"""pooltk.parity.fresh: every receive lands in a newly allocated buffer, on each layout family's
stage shape.

The stages here are stand-ins with the attributes and methods torch's stages have in each family (a
``_RecvInfo`` with ``is_root_arg`` on 2.12-2.14, a ``_RootArgPlaceholder`` without a buffer on
<= 2.11); the real torch 2.13 stage is covered on gloo ranks in tests/dist/test_parity_1f1b.py.
"""

from types import SimpleNamespace

import pytest
import torch

from pooltk.parity import fresh
from pooltk.parity.fresh import FreshError, fresh_stage, is_fresh, unfresh_stage


class Info212:  # torch 2.12-2.14 _RecvInfo: buffer, tensor_meta, is_root_arg
    def __init__(self, buffer, is_root_arg=False):
        self.buffer, self.is_root_arg = buffer, is_root_arg


class Info211:  # torch <= 2.11 _RecvInfo(input_name, source, buffer)
    def __init__(self, buffer):
        self.buffer = buffer


class RootPlaceholder211:  # torch <= 2.11 stage-0 input: no buffer at all
    pass


class Stage:
    """The receive side of a _PipelineStageBase: what the schedule calls and what it reads."""

    def __init__(self, fwd, grad, *, is_last=False):
        self.stage_index, self.has_backward, self.is_last = 1, True, is_last
        self.args_recv_info, self.grad_recv_info = fwd, grad

    def get_fwd_recv_ops(self, fwd_chunk_id):
        return [
            i.buffer
            for i in self.args_recv_info[fwd_chunk_id]
            if getattr(i, "buffer", None) is not None and not getattr(i, "is_root_arg", False)
        ]

    def get_bwd_recv_ops(self, bwd_chunk_id):
        return [i.buffer for i in self.grad_recv_info[bwd_chunk_id]]

    def set_local_bwd_input(self, next_stage_bwd_outputs, mb_index):
        for info, t in zip(self.grad_recv_info[mb_index], next_stage_bwd_outputs):
            if t is None:
                info.buffer.zero_()
            else:
                info.buffer = t


def _eager(monkeypatch, name):
    layout = SimpleNamespace(name=name, setup_targets=(), per_receive=False)
    monkeypatch.setattr(
        "pooltk.parity.fresh.detect", lambda: SimpleNamespace(layout=layout, reason="test")
    )


def _stage(info_cls, m=3):
    fwd = {c: (info_cls(torch.randn(2, 3).requires_grad_()),) for c in range(m)}
    grad = {c: (info_cls(torch.randn(2, 3)),) for c in range(m)}
    return Stage(fwd, grad)


@pytest.mark.parametrize(
    "family,info_cls", [("setup-recv-info", Info212), ("prepare-infra", Info211)]
)
def test_every_receive_post_gets_a_new_storage_and_old_buffers_stay_with_their_holders(
    monkeypatch, family, info_cls
):
    _eager(monkeypatch, family)
    st = _stage(info_cls)
    posted: list = []
    out = fresh_stage(st, posted=posted)
    assert out.bound and out.layout == family and is_fresh(st)
    held = st.args_recv_info[0][0].buffer  # what a model kept of microbatch 0's input
    held_copy = held.detach().clone()
    for _step in range(2):
        for c in range(3):
            new = st.get_fwd_recv_ops(c)[0]
            new.detach().fill_(float(c))  # the receive writes it
            st.get_bwd_recv_ops(c)[0].fill_(-1.0)
    storages = [b.untyped_storage().data_ptr() for _, b in posted]
    assert (
        len(posted) == 12 and len(set(storages)) == 12
    )  # 2 steps x 3 chunks x 2 directions, all distinct
    assert held.untyped_storage().data_ptr() not in storages
    assert torch.equal(held, held_copy)  # never written again
    for direction, b in posted:
        assert b.shape == (2, 3) and b.dtype == torch.float32
        assert b.requires_grad == (direction == "forward")  # the flag torch set at setup is kept


def test_root_inputs_are_left_alone_in_both_eager_families(monkeypatch):
    _eager(monkeypatch, "prepare-infra")
    root = RootPlaceholder211()
    st = Stage({0: (root,)}, {0: ()})
    fresh_stage(st)
    assert st.get_fwd_recv_ops(0) == [] and not hasattr(root, "buffer")
    _eager(monkeypatch, "setup-recv-info")
    buf = torch.zeros(2)
    st = Stage({0: (Info212(buf, is_root_arg=True),)}, {0: ()})
    fresh_stage(st)
    st.get_fwd_recv_ops(0)
    assert st.args_recv_info[0][0].buffer is buf


def test_a_same_rank_handoff_zeroes_a_new_buffer_not_the_one_a_holder_keeps(monkeypatch):
    _eager(monkeypatch, "setup-recv-info")
    st = _stage(Info212)
    fresh_stage(st)
    kept = st.grad_recv_info[1][0].buffer
    before = kept.clone()
    st.set_local_bwd_input((None,), 1)
    assert torch.equal(kept, before)
    assert st.grad_recv_info[1][0].buffer is not kept and not st.grad_recv_info[1][0].buffer.any()


def test_on_the_lazy_family_stock_already_is_fresh_and_nothing_is_bound(monkeypatch):
    layout = SimpleNamespace(
        name="lazy", setup_targets=(), per_receive=True, stands_down=True, note=""
    )
    monkeypatch.setattr(
        "pooltk.parity.fresh.detect", lambda: SimpleNamespace(layout=layout, reason="lazy")
    )
    st = _stage(Info212)
    out = fresh_stage(st)
    assert not out.bound and out.layout == "lazy" and "stock is fresh" in out.note
    assert not is_fresh(st) and "get_fwd_recv_ops" not in st.__dict__


def test_an_unknown_layout_a_pooled_stage_or_a_second_call_is_refused_naming_pooltk(monkeypatch):
    monkeypatch.setattr(
        "pooltk.parity.fresh.detect", lambda: SimpleNamespace(layout=None, reason="no markers")
    )
    with pytest.raises(
        FreshError, match=r"pooltk fresh: stage 1: found no known receive-buffer layout.*Fix:"
    ):
        fresh_stage(_stage(Info212))
    _eager(monkeypatch, "setup-recv-info")
    pooled = _stage(Info212)
    from pooltk.pool.stage import state_for

    state_for(pooled).rings["forward"] = object()  # a ring the pool holds on this stage
    with pytest.raises(FreshError, match="found a pooltk ring on it.*Fix: pooltk.uninstall"):
        fresh_stage(pooled)
    st = _stage(Info212)
    fresh_stage(st)
    with pytest.raises(FreshError, match="already fresh"):
        fresh_stage(st)


def test_unfresh_restores_the_stage_exactly(monkeypatch):
    _eager(monkeypatch, "setup-recv-info")
    st = _stage(Info212)
    before = dict(st.__dict__)
    fresh_stage(st)
    assert unfresh_stage(st) and st.__dict__ == before and not unfresh_stage(st)
    buf = st.args_recv_info[0][0].buffer
    st.get_fwd_recv_ops(0)
    assert st.args_recv_info[0][0].buffer is buf  # stock again: the same buffer every post


def test_the_real_torch_here_is_an_eager_family_fresh_binds_on():
    from pooltk.pool.torch_compat.layouts import detect

    found = detect()
    assert found.layout is not None and found.layout.name in (
        "prepare-infra",
        "setup-recv-info",
        "lazy",
    )
    assert fresh.__doc__ and "[Note: fresh buffers]" in fresh.__doc__
