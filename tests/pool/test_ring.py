"""pooltk.pool.ring: slots, fresh aliases, ownership, copy on conflict per tensor, finished sends, what a ring held."""

from __future__ import annotations

import weakref

import pytest
import torch
import torch.distributed as dist

from pooltk.pool.guard import PoolOverrunError
from pooltk.pool.ring import DirectionRing


class _Info:
    def __init__(self, buffer):
        self.buffer, self.is_root_arg = buffer, False


class _Op:
    def __init__(self, op, tensor):
        self.op, self.tensor = op, tensor


def _ring(k=2, m=4, tensors=1, guard=True, **kw):
    slots = [[torch.zeros(3) for _ in range(tensors)] for _ in range(k)]
    infos = {c: tuple(_Info(torch.zeros(3)) for _ in range(tensors)) for c in range(m)}
    ring = DirectionRing(
        stage=1, direction="forward", live=k, n_microbatches=m, slots=slots, guard=guard, **kw
    )
    ring.bind(1, infos, list(range(tensors)))
    return ring, infos


def _use(ring, infos, chunk, training=True):
    """Post the chunk's receive, then release its slot (its backward ran); a weak reference to what it got."""
    ring.post(chunk, 1, infos[chunk], training=training)
    ring.release(chunk, 1)
    return weakref.ref(infos[chunk][0].buffer)


def test_chunks_k_apart_share_a_slots_storage_but_never_a_tensor_object():
    ring, infos = _ring()
    a = _use(ring, infos, 0)
    b = _use(ring, infos, 2)
    assert a() is not b() and infos[0][0].buffer is not b()  # chunk 0 rests on another object
    assert b().untyped_storage().data_ptr() == ring.slots[0][0].untyped_storage().data_ptr()
    assert (
        _use(ring, infos, 1)().untyped_storage().data_ptr()
        == ring.slots[1][0].untyped_storage().data_ptr()
    )
    assert ring.rehomes == 0


def test_a_hook_on_microbatch_k_never_fires_for_k_plus_the_ring():
    ring, infos = _ring(k=2)
    fired = []
    ring.post(0, 1, infos[0], training=True)
    a = infos[0][0].buffer.requires_grad_(True)
    handle = a.register_hook(lambda g: fired.append("k"))
    (a * 2).sum().backward()
    handle.remove()
    del a, handle
    ring.release(0, 1)
    ring.post(2, 1, infos[2], training=True)
    b = infos[2][0].buffer.requires_grad_(True)
    (b * 3).sum().backward()
    assert fired == ["k"] and torch.equal(b.grad, torch.full((3,), 3.0))


def test_posting_into_a_slot_still_owned_raises_before_the_receive_and_unguarded_rings_do_not():
    ring, infos = _ring(k=2)
    ring.post(0, 1, infos[0], training=True)
    ring.post(1, 1, infos[1], training=True)
    with pytest.raises(PoolOverrunError) as info:
        ring.post(2, 1, infos[2], training=True)
    assert (info.value.slot, info.value.owner, info.value.incoming) == (0, 0, 2)
    loose, loose_infos = _ring(k=2, guard=False)
    for c in range(3):
        loose.post(
            c, 1, loose_infos[c], training=True
        )  # silently reuses slot 0: what the guard exists to stop


def test_a_reused_slot_is_bumped_so_autograd_refuses_stale_reads():
    ring, infos = _ring(k=1)
    _use(ring, infos, 0)
    version = ring.slots[0][0]._version
    _use(ring, infos, 1)
    assert (
        ring.slots[0][0]._version == version + 1 and ring.bumps[0] == (1, 0) and ring.rehomes == 0
    )


def test_a_tensor_kept_past_its_use_is_re_homed_alone_and_keeps_its_values():
    ring, infos = _ring(k=1, tensors=2)
    ring.post(0, 1, infos[0], training=True)
    kept = infos[0][
        1
    ].buffer  # a model keeps the second received tensor (a mask, say) across microbatches
    kept.fill_(7.0)
    ring.release(0, 1)
    first = ring.slots[0][0]
    ring.post(1, 1, infos[1], training=True)
    assert ring.rehomes == 1 and ring.slots[0][0] is first  # the other tensor keeps its storage
    assert ring.slots[0][1].untyped_storage().data_ptr() != kept.untyped_storage().data_ptr()
    assert torch.equal(kept, torch.full((3,), 7.0))


