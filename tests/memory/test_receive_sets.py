"""One source of receive-buffer sets: the closed forms equal the walk, and the model's every column
is read from it."""

from __future__ import annotations

import pytest

from pooltk._validate import InputError
from pooltk.analysis.lifetimes import DIRECTIONS, live_sets, min_safe_ring, lifetimes
from pooltk.analysis.stage_sets import formula_live, receive_sets, stock_count
from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, PipelineShape, automodel_ring, model_memory
from pooltk.parity.experiments import Harness
from pooltk.pool.ring import live_1f1b, ring_size


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
    # torch 2.15 measured forward 8 8 6 4 4 4 8 on stages 1..7
    # (../shared/reference/torch-layouts.md)
    assert [r.stock_lazy for r in rows if r.direction == "forward"][1:] == [8, 8, 6, 4, 4, 4, 8]
    assert [r.rank for r in rows[::2]] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_the_pools_1f1b_arithmetic_agrees_with_the_record():
    # the pool sizes a 1F1B stage from its closed form (pool/ring.py), the model from the record
    for n, m in ((4, 8), (8, 64), (3, 3)):
        for r in receive_sets("1F1B", pp=n, n_microbatches=m):
            assert live_1f1b(n, r.stage, m, r.direction) == r.live == r.ring_min
            assert stock_count(n, r.stage, r.direction, m) == r.stock
            cfg = Harness(slack=2, grad_slack=1)
            closed = cfg.ring_size(
                live=live_1f1b(n, r.stage, m, r.direction),
                receives=m,
                direction=r.direction,
                stage=r.stage,
                num_stages=n,
            )
            assert closed == ring_size(r.ring_min, m, r.direction, cfg.config)


def test_every_column_of_the_model_is_read_from_the_record():
    shape = PipelineShape(pp=4, n_microbatches=8, schedule="interleaved1f1b")
    model = model_memory(shape, Boundary.opaque(1024), PoolConfig(slack=1, grad_slack=0))
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
        assert row.pooled_sets == ring_size(rec.ring_min, 8, rec.direction, model.config)


def test_automodels_ring_is_asked_of_one_helper():
    cfg = PoolConfig(slack=2)
    model = model_memory(
        PipelineShape(pp=8, n_microbatches=64), Boundary.opaque(1), cfg, policy="automodel"
    )
    for i in range(8):
        assert automodel_ring(8, i, 64, 2) == max(2, min(64, max(1, 8 - i) + 2))
        for d in DIRECTIONS:
            expect = (
                0
                if (d == "forward" and i == 0) or (d == "grad" and i == 7)
                else automodel_ring(8, i, 64, cfg.slack)
            )
            assert model.row(i, d).automodel_sets == expect == model.row(i, d).pooled_sets
    # a ring a set short is the harness's alone (negative controls), from the same helper
    short = Harness(slack=2, policy="automodel", forward_shortfall=1)
    closed = dict(receives=8, direction="forward", stage=1, num_stages=4)
    assert short.ring_size(live=3, **closed) == automodel_ring(4, 1, 8, 2) - 1


def test_the_closed_forms_refuse_a_multi_stage_schedule_and_say_what_to_use():
    with pytest.raises(
        InputError,
        match=r"^live source: found 'formula' for Interleaved1F1B.*Fix: use source='schedule'",
    ):
        receive_sets("Interleaved1F1B", pp=2, n_microbatches=4, stages_per_rank=2, source="formula")
    with pytest.raises(InputError, match=r"^live source: found 'guess'"):
        receive_sets("1F1B", pp=2, n_microbatches=4, source="guess")
