"""The pooltk modules behind notebooks 00 and 02, checked without a kernel (fast).

The slot table, the overwrite count and the guard's replay come from two independent walks of
torch's own action order (the lifetimes' intervals, and the guard's rule of slot owners replayed
event by event); these tests hold them to each other and to the 1F1B facts, and check the lifetime
facts, what slack buys, the layout table and the parity panel's input handling.
"""

from __future__ import annotations

import pytest

from pooltk import PoolConfig, PoolOverrunError

mp = pytest.importorskip("pooltk.nb.mechanism")
pytest.importorskip("pandas")
pytest.importorskip("matplotlib").use("Agg")
rk = pytest.importorskip("pooltk.nb.ranks")
sc = pytest.importorskip("pooltk.nb.schedules")
sl = pytest.importorskip("pooltk.nb.slack")
lf = pytest.importorskip("pooltk.nb.lifetime_facts")
common = pytest.importorskip("pooltk.nb.common")


@pytest.mark.parametrize(("pp", "m"), [(2, 2), (3, 5), (4, 8), (5, 7)])
def test_1f1b_warmup_is_w_forwards_per_stage_and_gpipe_has_no_steady_phase(pp: int, m: int) -> None:
    ph = mp.phases(mp.replay("1F1B", pp=pp, n_microbatches=m))
    for stage in range(pp):
        first, last = ph[stage]["warmup"]
        assert last - first + 1 == mp.inflight_depth(pp, stage, m) == min(m, pp - stage), (
            stage,
            ph[stage],
        )
    gp = mp.phases(mp.replay("GPipe", pp=pp, n_microbatches=m))
    assert all(
        set(p) == {"warmup", "cooldown"} and p["warmup"] == (0, m - 1) for p in gp.values()
    ), gp


def test_replay_respects_cross_stage_dependencies() -> None:
    rp = mp.replay("1F1B", pp=4, n_microbatches=8)
    frame = rp.compute_frame().set_index(["kind", "stage", "microbatch"])
    for mb in range(8):
        for s in range(1, 4):
            assert frame.loc[("F", s, mb), "start"] >= frame.loc[("F", s - 1, mb), "end"]
            assert frame.loc[("B", s - 1, mb), "start"] >= frame.loc[("B", s, mb), "end"]


@pytest.mark.parametrize(
    ("pp", "m", "slack", "grad_slack"), [(4, 8, 0, 0), (4, 8, 2, 1), (5, 7, 1, 0), (3, 3, 4, 2)]
)
def test_the_ring_is_w_plus_slack_forward_and_one_plus_grad_slack_capped_at_m(
    pp, m, slack, grad_slack
) -> None:
    rings = mp.rings_for(pp, m, PoolConfig(slack=slack, grad_slack=grad_slack))
    for stage in range(pp):
        assert rings[(stage, "forward")] == (
            0 if stage == 0 else min(m, min(m, pp - stage) + slack)
        )
        assert rings[(stage, "grad")] == (0 if stage == pp - 1 else min(m, 1 + grad_slack))
    short = mp.one_short(rings)
    assert all(short[(s, "forward")] == max(1, rings[(s, "forward")] - 1) for s in range(1, pp))
    assert all(short[(s, "grad")] == rings[(s, "grad")] for s in range(pp))


