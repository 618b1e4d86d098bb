"""Stock vs pooled 1F1B on real gloo stages: bitwise parity, exact bytes, and the negative controls.

Each test is one launch (startup of 4 ranks dominates: 5-8 s here), bounded by timeout_s.
"""

import pytest

from pooltk import PoolOverrunError
from pooltk.analysis.stage_sets import stock_count
from pooltk.parity.experiments import Harness
from pooltk.parity import ParitySpec, default_variants, run_parity
from pooltk.pool.ring import live_1f1b

pytestmark = [pytest.mark.dist, pytest.mark.timeout(400)]

CONFIGS = [Harness(slack=2), Harness(slack=0, grad_slack=0), Harness(policy="automodel")]


def _sets(n: int, s: int, m: int, h: Harness | None) -> tuple[int, int]:
    """(forward, grad) sets stage ``s`` of a 1F1B pipeline keeps: the harness's rings, or stock
    (None)."""
    if h is None:
        return stock_count(n, s, "forward", m), stock_count(n, s, "grad", m)
    return tuple(  # type: ignore[return-value]
        h.ring_size(live=live_1f1b(n, s, m, d), receives=m, direction=d, stage=s, num_stages=n)
        for d in ("forward", "grad")
    )


def test_pooled_1f1b_is_bitwise_equal_to_stock_for_each_policy_and_both_frontends(
    no_leftover_ranks,
):
    spec = ParitySpec(
        pp=4,
        microbatches=16,
        steps=3,
        timeout_s=300,
        variants=default_variants(CONFIGS, frontends=("manual", "tracing")),
    )
    report = run_parity(spec)
    assert report.bitwise_equal
    pooled = [v for v in report.variants if v.pooled]
    assert len(pooled) == 6
    for v in pooled:
        assert v.params_bitwise_equal and v.losses_bitwise_equal, v.name
        assert v.params_max_abs_diff == 0.0 and v.losses_max_abs_diff == 0.0
        assert len(v.losses) == 3 and all(len(step) == 16 for step in v.losses)


def test_pooled_bytes_per_stage_are_exactly_ring_sets_times_set_bytes_and_only_those_are_allocated(
    no_leftover_ranks,
):
    spec = ParitySpec(
        pp=4,
        microbatches=16,
        steps=1,
        timeout_s=300,
        variants=default_variants(CONFIGS, frontends=("manual",)),
    )
    report = run_parity(spec)
    set_bytes = report.boundary_bytes
    for v in report.variants:
        cfg = Harness(**v.config) if v.config else None
        for s in range(4):
            forward, grad = _sets(4, s, 16, cfg)
            assert v.recv[s]["forward"]["bytes"] == forward * set_bytes, (v.name, s)
            assert v.recv[s]["grad"]["bytes"] == grad * set_bytes, (v.name, s)
            assert v.recv[s]["forward"]["sets"] == forward and v.recv[s]["grad"]["sets"] == grad
            # No transient: setup made exactly the K sets (stock makes all M).
            assert v.setup_alloc_bytes[s] == (forward + grad) * set_bytes, (v.name, s)


def test_negative_controls_diverge_silently_without_the_guard(no_leftover_ranks):
    short = Harness(slack=0, guard=False, forward_shortfall=1)
    gpipe = Harness(slack=0, guard=False)
    variants = default_variants([short], force=True) + default_variants(
        [gpipe], schedule="GPipe", force=True
    )
    report = run_parity(ParitySpec(pp=4, microbatches=8, steps=2, timeout_s=300, variants=variants))
    assert not report.bitwise_equal
    for v in report.variants:
        if v.pooled:
            assert v.bitwise_equal is False, v.name
            assert v.params_max_abs_diff > 1e-6, v.name


def test_ring_one_short_is_caught_by_the_guard_and_its_fields_reach_the_launcher(no_leftover_ranks):
    cfg = Harness(slack=0, forward_shortfall=1)
    spec = ParitySpec(
        pp=4, microbatches=8, steps=1, timeout_s=300, variants=default_variants([cfg], force=True)
    )
    with pytest.raises(PoolOverrunError) as caught:
        run_parity(spec)
    exc = caught.value
    # Structured, not parsed: every field arrives from the rank that raised it.
    assert exc.direction == "forward"
    assert exc.rank == exc.stage  # one stage per rank
    assert (
        1 <= exc.stage <= 2
    )  # stage 0 receives nothing; the last stage's live set is 1 (no ring is one short)
    assert exc.ring == 4 - exc.stage - 1  # W - 1 with W = N - i
    assert exc.slot == exc.incoming % exc.ring == exc.owner % exc.ring
    assert exc.incoming - exc.owner == exc.ring
    assert str(exc).startswith(f"[rank {exc.rank}] pooltk: stage {exc.stage} forward ring overrun")


