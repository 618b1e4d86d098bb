"""Beyond 1F1B: every schedule torch ships, pooled with schedule='auto' on real gloo ranks.

One launch runs all schedules at pp2, M=4 (stock / measure / slack-0 ring); the guard
checks launch a ring one short for two multi-stage schedules. The full grid (pp 2 and 4,
M = pp, 2pp, 4pp, a guard check per schedule) is `pooltk schedules --validate`; its
output is recorded in docs/schedules.md.
"""

import pytest

from pooltk.parity.schedule_check import check_schedules, guard_catch

pytestmark = [pytest.mark.dist, pytest.mark.timeout(900)]


def test_every_schedule_pooled_auto_is_bitwise_with_per_stage_and_per_rank_rings_peaks_as_analysed(
    no_leftover_ranks,
):
    result = check_schedules(pps=(2,), factors=(1,), guard_checks=False)
    df = result.to_frame()
    assert set(df.schedule) >= {
        "1F1B",
        "GPipe",
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV",
    }
    assert df.parity.all(), df[~df.parity]
    bad = df[df.measured_peak != df.analysed_peak]
    assert bad.empty, bad
    # the slack-0 ring is the analysed minimum wherever a direction is pooled, and never above stock
    pooled = df[df.analysed_min > 0]
    assert (pooled.pooltk == pooled.analysed_min).all()
    assert (df.pooltk <= df.stock).all()
    # and it saves memory on the schedules whose live set is below M
    summary = result.summary().set_index("schedule")
    assert (
        summary.loc["Interleaved1F1B", "pooltk_buffers"]
        < summary.loc["Interleaved1F1B", "stock_buffers"]
    )
    # rank-shared rings: each rank's distinct receive storages are the analysed rank rings (its live
    # set at slack 0), the shared ring's guard saw exactly the rank's live set owned, and the run is
    # bitwise equal
    ranks = result.rank_frame()
    assert set(ranks.schedule) >= {
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV",
    }
    assert ranks.parity.all(), ranks[~ranks.parity]
    assert (ranks.rank_shared == ranks.analysed).all(), ranks[ranks.rank_shared != ranks.analysed]
    assert (ranks.rank_shared == ranks.rank_live).all()
    assert (ranks.measured_peak == ranks.rank_live).all(), ranks[
        ranks.measured_peak != ranks.rank_live
    ]
    assert (ranks.rank_shared <= ranks.per_stage).all()
    totals = ranks.groupby("schedule")[["rank_shared", "per_stage"]].sum()
    assert totals.loc["Interleaved1F1B", "rank_shared"] < totals.loc["Interleaved1F1B", "per_stage"]
    # a V schedule's same-rank handoff allocates no receive buffers (stock keeps what each handoff
    # gave it)
    from pooltk.analysis.lifetimes import live_table

    for name in ("ZBVZeroBubble", "DualPipeV"):
        mine = df[df.schedule == name].merge(
            live_table(name, pp=2, n_microbatches=4, stages_per_rank=2)[
                ["stage", "direction", "handoff"]
            ],
            on=["stage", "direction"],
        )
        handoffs = mine[mine.handoff]
        assert len(handoffs) == 2, (
            mine
        )  # stage 1's gradient and stage 2's activation arrive on the same rank
        assert (handoffs.pooltk == 0).all() and (handoffs.stock > 0).all(), handoffs


@pytest.mark.parametrize("schedule", ["Interleaved1F1B", "ZBVZeroBubble"])
def test_a_ring_one_short_of_the_analysed_minimum_is_caught_by_the_guard(
    schedule, no_leftover_ranks
):
    assert guard_catch(schedule).startswith("caught")
