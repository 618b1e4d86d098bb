"""pooltk.pool.guard: the overrun error keeps its fields across processes, autograd's version error is named."""

from __future__ import annotations

import pickle

import pytest
import torch

from pooltk.pool.guard import (
    PoolOverrunError,
    PoolReuseError,
    bump_version,
    is_version_error,
    name_reuse,
)


def test_an_overrun_keeps_every_field_through_pickle_and_dict_and_is_found_under_a_wrapper():
    exc = PoolOverrunError(stage=2, direction="grad", slot=1, ring=3, owner=4, incoming=7)
    back = pickle.loads(pickle.dumps(exc))
    assert back.to_dict() == exc.to_dict() and str(back) == str(exc)
    ranked = PoolOverrunError.from_dict({**exc.to_dict(), "rank": 5})
    assert ranked.rank == 5 and str(ranked).startswith("[rank 5] pooltk:")
    assert len(str(exc).splitlines()) <= 2


def test_a_version_bump_makes_backward_through_a_stale_received_tensor_fail():
    slot = torch.zeros(4, 4)
    x = slot.detach().requires_grad_(True)
    y = (x @ torch.randn(4, 4, requires_grad=True)).sum()  # saves x for the weight's gradient
    bump_version([slot])  # the slot is re-posted for a later microbatch
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def _version_error(slot: torch.Tensor) -> RuntimeError:
    alias = slot.detach().requires_grad_(True)
    y = (alias * torch.randn(slot.shape[-1], requires_grad=True)).sum()
    torch.autograd.graph.increment_version(slot)
    try:
        y.backward()
    except RuntimeError as exc:
        return exc
    raise AssertionError("autograd did not refuse the bumped tensor")


class _Ring:
    def __init__(self, slots, bumps):
        self.slots, self.bumps = slots, bumps


def test_autograds_version_error_after_a_bump_is_named_with_the_slot_it_quotes():
    quiet, bumped = torch.zeros(2, 3), torch.zeros(2, 3)
    for _ in range(3):
        torch.autograd.graph.increment_version(quiet)  # a version autograd will not quote
    exc = _version_error(bumped)
    assert is_version_error(exc)
    named = name_reuse(
        exc,
        stage=2,
        rings={"forward": _Ring([[quiet], [bumped]], {0: (7, 4), 1: (6, 3)})},
        microbatch=3,
    )
    assert isinstance(named, PoolReuseError) and named.slots == [(1, 6, 3)]
    assert (named.stage, named.direction, named.microbatch) == (2, "forward", 3)
    again = pickle.loads(pickle.dumps(named))
    assert again.to_dict() == named.to_dict() and len(str(named).splitlines()) <= 2


def test_errors_pooltk_did_not_cause_pass_through_unnamed():
    slot = torch.zeros(2, 3)
    assert (
        name_reuse(
            _version_error(slot), stage=1, rings={"forward": _Ring([[slot]], {})}, microbatch=0
        )
        is None
    )
    assert not is_version_error(RuntimeError("CUDA out of memory"))
