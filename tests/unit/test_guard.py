"""The guard: ownership overruns raise, version bumps make autograd refuse stale data, aliases isolate hooks."""

import pytest
import torch

from pooltk.pool.guard import PoolOverrunError, SlotOwnership, bump_version
from pooltk.pool.ring import DirectionRing


def test_posting_into_an_owned_slot_raises_overrun_naming_everything():
    own = SlotOwnership(stage=2, direction="forward", ring=3)
    for chunk in range(3):
        own.acquire(chunk)
    with pytest.raises(PoolOverrunError) as info:
        own.acquire(3)
    e = info.value
    assert (e.stage, e.direction, e.slot, e.ring, e.owner, e.incoming) == (2, "forward", 0, 3, 0, 3)
    assert "slack" in str(e) and "microbatch 0" in str(e) and "microbatch 3" in str(e)


def test_released_slot_can_be_reused_and_reset_clears_owners():
    own = SlotOwnership(stage=1, direction="grad", ring=1)
    own.acquire(0)
    own.release(0)
    assert own.acquire(1) == 0
    own.reset()
    assert own.owned == 0
    own.acquire(5)


def test_overrun_error_survives_pickling():
    import pickle

    e = PoolOverrunError(stage=1, direction="forward", slot=0, ring=2, owner=0, incoming=2)
    e2 = pickle.loads(pickle.dumps(e))
    assert isinstance(e2, PoolOverrunError) and str(e2) == str(e)


def test_version_bump_makes_backward_through_a_stale_activation_fail():
    slot = torch.zeros(4, 4)
    x = slot.detach().requires_grad_(True)
    w = torch.randn(4, 4, requires_grad=True)
    y = (x @ w).sum()  # saves x for w's gradient
    bump_version([slot])  # the slot is re-posted for a later microbatch
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


class _Info:
    def __init__(self, buffer):
        self.buffer = buffer
        self.is_root_arg = False


def _ring(k=2, m=4, guard=True):
    slots = [[torch.zeros(3)] for _ in range(k)]
    infos = {c: (_Info(torch.zeros(3)),) for c in range(m)}
    ring = DirectionRing(stage=1, direction="forward", size=k, n_microbatches=m, positions=[0], slots=slots, guard=guard)
    ring.bind(infos)
    return ring, infos, slots


def test_chunks_share_slot_storage_but_not_tensor_objects():
    ring, infos, slots = _ring()
    ring.post(0, infos[0])
    ring.release(0)
    ring.post(2, infos[2])
    assert infos[0][0].buffer is not infos[2][0].buffer
    assert infos[0][0].buffer.untyped_storage().data_ptr() == infos[2][0].buffer.untyped_storage().data_ptr()
    assert infos[0][0].buffer.untyped_storage().data_ptr() != infos[1][0].buffer.untyped_storage().data_ptr()


def test_hook_on_microbatch_k_input_does_not_fire_for_k_plus_ring():
    ring, infos, _ = _ring(k=2)
    fired = []
    ring.post(0, infos[0])
    a = infos[0][0].buffer.requires_grad_(True)
    a.register_hook(lambda g: fired.append("k"))
    (a * 2).sum().backward()
    ring.release(0)
    ring.post(2, infos[2])
    b = infos[2][0].buffer.requires_grad_(True)
    (b * 3).sum().backward()
    assert fired == ["k"]
    assert a.grad is not None and torch.equal(a.grad, torch.full((3,), 2.0))
    assert torch.equal(b.grad, torch.full((3,), 3.0))


def test_ring_post_without_release_raises_when_guarded_and_not_when_unguarded():
    ring, infos, _ = _ring(k=2, guard=True)
    ring.post(0, infos[0])
    ring.post(1, infos[1])
    with pytest.raises(PoolOverrunError):
        ring.post(2, infos[2])
    ring2, infos2, _ = _ring(k=2, guard=False)
    ring2.post(0, infos2[0])
    ring2.post(1, infos2[1])
    ring2.post(2, infos2[2])  # silently reuses slot 0: exactly what the guard exists to stop


