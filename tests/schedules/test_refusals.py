"""The schedule analysis refuses what it cannot vouch for, with a reason a caller can show.

Pooling is gated on this analysis: unknown names, base classes, custom (CSV) runtime
schedules, subclasses that replace the step logic, unknown actions and malformed orders
must raise ScheduleAnalysisError, never return numbers.
"""

from __future__ import annotations

import pytest
from torch.distributed.pipelining import schedules as torch_schedules

from pooltk.analysis.programs import Event, Program, program
from pooltk.analysis.lifetimes import (
    ScheduleAnalysisError,
    lifetimes,
    lifetimes_of,
    live_sets,
    overwrites,
)


def test_unknown_schedule_name_is_refused_listing_the_known_names() -> None:
    with pytest.raises(
        ScheduleAnalysisError, match="found 'Looped1F1B'.*Interleaved1F1B.*ZBVZeroBubble"
    ):
        live_sets("Looped1F1B", pp=4, n_microbatches=8)


def test_schedule_analysis_error_is_a_value_error() -> None:
    assert issubclass(ScheduleAnalysisError, ValueError)


@pytest.mark.parametrize(
    "name", ["PipelineScheduleSingle", "PipelineScheduleMulti", "pipelineschedulemulti"]
)
def test_base_schedule_names_are_refused(name: str) -> None:
    with pytest.raises(ScheduleAnalysisError, match="cannot be analysed"):
        lifetimes(name, pp=4, n_microbatches=8)


def test_custom_csv_runtime_schedule_class_is_refused() -> None:
    with pytest.raises(ScheduleAnalysisError, match="CSV"):
        lifetimes(torch_schedules._PipelineScheduleRuntime, pp=4, n_microbatches=8)


def test_subclass_that_replaces_the_single_stage_step_is_refused() -> None:
    class Custom1F1B(torch_schedules.Schedule1F1B):
        def _step_microbatches(self, *args, **kwargs):  # type: ignore[override]
            raise NotImplementedError

    with pytest.raises(ScheduleAnalysisError, match="overrides _step_microbatches"):
        lifetimes(Custom1F1B, pp=4, n_microbatches=8)


def test_runtime_subclass_that_replaces_the_step_is_refused() -> None:
    class CustomRuntime(torch_schedules.ScheduleInterleaved1F1B):
        def _step_microbatches(self, *args, **kwargs):  # type: ignore[override]
            raise NotImplementedError

    with pytest.raises(ScheduleAnalysisError, match="overrides _step_microbatches"):
        lifetimes(CustomRuntime, pp=4, n_microbatches=8, stages_per_rank=2)


def test_runtime_subclass_that_only_builds_its_order_is_analysed() -> None:
    class Renamed(torch_schedules.ScheduleInterleaved1F1B):
        pass

    assert live_sets(Renamed, pp=4, n_microbatches=8, stages_per_rank=2) == live_sets(
        "Interleaved1F1B", pp=4, n_microbatches=8, stages_per_rank=2
    )


def test_unrelated_class_is_refused() -> None:
    with pytest.raises(ScheduleAnalysisError, match="not one pooltk can analyse"):
        lifetimes(dict, pp=4, n_microbatches=8)


def test_unknown_action_in_the_lowered_order_is_refused() -> None:
    class _Odd:
        value = "PREFETCH"

    class _OddAction:
        stage_index, microbatch_index, sub_actions = 1, 0, None
        computation_type = _Odd()

    class WithOddAction(torch_schedules.ScheduleInterleaved1F1B):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.pipeline_order_with_comms[1].insert(3, _OddAction())

    with pytest.raises(ScheduleAnalysisError, match="PREFETCH"):
        lifetimes(WithOddAction, pp=4, n_microbatches=8, stages_per_rank=2)


def _hand_made(events: tuple) -> Program:
    return Program(
        schedule="hand-made",
        pp=2,
        stages_per_rank=1,
        n_microbatches=1,
        forward_only=False,
        defer_pp_recv=False,
        stage_to_rank={0: 0, 1: 1},
        events={0: (), 1: events},
        source="test",
    )


def test_compute_before_its_receive_is_refused() -> None:
    prog = _hand_made((Event(0, "F", 1, 0), Event(1, "RECV_F", 1, 0)))
    with pytest.raises(ScheduleAnalysisError, match="before its receive"):
        lifetimes_of(prog)


