"""pooltk.pool.ring: slot c mod K, a slot's ownership verbs, fresh aliases, what a ring held."""

from __future__ import annotations

import weakref

import pytest
import torch

from pooltk import PoolConfig
from pooltk.pool.errors import PoolOverrunError
from pooltk.pool.ring import Ring, Slot, live_1f1b, ring_size


class _Info:
    def __init__(self, buffer):
        self.buffer, self.is_root_arg = buffer, False


def _ring(k=2, m=4, tensors=1, guard=True, **kw):
    sets = [[torch.zeros(3) for _ in range(tensors)] for _ in range(k)]
    infos = {c: tuple(_Info(torch.zeros(3)) for _ in range(tensors)) for c in range(m)}
    ring = Ring(
        stage=1,
        direction="forward",
        live=k,
        n_microbatches=m,
        slots=[Slot(ts, [False] * tensors) for ts in sets],
        guard=guard,
        **kw,
    )
    ring.add_member(1, infos, list(range(tensors)))
    return ring, infos


def _use(ring, infos, chunk, training=True):
    """Post the chunk's receive, then release its slot (its backward ran); a weak reference to what
    it got."""
    ring.post((1, chunk), infos[chunk], training=training)
    ring.release((1, chunk))
    return weakref.ref(infos[chunk][0].buffer)


def _storage(t):
    return t.untyped_storage().data_ptr()


def test_chunk_c_receives_into_slot_c_mod_k_through_its_own_alias():
    ring, infos = _ring()
    a = _use(ring, infos, 0)
    b = _use(ring, infos, 2)
    assert a() is not b() and infos[0][0].buffer is not b()  # chunk 0 rests on another object
    assert _storage(b()) == _storage(ring.slots[0].tensors[0])
    assert _storage(_use(ring, infos, 1)()) == _storage(ring.slots[1].tensors[0])
    assert ring.rehomes == 0


def test_a_hook_on_microbatch_k_never_fires_for_k_plus_the_ring():
    ring, infos = _ring(k=2)
    fired = []
    ring.post((1, 0), infos[0], training=True)
    a = infos[0][0].buffer.requires_grad_(True)
    handle = a.register_hook(lambda g: fired.append("k"))
    (a * 2).sum().backward()
    handle.remove()
    del a, handle
    ring.release((1, 0))
    ring.post((1, 2), infos[2], training=True)
    b = infos[2][0].buffer.requires_grad_(True)
    (b * 3).sum().backward()
    assert fired == ["k"] and torch.equal(b.grad, torch.full((3,), 3.0))


def test_posting_into_a_slot_still_owned_raises_before_the_receive_and_unguarded_rings_do_not():
    ring, infos = _ring(k=2)
    ring.post((1, 0), infos[0], training=True)
    ring.post((1, 1), infos[1], training=True)
    with pytest.raises(PoolOverrunError) as info:
        ring.post((1, 2), infos[2], training=True)
    assert (info.value.slot, info.value.owner, info.value.incoming) == (0, 0, 2)
    assert ring.peak_owned == 2
    loose, loose_infos = _ring(k=2, guard=False)
    for c in range(3):
        loose.post((1, c), loose_infos[c], training=True)  # silently reuses slot 0: the guard's job


def test_a_slot_is_owned_from_its_claim_until_its_release_by_the_same_user():
    slot = Slot([torch.zeros(2)], [False])
    slot.claim((1, 0))
    assert slot.owner == (1, 0) and not slot.release((1, 4)) and slot.owner == (1, 0)
    assert slot.release((1, 0)) and slot.owner is None


def test_each_take_hands_out_new_aliases_of_the_same_storage_and_the_resting_ones_stay():
    slot = Slot([torch.zeros(2), torch.zeros(3)], [True, False])
    first, second = slot.take((1, 0), True, False), slot.take((1, 2), True, False)
    assert all(a is not b for a, b in zip(first, second))
    assert [_storage(a) for a in second] == [_storage(t) for t in slot.tensors]
    assert [a.requires_grad for a in second] == [True, False]
    assert slot.handed_to == (1, 2) and slot.aliases is second
    assert all(r is not a for r, a in zip(slot.resting, second))