def test_repost_bumps_the_slot_version():
    ring, infos, slots = _ring(k=1)
    ring.post(0, infos[0])
    v0 = slots[0][0]._version
    ring.release(0)
    ring.post(1, infos[1])
    assert slots[0][0]._version == v0 + 1


def test_overrun_error_keeps_every_field_through_pickle_and_dict():
    import pickle

    from pooltk.pool.guard import find_overrun

    exc = PoolOverrunError(stage=2, direction="grad", slot=1, ring=3, owner=4, incoming=7)
    back = pickle.loads(pickle.dumps(exc))
    assert back.to_dict() == exc.to_dict() and str(back) == str(exc)
    ranked = PoolOverrunError.from_dict({**exc.to_dict(), "rank": 5})
    assert ranked.rank == 5 and str(ranked).startswith("[rank 5] pooltk: stage 2 grad ring overrun")
    try:
        try:
            raise exc
        except PoolOverrunError as inner:
            raise RuntimeError("wrapped by a schedule") from inner
    except RuntimeError as outer:
        assert find_overrun(outer) is exc
    assert find_overrun(RuntimeError("PoolOverrunError mentioned in text only")) is None


# --------------------------------------------------------------------- [Note: naming the reuse]


def _version_error(slot: torch.Tensor) -> RuntimeError:
    """autograd's own error: a saved received tensor bumped (as a re-post bumps it) before the backward."""
    alias = slot.detach().requires_grad_(True)
    w = torch.randn(slot.shape[-1], requires_grad=True)
    y = (alias * w).sum()  # saves alias for w's gradient
    torch.autograd.graph.increment_version(slot)  # a re-post of the slot
    try:
        y.backward()
    except RuntimeError as exc:
        return exc
    raise AssertionError("autograd did not refuse the bumped tensor")


class _Ring:
    def __init__(self, slots, bumps):
        self.slots, self.bumps = slots, bumps


def test_autograds_version_error_after_a_bump_is_named_with_stage_slot_microbatches_and_fix():
    import pickle

    from pooltk.pool.guard import PoolReuseError, is_version_error, name_reuse

    slot = torch.zeros(2, 3)
    exc = _version_error(slot)
    assert is_version_error(exc)
    named = name_reuse(exc, stage=1, rings={"forward": _Ring([[slot]], {0: (5, 2)})}, microbatch=4)
    assert isinstance(named, PoolReuseError)
    assert (named.stage, named.direction, named.slots, named.microbatch) == (1, "forward", [(0, 5, 2)], 4)
    text = str(named)
    assert text.startswith("pooltk: stage 1 forward ring") and "slot 0 re-used by microbatch 5" in text
    assert "x.detach()" in text and "slack" in text and "modified by an inplace operation" in text
    again = pickle.loads(pickle.dumps(named))
    assert again.to_dict() == named.to_dict() and str(again) == text


def test_the_slot_whose_version_autograd_quotes_is_the_one_named():
    from pooltk.pool.guard import name_reuse

    quiet, bumped = torch.zeros(2, 3), torch.zeros(2, 3)
    torch.autograd.graph.increment_version(quiet)
    torch.autograd.graph.increment_version(quiet)
    torch.autograd.graph.increment_version(quiet)  # a version autograd will not quote
    exc = _version_error(bumped)
    named = name_reuse(exc, stage=2, rings={"forward": _Ring([[quiet], [bumped]], {0: (7, 4), 1: (6, 3)})},
                       microbatch=3)
    assert named.slots == [(1, 6, 3)]


def test_errors_pooltk_did_not_cause_pass_through_unnamed():
    from pooltk.pool.guard import is_version_error, name_reuse

    slot = torch.zeros(2, 3)
    exc = _version_error(slot)
    assert name_reuse(exc, stage=1, rings={"forward": _Ring([[slot]], {})}, microbatch=0) is None  # no bump this step
    assert not is_version_error(RuntimeError("CUDA out of memory"))
