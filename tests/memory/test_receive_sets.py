"""One source of receive-buffer sets: the closed forms equal the walk, and the model's every column is read from it."""

from __future__ import annotations

import dataclasses

import pytest

from pooltk._validate import InputError
from pooltk.analysis.lifetimes import DIRECTIONS, live_sets, min_safe_ring, lifetimes
from pooltk.analysis.rings import ring_from_live
from pooltk.analysis.stage_sets import formula_live, receive_sets
from pooltk.analysis.rings import RingRule
from pooltk.memory.model import Boundary, PipelineShape, automodel_ring, model_memory
from pooltk.analysis.rings import automodel_ring_size, live_set_1f1b, ring_sizes, stock_sets


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
@pytest.mark.parametrize("pp,m", [(2, 2), (4, 4), (4, 9), (8, 64), (5, 7)])
def test_the_closed_forms_are_the_walk_on_every_stage_and_direction(schedule, pp, m):
    walked = receive_sets(schedule, pp=pp, n_microbatches=m)
    closed = receive_sets(schedule, pp=pp, n_microbatches=m, source="formula")
    assert walked == closed
    assert all(
        r.live == formula_live(pp, r.stage, r.direction, m, gpipe=schedule == "GPipe")
        for r in walked
    )


def test_the_record_is_the_walk_the_pool_plans_from():
    rows = receive_sets("Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=2)
    spans = lifetimes("Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=2)
    walked = live_sets("Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=2)
    assert [r.live for r in rows] == [walked[(r.stage, r.direction)] for r in rows]
    assert [r.ring_min for r in rows] == [
        min_safe_ring(spans, r.stage, r.direction, 8) for r in rows
    ]
    # torch 2.15 measured forward 8 8 6 4 4 4 8 on stages 1..7 (../shared/reference/torch-layouts.md)
    assert [r.stock_lazy for r in rows if r.direction == "forward"][1:] == [8, 8, 6, 4, 4, 4, 8]
    assert [r.rank for r in rows[::2]] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_the_pools_1f1b_arithmetic_agrees_with_the_record():
    # analysis/rings.py still writes the 1F1B closed form itself; until it reads the record, they must agree
    for n, m in ((4, 8), (8, 64), (3, 3)):
        for r in receive_sets("1F1B", pp=n, n_microbatches=m):
            assert getattr(live_set_1f1b(n, r.stage, m), r.direction) == r.live == r.ring_min
            assert getattr(stock_sets(n, r.stage, m), r.direction) == r.stock
            cfg = RingRule(slack=2, grad_slack=1)
            assert getattr(ring_sizes(n, r.stage, m, cfg), r.direction) == ring_from_live(
                r.ring_min, m, r.direction, cfg
            )


def test_every_column_of_the_model_is_read_from_the_record():
    shape = PipelineShape(pp=4, n_microbatches=8, schedule="interleaved1f1b")
    model = model_memory(shape, Boundary.opaque(1024), RingRule(slack=1, grad_slack=0))
    for row, rec in zip(
        model.rows, receive_sets("Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=2)
    ):
        assert (row.stage, row.direction, row.rank, row.handoff) == (
            rec.stage,
            rec.direction,
            rec.rank,
            rec.handoff,
        )
        assert (row.stock_sets, row.live_sets, row.stock_lazy_sets, row.lazy_released_sets) == (
            rec.stock,
            rec.live,
            rec.stock_lazy,
            rec.lazy_released,
        )
        assert row.pooled_sets == ring_from_live(rec.ring_min, 8, rec.direction, model.config)


def test_automodels_ring_is_asked_of_one_helper():
    cfg = RingRule(slack=2, policy="automodel")
    model = model_memory(PipelineShape(pp=8, n_microbatches=64), Boundary.opaque(1), cfg)
    for i in range(8):
        assert automodel_ring(8, i, 64, cfg) == automodel_ring_size(8, i, 64, 2)
        for d in DIRECTIONS:
            expect = (
                0
                if (d == "forward" and i == 0) or (d == "grad" and i == 7)
                else automodel_ring(8, i, 64, cfg)
            )
            assert model.row(i, d).automodel_sets == expect == model.row(i, d).pooled_sets
    shortfall = model_memory(
        PipelineShape(pp=4, n_microbatches=8),
        Boundary.opaque(1),
        dataclasses.replace(cfg, forward_shortfall=1),
    )
    assert shortfall.row(1, "forward").automodel_sets == automodel_ring(4, 1, 8, cfg) - 1


def test_the_closed_forms_refuse_a_multi_stage_schedule_and_say_what_to_use():
    with pytest.raises(
        InputError,
        match=r"^live source: found 'formula' for Interleaved1F1B.*Fix: use source='schedule'",
    ):
        receive_sets("Interleaved1F1B", pp=2, n_microbatches=4, stages_per_rank=2, source="formula")
    with pytest.raises(InputError, match=r"^live source: found 'guess'"):
        receive_sets("1F1B", pp=2, n_microbatches=4, source="guess")
