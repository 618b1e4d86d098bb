"""Ring sizes per policy, the live set under 1F1B, and the chunk -> slot map."""

import pytest

from pooltk import PoolConfig
from pooltk.pool.sizing import (
    RingSizes,
    automodel_ring_size,
    inflight_1f1b,
    live_set_1f1b,
    ring_sizes,
    slot_of,
    stock_sets,
)


def test_automodel_ring_matches_the_original_implementations_cases():
    # Cases from the original PR's tests: 8 stages x 64 microbatches, and 4 microbatches.
    assert automodel_ring_size(8, 0, 64, slack=2) == 10
    assert automodel_ring_size(8, 7, 64, slack=0) == 2
    assert automodel_ring_size(8, 0, 4, slack=2) == 4
    assert automodel_ring_size(4, 1, 16, slack=2) == 5


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 8, 64])
def test_tight_ring_is_live_set_plus_slack_capped_at_m(n, m):
    for i in range(n):
        w = min(m, n - i)
        r = ring_sizes(n, i, m, PoolConfig(slack=2, grad_slack=1))
        assert r.forward == (0 if i == 0 else min(m, w + 2))
        assert r.grad == (0 if i == n - 1 else min(m, 2))
        assert ring_sizes(n, i, m, PoolConfig(slack=0, grad_slack=0)) == live_set_1f1b(n, i, m)


def test_automodel_policy_uses_one_size_for_both_directions():
    r = ring_sizes(4, 1, 16, PoolConfig(policy="automodel"))
    assert r == RingSizes(forward=5, grad=5)


def test_stock_holds_m_sets_per_direction_except_edges():
    assert stock_sets(4, 0, 16) == RingSizes(forward=0, grad=16)
    assert stock_sets(4, 2, 16) == RingSizes(forward=16, grad=16)
    assert stock_sets(4, 3, 16) == RingSizes(forward=16, grad=0)


def test_shortfall_shrinks_forward_ring_but_never_below_one():
    assert ring_sizes(4, 1, 8, PoolConfig(slack=0, forward_shortfall=1)).forward == 2
    assert ring_sizes(4, 3, 8, PoolConfig(slack=0, forward_shortfall=5)).forward == 1


def test_inflight_depth_is_warmup_of_1f1b():
    assert [inflight_1f1b(4, i, 8) for i in range(4)] == [4, 3, 2, 1]
    assert [inflight_1f1b(4, i, 2) for i in range(4)] == [2, 2, 2, 1]


def test_slot_map_is_round_robin():
    assert [slot_of(c, 3) for c in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    with pytest.raises(ValueError):
        slot_of(1, 0)


@pytest.mark.parametrize("args", [(0, 0, 4), (4, 4, 4), (4, -1, 4), (4, 0, 0), (4, 1.0, 4)])
def test_bad_shapes_raise_clear_errors(args):
    with pytest.raises(ValueError, match="found"):
        inflight_1f1b(*args)


