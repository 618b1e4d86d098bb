"""pooltk.analysis.rings: K = live set + slack (at most M), the 1F1B live set, what stock holds."""

from __future__ import annotations

import pytest

from pooltk import PoolConfig
from pooltk.analysis.rings import (
    automodel_ring_size,
    inflight_1f1b,
    live_set_1f1b,
    ring_and_live,
    ring_sizes,
    stock_sets,
)


def test_the_original_single_ring_matches_the_original_implementations_cases():
    # Cases from the original PR's tests: 8 stages x 64 microbatches, and 4 microbatches.
    assert [
        automodel_ring_size(8, 0, 64, slack=2),
        automodel_ring_size(8, 7, 64, slack=0),
        automodel_ring_size(8, 0, 4, slack=2),
        automodel_ring_size(4, 1, 16, slack=2),
    ] == [10, 2, 4, 5]


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 8, 64])
def test_the_ring_is_the_1f1b_live_set_plus_slack_capped_at_m(n, m):
    for i in range(n):
        w = min(m, n - i)
        r = ring_sizes(n, i, m, PoolConfig(slack=2, grad_slack=1))
        assert (r.forward, r.grad) == (
            0 if i == 0 else min(m, w + 2),
            0 if i == n - 1 else min(m, 2),
        )
        assert ring_sizes(n, i, m, PoolConfig(slack=0, grad_slack=0)) == live_set_1f1b(n, i, m)
        for d, k in (("forward", r.forward), ("grad", r.grad)):
            assert ring_and_live(n, i, m, d, PoolConfig())[0] == k


def test_stock_holds_m_sets_per_direction_except_where_nothing_is_received():
    assert [(s.forward, s.grad) for s in (stock_sets(4, i, 16) for i in (0, 2, 3))] == [
        (0, 16),
        (16, 16),
        (16, 0),
    ]


def test_the_inflight_depth_is_1f1bs_warmup():
    assert [inflight_1f1b(4, i, 8) for i in range(4)] == [4, 3, 2, 1]
    assert [inflight_1f1b(4, i, 2) for i in range(4)] == [2, 2, 2, 1]


def test_a_plan_decides_over_the_closed_form():
    class Plan:
        sizes, min_safe = {(1, "forward"): 7}, {(1, "forward"): 5}

    assert ring_and_live(4, 1, 8, "forward", PoolConfig(), Plan()) == (7, 5)
    assert ring_and_live(4, 1, 8, "grad", PoolConfig(), Plan()) == (0, 0)
