"""The memory model against hand-computed cases, its invariants, and its errors."""

from __future__ import annotations

import pytest

from pooltk.config import PoolConfig
from pooltk.memory.model import (
    Boundary,
    MemoryModelError,
    PipelineShape,
    TensorSpec,
    UnpoolableScheduleError,
    expected_bytes,
    harness_boundary,
    live_sets_for,
    microbatches_from_batch,
    model_memory,
    to_unit,
)

# pp 4, M 8, one float32 (2, 16, 32) tensor per boundary: 4096 bytes per set.
SET = 2 * 16 * 32 * 4
# Hand-computed per stage: (forward, grad) sets. W = min(M, N - i) = 4, 3, 2, 1.
HAND_STOCK = [(0, 8), (8, 8), (8, 8), (8, 0)]
HAND_TIGHT_S2_G1 = [(0, 2), (5, 2), (4, 2), (3, 0)]  # forward min(8, W + 2), grad min(8, 1 + 1)
HAND_AUTOMODEL_S2 = [(0, 6), (5, 5), (4, 4), (3, 0)]  # max(2, min(8, max(1, 4 - i) + 2)) both ways
HAND_LIVE = [(0, 1), (3, 1), (2, 1), (1, 0)]


def _small(config: PoolConfig, **kw):
    shape = PipelineShape(pp=4, n_microbatches=8)
    return model_memory(shape, harness_boundary(rows=2, seq_len=16, hidden=32), config, **kw)


def _pairs(model, variant):
    return [
        (model.row(i, "forward").sets(variant), model.row(i, "grad").sets(variant))
        for i in range(model.shape.pp)
    ]


def test_small_pipeline_matches_hand_computed_sets_and_bytes():
    m = _small(PoolConfig(slack=2, grad_slack=1), policy="tight")
    assert _pairs(m, "stock") == HAND_STOCK
    assert _pairs(m, "tight") == HAND_TIGHT_S2_G1
    assert _pairs(m, "automodel") == HAND_AUTOMODEL_S2
    assert _pairs(m, "live_set") == HAND_LIVE
    assert _pairs(m, "pooled") == HAND_TIGHT_S2_G1
    assert [m.stage_bytes(i, "stock") for i in range(4)] == [8 * SET, 16 * SET, 16 * SET, 8 * SET]
    assert [m.stage_bytes(i, "tight") for i in range(4)] == [2 * SET, 7 * SET, 6 * SET, 3 * SET]
    assert m.saved_bytes(1) == 9 * SET
    assert m.total_bytes("stock") == 48 * SET
    assert m.total_bytes("pooled") == 18 * SET
    assert m.peak_stage_bytes("stock") == 16 * SET


def test_pooled_column_follows_the_policy():
    m = _small(PoolConfig(slack=2), policy="automodel")
    assert _pairs(m, "pooled") == HAND_AUTOMODEL_S2
    assert m.saved_bytes(1) == (16 - 10) * SET


def test_slack_zero_tight_ring_equals_the_live_set():
    m = _small(PoolConfig(slack=0, grad_slack=0))
    assert _pairs(m, "tight") == HAND_LIVE
    assert m.total_bytes("pooled") == m.total_bytes("live_set")


def test_automodel_ring_matches_the_original_prs_unit_test_figures():
    # The seed PR's tests: 8 stages, 64 microbatches: stage 0 slack 2 -> 10; stage 7 slack 0 -> 2;
    # 4 microbatches -> 4.
    b = Boundary.opaque(1)
    assert (
        model_memory(
            PipelineShape(pp=8, n_microbatches=64), b, PoolConfig(slack=2), policy="automodel"
        )
        .row(0, "grad")
        .pooled_sets
        == 10
    )
    assert (
        model_memory(
            PipelineShape(pp=8, n_microbatches=64), b, PoolConfig(slack=0), policy="automodel"
        )
        .row(7, "forward")
        .pooled_sets
        == 2
    )
    assert (
        model_memory(
            PipelineShape(pp=4, n_microbatches=4), b, PoolConfig(slack=2), policy="automodel"
        )
        .row(0, "grad")
        .pooled_sets
        == 4
    )


def test_each_boundary_sizes_the_receives_on_both_sides():
    # Boundary b carries stage b -> b + 1: forward receives on b + 1, grad receives on b.
    bounds = [
        Boundary(activations=(TensorSpec(shape=(10,), dtype="uint8"),)),
        Boundary(
            activations=(TensorSpec(shape=(20,), dtype="uint8"),),
            grads=(TensorSpec(shape=(7,), dtype="float32"),),
        ),
        Boundary(
            activations=(
                TensorSpec(shape=(30,), dtype="uint8"),
                TensorSpec(shape=(3,), dtype="bfloat16"),
            )
        ),
    ]
    m = model_memory(PipelineShape(pp=4, n_microbatches=4), bounds, PoolConfig())
    assert [m.row(i, "forward").set_bytes for i in range(4)] == [0, 10, 20, 36]
    assert [m.row(i, "grad").set_bytes for i in range(4)] == [10, 28, 36, 0]