def test_a_reused_slot_is_bumped_so_autograd_refuses_stale_reads():
    ring, infos = _ring(k=1)
    _use(ring, infos, 0)
    version = ring.slots[0].tensors[0]._version
    _use(ring, infos, 1)
    assert ring.slots[0].tensors[0]._version == version + 1
    assert ring.stats.bumps[0] == [((1, 1), (1, 0))] and ring.rehomes == 0
    assert ring.bumped(None) == [(0, (1, 1), (1, 0))]


def test_retire_inputs_gives_torchs_kept_list_the_resting_alias_instead_of_the_chunks():
    ring, infos = _ring(k=2)
    ring.post((1, 0), infos[0], training=False)
    kept = [infos[0][0].buffer, "other"]
    ring.retire_inputs((1, 0), kept)
    assert kept[0] is ring.slots[0].resting[0] and kept[1] == "other"


def test_reset_frees_every_slot_and_points_every_chunk_back_at_its_resting_alias():
    ring, infos = _ring(k=2)
    ring.post((1, 0), infos[0], training=True)
    ring.post((1, 1), infos[1], training=True)
    ring.reset()
    assert all(s.owner is None for s in ring.slots) and ring.stats.owned == 0
    assert infos[0][0].buffer is ring.slots[0].resting[0]
    ring.post((1, 2), infos[2], training=True)  # slot 0 is free again: no overrun


def _shared(k=2, m=2):
    """Stages 1 and 3 share one ring; stage 3's received tensor sits at position 1 of its infos."""
    ring = Ring(
        stage=1,
        direction="forward",
        live=k,
        n_microbatches=m,
        slots=[Slot([torch.zeros(3)], [False]) for _ in range(k)],
        slot_map={(1, 0): 0, (1, 1): 1, (3, 0): 1, (3, 1): 0},
    )
    infos1 = {c: (_Info(torch.zeros(3)),) for c in range(m)}
    infos3 = {c: (_Info(None), _Info(torch.zeros(3))) for c in range(m)}
    ring.add_member(1, infos1, [0])
    ring.add_member(3, infos3, [1])
    return ring, infos1, infos3


def test_a_shared_ring_gives_each_stage_the_slot_its_colouring_names_and_refuses_an_owned_one():
    ring, infos1, infos3 = _shared()
    assert ring.shared and ring.stock_sets == 4
    ring.post((1, 0), infos1[0], training=True)
    assert _storage(infos1[0][0].buffer) == _storage(ring.slots[0].tensors[0])
    with pytest.raises(PoolOverrunError) as info:
        ring.post((3, 1), infos3[1], training=True)  # stage 3 microbatch 1 is coloured into slot 0
    assert (info.value.stage, info.value.owner_stage) == (3, 1)
    ring.release((3, 0))  # the wrong stage's release gives nothing back
    with pytest.raises(PoolOverrunError):
        ring.post((3, 1), infos3[1], training=True)
    ring.release((1, 0))
    ring.post((3, 1), infos3[1], training=True)
    assert infos3[1][0].buffer is None and ring.stats.bumps[0] == [((3, 1), (1, 0))]


def test_a_reuse_error_on_a_shared_ring_names_the_other_stage_that_reused_the_slot():
    import pickle

    from pooltk.pool.errors import name_reuse

    ring, infos1, infos3 = _shared()
    ring.post((1, 0), infos1[0], training=True)
    ring.release((1, 0))
    ring.post((3, 1), infos3[1], training=True)  # bumps slot 0: stage 1's microbatch 0 had it
    autograd = RuntimeError("modified by an inplace operation")
    named = name_reuse(autograd, stage=1, rings={"forward": ring}, microbatch=0)
    assert "slot 0 re-used by stage 3 microbatch 1 after microbatch 0" in str(named)
    assert str(pickle.loads(pickle.dumps(named))) == str(named)


def test_a_re_homed_shared_slot_rebinds_every_stage_that_rests_on_it():
    ring, infos1, infos3 = _shared()
    ring.post((1, 0), infos1[0], training=True)
    kept = infos1[0][0].buffer
    ring.release((1, 0))
    ring.post((3, 1), infos3[1], training=True)
    new = _storage(ring.slots[0].tensors[0])
    assert ring.rehomes == 1 and _storage(kept) != new
    assert _storage(infos1[0][0].buffer) == new


