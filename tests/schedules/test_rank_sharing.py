"""Rank-shared rings from the schedule's own action order ([Note: rank-shared rings])."""

from __future__ import annotations

import pytest

from pooltk.analysis.catalog import (
    analysable_schedules,
    is_single_stage,
    resolve_schedule,
    v_schedules,
)
from pooltk.analysis.lifetimes import (
    ScheduleShape,
    ScheduleAnalysisError,
    analyse,
    min_safe_ring,
    shared_slots,
)
from functools import partial

from pooltk.analysis.sharing import colour, rank_rings
from pooltk.config import PoolConfig
from pooltk.pool.ring import ring_size

TIGHT0 = PoolConfig(slack=0, grad_slack=0)


def _rings(prog, spans, config, **kw):
    """The pool's rank-shared rings under ``config`` (the one slack rule sizes them)."""
    return rank_rings(prog, spans, partial(ring_size, config=config), **kw)


def _shapes():
    for name in analysable_schedules():
        _, cls = resolve_schedule(name)
        vpps = (1,) if is_single_stage(cls) else (2,) if name in v_schedules() else (2, 3)
        for pp in (2, 4):
            for vpp in vpps:
                for m in (4, 8, 12):
                    yield name, pp, vpp, m


def _analysed(name, pp, vpp, m):
    _, cls = resolve_schedule(name)
    try:
        return analyse(ScheduleShape(schedule=cls, pp=pp, n_microbatches=m, stages_per_rank=vpp))
    except ScheduleAnalysisError as exc:
        pytest.skip(f"{name} pp{pp} vpp{vpp} M{m}: {exc}")


def _clashes(spans, ring):
    group = [
        b
        for b in spans
        if b.rank == ring.rank and b.direction == ring.direction and b.stage in ring.stages
    ]
    found = []
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            same = ring.slot_of(a.stage, a.microbatch) == ring.slot_of(b.stage, b.microbatch)
            if same and a.post <= b.release and b.post <= a.release:
                found.append((a, b))
    return found


@pytest.mark.parametrize("name,pp,vpp,m", list(_shapes()))
@pytest.mark.parametrize("config", [TIGHT0, PoolConfig()], ids=["slack0", "default"])
def test_no_two_live_receives_of_a_rank_share_a_slot(name, pp, vpp, m, config):
    prog, spans = _analysed(name, pp, vpp, m)
    rings = _rings(prog, spans, config)
    assert rings, "every analysed pipeline receives something"
    for ring in rings:
        assert not _clashes(spans, ring), (name, pp, vpp, m, ring.rank, ring.direction)
        assert set(ring.slots.values()) <= set(range(ring.size))
        assert ring.receives == len(ring.slots)
    covered = {(b.stage, b.microbatch, b.direction) for b in spans}
    assert covered == {(s, mb, r.direction) for r in rings for (s, mb) in r.slots}


@pytest.mark.parametrize("name,pp,vpp,m", list(_shapes()))
def test_a_rank_shared_ring_never_holds_more_than_its_stages_rings(name, pp, vpp, m):
    prog, spans = _analysed(name, pp, vpp, m)
    for config in (TIGHT0, PoolConfig()):
        for ring in _rings(prog, spans, config):
            per_stage = sum(
                ring_size(min_safe_ring(spans, s, ring.direction, m), m, ring.direction, config)
                for s in ring.stages
            )
            assert ring.size <= per_stage
            if config == TIGHT0:
                assert ring.size == ring.live or not ring.shared


def test_slack_zero_rank_rings_are_the_per_rank_direction_live_sets():
    prog, spans = _analysed("Interleaved1F1B", 4, 4, 8)
    rings = _rings(prog, spans, TIGHT0)
    # upstream review of pytorch PR #196465: 112 per (stage, direction), 69 per (rank, direction)
    assert (
        sum(
            min_safe_ring(spans, s, d, 8)
            for s in range(prog.num_stages)
            for d in ("forward", "grad")
        )
        == 112
    )
    assert sum(r.size for r in rings) == 69 == shared_slots(spans).per_rank_direction


def test_a_rank_with_one_stage_keeps_the_per_stage_ring():
    prog, spans = _analysed("1F1B", 4, 1, 8)
    config = PoolConfig()
    for ring in _rings(prog, spans, config):
        assert not ring.shared and len(ring.stages) == 1
        (stage,) = ring.stages
        assert ring.size == ring_size(
            min_safe_ring(spans, stage, ring.direction, 8), 8, ring.direction, config
        )
        assert all(slot == mb % ring.size for (_, mb), slot in ring.slots.items())


def test_boundary_keys_split_a_rank_ring():
    prog, spans = _analysed("Interleaved1F1B", 2, 2, 8)
    one = {(r.rank, r.direction): r for r in _rings(prog, spans, TIGHT0)}
    keys = {
        (s, d): ("wide" if s >= 2 else "narrow")
        for s in range(prog.num_stages)
        for d in ("forward", "grad")
    }
    split = _rings(prog, spans, TIGHT0, groups=keys)
    assert len(split) > len(one)
    assert all(len({keys[(s, r.direction)] for s in r.stages}) == 1 for r in split)


def test_an_undersized_ring_is_coloured_with_clashes_the_guard_must_catch():
    prog, spans = _analysed("Interleaved1F1B", 2, 2, 8)
    group = [b for b in spans if b.rank == 1 and b.direction == "forward"]
    full = _rings(prog, spans, TIGHT0)
    live = next(r.live for r in full if r.rank == 1 and r.direction == "forward")
    slots = colour(group, live - 1)
    clashes = [
        (a, b)
        for i, a in enumerate(group)
        for b in group[i + 1 :]
        if slots[(a.stage, a.microbatch)] == slots[(b.stage, b.microbatch)]
        and a.post <= b.release
        and b.post <= a.release
    ]
    assert clashes
    with pytest.raises(ValueError, match="size 0"):
        colour(group, 0)


def test_sharing_is_a_validated_field_of_the_harness_and_the_memory_model():
    from pooltk.memory.model import Boundary, PipelineShape, model_memory
    from pooltk.parity.experiments import Harness

    assert Harness().sharing == "rank"
    assert "sharing=stage" in Harness(sharing="stage").describe()
    with pytest.raises(ValueError, match="Harness.sharing"):
        Harness(sharing="node")
    shape = PipelineShape(pp=4, n_microbatches=8)
    assert model_memory(shape, Boundary.opaque(1)).sharing == "rank"
    assert "sharing=stage" in model_memory(shape, Boundary.opaque(1), sharing="stage").describe()
    with pytest.raises(ValueError, match="sharing"):
        model_memory(shape, Boundary.opaque(1), sharing="node")
