"""pooltk's receive lifetimes against torch's own liveness analysis, where torch has one (2.15+).

torch 2.15 exports ``analyze_pipeline_activation_liveness``: greedy slots for each microbatch's
ACTIVATION lifetime (its forward .. its full or weight backward). A receive buffer lives longer:
from the moment its receive is posted, which is before its forward. So pooltk's receive live set
must be >= torch's slots on every stage, and where it is larger, starting each lifetime at the
forward instead of the post must give torch's number exactly (the difference is the posting, and
nothing else). Runs in the torch 2.15 venv the compatibility matrix builds
(``python -m tools.compat_matrix --releases 2.15.0``); skips elsewhere.
"""

from __future__ import annotations

import pytest

from pooltk.analysis.lifetimes import lifetimes, live_sets
from pooltk.analysis.programs import program

pipelining = pytest.importorskip("torch.distributed.pipelining")
analyze = getattr(pipelining, "analyze_pipeline_activation_liveness", None)
needs_torch_liveness = pytest.mark.skipif(
    analyze is None, reason="this torch has no analyze_pipeline_activation_liveness (torch < 2.15)"
)


class _Stage:
    """The attributes a schedule constructor reads; nothing allocates or communicates."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int) -> None:
        self.stage_index, self.num_stages = stage_index, num_stages
        self.group_rank, self.group_size = 0, group_size
        self.is_first, self.is_last = stage_index == 0, stage_index == num_stages - 1
        self.submod, self.stage_index_to_group_rank, self.has_backward = None, {}, True


def _peak_inclusive(intervals: list[tuple[int, int]]) -> int:
    points = sorted({p for a, b in intervals for p in (a, b)})
    return max((sum(1 for a, b in intervals if a <= p <= b) for p in points), default=0)


def _torch_slots(pp: int, vpp: int, m: int) -> dict[int, int]:
    from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B

    n = pp * vpp
    stages = [
        _Stage(i, n, pp) for i in range(0, n, pp)
    ]  # rank 0's stages; every rank holds the whole order
    sched = ScheduleInterleaved1F1B(stages, m, loss_fn=lambda *a: None)
    out = {}
    for s in range(n):
        res = analyze(sched, pp_rank=s % pp, stage_indices=[s], granularity="stage_microbatch")
        out[s] = int(res.num_slots)
    return out


@needs_torch_liveness
@pytest.mark.parametrize("pp,vpp,m", [(4, 2, 8), (2, 2, 8), (4, 2, 16)])
def test_receive_live_sets_cover_torchs_activation_slots_and_the_difference_is_the_early_post(
    pp, vpp, m
):
    theirs = _torch_slots(pp, vpp, m)
    ours = live_sets("Interleaved1F1B", pp=pp, stages_per_rank=vpp, n_microbatches=m)
    spans = [
        s
        for s in lifetimes("Interleaved1F1B", pp=pp, stages_per_rank=vpp, n_microbatches=m)
        if s.direction == "forward"
    ]
    for s in range(1, pp * vpp):  # stage 0 receives nothing
        mine = ours[(s, "forward")]
        assert mine >= theirs[s], (s, mine, theirs[s])
        from_forward = _peak_inclusive([(x.consume, x.release) for x in spans if x.stage == s])
        assert from_forward == theirs[s], (s, from_forward, theirs[s])
    assert any(ours[(s, "forward")] > theirs[s] for s in range(1, pp * vpp)), (
        "no stage posts a receive early?"
    )


def test_1f1b_last_rank_forwards_are_microbatches_0_to_m_minus_1_whatever_torchs_listing_says():
    prog = program("1F1B", pp=4, n_microbatches=8)
    last = [e.microbatch for e in prog.events[3] if e.kind == "F"]
    assert last == list(range(8))
    try:
        from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
    except ImportError:
        return
    listed = get_schedule_ops("1F1B", 4, 8)
    torch_last = [
        a.microbatch_index for a in listed[3] if a is not None and a.computation_type.value == "F"
    ]
    if torch_last != list(range(8)):  # torch 2.14.1 and 2.15.0 list F1 .. F8 for the last rank
        assert torch_last == list(range(1, 9)) and last != torch_last
