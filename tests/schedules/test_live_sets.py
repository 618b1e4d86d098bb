"""Live receive buffers derived from torch's own schedule order reproduce the measured figures.

The reference figures come from instrumented gloo runs (pp4, M=8) recorded in
shared/reference/torch-layouts.md, and from the upstream slot-colouring proposal
(shared/reference/peers.md); they are restated here as literals so the tests run without
../shared.
"""

from __future__ import annotations

import pytest

from pooltk.analysis.lifetimes import (
    DIRECTIONS,
    BufferLifetime,
    lifetime_frame,
    lifetimes,
    live_sets,
    live_table,
    min_safe_ring,
    overwrites,
    peak_overlap,
    shared_slots,
)
from pooltk.pool.ring import live_1f1b

GRID_1F1B = [(n, m) for n in (2, 3, 4, 5, 8) for m in sorted({n, n + 1, 2 * n, 3 * n + 1})]


def _row(peaks: dict, n_stages: int, direction: str) -> list[int]:
    return [peaks[(s, direction)] for s in range(n_stages)]


@pytest.mark.parametrize(("n", "m"), GRID_1F1B)
def test_1f1b_live_sets_are_min_m_n_minus_i_forward_and_one_grad(n: int, m: int) -> None:
    peaks = live_sets("1F1B", pp=n, n_microbatches=m)
    assert _row(peaks, n, "forward") == [0] + [min(m, n - i) for i in range(1, n)]
    assert _row(peaks, n, "grad") == [1] * (n - 1) + [0]
    # the schedule analysis and the ring's closed form agree stage by stage
    for i in range(n):
        closed = (live_1f1b(n, i, m, "forward"), live_1f1b(n, i, m, "grad"))
        assert (peaks[(i, "forward")], peaks[(i, "grad")]) == closed


@pytest.mark.parametrize(("n", "m"), [(2, 2), (3, 5), (4, 8), (5, 16)])
def test_gpipe_forward_live_set_is_m_and_grad_is_one(n: int, m: int) -> None:
    peaks = live_sets("gpipe", pp=n, n_microbatches=m)
    assert _row(peaks, n, "forward") == [0] + [m] * (n - 1)
    assert _row(peaks, n, "grad") == [1] * (n - 1) + [0]


def test_1f1b_forward_receive_for_k_plus_w_is_posted_after_backward_k() -> None:
    n, m = 4, 8
    spans = lifetimes("1F1B", pp=n, n_microbatches=m)
    fwd = {(b.stage, b.microbatch): b for b in spans if b.direction == "forward"}
    grad = {(b.stage, b.microbatch): b for b in spans if b.direction == "grad"}
    for i in range(1, n):
        w = min(m, n - i)
        for k in range(m - w):
            assert fwd[(i, k + w)].post > fwd[(i, k)].release, (i, k)
            assert fwd[(i, k + w - 1)].post < fwd[(i, k)].release, (i, k)  # so W are live at once
    for i in range(n - 1):
        for k in range(m - 1):
            assert grad[(i, k + 1)].post > grad[(i, k)].release
            assert grad[(i, k)].consume == grad[(i, k)].release  # B reads and drops it


def test_every_lifetime_is_posted_before_it_is_consumed_and_released_after() -> None:
    cases = (
        ("1F1B", 1),
        ("GPipe", 1),
        ("Interleaved1F1B", 2),
        ("InterleavedZeroBubble", 2),
        ("DualPipeV", 2),
    )
    for name, vpp in cases:
        spans = lifetimes(name, pp=4, n_microbatches=8, stages_per_rank=vpp)
        assert spans, name
        for b in spans:
            assert b.post < b.consume <= b.release, (name, b)