def test_an_overwrite_is_counted_once_per_receive_into_a_held_slot() -> None:
    """GPipe pp4 M8 with the 1F1B ring [- 3 2 1]: on stage i every receive after the first K lands
    on a held buffer."""
    from pooltk.analysis.lifetimes import overwrites

    gp = mp.replay("GPipe", pp=4, n_microbatches=8)
    rings = mp.rings_for(4, 8, PoolConfig(slack=0, grad_slack=0))
    found = mp.overwritten_receives(gp, rings)
    per_stage = {s: sum(o.stage == s for o in found) for s in range(4)}
    assert per_stage == {0: 0, 1: 8 - 3, 2: 8 - 2, 3: 8 - 1}
    assert len({(o.stage, o.direction, o.overwritten_by) for o in found}) == len(found) == 18
    pairs = [o for o in overwrites(gp.spans, rings) if o.stage == 1]
    assert len(pairs) == 7 > per_stage[1]  # the analysis lists pairs; the notebooks count receives
    table = mp.slot_table(gp, rings)
    assert int((table.overwrites >= 0).sum()) == 18
    assert not mp.overwritten_receives(mp.replay("1F1B", pp=4, n_microbatches=8), rings)


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
@pytest.mark.parametrize(("pp", "m"), [(3, 6), (4, 8)])
@pytest.mark.parametrize(("slack", "short"), [(0, False), (0, True), (1, False), (2, False)])
def test_the_guard_replay_stops_exactly_when_a_receive_lands_on_a_held_slot(
    schedule, pp, m, slack, short
) -> None:
    rp = mp.replay(schedule, pp=pp, n_microbatches=m)
    rings = mp.rings_for(pp, m, PoolConfig(slack=slack, grad_slack=0))
    rings = mp.one_short(rings) if short else rings
    table = mp.slot_table(rp, rings)
    assert (table.slot == table.microbatch % table.ring).all()
    guard = mp.guard_replay(rp, rings)
    found = mp.overwritten_receives(rp, rings)
    assert guard.ok == (not found), (guard.line(), found)
    if schedule == "1F1B":
        assert guard.ok == (not short)
    if guard.stop is not None:  # the first premature post the guard meets is one the lifetimes list
        e = guard.stop
        assert (e.stage, e.direction, e.owner, e.incoming) in {
            (o.stage, o.direction, o.microbatch, o.overwritten_by) for o in found
        }
        assert e.slot == e.incoming % e.ring == e.owner % e.ring


def test_the_layout_table_marks_exactly_the_family_probe_finds() -> None:
    import pooltk
    from pooltk.nb.layouts import FAMILIES

    frame = mp.layout_families()
    assert list(frame.columns) == ["receive buffers", *(f.name for f in FAMILIES)]
    marked = frame.iloc[-1]
    found = pooltk.probe().layout
    assert [f.name for f in FAMILIES if marked[f.name] == "detected here"] == (
        [found] if found else []
    )


def test_the_explorer_records_rejected_shapes_instead_of_raising() -> None:
    state = mp.MechanismState()
    assert mp.explore(state, schedule="1F1B", pp=4, microbatches=2, slack=0, grad_slack=0) is None
    assert state.last_error and "microbatches" in state.last_error.lower()
    assert (
        mp.explore(state, schedule="GPipe", pp=4, microbatches=8, slack=0, grad_slack=0) is not None
    )
    assert state.last_error is None and len(state.overwrites) == 18 and not state.guard.ok
    assert "18 receive(s) into a slot still held" in state.line()


# ----------------------------------------------------------- what slack buys, the lifetime facts


def test_slack_needed_is_zero_for_1f1b_and_m_minus_one_for_gpipe_under_the_1f1b_formula() -> None:
    from pooltk.nb.slack import slack_needs

    frame = slack_needs(["1F1B", "GPipe", "Interleaved1F1B"], pp=4, n_microbatches=8).set_index(
        ["schedule", "rule", "direction"]
    )
    assert (frame.loc["1F1B"].slack_needed == 0).all()
    gpipe = frame.loc[("GPipe", "1F1B formula", "forward")]
    assert (
        gpipe.slack_needed == 8 - 1 and gpipe.worst_stage == 3
    )  # the last stage: W = 1, all 8 held
    assert not frame.loc[("GPipe", "PR #3780 ring", "both")].covered_by_pr_default
    assert frame.loc[("Interleaved1F1B", "first read to release", "forward")].slack_needed >= 1


def test_an_input_overwritten_before_its_backward_changes_gradients_and_after_it_none() -> None:
    from pooltk.nb import lifetime_facts as lf

    rows = {(r.case, r.gradient): r for r in lf.reuse_point()}
    assert all(rows[("after", g)].max_abs_diff == 0 for g in lf.GRADIENTS)
    assert rows[("before", "layer 1 weight")].max_abs_diff > 0
    assert (
        rows[("before", "input (sent upstream)")].max_abs_diff == 0
    )  # without AC the input grad needs W1 only
    assert (
        rows[("before_ac", "input (sent upstream)")].max_abs_diff > 0
    )  # AC recomputes the forward from it
    assert all(
        rows[("bumped", g)].error and "inplace" in rows[("bumped", g)].error for g in lf.GRADIENTS
    )