def test_a_view_an_output_that_is_the_input_and_a_graph_are_holders():
    for keep in (lambda a: a[1:], lambda a: (a,), lambda a: a.requires_grad_(True) * 2):
        ring, infos = _ring(k=1)
        ring.post(0, 1, infos[0], training=True)
        held = keep(infos[0][0].buffer)
        ring.release(0, 1)
        ring.post(1, 1, infos[1], training=True)
        assert ring.rehomes == 1, keep
        del held


def test_reading_an_address_or_passing_a_tensor_on_costs_nothing_once_nobody_holds_it():
    ring, infos = _ring(k=2)
    for c in range(4):
        ring.post(c, 1, infos[c], training=True)
        x = infos[c][0].buffer
        x.data_ptr(), x.untyped_storage().data_ptr()  # a kernel launcher reads the addresses
        out = (x,)  # the stage hands it on unchanged
        ring.release(c, 1)
        del x, out
    assert ring.rehomes == 0


def test_finished_forward_sends_are_not_holders_in_training_but_are_in_a_forward_only_step():
    for training, rehomes in ((True, 0), (False, 1)):
        ring, infos = _ring(k=1)
        ring.post(0, 1, infos[0], training=training)
        sends = [
            _Op(dist.isend, infos[0][0].buffer.detach())
        ]  # torch keeps its send works until the step ends
        ring.note_ops(0, 1, sends=sends)
        ring.release(0, 1)
        ring.post(1, 1, infos[1], training=training)
        assert ring.rehomes == rehomes, training
        del sends


def test_what_a_ring_held_is_its_k_sets_plus_re_homed_storages_still_held_and_saving_nothing_is_called_out():
    full = []
    ring, infos = _ring(k=1, m=3, say=lambda kind, **f: full.append((kind, f["check"])))
    kept = []
    for c in range(3):
        ring.post(c, 1, infos[c], training=True)
        kept.append(infos[c][0].buffer)  # a model keeps every received input: each reuse re-homes
        ring.release(c, 1)
    use = ring.usage(1)
    assert (use.ring, use.live, use.stock, use.held_sets, use.rehomes) == (
        1,
        1,
        3,
        3,
        2,
    ) and use.saved_sets == 0
    assert full == [("re-homed", "python"), ("no-saving", "python"), ("re-homed", "python")]
    del kept
    ring.reset()
    assert (
        ring.usage(1).held_sets == 1 and ring.usage(1).rehomes == 0
    )  # the next step starts from the ring


def _shared(k=2, m=2):
    """Stages 1 and 3 share one ring; stage 3's received tensor sits at position 1 of its infos."""
    slots = [[torch.zeros(3)] for _ in range(k)]
    ring = DirectionRing(
        stage=1,
        direction="forward",
        live=k,
        n_microbatches=m,
        slots=slots,
        slot_map={(1, 0): 0, (1, 1): 1, (3, 0): 1, (3, 1): 0},
    )
    infos1 = {c: (_Info(torch.zeros(3)),) for c in range(m)}
    infos3 = {c: (_Info(None), _Info(torch.zeros(3))) for c in range(m)}
    ring.bind(1, infos1, [0])
    ring.bind(3, infos3, [1])
    return ring, infos1, infos3


def test_a_shared_ring_gives_each_stage_the_slot_its_colouring_names_and_refuses_one_owned_by_the_other():
    ring, infos1, infos3 = _shared()
    assert ring.shared and ring.stock_sets == 4
    ring.post(0, 1, infos1[0], training=True)
    assert (
        infos1[0][0].buffer.untyped_storage().data_ptr()
        == ring.slots[0][0].untyped_storage().data_ptr()
    )
    with pytest.raises(PoolOverrunError) as info:
        ring.post(
            1, 3, infos3[1], training=True
        )  # stage 3 microbatch 1 is coloured into slot 0 too
    assert (info.value.stage, info.value.owner_stage) == (3, 1)
    ring.release(0, 3)  # the wrong stage's release gives nothing back
    with pytest.raises(PoolOverrunError):
        ring.post(1, 3, infos3[1], training=True)
    ring.release(0, 1)
    ring.post(1, 3, infos3[1], training=True)
    assert infos3[1][0].buffer is None and ring.bumps[0] == (1, 0)


def test_a_re_homed_shared_slot_rebinds_every_stage_that_rests_on_it():
    ring, infos1, infos3 = _shared()
    ring.post(0, 1, infos1[0], training=True)
    kept = infos1[0][0].buffer
    ring.release(0, 1)
    ring.post(1, 3, infos3[1], training=True)
    new = ring.slots[0][0].untyped_storage().data_ptr()
    assert ring.rehomes == 1 and kept.untyped_storage().data_ptr() != new
    assert infos1[0][0].buffer.untyped_storage().data_ptr() == new
