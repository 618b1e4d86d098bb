"""The pool in the compositions real stacks use (issue #26): same bits as stock (or fresh), and the
live set held.

Every case of ``pooltk.parity.compositions.CASES`` runs once for the module on gloo ranks (fresh,
stock, pooled); each test reads its claim off the same rows. Storages are counted outside pooltk, at
the P2P layer ([Note: counting receive storages]); the bound is ``tensors x (live set + slack)`` per
direction.
"""

from __future__ import annotations

import pytest

from pooltk.parity.compositions import AUTO_SCHEDULES, CASES, FORWARD_ONLY, run_compositions

pytestmark = [pytest.mark.dist, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def rows():
    return run_compositions(CASES, timeout_s=1200)


def _by_case(rows):
    out = {}
    for r in rows:
        out.setdefault(r.case, []).append(r)
    return out


def test_every_case_ran_on_every_rank_with_rows_for_each_direction_it_receives(rows):
    by = _by_case(rows)
    assert set(by) == {c.name for c in CASES}
    for case in CASES:
        receiving = set(range(case.world))
        if (
            case.eval_only and case.stages_per_rank == 1
        ):  # rank 0 (stage 0, dp 1) receives nothing in eval
            assert case.dp == 1, case.name
            receiving -= {0}
        assert {r.rank for r in by[case.name]} == receiving, case.name
        expected = {"forward"} if case.eval_only else {"forward", "grad"}
        assert {r.direction for r in by[case.name]} == expected, case.name


def test_every_pooled_run_is_bitwise_equal_to_stock_or_to_fresh_with_the_reason(rows):
    bad = [
        (r.case, r.rank, r.verdict, r.detail)
        for r in rows
        if r.verdict not in ("equal", "explained")
    ]
    assert not bad


def test_every_stage_and_rank_holds_at_most_its_ring_at_once_and_within_each_step(rows):
    over = [
        (r.case, r.rank, r.stage, r.direction, r.pooled_peak, r.pooled_distinct, r.bound, r.detail)
        for r in rows
        if r.judged == "ring" and not r.within_bound
    ]
    assert not over


def test_address_reads_and_tensors_passed_on_cost_no_rehome_and_keep_the_saving(rows):
    cases = {c.name: c for c in CASES}
    ordinary = [r for r in rows if not cases[r.case].expect_rehomes]
    assert ordinary and all(r.rehomes == 0 for r in ordinary)
    for r in ordinary:
        if r.bound < r.stock_peak:  # where a ring can save, it did, counted at the P2P layer
            assert r.pooled_peak < r.stock_peak, r
    launcher = [r for r in rows if "launcher" in cases[r.case].features]
    assert launcher and all(
        "address_reads=" in r.evidence and not r.evidence.endswith("address_reads=0")
        for r in launcher
    )
    passon = [
        r
        for r in rows
        if "passon" in cases[r.case].features and r.direction == "forward" and r.stage != 0
    ]
    assert passon and all(
        r.tensors == 3 for r in passon
    )  # hidden state, int64 positions, bool mask


def test_a_tensor_passed_on_in_a_forward_only_step_is_held_by_its_send_and_costs_no_more_than_fresh(
    rows,
):
    held = [r for r in rows if r.case == "eval-passon-pp4"]
    assert held and all(r.judged == "fresh" and r.within_bound for r in held)
    assert sum(r.rehomes for r in held) > 0  # the in-flight sends were seen and paid for


def test_eval_and_inference_steps_hold_the_ring_without_a_rehome_for_1f1b_and_every_auto_schedule(
    rows,
):
    """Issue #36: a forward-only step keeps every graph to its end (fwd_cache, the last stage's
    outputs and losses); the pool drops them, so no slot is re-homed and the saving holds."""
    names = {c.name for c in FORWARD_ONLY}
    assert {c.schedule for c in FORWARD_ONLY} == {"1F1B", *(s for s, _ in AUTO_SCHEDULES)}
    assert {(c.eval_only, c.eval_mode) for c in FORWARD_ONLY} == {
        (True, "grad"),
        (True, "inference"),
        (False, "grad"),
    }
    mine = [r for r in rows if r.case in names]
    assert {r.case for r in mine} == names
    assert all(r.judged == "ring" and r.within_bound and r.rehomes == 0 for r in mine)
    for name in names:  # counted at the P2P layer: every case's forward receives are below stock's
        fwd = [
            r for r in mine if r.case == name and r.direction == "forward" and r.stage is not None
        ]
        assert sum(r.pooled_peak for r in fwd) < sum(r.stock_peak for r in fwd), name


def test_each_composition_ran_as_described(rows):
    evidence = {c.name: {r.evidence for r in rows if r.case == c.name} for c in CASES}

    def every(name: str, text: str) -> bool:
        return all(text in e for e in evidence[name])

    assert every("ddp-pp2-dp2", "submod=DistributedDataParallel")
    assert every("interleaved-ddp-pp2-dp2", "submod=DistributedDataParallel")
    assert all(
        "submod=FSDP" in e
        for n in ("fsdp2-pp2-dp2", "interleaved-fsdp2-pp2-dp2")
        for e in evidence[n]
    )
    assert every("checkpoint-pp4", "submod=CheckpointWrapper")
    assert every("compile-aot_eager-pp2", "submod=OptimizedModule")
    assert all(
        "graphs=0" not in e and "inductor_graphs=0+0" not in e
        for e in evidence["compile-inductor-pp2"]
    )
    assert every("autocast-bf16-pp2", "bfloat16")
    assert all("frozen=0" not in e and "frozen=" in e for e in evidence["frozen-lora-pp4"])


def test_a_case_that_fails_is_named_with_its_own_rank_error_not_a_peers_echo(no_leftover_ranks):
    from pooltk.parity.compositions import Composition

    with pytest.raises(RuntimeError) as failed:
        run_compositions((Composition(name="bad-wrap", pp=2, wrap="bogus"),), timeout_s=120)
    message = str(failed.value)
    assert message.startswith("compositions: case bad-wrap failed on rank "), message[:300]
    assert "ValueError: compositions: wrap found 'bogus'" in message