def test_receive_never_consumed_is_refused() -> None:
    prog = _hand_made((Event(0, "RECV_F", 1, 0),))
    with pytest.raises(ScheduleAnalysisError, match="never consumed"):
        lifetimes_of(prog)


def test_a_receive_posted_twice_is_refused_naming_the_rank_and_step() -> None:
    twice = _hand_made((Event(0, "RECV_F", 1, 0), Event(1, "RECV_F", 1, 0)))
    with pytest.raises(
        ScheduleAnalysisError, match="rank 1 step 1: receive RECV_F .* posted twice"
    ):
        lifetimes_of(twice)


def test_a_last_stages_backward_needs_no_gradient_receive() -> None:
    last = _hand_made((Event(0, "RECV_F", 1, 0), Event(1, "F", 1, 0), Event(2, "B", 1, 0)))
    assert [(b.direction, b.release) for b in lifetimes_of(last)] == [("forward", 2)]


def test_auto_refuses_a_schedule_object_whose_action_order_was_replaced() -> None:
    from pooltk.analysis.plans import plan_rings
    from pooltk.analysis.programs import _StandInStage

    def built():
        stages = [_StandInStage(i, 8, 0, 4) for i in (0, 4)]  # rank 0's stages at pp4, 2 per rank
        return torch_schedules.ScheduleInterleaved1F1B(stages, 8, loss_fn=lambda *a: None)

    assert plan_rings(built()).schedule == "ScheduleInterleaved1F1B"  # torch's own order: vouched
    edited = built()
    order = edited.pipeline_order_with_comms[0]
    first, second = [t for t, a in enumerate(order) if a is not None and a.microbatch_index == 0][
        :2
    ]
    order[first], order[second] = order[second], order[first]
    with pytest.raises(ScheduleAnalysisError, match="differs from the one torch builds"):
        plan_rings(edited)


def test_shapes_torch_rejects_are_refused_with_torchs_reason() -> None:
    with pytest.raises(
        ScheduleAnalysisError, match="greater than or equal to the number of stages"
    ):
        lifetimes("1F1B", pp=4, n_microbatches=2)
    with pytest.raises(ScheduleAnalysisError, match="exactly 2 stages per rank"):
        lifetimes("ZBVZeroBubble", pp=4, n_microbatches=8, stages_per_rank=1)


def test_bad_arguments_name_the_argument_and_the_fix() -> None:
    with pytest.raises(ScheduleAnalysisError, match="stages_per_rank: found 2.*one stage per rank"):
        program("1F1B", pp=4, n_microbatches=8, stages_per_rank=2)
    with pytest.raises(ScheduleAnalysisError, match="defer_pp_recv=True.*single-stage"):
        program("GPipe", pp=4, n_microbatches=8, defer_pp_recv=True)
    with pytest.raises(ScheduleAnalysisError, match="style: found 'loop'.*'v'"):
        program("DualPipeV", pp=4, n_microbatches=8, stages_per_rank=2, style="loop")
    with pytest.raises(ScheduleAnalysisError, match="n_microbatches: found 0"):
        program("1F1B", pp=4, n_microbatches=0)
    with pytest.raises(ScheduleAnalysisError, match="pp: found True"):
        program("1F1B", pp=True, n_microbatches=8)  # type: ignore[arg-type]


def test_ring_size_mapping_missing_a_stage_is_an_error() -> None:
    spans = lifetimes("1F1B", pp=2, n_microbatches=2)
    with pytest.raises(ValueError, match="no entry for"):
        overwrites(spans, {(1, "forward"): 1})
    with pytest.raises(ValueError, match="required an integer >= 1"):
        overwrites(spans, 0)


def test_recording_a_single_stage_step_leaves_torchs_module_untouched() -> None:
    before = (
        torch_schedules._batch_p2p,
        torch_schedules._sorted_batch_p2p,
        torch_schedules._wait_batch_p2p,
    )
    lifetimes("1F1B", pp=3, n_microbatches=5)
    lifetimes("GPipe", pp=3, n_microbatches=5)
    after = (
        torch_schedules._batch_p2p,
        torch_schedules._sorted_batch_p2p,
        torch_schedules._wait_batch_p2p,
    )
    assert after == before
