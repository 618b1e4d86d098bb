"""The stock-lazy column: what torch >= 2.15's lazy receive buffers hold, against 2.15.0's measured
peaks.

Measured figures (peak live receive buffers per stage and direction, stock torch 2.15.0, CPU gloo,
small Linear stages, counted with weakrefs on every ``_RecvInfo.allocate_buffer`` result), from
``../shared/reference/torch-layouts.md``, section "torch 2.15.0 and the last stage" (measured
2026-12-01); the 1F1B pp4 M8 row is also docs/torch-compat.md's 2.15.0 row ("0+2 3+2 2+1 8+0").
They are copied here, not read from ../shared, so the test runs without it.
"""

from __future__ import annotations

import pytest

from pooltk.analysis.stage_sets import lazy_holds
from pooltk.analysis.lifetimes import live_sets
from pooltk.config import PoolConfig
from pooltk.memory.model import PipelineShape, harness_boundary, model_memory

# 1F1B pp4 M8, stock 2.15.0: forward on stages 1..3, grad on stages 0..2.
MEASURED_1F1B_PP4_M8_FORWARD = {1: 3, 2: 2, 3: 8}
MEASURED_1F1B_PP4_M8_GRAD = {0: 2, 1: 2, 2: 1}
# 1F1B pp4 M16: the last stage holds 16, the others unchanged.
MEASURED_1F1B_PP4_M16_LAST_FORWARD = 16
# Interleaved1F1B pp4 vpp2 M8: forward on stages 1..7.
MEASURED_INTERLEAVED_PP4_VPP2_M8_FORWARD = {1: 8, 2: 8, 3: 6, 4: 4, 5: 4, 6: 4, 7: 8}


def _model(m: int):
    return model_memory(
        PipelineShape(pp=4, n_microbatches=m),
        harness_boundary(rows=2, seq_len=4, hidden=8),
        PoolConfig(),
    )


@pytest.mark.parametrize("m", [8, 16])
def test_stock_lazy_forward_equals_torch_2_15_measured_on_every_1f1b_stage(m):
    measured = dict(MEASURED_1F1B_PP4_M8_FORWARD)
    if m == 16:
        measured[3] = MEASURED_1F1B_PP4_M16_LAST_FORWARD
    model = _model(m)
    assert {i: model.row(i, "forward").sets("stock_lazy") for i in (1, 2, 3)} == measured
    assert (
        model.row(0, "forward").sets("stock_lazy") == 0
    )  # stage 0's inputs are the root arguments


def test_only_the_last_stage_forward_differs_from_the_live_set_and_the_release_closes_it():
    model = _model(8)
    for i in range(4):
        for d in ("forward", "grad"):
            row = model.row(i, d)
            assert row.sets("lazy_released") == row.sets("live_set")
            expected = 8 if (i, d) == (3, "forward") else row.sets("live_set")
            assert row.sets("stock_lazy") == expected, (i, d)
    assert model.row(3, "forward").sets("lazy_released") == 1  # from M = 8 to the live set


def test_interleaved_stock_lazy_equals_torch_2_15_measured_on_every_stage():
    live = live_sets("Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=2)
    held = lazy_holds(live, 8, 8)
    assert {
        i: held[(i, "forward")] for i in range(1, 8)
    } == MEASURED_INTERLEAVED_PP4_VPP2_M8_FORWARD
    released = lazy_holds(live, 8, 8, released=True)
    assert released[(7, "forward")] == live[(7, "forward")] == 2


def test_the_gradient_direction_is_a_lower_bound_one_short_on_stages_0_and_1():
    # The receive lifetime (post to the backward that reads it) has one gradient buffer live on
    # every 1F1B stage; 2.15.0 measured 2, 2, 1. The model is exact on stage 2 and one short on
    # stages 0 and 1, where torch's 1F1B step still holds the previous receive op while it allocates
    # the next (see [Note: lazy receive buffers] in pooltk.analysis.stage_sets and
    # tests/schedules/test_lazy_step_holder.py). This test fails if either side changes.
    model = _model(8)
    modelled = {i: model.row(i, "grad").sets("stock_lazy") for i in (0, 1, 2)}
    assert modelled == {0: 1, 1: 1, 2: 1}
    short = {i: MEASURED_1F1B_PP4_M8_GRAD[i] - modelled[i] for i in modelled}
    assert short == {0: 1, 1: 1, 2: 0}


def test_a_schedule_the_pool_stands_down_on_keeps_torchs_own_lazy_holding():
    model = model_memory(
        PipelineShape(pp=4, n_microbatches=8, schedule="gpipe"),
        harness_boundary(rows=2, seq_len=4, hidden=8),
        unpoolable="stock",
    )
    for i in range(1, 4):  # GPipe measured 8 forward on stages 1..3 (the same source)
        assert model.row(i, "forward").sets("stock_lazy") == 8
        assert model.row(i, "forward").sets("lazy_released") == 8