def test_gpipe_with_the_pool_forced_is_caught_by_the_guard(no_leftover_ranks):
    spec = ParitySpec(
        pp=4,
        microbatches=8,
        steps=1,
        timeout_s=300,
        variants=default_variants([Harness(slack=0)], schedule="GPipe", force=True),
    )
    with pytest.raises(PoolOverrunError):
        run_parity(spec)


def test_gpipe_without_force_is_not_pooled_and_stays_stock(no_leftover_ranks):
    spec = ParitySpec(
        pp=2,
        microbatches=4,
        steps=1,
        timeout_s=200,
        variants=default_variants([Harness()], schedule="GPipe"),
    )
    report = run_parity(spec)
    pooled = report.variants[1]
    assert pooled.bitwise_equal
    assert all(r == {} for r in pooled.rings.values())
    assert "gpipe" in (pooled.gate[1] or "")  # the stage says why it stayed stock
    assert pooled.recv[1]["forward"]["sets"] == 4


def test_eval_train_switch_and_repeated_steps_keep_the_pool_and_parity(no_leftover_ranks):
    variants = default_variants(
        [Harness(slack=1), Harness(policy="automodel")], eval_between_steps=True
    )
    report = run_parity(ParitySpec(pp=4, microbatches=8, steps=3, timeout_s=300, variants=variants))
    assert report.bitwise_equal
    for v in report.variants:
        if v.pooled:
            assert v.rings[1]["forward"] == _sets(4, 1, 8, Harness(**v.config))[0]
            assert v.recv[1]["forward"]["sets"] < 8


def test_per_stage_form_pools_only_the_stages_given_and_is_bitwise_equal(no_leftover_ranks):
    from pooltk.parity import Variant

    variants = (
        Variant(name="stock"),
        Variant(name="per-stage", pooled=True, config=Harness(slack=1), scope="stage"),
    )
    report = run_parity(ParitySpec(pp=4, microbatches=8, steps=2, timeout_s=300, variants=variants))
    v = report.variant("per-stage")
    assert v.bitwise_equal
    for s in range(4):
        forward, grad = _sets(4, s, 8, Harness(slack=1))
        assert v.recv[s]["forward"]["sets"] == forward and v.recv[s]["grad"]["sets"] == grad


def test_fresh_lands_every_receive_in_a_new_storage_and_a_model_keeping_nothing_is_equal_three_ways(
    no_leftover_ranks,
):
    from pooltk.parity.summary import exit_code, run_three_way, same

    spec = ParitySpec(
        pp=3,
        microbatches=6,
        steps=2,
        timeout_s=300,
        variants=default_variants(
            [Harness(slack=0, grad_slack=0)], frontends=("manual", "tracing")
        ),
    )
    three = run_three_way(spec)
    fresh = [v for v in three.report.variants if v.name.startswith("fresh/")]
    assert len(fresh) == 2 and three.followup is None
    for v in fresh:
        assert same(v), v.name  # the toy model keeps nothing: stock's reuse changes no number
        for s in (1, 2):  # receives activations: one new storage per post, 6 microbatches x 2 steps
            assert v.recv[s]["forward"]["posts"] == v.recv[s]["forward"]["post_storages"] == 12, (
                v.name,
                s,
            )
        for s in (0, 1):  # receives gradients
            assert v.recv[s]["grad"]["posts"] == v.recv[s]["grad"]["post_storages"] == 12, (
                v.name,
                s,
            )
    assert [j.verdict for j in three.judgements] == ["equal", "equal"]
    assert exit_code(three.judgements) == 0 and three.line == "verdict: 2 equal"


def test_negative_controls_are_silent_against_fresh_with_the_guard_off_and_loud_with_it_on(
    no_leftover_ranks,
):
    from pooltk.parity.controls import run_negative_controls

    out = run_negative_controls(pp=3, microbatches=6, steps=2)
    assert out.verdicts() == {
        ("ring one short", "guard off"): "silent",
        ("GPipe forced", "guard off"): "silent",
        ("ring one short", "guard on"): "loud",
        ("GPipe forced", "guard on"): "loud",
    }
    for j in out.judgements:  # the divergence is the pool's: stock and fresh agree
        assert j.stock_equal_fresh is True and j.equal_fresh is False