def test_torchs_stage_backward_resets_the_leafs_grad_so_a_reused_buffer_accumulates_nothing() -> (
    None
):
    from pooltk.nb import lifetime_facts as lf

    got = lf.leaf_reuse()
    assert got.diff_stage_backward == (0.0, 0.0) and got.grad_after_stage_backward == "None"
    assert got.diff_plain[0] == 0.0 and got.diff_plain[1] > 0


# --------------------------------------------------------------------------- notebook 02


pq = pytest.importorskip("pooltk.nb.parity")


def test_a_guarded_control_outcome_carries_the_overruns_own_fields(monkeypatch) -> None:
    import pooltk.parity.controls as controls

    exc = PoolOverrunError(
        stage=2, direction="forward", slot=1, ring=3, owner=4, incoming=7, rank=2
    )

    def raise_overrun(spec):
        raise exc

    monkeypatch.setattr(controls, "run_parity", raise_overrun)
    out = controls.run_negative_controls(pp=3, microbatches=6, steps=1)
    assert out.unguarded is None and "PoolOverrunError" in (out.unguarded_error or "")
    for outcome in out.guarded:
        assert outcome.caught and outcome.error_type == "PoolOverrunError"
        assert (
            outcome.rank,
            outcome.stage,
            outcome.direction,
            outcome.slot,
            outcome.ring,
            outcome.owner,
            outcome.incoming,
        ) == (2, 2, "forward", 1, 3, 4, 7)


def test_the_parity_panel_rejects_bad_inputs_before_launching() -> None:
    state = pq.ParityState()
    assert pq.run_check(state, pp=4, microbatches=2) is None
    assert "M >= pp" in (state.last_error or "") and state.last_report is None
    assert pq.run_check(state, pp=3, microbatches=6, slack=-1) is None
    assert "slack" in (state.last_error or "")
    with pytest.raises(ValueError, match="pp: found 2"):
        pq.run_negative_controls(pp=2)


# ------------------------------------------------------------------- notebook 00's lesson figures


@pytest.mark.parametrize(("schedule", "short"), [("1F1B", True), ("GPipe", False)])
def test_the_guard_stops_at_the_first_premature_post_in_time_and_counts_it_within_its_ring(
    schedule, short
) -> None:
    rp = mp.replay(schedule, pp=4, n_microbatches=8)
    rings = mp.rings_for(4, 8, PoolConfig(slack=0, grad_slack=0))
    rings = mp.one_short(rings) if short else rings
    guard = mp.guard_replay(rp, rings)
    by_key = {(b.stage, b.direction, b.microbatch): b for b in rp.spans}
    posts = [
        rp.time_of_post(by_key[(o.stage, o.direction, o.overwritten_by)])
        for o in mp.overwritten_receives(rp, rings)
    ]
    e = guard.stop
    assert e is not None and e.time == min(posts) and guard.makespan == rp.makespan
    ring_posts = sorted(
        rp.time_of_post(b) for b in rp.spans if (b.stage, b.direction) == (e.stage, e.direction)
    )
    assert ring_posts.index(e.time) + 1 == e.ring_post  # "stage 1's 3rd activation receive"
    assert f"stage {e.stage}'s {mp.ordinal(e.ring_post)} activation receive" in guard.line()


def test_the_guard_chart_draws_nothing_after_the_stop() -> None:
    import numpy as np
    from matplotlib.patches import Rectangle

    from pooltk.nb import timelines as tl

    rp = mp.replay("1F1B", pp=4, n_microbatches=8)
    short = mp.one_short(mp.rings_for(4, 8, PoolConfig(slack=0, grad_slack=0)))
    guard = mp.guard_replay(rp, short)
    fig = tl.slot_chart(rp, short, guard=guard)
    (ax,) = fig.axes
    stop = guard.stop.time
    xs = [x for line in ax.get_lines() for x in np.atleast_1d(line.get_xdata())]
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    assert max(xs) <= stop and all(p.get_x() + p.get_width() <= stop + 1e-9 for p in bars)
    assert ax.get_xlim()[1] < rp.makespan / 4 and "tick 3 of 33" in ax.get_title()
    full = tl.slot_chart(rp, short)  # without the guard: every overwrite, to the step's end
    assert full.axes[0].get_xlim()[1] == rp.makespan