def test_interleaved1f1b_pp4_vpp2_m8_peaks_match_instrumented_runs() -> None:
    peaks = live_sets("Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=2)
    assert _row(peaks, 8, "forward")[1:] == [8, 8, 6, 4, 4, 4, 2]
    assert _row(peaks, 8, "grad")[:7] == [1, 1, 1, 4, 1, 1, 1]


def test_interleaved1f1b_defer_pp_recv_peaks_match_instrumented_runs() -> None:
    peaks = live_sets(
        "interleaved1f1b", pp=4, n_microbatches=8, stages_per_rank=2, defer_pp_recv=True
    )
    assert _row(peaks, 8, "forward")[1:] == [8, 7, 5, 4, 4, 3, 1]
    assert _row(peaks, 8, "grad")[:7] == [1] * 7


def test_looped_bfs_keeps_all_m_activations_live() -> None:
    peaks = live_sets("LoopedBFS", pp=4, n_microbatches=8, stages_per_rank=2)
    assert _row(peaks, 8, "forward")[1:] == [8] * 7


@pytest.mark.parametrize(
    ("name", "fwd_max", "grad_max"),
    [("InterleavedZeroBubble", 8, 4), ("ZBVZeroBubble", 7, 4), ("DualPipeV", 7, 3)],
)
def test_zero_bubble_and_v_schedule_peaks_match_instrumented_maxima(
    name: str, fwd_max: int, grad_max: int
) -> None:
    peaks = live_sets(name, pp=4, n_microbatches=8, stages_per_rank=2)
    assert max(_row(peaks, 8, "forward")) == fwd_max
    assert max(_row(peaks, 8, "grad")) == grad_max


def test_v_schedule_turn_stage_is_a_local_handoff_with_no_receives() -> None:
    table = live_table("ZBVZeroBubble", pp=4, n_microbatches=8, stages_per_rank=2)
    turn = table[(table.stage == 4) & (table.direction == "forward")].iloc[0]
    assert bool(turn.handoff) and turn.live_peak == 0 and turn.stock_buffers == 8
    back = table[(table.stage == 3) & (table.direction == "grad")].iloc[0]
    assert bool(back.handoff) and back.live_peak == 0
    assert not table[(table.stage == 5)].handoff.any()


def test_shared_slots_reproduce_upstream_figures() -> None:
    inter = shared_slots(lifetimes("Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=4))
    assert (inter.per_stage_direction, inter.per_rank_direction, inter.per_rank) == (112, 69, 67)
    zbv = shared_slots(lifetimes("ZBVZeroBubble", pp=4, n_microbatches=8, stages_per_rank=2))
    assert (zbv.per_stage_direction, zbv.per_rank_direction, zbv.per_rank) == (43, 43, 33)


def test_overwrites_finds_gpipe_overwrite_for_ring_m_minus_1() -> None:
    m = 8
    found = overwrites(lifetimes("GPipe", pp=4, n_microbatches=m), m - 1)
    assert {(o.stage, o.direction) for o in found} == {
        (1, "forward"),
        (2, "forward"),
        (3, "forward"),
    }
    assert all((o.microbatch, o.overwritten_by) == (0, m - 1) for o in found)


def test_overwrites_finds_none_for_1f1b_with_ring_w_and_some_with_w_minus_1() -> None:
    n, m = 4, 8
    spans = lifetimes("1F1B", pp=n, n_microbatches=m)
    ring_w = {
        (i, d): (min(m, n - i) if d == "forward" else 1) for i in range(n) for d in DIRECTIONS
    }
    assert overwrites(spans, ring_w) == []
    short = {key: max(1, k - 1) if key[1] == "forward" else 1 for key, k in ring_w.items()}
    hit = {o.stage for o in overwrites(spans, short)}
    assert hit == {1, 2}  # stage 3 has W = 1 and cannot shrink; measured: wrong on s1, s2


def test_ring_min_equals_live_peak_for_every_schedule_at_pp4() -> None:
    for name, vpp in (
        ("1F1B", 1),
        ("GPipe", 1),
        ("Interleaved1F1B", 2),
        ("LoopedBFS", 2),
        ("InterleavedZeroBubble", 2),
        ("ZBVZeroBubble", 2),
        ("DualPipeV", 2),
    ):
        for defer in (False,) if vpp == 1 else (False, True):
            table = live_table(
                name, pp=4, n_microbatches=8, stages_per_rank=vpp, defer_pp_recv=defer
            )
            assert (table.ring_min == table.live_peak).all(), (name, defer)


def test_ring_min_is_larger_than_peak_when_releases_come_out_of_order() -> None:
    # two overlapping buffers then one more: peak 2, but c mod 2 puts 0 and 2 together while 0 is
    # still live
    spans = [
        BufferLifetime(
            stage=1, rank=1, direction="forward", microbatch=0, post=0, consume=1, release=9
        ),
        BufferLifetime(
            stage=1, rank=1, direction="forward", microbatch=1, post=2, consume=3, release=4
        ),
        BufferLifetime(
            stage=1, rank=1, direction="forward", microbatch=2, post=5, consume=6, release=7
        ),
    ]
    assert peak_overlap((b.post, b.release) for b in spans) == 2
    assert min_safe_ring(spans, 1, "forward", 3) == 3
    assert [(o.microbatch, o.overwritten_by) for o in overwrites(spans, 2)] == [(0, 2)]


def test_peak_overlap_counts_closed_intervals() -> None:
    assert peak_overlap([]) == 0
    assert peak_overlap([(0, 1), (2, 3)]) == 1
    assert peak_overlap([(0, 2), (2, 3)]) == 2  # touching at 2: both live there
    assert peak_overlap([(0, 10), (1, 2), (3, 4), (5, 11)]) == 2
    with pytest.raises(ValueError, match="end < start"):
        peak_overlap([(3, 1)])


def test_forward_only_step_keeps_one_activation_live_and_no_grads() -> None:
    peaks = live_sets("1F1B", pp=4, n_microbatches=8, forward_only=True)
    assert _row(peaks, 4, "forward") == [0, 1, 1, 1]
    assert _row(peaks, 4, "grad") == [0, 0, 0, 0]
    table = live_table("GPipe", pp=4, n_microbatches=8, forward_only=True)
    assert (table[table.direction == "grad"].stock_buffers == 0).all()


def test_live_table_is_tidy_with_stock_m_per_receiving_stage() -> None:
    table = live_table("1F1B", pp=4, n_microbatches=8)
    assert {
        "schedule",
        "pp",
        "vpp",
        "n_microbatches",
        "stage",
        "rank",
        "direction",
        "stock_buffers",
        "live_peak",
    } <= set(table.columns)
    assert len(table) == 8
    stock = {(r.stage, r.direction): r.stock_buffers for r in table.itertuples()}
    assert stock[(0, "forward")] == 0 and stock[(3, "grad")] == 0 and stock[(1, "forward")] == 8
    from pooltk.memory.sweeps import tight_rings

    tight = tight_rings(table, slack=2, grad_slack=1)
    got = {(r.stage, r.direction): r.tight for r in tight.itertuples()}
    assert (
        got[(1, "forward")] == 5
        and got[(3, "forward")] == 3
        and got[(0, "grad")] == 2
        and got[(0, "forward")] == 0
    )


def test_lifetime_frame_has_one_row_per_buffer() -> None:
    spans = lifetimes("GPipe", pp=3, n_microbatches=4)
    frame = lifetime_frame(spans)
    assert len(frame) == len(spans) == 2 * 4 + 2 * 4  # stages 1,2 forward; stages 0,1 grad
    assert list(frame.columns) == [
        "stage",
        "rank",
        "direction",
        "microbatch",
        "post",
        "consume",
        "release",
    ]


def test_overwrites_unpack_as_stage_direction_microbatch_overwritten_by() -> None:
    found = overwrites(lifetimes("GPipe", pp=2, n_microbatches=3), 2)
    assert [tuple(o) for o in found] == [(1, "forward", 0, 2)]


@pytest.mark.parametrize(
    "direction, m, found",
    [
        ("forward", 2, "found 2; required an integer >= 4"),
        ("forward", -1, "found -1"),
        ("forward", 1.5, "found 1.5 (float)"),
        ("x", 4, "found 'x'"),
    ],
)
def test_min_safe_ring_refuses_a_direction_or_microbatch_count_the_spans_do_not_fit(
    direction, m, found
) -> None:
    """M 2 for spans of 4 microbatches gave 2 (K = M is safe only for the spans' own M), -1 gave -1,
    1.5 was range()'s TypeError and direction 'x' gave 0 ('no receives')."""
    import re

    from pooltk._validate import InputError

    spans = lifetimes("1F1B", pp=2, n_microbatches=4)
    where = "^min_safe_ring (n_microbatches|direction): "
    with pytest.raises(InputError, match=where + re.escape(found)):
        min_safe_ring(spans, 1, direction, m)