def test_gradients_default_to_the_activation_shapes_and_dtypes():
    b = Boundary(
        activations=(
            TensorSpec(shape=(2, 3), dtype="bf16"),
            TensorSpec(shape=(5,), dtype="float32"),
        )
    )
    assert b.forward_bytes == b.grad_bytes == 2 * 3 * 2 + 5 * 4


def test_dtype_sizes_and_aliases():
    assert TensorSpec(shape=(2, 2048, 7168), dtype="bfloat16").nbytes == 56 * 2**20
    assert TensorSpec(shape=(4,), dtype="torch.float32").nbytes == 16
    assert TensorSpec(shape=(4,), dtype="fp16").dtype == "float16"
    assert TensorSpec(shape=(4,), dtype="float8_e4m3fn").nbytes == 4


def test_units_are_binary_and_decimal_as_named():
    assert to_unit(2**30, "gib") == 1.0
    assert to_unit(10**9, "gb") == 1.0
    assert to_unit(3 * 2**20, "mib") == 3.0


def test_expected_bytes_covers_every_stage_and_direction_for_the_harness_boundary():
    cfg = PoolConfig(slack=0, grad_slack=0)
    exp = expected_bytes(
        pp=4,
        n_microbatches=8,
        boundaries=harness_boundary(rows=2, seq_len=16, hidden=32),
        config=cfg,
    )
    assert set(exp) == {(i, d) for i in range(4) for d in ("forward", "grad")}
    assert exp[(0, "forward")].stock_bytes == 0 and exp[(3, "grad")].pooled_bytes == 0
    assert exp[(1, "forward")].stock_bytes == 8 * SET
    assert exp[(1, "forward")].pooled_bytes == 3 * SET
    assert exp[(1, "grad")].pooled_sets == 1


def test_tidy_frame_has_one_row_per_stage_direction_variant_and_explicit_units():
    m = _small(PoolConfig())
    frame = m.to_frame()
    assert (
        len(frame) == 4 * 2 * 7
    )  # stock, stock_lazy, lazy_released, automodel, tight, live_set, pooled
    assert {"bytes", "gib", "gb", "mib", "sets", "set_bytes"} <= set(frame.columns)
    row = frame[
        (frame.stage == 1) & (frame.direction == "forward") & (frame.variant == "stock")
    ].iloc[0]
    assert row.bytes == 8 * SET and row.gib == 8 * SET / 2**30 and row.gb == 8 * SET / 1e9
    wide = m.per_stage_frame("gb")
    assert wide.loc[1, "stock_gb"] == 16 * SET / 1e9
    assert wide.loc[1, "saved_gb"] == pytest.approx(9 * SET / 1e9)


def test_schedule_walk_and_closed_form_give_the_same_live_sets():
    mismatches = []
    for schedule in ("1f1b", "gpipe"):
        for n in (2, 3, 4, 5, 8):
            for m in sorted({n, n + 1, 2 * n + 1, 3 * n}):
                shape = PipelineShape(pp=n, n_microbatches=m, schedule=schedule)
                walked, formula = live_sets_for(shape, "schedule"), live_sets_for(shape, "formula")
                if walked != formula:
                    mismatches.append((schedule, n, m, walked, formula))
    assert mismatches == []


def test_no_pooled_ring_is_smaller_than_the_walked_live_set():
    for n, m in ((2, 2), (4, 8), (5, 7), (8, 64)):
        for cfg, policy in (
            (PoolConfig(slack=0, grad_slack=0), "tight"),
            (PoolConfig(slack=0), "automodel"),
            (PoolConfig(), "tight"),
        ):
            model = model_memory(
                PipelineShape(pp=n, n_microbatches=m), Boundary.opaque(1), cfg, policy=policy
            )
            assert all(r.pooled_sets >= r.live_sets for r in model.rows), (n, m, cfg, policy)


def test_policy_sharing_and_config_are_checked_with_found_required_fix():
    shape = PipelineShape(pp=4, n_microbatches=8)
    for kw, what in (({"policy": "measure"}, "policy"), ({"sharing": "node"}, "sharing")):
        with pytest.raises(MemoryModelError, match=rf"{what}: found .*required .*Fix:") as err:
            model_memory(shape, Boundary.opaque(1), PoolConfig(), **kw)
        assert err.value.what == what
    with pytest.raises(MemoryModelError, match=r"config: found dict; required a pooltk.PoolConfig"):
        model_memory(shape, Boundary.opaque(1), {"slack": 2})  # type: ignore[arg-type]
    m = model_memory(shape, Boundary.opaque(1), PoolConfig(slack=1), policy="automodel")
    assert (m.policy, m.sharing, m.describe()) == ("automodel", "rank", "automodel slack=1")
    assert m.to_dict()["config"] == {
        "slack": 1,
        "grad_slack": 1,
        "release": True,
        "policy": "automodel",
        "sharing": "rank",
    }


