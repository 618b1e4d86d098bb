"""pooltk.pool.holders: who still holds a slot's data at a re-post (views, Python, C++ references,
sends), what an address or a finished send is not, and that a held tensor is re-homed alone."""

from __future__ import annotations

import torch
import torch.distributed as dist

from pooltk.pool import holders
from pooltk.pool.ring import Ring, Slot


class _Info:
    def __init__(self, buffer):
        self.buffer, self.is_root_arg = buffer, False


class _Op:
    def __init__(self, op, tensor):
        self.op, self.tensor = op, tensor


def _ring(k=1, m=4, tensors=1):
    ring = Ring(
        stage=1,
        direction="forward",
        live=k,
        n_microbatches=m,
        slots=[
            Slot(ts, [False] * tensors)
            for ts in [[torch.zeros(3) for _ in range(tensors)] for _ in range(k)]
        ],
    )
    infos = {c: tuple(_Info(torch.zeros(3)) for _ in range(tensors)) for c in range(m)}
    ring.add_member(1, infos, list(range(tensors)))
    return ring, infos


def _counted(slot: Slot, calibration: holders.Calibration) -> list[str]:
    return [why for _, why in holders.count(slot, calibration)]


def test_an_alias_nobody_else_holds_counts_nothing_and_each_kind_of_holder_is_named():
    slot = Slot([torch.zeros(4)], [True])
    baseline = holders.calibrate(slot)  # once, before any alias is handed out (as a ring does)
    slot.take((1, 0), True, True)
    assert _counted(slot, baseline) == [""]
    view = slot.aliases[0][1:]
    assert _counted(slot, baseline) == ["views"]
    del view
    kept = [slot.aliases[0]]
    assert _counted(slot, baseline) == ["python"]
    del kept
    graph = (slot.aliases[0] * slot.aliases[0]).sum()  # autograd saves the input: C++ holders
    assert _counted(slot, baseline) == ["c++"]
    del graph


def test_torchs_receive_ops_are_pointed_back_at_the_resting_alias_not_counted():
    slot = Slot([torch.zeros(4)], [False])
    baseline = holders.calibrate(slot)
    slot.take((1, 0), True, True)
    slot.recv_ops = [_Op(dist.irecv, slot.aliases[0])]
    ops = slot.recv_ops
    holders.let_go_of_recv_ops(slot)
    assert _counted(slot, baseline) == [""] and ops[0].tensor is slot.resting[0]


def test_a_tensor_kept_past_its_use_is_re_homed_alone_and_keeps_its_values():
    ring, infos = _ring(k=1, tensors=2)
    ring.post((1, 0), infos[0], training=True)
    kept = infos[0][1].buffer  # a model keeps the second received tensor (a mask) across chunks
    kept.fill_(7.0)
    ring.release((1, 0))
    first = ring.slots[0].tensors[0]
    ring.post((1, 1), infos[1], training=True)
    assert ring.rehomes == 1 and ring.slots[0].tensors[0] is first  # the other keeps its storage
    assert (
        ring.slots[0].tensors[1].untyped_storage().data_ptr() != kept.untyped_storage().data_ptr()
    )
    assert torch.equal(kept, torch.full((3,), 7.0))


def test_a_view_an_output_that_is_the_input_and_a_graph_are_holders():
    for keep in (lambda a: a[1:], lambda a: (a,), lambda a: a.requires_grad_(True) * 2):
        ring, infos = _ring(k=1)
        ring.post((1, 0), infos[0], training=True)
        held = keep(infos[0][0].buffer)
        ring.release((1, 0))
        ring.post((1, 1), infos[1], training=True)
        assert ring.rehomes == 1, keep
        del held


def test_reading_an_address_or_passing_a_tensor_on_costs_nothing_once_nobody_holds_it():
    ring, infos = _ring(k=2)
    for c in range(4):
        ring.post((1, c), infos[c], training=True)
        x = infos[c][0].buffer
        x.data_ptr(), x.untyped_storage().data_ptr()  # a kernel launcher reads the addresses
        out = (x,)  # the stage hands it on unchanged
        ring.release((1, c))
        del x, out
    assert ring.rehomes == 0


def test_finished_forward_sends_are_not_holders_in_training_but_are_in_a_forward_only_step():
    for training, rehomes in ((True, 0), (False, 1)):
        ring, infos = _ring(k=1)
        ring.post((1, 0), infos[0], training=training)
        sends = [_Op(dist.isend, infos[0][0].buffer.detach())]  # torch keeps sends to step end
        ring.note_sends((1, 0), sends)
        ring.release((1, 0))
        ring.post((1, 1), infos[1], training=training)
        assert ring.rehomes == rehomes, training
        del sends


def test_a_finished_send_kept_past_later_uses_of_its_slot_is_not_a_holder():
    # Schedule1F1B keeps its last warm-up send's work (and tensor) until the cooldown: a tensor the
    # stage passes on unchanged stays held by a send that finished two uses of its slot ago.
    ring, infos = _ring(k=1)
    ring.post((1, 0), infos[0], training=True)
    stale = [_Op(dist.isend, infos[0][0].buffer.detach())]
    ring.note_sends((1, 0), stale)
    ring.release((1, 0))
    for c in (1, 2):
        ring.post((1, c), infos[c], training=True)
        ring.release((1, c))
    assert ring.rehomes == 0
    del stale
