"""A ring shared by a rank's stages: one ownership across stages, per-stage positions, handoffs without buffers."""

import pytest
import torch

from pooltk.pool.guard import PoolOverrunError
from pooltk.pool.ring import DirectionRing


class _Info:
    def __init__(self, buffer):
        self.buffer = buffer
        self.is_root_arg = False


def _shared(k=2, m=2, slot_map=None, positions=None):
    """Stages 1 and 3 share one forward ring; stage 3's received tensor sits at position 1 of its infos."""
    slot_map = slot_map or {(1, 0): 0, (1, 1): 1, (3, 0): 1, (3, 1): 0}
    slots = [[torch.zeros(3)] for _ in range(k)]
    ring = DirectionRing(stage=1, direction="forward", size=k, n_microbatches=m, positions=[0], slots=slots,
                         guard=True, slot_map=slot_map)
    infos1 = {c: (_Info(torch.zeros(3)),) for c in range(m)}
    infos3 = {c: (_Info(None), _Info(torch.zeros(3))) for c in range(m)}
    ring.bind(infos1, stage=1, positions=[0])
    ring.bind(infos3, stage=3, positions=positions or [1])
    return ring, infos1, infos3


def test_two_stages_receive_into_the_slots_their_colouring_gives_and_nowhere_else():
    ring, infos1, infos3 = _shared()
    assert ring.shared and sorted(ring.members) == [1, 3]
    ring.post(0, infos1[0], 1)
    ring.post(0, infos3[0], 3)
    a, b = infos1[0][0].buffer, infos3[0][1].buffer
    assert a.untyped_storage().data_ptr() == ring.slots[0][0].untyped_storage().data_ptr()
    assert b.untyped_storage().data_ptr() == ring.slots[1][0].untyped_storage().data_ptr()
    assert infos3[0][0].buffer is None  # an entry that receives nothing is left alone


def test_a_slot_owned_by_one_stage_is_refused_to_the_other_naming_both():
    ring, infos1, infos3 = _shared()
    ring.post(0, infos1[0], 1)  # slot 0, owned by stage 1 microbatch 0
    with pytest.raises(PoolOverrunError) as info:
        ring.post(1, infos3[1], 3)  # stage 3 microbatch 1 is coloured into slot 0 too
    e = info.value
    assert (e.stage, e.slot, e.owner, e.incoming, e.owner_stage) == (3, 0, 0, 1, 1)
    assert "of stage 1 (the ring is shared by the rank's stages)" in str(e)


def test_release_by_stage_frees_the_slot_for_the_other_stage_and_the_reuse_is_bumped():
    ring, infos1, infos3 = _shared()
    ring.post(0, infos1[0], 1)
    version = ring.slots[0][0]._version
    ring.release(0, 3)  # the wrong stage's release gives nothing back
    with pytest.raises(PoolOverrunError):
        ring.post(1, infos3[1], 3)
    ring.release(0, 1)
    ring.post(1, infos3[1], 3)
    assert ring.bumps[0] == (1, 0) and ring.rehomes == 0
    assert ring.slots[0][0]._version == version + 1


def test_a_holder_of_one_stages_alias_re_homes_the_slot_for_the_other_stage():
    ring, infos1, infos3 = _shared()
    ring.post(0, infos1[0], 1)
    kept = infos1[0][0].buffer  # a model keeps its input across microbatches
    ring.release(0, 1)
    ring.post(1, infos3[1], 3)
    assert ring.rehomes == 1
    assert kept.untyped_storage().data_ptr() != infos3[1][1].buffer.untyped_storage().data_ptr()


def test_the_resting_alias_of_a_re_homed_slot_is_rebound_for_every_stage_that_maps_to_it():
    ring, infos1, infos3 = _shared()
    ring.post(0, infos1[0], 1)
    kept = infos1[0][0].buffer
    ring.release(0, 1)
    ring.post(1, infos3[1], 3)  # re-homes slot 0
    new_ptr = ring.slots[0][0].untyped_storage().data_ptr()
    # stage 1 microbatch 0's entry went back to the slot's resting alias, now on the new storage
    assert infos1[0][0].buffer.untyped_storage().data_ptr() == new_ptr
    assert kept.untyped_storage().data_ptr() != new_ptr


def _recv_info(buffer):
    """A real ``_RecvInfo`` (torch checks the type on some releases) whatever its constructor takes."""
    from torch.distributed.pipelining.stage import _RecvInfo

    info = _RecvInfo.__new__(_RecvInfo)
    info.input_name, info.source, info.buffer, info.tensor_meta, info.is_root_arg = "x", 2, buffer, None, False
    return info


def _handoff_stage(buffer):
    """A torch stage stand-in whose grad info holds ``buffer`` (a placeholder, as a V-schedule handoff leaves it)."""
    from pooltk.pool.state import state_for

    class Stage:
        has_backward, is_last, stage_index = True, False, 1

    stage = Stage()
    info = _recv_info(buffer)
    stage.grad_recv_info = {0: (info,)}
    st = state_for(stage)
    st.handoff["grad"] = {0: ((2, 3), torch.float32, torch.device("cpu"), False)}
    return stage, info


def test_a_none_gradient_handed_over_locally_reads_a_fresh_zero_buffer_or_is_refused_as_stock_refuses_it():
    from torch.distributed.pipelining.stage import _PipelineStageBase

    from pooltk.pool._patch import runtime_wrappers

    originals = {name: getattr(_PipelineStageBase, name) for name in
                 ("set_local_bwd_input", "forward_one_chunk", "backward_one_chunk", "clear_runtime_states")}
    wrapped = runtime_wrappers(originals, lambda _s: None)["set_local_bwd_input"]
    stock_stage, _ = _handoff_stage(torch.ones(2, 3))  # stock: a real buffer in the entry
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


def test_what_a_handoff_gave_a_chunk_is_let_go_after_its_backward():
    from pooltk.pool.handoff import drop_handed
    from pooltk.pool.state import state_for

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
    alive = [__import__("weakref").ref(t) for t in handed]
    del handed
    assert [r() is None for r in alive] == [True, True]  # nothing of the pool keeps them
