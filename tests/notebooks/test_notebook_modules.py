"""The pooltk modules behind notebooks 00 and 02, checked without a kernel (fast).

The replay, the slot table and the guard replay are drawn from two independent pieces of
pooltk (the schedule lifetimes and the guard's own ``SlotOwnership``); these tests hold
them to each other and to the 1F1B facts, and check the parity panel's input handling.
"""

from __future__ import annotations

import pytest

from pooltk import PoolConfig
from pooltk.pool.guard import PoolOverrunError
from pooltk.pool.sizing import inflight_1f1b

mp = pytest.importorskip("pooltk.nb.mechanism")
pytest.importorskip("pandas")


@pytest.mark.parametrize(("pp", "m"), [(2, 2), (3, 5), (4, 8), (5, 7)])
def test_1f1b_warmup_is_w_forwards_per_stage_and_gpipe_has_no_steady_phase(pp: int, m: int) -> None:
    ph = mp.phases(mp.replay("1F1B", pp=pp, n_microbatches=m))
    for stage in range(pp):
        first, last = ph[stage]["warmup"]
        assert last - first + 1 == inflight_1f1b(pp, stage, m), (stage, ph[stage])
    gp = mp.phases(mp.replay("GPipe", pp=pp, n_microbatches=m))
    assert all(set(p) == {"warmup", "cooldown"} and p["warmup"] == (0, m - 1) for p in gp.values()), gp


def test_replay_respects_cross_stage_dependencies() -> None:
    rp = mp.replay("1F1B", pp=4, n_microbatches=8)
    frame = rp.compute_frame().set_index(["kind", "stage", "microbatch"])
    for mb in range(8):
        for s in range(1, 4):
            assert frame.loc[("F", s, mb), "start"] >= frame.loc[("F", s - 1, mb), "end"]
            assert frame.loc[("B", s - 1, mb), "start"] >= frame.loc[("B", s, mb), "end"]


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe"])
@pytest.mark.parametrize(("pp", "m"), [(3, 6), (4, 8)])
@pytest.mark.parametrize(("slack", "shortfall"), [(0, 0), (0, 1), (1, 0), (2, 0)])
def test_the_guard_replay_raises_exactly_when_the_lifetimes_show_an_overwrite(
    schedule: str, pp: int, m: int, slack: int, shortfall: int
) -> None:
    rp = mp.replay(schedule, pp=pp, n_microbatches=m)
    rings = mp.rings_for(pp, m, PoolConfig(slack=slack, grad_slack=0, forward_shortfall=shortfall))
    table = mp.slot_table(rp, rings)
    assert (table.slot == table.microbatch % table.ring).all()
    guard = mp.guard_replay(rp, rings)
    overwritten = (table.overwrites >= 0).any()
    assert guard.ok == (not overwritten), (guard.line(), table[table.overwrites >= 0])
    if schedule == "1F1B":
        assert guard.ok == (shortfall == 0)
    if guard.error is not None:  # the first overrun the guard meets is one the lifetimes list
        e = guard.error
        hits = table[(table.stage == e.stage) & (table.direction == e.direction) & (table.microbatch == e.incoming)]
        assert (hits.overwrites == e.owner).all() and len(hits) == 1


def test_the_guard_note_is_the_guard_modules_own_text() -> None:
    import pooltk.pool.guard

    note = mp.guard_note()
    assert "owned" in note and note in (pooltk.pool.guard.__doc__ or "")


def test_layout_families_mark_exactly_the_detected_family() -> None:
    from pooltk.pool.adapters import detect

    frame = mp.layout_families()
    assert set(frame.family) == {"prepare-infra", "setup-recv-info", "lazy"}
    found = detect().layout
    detected = set(frame[frame.detected_here].family)
    assert detected == ({found.name} if found is not None else set())
    if found is not None and not found.per_receive:  # the detected family's methods all exist here
        assert frame[frame.family == found.name].defined_here.all()


def test_the_explorer_records_rejected_shapes_instead_of_raising() -> None:
    state = mp.MechanismState()
    assert mp.explore(state, schedule="1F1B", pp=4, microbatches=2, slack=0, grad_slack=0) is None
    assert state.last_error and "microbatches" in state.last_error.lower()
    assert mp.explore(state, schedule="GPipe", pp=4, microbatches=8, slack=0, grad_slack=0) is not None
    assert state.last_error is None and state.overwrites and not state.guard.ok


# --------------------------------------------------------------------------- notebook 02


pq = pytest.importorskip("pooltk.nb.parity")


def test_a_guarded_control_outcome_carries_the_overruns_own_fields(monkeypatch) -> None:
    import pooltk.parity.controls as controls

    exc = PoolOverrunError(stage=2, direction="forward", slot=1, ring=3, owner=4, incoming=7, rank=2)

    def raise_overrun(spec):
        raise exc

    monkeypatch.setattr(controls, "run_parity", raise_overrun)
    out = controls.run_negative_controls(pp=3, microbatches=6, steps=1)
    assert out.unguarded is None and "PoolOverrunError" in (out.unguarded_error or "")
    for outcome in out.guarded:
        assert outcome.caught and outcome.error_type == "PoolOverrunError"
        assert (outcome.rank, outcome.stage, outcome.direction, outcome.slot, outcome.ring, outcome.owner,
                outcome.incoming) == (2, 2, "forward", 1, 3, 4, 7)


def test_the_parity_panel_rejects_bad_inputs_before_launching() -> None:
    state = pq.ParityState()
    assert pq.run_check(state, pp=4, microbatches=2) is None
    assert "M >= pp" in (state.last_error or "") and state.last_report is None
    assert pq.run_check(state, pp=3, microbatches=6, policy="fastest") is None
    assert "policy" in (state.last_error or "")
    with pytest.raises(ValueError, match="pp: found 2"):
        pq.run_negative_controls(pp=2)
