"""pooltk.pool.gating: the allowlist matched like get_schedule_class, the observed schedule
decides, refusals."""

from __future__ import annotations

import types

import pytest

from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import (
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    _ComputationType,
    _PipelineScheduleRuntime,
)

import pooltk
from pooltk.analysis.catalog import ALLOWLIST, schedule_key
from pooltk.pool.gating import decide, refusal, schedule_allowed


def test_the_allowlist_is_1f1b_by_name_in_any_case_or_its_exact_class():
    assert ALLOWLIST == frozenset({"1f1b"})
    assert all(schedule_allowed(n) for n in ("1f1b", "1F1B", " 1F1b "))
    assert not any(
        schedule_allowed(n) for n in ("gpipe", "Interleaved1F1B", "ZBVZeroBubble", "", None)
    )
    assert schedule_allowed(Schedule1F1B) and not schedule_allowed(ScheduleGPipe)
    assert not schedule_allowed(ScheduleInterleaved1F1B)

    class Custom1F1B(Schedule1F1B):
        pass

    assert not schedule_allowed(Custom1F1B) and schedule_key(ScheduleGPipe) == "gpipe"


def _setup_as(schedule_obj, **kw):
    def _initialize_pp_stages(self):  # the observed schedule is `self` of a caller frame
        return decide(**kw)

    return _initialize_pp_stages(schedule_obj)


def test_the_schedule_seen_driving_the_setup_decides_over_the_install_name():
    gpipe = object.__new__(ScheduleGPipe)
    decision = _setup_as(gpipe, install_schedule="1f1b", force=False, stage=None)
    assert not decision.pooled and decision.schedule == "gpipe"
    assert decision.schedule_object() is gpipe  # by weak reference: a stage must not keep it
    one = object.__new__(Schedule1F1B)
    decision = _setup_as(one, install_schedule="gpipe", force=False, stage=None)
    assert decision.pooled and decision.schedule == "1f1b"


def test_unseen_setups_follow_the_install_name_and_force_overrides_it():
    def pool(**kw):
        return decide(stage=None, **kw).pooled

    assert pool(install_schedule="1f1b", force=False) and pool(install_schedule="gpipe", force=True)
    assert not pool(install_schedule="gpipe", force=False) and not pool(
        install_schedule=None, force=False
    )
    assert not pool(install_schedule="auto", force=False)  # auto needs the driving schedule


def test_auto_keeps_the_closed_form_for_1f1b_and_refuses_a_custom_runtime_schedule():
    kw = dict(install_schedule="auto", force=False, stage=None)
    decision = _setup_as(object.__new__(Schedule1F1B), **kw)
    assert decision.pooled and decision.plan is None
    decision = _setup_as(object.__new__(_PipelineScheduleRuntime), **kw)  # what a CSV schedule is
    assert not decision.pooled and decision.plan is None and decision.reason


def test_an_overriding_stage_class_and_custom_compute_functions_keep_the_stage_stock(clean_install):
    class MyStage(PipelineStage):
        def get_fwd_recv_ops(self, fwd_chunk_id):  # would bypass the pool's wrapper
            return []

    stage, plain = MyStage.__new__(MyStage), PipelineStage.__new__(PipelineStage)
    assert "get_fwd_recv_ops" in refusal(stage, None) and refusal(plain, None) is None
    forward = types.SimpleNamespace(
        _comp_type_to_function_map={_ComputationType.FORWARD: lambda *a: None}
    )
    unshard = types.SimpleNamespace(
        _comp_type_to_function_map={_ComputationType.UNSHARD: lambda *a: None}
    )
    assert refusal(plain, forward) and refusal(plain, unshard) is None
    report = pooltk.pool_stage(stage, slack=1)
    assert (
        not report.installed and "get_fwd_recv_ops" not in stage.__dict__
    )  # nothing bound over its own method


def _called_through(depth: int):  # noqa: ANN202 - a stack of wrappers, then the setup's look
    from pooltk.pool.gating import observe_schedule

    return observe_schedule() if depth == 0 else _called_through(depth - 1)


def test_the_schedule_driving_a_setup_is_seen_below_any_number_of_wrappers():
    from torch.distributed.pipelining.schedules import Schedule1F1B

    class Driver(Schedule1F1B):
        def step(self, depth):  # noqa: ANN001, ANN201
            return _called_through(depth)

    driver = object.__new__(Driver)
    assert driver.step(3) is driver and driver.step(40) is driver
    assert _called_through(3) is None


def test_a_stage_class_overriding_any_method_the_pool_wraps_keeps_the_stage_stock():
    from pooltk.pool.stage import runtime_names
    from pooltk.pool.torch_compat.layouts import detect

    layout = detect().layout
    if layout is None:
        pytest.skip("this torch's layout is not recognised")
    for name in runtime_names(layout):
        own = type("Own", (PipelineStage,), {name: lambda self, *a, **k: None})
        assert name in (refusal(own.__new__(own), None) or ""), name
