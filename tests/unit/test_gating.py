"""Gating: allowlist matched like get_schedule_class, observed schedule beats the install-time name."""

from torch.distributed.pipelining.schedules import Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

from pooltk.analysis.catalog import ALLOWLIST, schedule_key
from pooltk.pool.gating import decide, schedule_allowed


def test_allowlist_is_1f1b_only_and_case_insensitive():
    assert ALLOWLIST == frozenset({"1f1b"})
    for name in ("1f1b", "1F1B", " 1F1b "):
        assert schedule_allowed(name)
    for name in ("gpipe", "Interleaved1F1B", "ZBVZeroBubble", "", None):
        assert not schedule_allowed(name)


def test_classes_are_matched_exactly_not_by_subclass():
    assert schedule_allowed(Schedule1F1B)
    assert not schedule_allowed(ScheduleGPipe)
    assert not schedule_allowed(ScheduleInterleaved1F1B)

    class Custom1F1B(Schedule1F1B):
        pass

    assert not schedule_allowed(Custom1F1B)


def test_normalized_names_follow_torch():
    assert schedule_key(Schedule1F1B) == "1f1b"
    assert schedule_key(ScheduleGPipe) == "gpipe"
    assert schedule_key("GPipe") == "gpipe"


def _setup_as(schedule_obj, **kw):
    # The observed schedule is found as `self` of a caller frame.
    def _initialize_pp_stages(self):
        return decide(**kw)

    return _initialize_pp_stages(schedule_obj)


def test_observed_schedule_overrides_install_name():
    gpipe = object.__new__(ScheduleGPipe)
    d = _setup_as(gpipe, install_schedule="1f1b", force=False)
    assert not d.pool and d.observed and d.schedule == "gpipe"
    one = object.__new__(Schedule1F1B)
    d = _setup_as(one, install_schedule="gpipe", force=False)
    assert d.pool and d.observed and d.schedule == "1f1b"


def test_unobserved_setup_falls_back_to_install_name_and_force_overrides():
    assert decide(install_schedule="1f1b", force=False).pool
    d = decide(install_schedule="gpipe", force=False)
    assert not d.pool and not d.observed and "force=True" in d.reason
    assert decide(install_schedule="gpipe", force=True).pool
    assert not decide(install_schedule=None, force=False).pool


def test_auto_refuses_a_custom_runtime_schedule_and_says_why():
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime

    csv_like = object.__new__(_PipelineScheduleRuntime)  # what a CSV-loaded schedule is
    d = _setup_as(csv_like, install_schedule="auto", force=False)
    assert not d.pool and d.observed
    assert "cannot be analysed" in d.reason and "Stock receive buffers kept" in d.reason


def test_auto_without_an_observable_schedule_stays_stock():
    d = decide(install_schedule="auto", force=False)
    assert not d.pool and "needs the driving schedule" in d.reason


def test_auto_keeps_the_closed_form_for_1f1b():
    d = _setup_as(object.__new__(Schedule1F1B), install_schedule="auto", force=False)
    assert d.pool and d.plan is None
