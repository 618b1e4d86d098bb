"""Ring sizes: K = live set + slack (at most M), the 1F1B live set, stock, Automodel's ring."""

from __future__ import annotations

import pytest

from pooltk import PoolConfig
from pooltk.analysis.stage_sets import formula_live, stock_count
from pooltk.memory.model import automodel_ring
from pooltk.parity.experiments import Harness
from pooltk.pool import install as install_mod
from pooltk.pool.ring import live_1f1b, ring_size

DIRECTIONS = ("forward", "grad")


def _user_install(config: PoolConfig):  # noqa: ANN202 - an install with no harness set
    report = install_mod.InstallReport.of(None, "test", config, installed=False)
    return install_mod._Install(config, None, "1f1b", False, None, report)


def test_the_original_single_ring_matches_the_original_implementations_cases():
    # Cases from the original PR's tests: 8 stages x 64 microbatches, and 4 microbatches.
    assert [
        automodel_ring(8, 0, 64, slack=2),
        automodel_ring(8, 7, 64, slack=0),
        automodel_ring(8, 0, 4, slack=2),
        automodel_ring(4, 1, 16, slack=2),
    ] == [10, 2, 4, 5]


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 8, 64])
def test_the_ring_is_the_1f1b_live_set_plus_slack_capped_at_m(n, m):
    install = _user_install(PoolConfig())
    for i in range(n):
        w = min(m, n - i)
        config = PoolConfig(slack=2, grad_slack=1)
        k = {d: ring_size(live_1f1b(n, i, m, d), m, d, config) for d in DIRECTIONS}
        assert (k["forward"], k["grad"]) == (
            0 if i == 0 else min(m, w + 2),
            0 if i == n - 1 else min(m, 2),
        )
        for d in DIRECTIONS:
            live = live_1f1b(n, i, m, d)
            assert ring_size(live, m, d, PoolConfig(slack=0, grad_slack=0)) == live
            # what the pool's ring builder asks for the 1F1B closed form, with and without a harness
            closed = dict(live=live, receives=m, direction=d, stage=i, num_stages=n)
            assert install.ring_size(**closed) == k[d]
            assert Harness().ring_size(**closed) == k[d]


def test_stock_holds_m_sets_per_direction_except_where_nothing_is_received():
    assert [tuple(stock_count(4, i, d, 16) for d in DIRECTIONS) for i in (0, 2, 3)] == [
        (0, 16),
        (16, 16),
        (16, 0),
    ]
    assert stock_count(4, 1, "grad", 16, forward_only=True) == 0


def test_the_1f1b_live_set_is_the_warmup_depth_on_every_stage_that_receives():
    # W = min(M, N - i) forwards in flight before the first backward; stage 0 receives none of them.
    assert [live_1f1b(4, i, 8, "forward") for i in range(4)] == [0, 3, 2, 1]
    assert [live_1f1b(4, i, 2, "forward") for i in range(4)] == [0, 2, 2, 1]
    assert [live_1f1b(4, i, 8, "grad") for i in range(4)] == [1, 1, 1, 0]


@pytest.mark.parametrize(
    "call",
    [
        lambda: live_1f1b(4, 4, 8, "forward"),
        lambda: live_1f1b(0, 0, 8, "forward"),
        lambda: live_1f1b(4, 0, 0, "grad"),
        lambda: automodel_ring(4, 4, 8, 2),
        lambda: automodel_ring(4, -1, 8, 2),
        lambda: automodel_ring(4, 0, 0, 2),
        lambda: automodel_ring(4, 0, 8, -1),
    ],
)
def test_a_stage_outside_the_pipeline_is_refused_with_found_and_required(call):
    with pytest.raises(ValueError, match="found .*required"):
        call()


@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("m", range(1, 13))
def test_ring_size_and_stock_count_agree_with_the_analysis_closed_form_for_1f1b(n, m):
    for i in range(n):
        for d in DIRECTIONS:
            live = formula_live(n, i, d, m)
            assert live_1f1b(n, i, m, d) == live
            # slack 0 keeps exactly the live set; slack enough to reach M keeps what stock keeps
            assert ring_size(live, m, d, PoolConfig(slack=0, grad_slack=0)) == live
            assert ring_size(live, m, d, PoolConfig(slack=m, grad_slack=m)) == stock_count(
                n, i, d, m
            )
            assert (live == 0) == (stock_count(n, i, d, m) == 0)
            assert ring_size(live, m, d, PoolConfig()) <= stock_count(n, i, d, m)


def test_a_plan_sizes_by_the_tight_rule_from_its_smallest_safe_ring():
    # Under a plan the pool asks with the plan's min_safe and no stage: the tight rule, for every
    # harness policy but measure.
    install = _user_install(PoolConfig())
    assert install.ring_size(live=5, receives=8, direction="forward") == 7
    assert install.ring_size(live=0, receives=8, direction="grad") == 0
    assert Harness(policy="automodel").ring_size(live=5, receives=8, direction="forward") == 7
    assert (
        Harness(policy="automodel").ring_size(
            live=5, receives=8, direction="forward", stage=1, num_stages=4
        )
        == automodel_ring(4, 1, 8, 2)
        == 5
    )


def test_the_harness_sizes_what_no_user_chooses():
    measure = Harness(policy="measure")
    assert measure.ring_size(live=3, receives=8, direction="forward") == 8
    assert measure.ring_size(live=0, receives=8, direction="forward") == 0
    assert measure.ring_size(live=6, receives=16, direction="grad", stage=0, num_stages=4) == 16
    short = Harness(slack=0, forward_shortfall=1)
    assert short.ring_size(live=3, receives=8, direction="forward") == 2
    assert short.ring_size(live=1, receives=8, direction="forward") == 1  # never below 1
    assert short.ring_size(live=1, receives=8, direction="grad") == 2  # grad as the rule says
    am_short = Harness(policy="automodel", forward_shortfall=1)
    closed = dict(receives=8, stage=1, num_stages=4)
    assert (
        am_short.ring_size(live=3, direction="forward", **closed) == automodel_ring(4, 1, 8, 2) - 1
    )
    assert am_short.ring_size(live=1, direction="grad", **closed) == automodel_ring(4, 1, 8, 2)
    assert am_short.ring_size(live=0, direction="forward", **closed) == 0
