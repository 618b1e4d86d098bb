"""The memory model per rank: rank-shared rings, per-boundary shapes, V-schedule handoffs.

Figures not written for these tests: the slot counts of pooltk issue #21 (Interleaved1F1B pp4 vpp2
M16: 46 per stage and direction) and of the upstream review of pytorch PR #196465 (Interleaved1F1B
pp4 vpp4, M 8/16/32: 112 per (stage, direction), 69 per direction shared across a rank's stages),
and :func:`pooltk.analysis.lifetimes.shared_slots`, which counts the same peaks another way.
"""

from __future__ import annotations

import pytest

from pooltk.analysis.lifetimes import lifetimes, shared_slots
from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, MemoryModelError, PipelineShape, TensorSpec, model_memory

ONE = Boundary.opaque(1)


def _interleaved(m: int, vpp: int, boundaries=ONE, config: PoolConfig | None = None, **kw):
    shape = PipelineShape(pp=4, n_microbatches=m, schedule="Interleaved1F1B", stages_per_rank=vpp)
    return model_memory(shape, boundaries, config, **kw)


@pytest.mark.parametrize(
    ("vpp", "m", "per_stage", "per_rank"),
    [(2, 16, 46, 35), (4, 8, 112, 69), (4, 16, 112, 69), (4, 32, 112, 69)],
)
def test_rank_live_sets_reproduce_the_published_interleaved_slot_counts(
    vpp, m, per_stage, per_rank
):
    model = _interleaved(m, vpp)
    assert sum(r.live_sets for r in model.rows) == per_stage
    assert sum(g.live for g in model.rings) == per_rank
    assert sum(model.rank_bytes(r, "rank_live") for r in range(4)) == per_rank  # one byte per set
    slots = shared_slots(lifetimes("Interleaved1F1B", pp=4, n_microbatches=m, stages_per_rank=vpp))
    assert (slots.per_stage_direction, slots.per_rank_direction) == (per_stage, per_rank)


@pytest.mark.parametrize(
    "schedule",
    ["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"],
)
def test_a_rank_shared_ring_is_the_ranks_live_set_plus_slack_and_never_more_than_per_stage_rings(
    schedule,
):
    config = PoolConfig(slack=2, grad_slack=1)
    model = model_memory(PipelineShape(pp=4, n_microbatches=8, schedule=schedule), ONE, config)
    for g in model.rings:
        extra = config.slack if g.direction == "forward" else config.grad_slack
        if g.shared:
            assert g.size == min(g.receives, g.live + extra)
        else:
            # a ring of one stage is that stage's own ring, exactly what install(schedule="auto")
            # keeps
            (stage,) = g.stages
            assert g.size == model.row(stage, g.direction).pooled_sets
    for rank in range(4):
        assert (
            model.rank_bytes(rank, "rank_live")
            <= model.rank_bytes(rank, "shared")
            <= model.rank_bytes(rank, "tight")
        )
        assert model.rank_bytes(rank, "shared") <= model.rank_bytes(rank, "stock")


def test_the_ranks_pooled_bytes_follow_the_configs_sharing():
    rank = _interleaved(8, 2, sharing="rank")
    stage = _interleaved(8, 2, sharing="stage")
    for r in range(4):
        assert rank.rank_bytes(r, "pooled") == rank.rank_bytes(r, "shared")
        assert stage.rank_bytes(r, "pooled") == sum(
            stage.stage_bytes(i, "pooled") for i in stage.rank_stages(r)
        )
    assert sum(rank.rank_bytes(r, "pooled") for r in range(4)) < sum(
        stage.rank_bytes(r, "pooled") for r in range(4)
    )


def test_under_single_stage_schedules_a_rank_is_its_stage_for_every_variant():
    model = model_memory(
        PipelineShape(pp=4, n_microbatches=8),
        Boundary.hidden_state(rows=2, seq_len=16, hidden=32),
        PoolConfig(),
        policy="automodel",
    )
    for r in range(4):
        assert model.rank_stages(r) == (r,)
        for v in (
            "stock",
            "stock_lazy",
            "lazy_released",
            "automodel",
            "tight",
            "live_set",
            "pooled",
        ):
            assert model.rank_bytes(r, v) == model.stage_bytes(r, v)
        assert model.rank_bytes(r, "shared") == model.stage_bytes(r, "pooled")
        assert model.rank_bytes(r, "rank_live") == model.stage_bytes(r, "live_set")