def test_gpipe_is_refused_unless_the_pool_is_asked_to_stand_down():
    shape = PipelineShape(pp=4, n_microbatches=8, schedule="GPipe")
    with pytest.raises(UnpoolableScheduleError, match=r"required '1f1b'.*Fix:.*unpoolable='stock'"):
        model_memory(shape, Boundary.opaque(1), PoolConfig())
    m = model_memory(shape, Boundary.opaque(1), PoolConfig(), unpoolable="stock")
    assert not m.pool_active
    assert _pairs(m, "pooled") == _pairs(m, "stock") == HAND_STOCK
    assert _pairs(m, "live_set") == [(0, 1), (8, 1), (8, 1), (8, 0)]


@pytest.mark.parametrize("name", ["csv", "zigzag", "PipelineScheduleMulti"])
def test_schedules_the_model_does_not_know_name_the_supported_ones(name):
    with pytest.raises(
        UnpoolableScheduleError, match=r"found .*required one of 1F1B, GPipe, Interleaved1F1B.*Fix:"
    ):
        PipelineShape(pp=4, n_microbatches=8, schedule=name)


@pytest.mark.parametrize(
    ("name", "vpp", "why"),
    [("1f1b", 2, "a single-stage schedule"), ("ZBVZeroBubble", 3, "a V schedule")],
)
def test_stages_per_rank_a_schedule_cannot_run_is_named(name, vpp, why):
    with pytest.raises(
        MemoryModelError, match=rf"stages_per_rank: found {vpp} under .*; required .*{why}.*Fix:"
    ):
        PipelineShape(pp=4, n_microbatches=8, schedule=name, stages_per_rank=vpp)


def test_fewer_microbatches_than_stages_under_1f1b_is_a_clear_error():
    with pytest.raises(
        MemoryModelError,
        match=r"found M=4 microbatches with pp=8.*required M >= pp.*Fix: use at least 8",
    ):
        PipelineShape(pp=8, n_microbatches=4)
    assert (
        PipelineShape(pp=8, n_microbatches=4, schedule="gpipe").n_microbatches == 4
    )  # GPipe allows it


@pytest.mark.parametrize("shape", [(2, 0, 7), (2, -1), (), (2.5, 3), (True, 2)])
def test_zero_negative_or_non_integer_sizes_are_rejected(shape):
    with pytest.raises(
        MemoryModelError, match=r"shape: found .*required a non-empty tuple of integers >= 1.*Fix:"
    ):
        TensorSpec(shape=shape)


@pytest.mark.parametrize("field,value", [("pp", 0), ("n_microbatches", -3), ("pp", 2.0)])
def test_zero_or_negative_pipeline_sizes_are_rejected(field, value):
    kw = {"pp": 2, "n_microbatches": 4, field: value}
    with pytest.raises(MemoryModelError, match=rf"{field}: found .*required an integer >= 1"):
        PipelineShape(**kw)


def test_unknown_dtype_names_the_known_ones():
    with pytest.raises(
        MemoryModelError, match=r"dtype: found 'bfloat17'; required one of .*bfloat16.*Fix:"
    ):
        TensorSpec(shape=(1,), dtype="bfloat17")


def test_batch_sizes_give_microbatches_or_say_why_not():
    assert microbatches_from_batch(global_batch=4096, micro_batch=2, dp=32) == 64
    assert microbatches_from_batch(global_batch=4096, micro_batch=2, dp=32, local_batch=128) == 64
    assert (
        microbatches_from_batch(global_batch=8192, micro_batch=2, dp=32, local_batch=128) == 64
    )  # 2 GA steps
    with pytest.raises(
        MemoryModelError,
        match=r"found 4000 / \(32 \* 3\) = 41.6667; required a whole number"
        r".*multiple of dp \* micro_batch = 96",
    ):
        microbatches_from_batch(global_batch=4000, micro_batch=3, dp=32)
    with pytest.raises(MemoryModelError, match=r"local_batch / micro_batch: found 100 / 3"):
        microbatches_from_batch(global_batch=3200, micro_batch=3, dp=32, local_batch=100)
    with pytest.raises(MemoryModelError, match=r"global_batch / \(local_batch \* dp\)"):
        microbatches_from_batch(global_batch=4000, micro_batch=2, dp=32, local_batch=128)
    shape = PipelineShape.from_batch(pp=8, global_batch=4096, micro_batch=2, dp=32)
    assert (shape.n_microbatches, shape.global_batch, shape.dp) == (64, 4096, 32)


def test_a_boundary_list_of_the_wrong_length_is_rejected():
    with pytest.raises(MemoryModelError, match=r"boundaries: found 2 item\(s\).*stages - 1 = 3"):
        model_memory(PipelineShape(pp=4, n_microbatches=4), [Boundary.opaque(1)] * 2)