@pytest.mark.parametrize(
    "ring, found",
    [(None, "no ring"), (0, "a ring of 0"), (-2, "a ring of -2"), (2.0, "a ring of 2.0")],
)
def test_the_slot_chart_refuses_rings_without_a_ring_for_a_receiving_stage_naming_the_fix(
    ring, found
) -> None:
    from pooltk.nb import timelines as tl

    rp = mp.replay("1F1B", pp=4, n_microbatches=8)
    rings = dict(mp.rings_for(4, 8, PoolConfig(slack=0, grad_slack=0)))
    if ring is None:
        del rings[(1, "forward")]
    else:
        rings[(1, "forward")] = ring
    with pytest.raises(ValueError, match=rf"found {found}.*stage 1 forward.*Fix: build them with"):
        tl.slot_chart(rp, rings)


@pytest.mark.parametrize(
    "schedule", ["1F1B", "GPipe", "Interleaved1F1B", "LoopedBFS", "ZBVZeroBubble"]
)
def test_the_lifetime_charts_peak_on_notebook_00s_clock_is_the_analysed_live_set(schedule) -> None:
    from pooltk.analysis.lifetimes import live_table
    from pooltk.analysis.programs import CATALOG
    from pooltk.nb.schedules import _peak_window

    vpp = CATALOG[schedule].stages_per_rank
    rp = mp.replay(schedule, pp=4, n_microbatches=8, stages_per_rank=vpp)
    table = live_table(schedule, pp=4, n_microbatches=8, stages_per_rank=vpp)
    for row in table.itertuples():
        spans = [b for b in rp.spans if (b.stage, b.direction) == (row.stage, row.direction)]
        peak, *_ = _peak_window([(rp.time_of_post(b), rp.time_of_release(b)) for b in spans])
        assert peak == row.live_peak, (schedule, row.stage, row.direction)


def test_under_1f1b_slack_costs_a_set_per_receiving_stage_and_buys_tolerance_not_safety() -> None:
    from pooltk.nb.slack import slack_sweep

    sweep = slack_sweep(pp=4, n_microbatches=8)
    assert (sweep.exact == 0).all()  # the live-set ring is safe at every slack, 0 included
    assert list(sweep.one_short[:2]) == [13, 0]  # one set short: fixed by slack 1
    assert list(sweep.sets_kept[:3]) == [9, 12, 15] and sweep.stock.iloc[0] == 48
    safe = sweep[sweep.gpipe_forced == 0]
    assert list(safe.slack) == [7] and safe.all_at_m.all()  # GPipe: only where K = M


def test_a_slack_of_zero_that_leaves_k_equal_to_m_says_so() -> None:
    from pooltk.nb.slack import slack_needs

    frame = slack_needs(["1F1B", "GPipe"], pp=4, n_microbatches=8).set_index(
        ["schedule", "rule", "direction"]
    )
    gpipe = frame.loc[("GPipe", "first read to release", "forward")]
    assert gpipe.slack_needed == 0 and gpipe.ring_at_m  # not "GPipe is tight": every slot is M
    assert not frame.loc["1F1B"].ring_at_m.any()


def test_torch_2_15_keeps_the_live_set_but_all_m_activations_on_the_last_stage() -> None:
    sets = mp.sets_by_version(4, 8)
    totals = sets[["stock", "stock_lazy", "ring", "lazy_released"]].sum().to_dict()
    assert totals == {"stock": 48, "stock_lazy": 16, "ring": 9, "lazy_released": 9}
    last = sets[(sets.stage == 3) & (sets.direction == "forward")].iloc[0]
    assert (last.stock_lazy, last.lazy_released) == (8, 1)