def test_v_schedule_handoffs_hold_nothing_pooled_and_m_sets_in_stock_torch():
    model = model_memory(PipelineShape(pp=4, n_microbatches=8, schedule="ZBVZeroBubble"), ONE)
    handoffs = [(r.stage, r.direction) for r in model.rows if r.handoff]
    assert handoffs == [(3, "grad"), (4, "forward")]  # rank 3 runs stages 3 and 4: the V's turn
    for stage, direction in handoffs:
        row = model.row(stage, direction)
        assert row.stock_sets == 8  # torch <= 2.14 allocates M there all the same
        assert (row.pooled_sets, row.tight_sets, row.live_sets, row.stock_lazy_sets) == (0, 0, 0, 0)
        assert not any(stage in g.stages and g.direction == direction for g in model.rings)


def test_stages_of_a_rank_share_a_ring_only_where_their_boundary_tensors_are_equal():
    narrow = Boundary(activations=(TensorSpec(shape=(2, 4, 8)),))
    renamed = Boundary(
        activations=(TensorSpec(shape=(2, 4, 8), name="other_name"),)
    )  # same shape and dtype
    wide = Boundary(
        activations=(TensorSpec(shape=(2, 4, 8)), TensorSpec(shape=(3, 2, 4, 8), name="blocks"))
    )
    # 8 stages on 4 ranks (loop): rank r runs r and r + 4; stage s receives activations over
    # boundary s - 1 and gradients over boundary s.
    model = _interleaved(8, 2, boundaries=[narrow, wide, narrow, narrow, renamed, wide, wide])
    rings = {(g.rank, g.direction): [] for g in model.rings}
    for g in model.rings:
        rings[(g.rank, g.direction)].append(g.stages)
    assert rings[(1, "forward")] == [(1, 5)]  # boundaries 0 and 4: equal tensors, names aside
    assert rings[(2, "forward")] == [(2, 6)]  # boundaries 1 and 5: both wide
    assert rings[(3, "forward")] == [(3,), (7,)]  # boundaries 2 (narrow) and 6 (wide): a ring each
    assert rings[(0, "grad")] == [(0, 4)] and rings[(2, "grad")] == [(2,), (6,)]
    (wide_ring,) = [g for g in model.rings if g.rank == 2 and g.direction == "forward"]
    assert (
        wide_ring.set_bytes == wide.forward_bytes == 4 * 2 * 4 * 8 * 2
    )  # 4 hidden-sized tensors, bf16
    assert wide_ring.bytes == wide_ring.size * wide.forward_bytes


def test_a_rank_outside_the_pipeline_is_named():
    with pytest.raises(MemoryModelError, match=r"rank: found 4; required a rank in \[0, 3\]"):
        _interleaved(8, 2).rank_bytes(4, "pooled")
    with pytest.raises(MemoryModelError, match=r"variant: found 'sharde'"):
        _interleaved(8, 2).rank_bytes(0, "sharde")


def test_expected_rank_bytes_are_what_a_per_rank_measurement_should_find():
    bounds = Boundary.hidden_state(rows=2, seq_len=4, hidden=8)
    for sharing in ("rank", "stage"):
        model = _interleaved(
            8, 2, boundaries=bounds, config=PoolConfig(slack=0, grad_slack=0), sharing=sharing
        )
        expected = model.expected_rank_bytes()
        assert sorted(expected) == [0, 1, 2, 3]
        for rank, e in expected.items():
            assert (
                e.pooled_bytes
                == model.rank_bytes(rank, "pooled")
                == e.pooled_sets * bounds.forward_bytes
            )
            assert (
                e.stock_bytes
                == model.rank_bytes(rank, "stock")
                == e.stock_sets * bounds.forward_bytes
            )
    # slack 0, rank sharing: the pooled sets are the rank's live set (issue #21's done-when,
    # modelled side)
    model = _interleaved(8, 2, boundaries=bounds, config=PoolConfig(slack=0, grad_slack=0))
    all_shared = [r for r in range(4) if all(g.shared for g in model.rank_rings(r))]
    assert all_shared == [
        1,
        2,
    ]  # ranks 0 and 3 hold one stage in one direction (stage 0 sends, stage 7 ends)
    for r in all_shared:
        assert model.expected_rank_bytes()[r].pooled_bytes == model.rank_bytes(r, "rank_live")