def test_a_shared_ring_re_home_line_names_the_holding_stage_and_the_posting_one():
    from pooltk.pool.events import event

    ring, infos1, infos3 = _shared()
    said = []
    ring.say = lambda kind, **fields: said.append(event(kind, **fields).message)
    ring.post((1, 0), infos1[0], training=True)
    kept = infos1[0][0].buffer  # stage 1 keeps its input: stage 3's post into the slot re-homes
    ring.release((1, 0))
    ring.post((3, 1), infos3[1], training=True)
    assert said and said[0].startswith("pooltk: stage 1 forward slot 0 re-homed"), said
    assert "when microbatch 1 of stage 3 posts" in said[0], said[0]
    del kept
    fields = dict(direction="forward", slot=0, bytes=12, holders=1, check="python", incoming=2)
    own = event("re-homed", stage=1, incoming_stage=1, **fields).message
    assert "when microbatch 2 posts" in own and "of stage" not in own, own


def test_what_a_ring_held_is_its_k_sets_plus_re_homed_storages_and_saving_nothing_is_said():
    said = []
    ring, infos = _ring(k=1, m=3, say=lambda kind, **f: said.append((kind, f["check"])))
    kept = []
    for c in range(3):
        ring.post((1, c), infos[c], training=True)
        kept.append(infos[c][0].buffer)  # a model keeps every received input: each reuse re-homes
        ring.release((1, c))
    use = ring.usage(1)
    assert (use.ring, use.live, use.stock, use.held_sets, use.rehomes) == (1, 1, 3, 3, 2)
    assert use.saved_sets == 0 and use.to_dict()["saved_sets"] == 0
    assert said == [("re-homed", "python"), ("no-saving", "python"), ("re-homed", "python")]
    del kept
    ring.reset()
    assert ring.usage(1).held_sets == 1 and ring.usage(1).rehomes == 0  # the next step: the ring


def test_1f1b_rings_are_the_live_set_plus_slack_never_above_m_and_none_where_nothing_is_received():
    config = PoolConfig(slack=2, grad_slack=1)
    forward = [ring_size(live_1f1b(4, i, 8, "forward"), 8, "forward", config) for i in range(4)]
    grad = [ring_size(live_1f1b(4, i, 8, "grad"), 8, "grad", config) for i in range(4)]
    assert forward == [0, 5, 4, 3] and grad == [2, 2, 2, 0]
    assert ring_size(live_1f1b(8, 1, 4, "forward"), 4, "forward", config) == 4


def test_a_reuse_error_names_the_ring_autograd_quotes_and_leaves_a_models_own_write_alone():
    from pooltk.pool.errors import name_reuse

    forward, f_infos = _ring(k=1)
    grad, g_infos = _ring(k=1)
    grad.direction = "grad"
    for c in range(2):
        _use(forward, f_infos, c)  # forward slot 0: bumped once, at version 1
    for c in range(3):
        _use(grad, g_infos, c)  # grad slot 0: bumped twice, at version 2
    text = "modified by an inplace operation: [Tensor [3]] is at version {}; expected version 0"
    rings = {"forward": forward, "grad": grad}
    named = name_reuse(RuntimeError(text.format(2)), stage=1, rings=rings, microbatch=2)
    overwrites = [(0, (1, 1), (1, 0)), (0, (1, 2), (1, 1))]
    assert (named.direction, named.slots) == ("grad", overwrites)
    assert "slot 0 re-used by microbatch 2 after microbatch 1" in str(named)
    own = RuntimeError(text.format(9))  # no slot is at version 9: the model wrote in place itself
    assert name_reuse(own, stage=1, rings=rings, microbatch=2) is None
    unquoted = RuntimeError("modified by an inplace operation")
    assert name_reuse(unquoted, stage=1, rings=rings, microbatch=2).direction == "forward"


def test_the_bytes_a_ring_held_count_each_re_homed_storage_at_its_own_size():
    slots = [Slot([torch.zeros(3), torch.zeros(1, dtype=torch.int64)], [False, False])]
    ring = Ring(stage=1, direction="forward", live=1, n_microbatches=3, slots=slots)
    infos = {c: (_Info(torch.zeros(3)), _Info(torch.zeros(1, dtype=torch.int64))) for c in range(3)}
    ring.add_member(1, infos, [0, 1])
    kept = []
    for c in range(3):
        ring.post((1, c), infos[c], training=True)
        kept.append(infos[c][1].buffer)  # the model keeps each microbatch's positions (int64) only
        ring.release((1, c))
    use = ring.usage(1)
    assert (use.rehomes, use.held_sets) == (2, 2)
    assert use.held_bytes == 12 + 8 + 2 * 8  # the ring's set, then two 8-byte storages re-homed