def test_a_table_keeps_its_row_labels_and_a_saved_figure_prints_no_path(
    monkeypatch, tmp_path
) -> None:
    import matplotlib.pyplot as plt
    import pandas as pd

    from pooltk.nb import common

    shown = []
    monkeypatch.setattr(common, "_display", shown.append)
    totals = pd.DataFrame({"schedule": ["1F1B", "GPipe"], "stock": [48, 48]}).groupby("schedule")
    common.show_frame(totals.sum(), "totals")
    assert list(shown[0].data.columns) == ["schedule", "stock"]  # notebook 04's totals
    monkeypatch.setenv("POOLTK_REPORT_DIR", str(tmp_path))
    fig, ax = plt.subplots()
    path = common.save_figure(fig, "00_x")
    plt.close(fig)
    assert path == tmp_path / "00_x.png" and path.is_file()
    assert path._ipython_display_() is None  # IPython shows nothing for it (no PosixPath)


def test_cpu_runs_never_share_an_axis_with_the_published_gb200_figures() -> None:
    import warnings
    from pathlib import Path

    from pooltk.logs import read_logs
    from pooltk.logs.metrics import summarize
    from pooltk.nb import logs as lv
    from pooltk.studies.kimi_k3 import load_published

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU logs' own per-GPU basis, said elsewhere
        summary = summarize(read_logs([Path(__file__).resolve().parents[2] / "data" / "cpu_runs"]))
    beside = lv.beside_published(load_published(), summary)
    frame = beside.frame
    published = set(frame[frame["same_basis"].astype(bool)]["label"])
    cpu = set(frame[~frame["same_basis"].astype(bool)]["label"])
    assert published and cpu, (published, cpu)  # the CPU runs are per process, not per GPU
    fig = lv.beside_figure(beside)
    units = {}
    for ax in fig.axes:
        labels = {t.get_text() for t in ax.get_yticklabels()} - {""}
        assert not (labels & published and labels & cpu), (ax.get_title(), labels)
        if labels:
            units["cpu" if labels <= cpu else "published"] = ax.get_xlabel()
    assert units["cpu"] != units["published"] and "per process" in units["cpu"], units


def test_the_schedule_helpers_take_any_spelling_torch_takes():
    assert sc.lifetime_chart("1f1b", pp=2, n_microbatches=4) is not None
    assert set(sl.slack_needs(["interleaved1f1b"], pp=2, n_microbatches=4)["schedule"]) == {
        "Interleaved1F1B"
    }
    assert set(sl.slack_needs("gpipe", pp=2, n_microbatches=4)["schedule"]) == {"GPipe"}


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: sc.lifetime_chart("nope", pp=2, n_microbatches=4), "schedule: found 'nope'"),
        (
            lambda: sc.lifetime_chart("1F1B", pp=2, n_microbatches=4, direction="sideways"),
            "direction: found 'sideways'",
        ),
        (  # 0 was read as unset: the catalog's 2 stages per rank were drawn
            lambda: sc.lifetime_chart("Interleaved1F1B", pp=2, n_microbatches=4, stages_per_rank=0),
            "stages_per_rank: found 0",
        ),
        (lambda: sl.slack_needs(["nope"]), "schedule: found 'nope'"),
        (lambda: rk.schedule_ranks([], pp=4, n_microbatches=8), "schedules: found []"),
        (lambda: mp.inflight_depth(4, 9, 8), "stage: found 9"),  # was min(8, 4 - 9) = -5
        (lambda: sl.pr_ring_size(4, 1, 8, -1), "slack: found -1"),
    ],
)
def test_a_helpers_bad_value_is_named_never_a_key_error_or_a_number(call, needle):
    with pytest.raises(ValueError) as refused:
        call()
    assert needle in str(refused.value)


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: lf.leaf_reuse(hidden=0), "hidden: found 0"),  # torch: max() of an empty tensor
        (lambda: lf.reuse_point(rows=-1), "rows: found -1"),  # torch: a negative dimension
        (lambda: common.setup(font_scale=-1), "font_scale: found -1"),  # was taken
        (lambda: common.setup(context="slides"), "context: found 'slides'"),
    ],
)
def test_a_lessons_helper_names_a_size_or_style_it_cannot_take(call, needle):
    with pytest.raises(ValueError) as refused:
        call()
    assert needle in str(refused.value)
