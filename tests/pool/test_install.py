"""pooltk.pool.install and the setup wrapper: one install path, exact undo, fail-open only on
unknown layouts."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import pooltk
import pooltk.pool.install as install_mod
import pooltk.pool.stage as stage_mod
from pooltk import PoolConfig
from pooltk.pool.gating import Decision
from pooltk.pool.torch_compat.layouts import SetupTarget, detect
from pooltk.pool.torch_compat.stage_api import Call

_LAYOUT = detect().layout
pytestmark = pytest.mark.skipif(
    _LAYOUT is None or _LAYOUT.per_receive, reason="this torch's layout is not pooled"
)


def _stage_classes():
    from torch.distributed.pipelining import stage as m

    return m._PipelineStageBase, m.PipelineStage, m._PipelineStage


def _snapshot():
    return {
        (cls.__name__, name): value for cls in _stage_classes() for name, value in vars(cls).items()
    }


def test_install_replaces_stage_methods_and_uninstall_puts_the_same_objects_back(clean_install):
    before = _snapshot()
    report = pooltk.install(slack=1)
    assert report.installed and report.mode == "rings+release"
    assert {k for k in before if _snapshot()[k] is not before[k]}  # something was wrapped
    assert pooltk.uninstall() is True and pooltk.uninstall() is False
    assert _snapshot().keys() == before.keys() and all(_snapshot()[k] is before[k] for k in before)


def test_a_second_install_with_the_same_settings_is_the_first_and_with_others_is_refused(
    clean_install,
):
    first = pooltk.install(PoolConfig(slack=3))
    assert pooltk.install(PoolConfig(slack=3)) is first
    with pytest.raises(ValueError, match="uninstall"):
        pooltk.install(slack=0)
    with pytest.raises(ValueError):
        pooltk.pool_stage(object.__new__(_stage_classes()[1]))  # one form at a time


def test_a_config_and_its_fields_together_are_refused(clean_install):
    with pytest.raises(ValueError, match="Fix:"):
        pooltk.install(PoolConfig(), slack=1)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"schedule": 5}, "schedule found 5; required a schedule's name"),
        ({"schedule": PoolConfig}, "schedule found <class 'pooltk.config.PoolConfig'>"),
        ({"slak": 2}, "found ['slak'], which PoolConfig does not have"),
    ],
)
def test_a_schedule_of_no_known_kind_and_a_field_poolconfig_lacks_are_refused_by_every_form(
    clean_install, kwargs, needle
):
    stage = object.__new__(_stage_classes()[1])
    for form in (pooltk.install, lambda **kw: pooltk.pool_stage(stage, **kw)):
        with pytest.raises(ValueError) as refused:
            form(**kwargs)
        assert needle in str(refused.value)
        assert pooltk.installed() is None and "forward_one_chunk" not in vars(stage)


def test_a_schedule_class_names_its_schedule(clean_install):
    from torch.distributed.pipelining import ScheduleGPipe

    assert pooltk.install(schedule=ScheduleGPipe).schedule == "gpipe"


def test_pooled_uninstalls_on_exit_even_after_an_error(clean_install):
    before = _snapshot()
    with pytest.raises(KeyError), pooltk.pooled(slack=2) as report:
        assert pooltk.installed() is report
        raise KeyError("boom")
    assert pooltk.installed() is None and all(_snapshot()[k] is before[k] for k in before)


def test_pool_stage_binds_on_the_instance_only_and_unpool_stage_removes_it(clean_install):
    before = _snapshot()
    stage = object.__new__(_stage_classes()[1])  # no process group needed to bind methods
    report = pooltk.pool_stage(stage, slack=1)
    assert report.installed and report.scope == "stage"
    assert {"get_fwd_recv_ops", "forward_one_chunk"} <= set(stage.__dict__)
    assert all(_snapshot()[k] is before[k] for k in before)
    assert pooltk.unpool_stage(stage) is True and "get_fwd_recv_ops" not in stage.__dict__
    assert pooltk.unpool_stage(stage) is False


def test_probe_changes_nothing_and_warns_nothing(clean_install):
    before = _snapshot()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = pooltk.probe()
    assert (
        report.scope == "probe"
        and report.layout
        and all(_snapshot()[k] is before[k] for k in before)
    )


FAIL_OPEN = textwrap.dedent("""
    import warnings
    from torch.distributed.pipelining import stage as m
    from pooltk.pool.torch_compat.layouts import detect
    # a torch whose private layout moved: the manual frontend's setup method now lives on the base
    name = next(t.name for t in detect().layout.setup_targets if t.owner is m.PipelineStage)
    fn = m.PipelineStage.__dict__[name]
    delattr(m.PipelineStage, name)
    setattr(m._PipelineStageBase, name, fn)
    before = dict(vars(m._PipelineStageBase))
    import pooltk
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        report = pooltk.install()
    assert report.installed is False and report.reason, report
    assert any(issubclass(x.category, pooltk.PoolWarning) for x in w)
    assert dict(vars(m._PipelineStageBase)) == before
    print("FAIL-OPEN-OK")
""")


def test_a_setup_method_whose_microbatch_count_is_renamed_is_an_unknown_layout(monkeypatch):
    """The setup hooks read ``num_microbatches`` by name: a torch that renames it fails open at
    install, never with a TypeError in the middle of a setup."""
    target = _LAYOUT.setup_targets[0]

    def renamed(self, n_microbatches, *args, **kwargs):  # noqa: ANN001, ANN202
        return None

    monkeypatch.setattr(target.owner, target.name, renamed)
    layout, reason = install_mod._layout()
    assert layout is None and f"{target.name}(n_microbatches)" in reason, reason
    assert "num_microbatches" in reason and "pooltk does not know" in reason


def test_an_unknown_layout_fails_open_with_a_warning_and_touches_nothing(tmp_path):
    script = tmp_path / "failopen.py"
    script.write_text(FAIL_OPEN)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "FAIL-OPEN-OK" in out.stdout, out.stderr[-2000:]


# ------------------------------------------------------------ the setup wrapper on a stand-in stage


class _Info:
    def __init__(self, buffer):
        self.buffer, self.is_root_arg = buffer, False


class _FakeStage:
    """What the setup wrapper reads of a stage; its setup makes buffers through torch's own
    maker."""

    def __init__(self, stage_index=1, num_stages=2):
        self.stage_index, self.num_stages, self.has_backward, self.is_last = (
            stage_index,
            num_stages,
            True,
            False,
        )
        self.grad_recv_info = {}


def _fake_setup(self, n_mb):
    from torch.distributed.pipelining import stage as stage_mod
    from torch.distributed.pipelining._utils import _TensorMeta

    meta = _TensorMeta.from_tensor(torch.zeros(2, 3))
    self.grad_recv_info = {
        c: (_Info(stage_mod._make_tensor_from_meta(meta, "cpu")),) for c in range(n_mb)
    }


def _live(config=None):
    """A process install as the hooks see it (not bound: the test calls the setup hook itself)."""
    config = config or PoolConfig()
    report = install_mod.InstallReport.of(_LAYOUT, "test", config, installed=True, schedule="1f1b")
    return install_mod._Install(config, None, "1f1b", False, _LAYOUT, report)


def _setup(monkeypatch, config=None, pool=True, plan=None, live=None):
    """The grad setup of ``_FakeStage`` under the pool's setup hook, the gate answering ``pool``."""
    live = live or _live(config)
    monkeypatch.setattr(stage_mod, "decide", lambda **_: Decision(pool, "test", "1f1b", plan))
    name = "_setup_backward_recv_info"
    target = SetupTarget(
        owner=_FakeStage, name=name, direction="grad", infos_attr="grad_recv_info", alloc_free=True
    )

    def setup(stage, n_mb):
        def proceed():
            return _fake_setup(stage, n_mb)

        return stage_mod.on_setup(
            stage, Call(name, (n_mb,), {}), proceed, target=target, install=live
        )

    return setup, live


def _storages(stage):
    return {infos[0].buffer.untyped_storage().data_ptr() for infos in stage.grad_recv_info.values()}


def test_a_pooled_setup_allocates_only_the_ring_and_a_stock_one_all_m(monkeypatch):
    setup, _ = _setup(monkeypatch, PoolConfig(grad_slack=0))
    stage = _FakeStage(stage_index=0)
    setup(stage, 4)
    assert len(_storages(stage)) == 1 and pooltk.stage_state(stage).phase == "set-up"
    setup, _ = _setup(monkeypatch, pool=False)
    stock = _FakeStage(stage_index=0)
    setup(stock, 4)
    assert len(_storages(stock)) == 4 and not pooltk.stage_state(stock).pooled


def test_a_direction_planned_without_a_ring_gets_real_stock_buffers_not_placeholders(monkeypatch):
    from pooltk.analysis.plans import RingPlan

    plan = RingPlan(
        schedule="ZBVZeroBubble",
        n_microbatches=4,
        min_safe={(1, "grad"): 0},
    )
    setup, _ = _setup(monkeypatch, plan=plan)
    stage = _FakeStage()
    setup(stage, 4)
    assert (
        not any(infos[0].buffer.is_meta for infos in stage.grad_recv_info.values())
        and len(_storages(stage)) == 4
    )


def test_an_error_inside_a_recognised_layout_raises_pool_setup_error_with_stage_direction_and_cause(
    monkeypatch,
):
    def broken(*_a, **_k):
        raise KeyError("boom")

    setup, _ = _setup(monkeypatch)
    monkeypatch.setattr(stage_mod, "_build_ring", broken)
    with pytest.raises(pooltk.PoolSetupError) as info:
        setup(_FakeStage(), 4)
    assert (info.value.stage, info.value.direction) == (1, "grad") and isinstance(
        info.value.cause, KeyError
    )


def test_a_planning_error_names_the_stage_and_direction_in_its_fields_and_its_text(monkeypatch):
    from pooltk.pool.errors import PoolSetupError

    def unplannable(**_):
        raise PoolSetupError(stage=None, direction=None, cause=KeyError("boom"), what="planning")

    setup, _ = _setup(monkeypatch)
    monkeypatch.setattr(stage_mod, "decide", unplannable)
    with pytest.raises(pooltk.PoolSetupError) as info:
        setup(_FakeStage(), 4)
    error = info.value
    assert (error.stage, error.direction, type(error.cause)) == (1, "grad", KeyError)
    assert "stage 1 grad" in str(error) and "None" not in str(error), str(error)


def test_uninstall_gives_a_live_pooled_stage_stock_buffers_and_says_unpooled(
    monkeypatch, clean_install
):
    report = pooltk.install(grad_slack=0)
    setup, live = _setup(monkeypatch, PoolConfig(grad_slack=0), live=install_mod._current)
    stage = _FakeStage(stage_index=0)
    setup(stage, 4)
    assert stage in live.stages
    assert pooltk.stage_rings(stage)["grad"].size == 1
    pooltk.uninstall()
    assert pooltk.stage_rings(stage) == {} and len(_storages(stage)) == 4
    assert [e.kind for e in report.stage_events()] == ["unpooled"]


def test_uninstall_mid_step_keeps_what_a_chunk_received_and_has_not_yet_read(
    monkeypatch, clean_install
):
    """Received into its slot, not yet read by its backward: the chunk keeps its data (a stock
    buffer in its place would be read as garbage); the other chunks get stock buffers."""
    pooltk.install(grad_slack=0)
    setup, _ = _setup(monkeypatch, PoolConfig(grad_slack=0), live=install_mod._current)
    stage = _FakeStage(stage_index=0)
    setup(stage, 4)
    ring = pooltk.stage_rings(stage)["grad"]
    for chunk in (0, 1):  # chunk 0 is done; chunk 1's gradient has arrived
        ring.post((0, chunk), stage.grad_recv_info[chunk], training=True)
        stage.grad_recv_info[chunk][0].buffer.fill_(chunk + 1.0)
        if chunk == 0:
            ring.release((0, 0))
    pooltk.uninstall()
    assert torch.equal(stage.grad_recv_info[1][0].buffer, torch.full((2, 3), 2.0))
    assert len(_storages(stage)) == 4


def test_a_stage_set_up_before_install_is_reported_kept_stock_once(clean_install, caplog):
    report = pooltk.install(slack=1)
    stage = _FakeStage()
    stage.args_recv_info = {
        0: (_Info(torch.zeros(2)),)
    }  # set up by torch before install: no pooltk state
    base = _stage_classes()[0]
    with caplog.at_level(logging.WARNING, logger="pooltk"):
        for _ in range(2):
            with pytest.raises(Exception):  # noqa: B017 - the stand-in cannot really compute
                base.forward_one_chunk(stage, 0)
    assert len(report.stage_events("kept-stock")) == 1 and pooltk.stage_state(stage).phase == "late"
    assert sum("kept stock" in r.getMessage() for r in caplog.records) == 1


def test_install_and_uninstall_wait_for_the_one_lock_another_thread_holds(clean_install):
    import threading

    from pooltk.pool.install import _LOCK as LOCK

    for call in (lambda: pooltk.install(slack=1), pooltk.uninstall):
        done = threading.Event()
        worker = threading.Thread(target=lambda call=call, done=done: (call(), done.set()))
        with LOCK:
            worker.start()
            worker.join(0.3)
            assert not done.is_set()  # it waits while another thread holds the lock
        worker.join(10)
        assert done.is_set()
    assert pooltk.installed() is None


def test_a_wrapper_around_torchs_buffer_maker_keeps_setup_at_the_ring_sets(
    monkeypatch, clean_install
):
    """A profiler's or an allocation counter's wrapper around torch's ``_make_tensor_from_meta`` (no
    functools.wraps) leaves the placeholders on: setup makes the ring's K sets, not M
    ([Note: placeholders without patching]). Before the maker was matched by torch's own frame, such
    a wrapper made all M."""
    from torch.distributed.pipelining import stage as stage_mod

    from pooltk.parity.one_stage import fake_group, run_steps, static_schedule, static_stage

    if not callable(getattr(stage_mod, "_make_tensor_from_meta", None)):
        pytest.skip("this torch makes its receive buffers without _make_tensor_from_meta")
    made: list[int] = []
    maker = stage_mod._make_tensor_from_meta

    def counting(meta, device):
        t = maker(meta, device)
        if not t.is_meta:
            made.append(t.untyped_storage().nbytes())
        return t

    monkeypatch.setattr(stage_mod, "_make_tensor_from_meta", counting)
    from torch.distributed.pipelining import _utils

    if (
        getattr(_utils, "_make_tensor_from_meta", None) is maker
    ):  # where torch defines it (2.12 on): wrapped too
        monkeypatch.setattr(_utils, "_make_tensor_from_meta", counting)
    with fake_group(1, 3), pooltk.pooled() as report:
        stage = static_stage(torch.nn.Linear(4, 4), 1, 3, torch.zeros(2, 4))
        schedule = static_schedule(stage, 8, lambda o, t: ((o - t) ** 2).mean())
        run_steps(schedule, stage, torch.randn(16, 4), steps=1)
        assert [u.ring for u in report.usage()] == [4, 2]  # forward W + slack = 2 + 2, grad 1 + 1
    assert made == [2 * 4 * 4] * 6, (
        f"setup made {len(made)} real buffers through the wrapper; the rings hold 6"
    )


def test_uninstall_gives_a_handoff_fed_stage_real_buffers_for_its_placeholders(
    monkeypatch, clean_install
):
    """A V schedule's stage fed by a same-rank handoff holds placeholders and no ring; uninstall
    must make them real buffers as well (torch reads one to zero a None gradient)."""
    from pooltk.analysis.plans import RingPlan

    pooltk.install(grad_slack=0)
    plan = RingPlan(
        schedule="ZBVZeroBubble", n_microbatches=4, min_safe={}, handoff=frozenset({(1, "grad")})
    )
    setup, live = _setup(monkeypatch, plan=plan, live=install_mod._current)
    stage = _FakeStage()
    setup(stage, 4)
    assert all(infos[0].buffer.is_meta for infos in stage.grad_recv_info.values())
    assert stage in live.stages
    pooltk.uninstall()
    assert not any(infos[0].buffer.is_meta for infos in stage.grad_recv_info.values())


def _forward(stage, install):  # noqa: ANN001, ANN202 - the pool's hook before a forward
    stage_mod.before_forward(stage, Call("forward_one_chunk", (0, ()), {}), install=install)


def test_a_stage_pooled_again_under_a_second_install_is_said_in_that_installs_report(monkeypatch):
    stage = _FakeStage()
    for _ in range(2):  # install, step, uninstall; then the same again
        setup, live = _setup(monkeypatch)
        setup(stage, 4)
        _forward(stage, live)
        assert [e.kind for e in live.report.stage_events()] == ["pooled"]
        stage_mod.give_back_stock(stage, live, "uninstalled")


def test_a_last_stage_kept_stock_at_its_next_setup_stops_releasing(monkeypatch):
    stage = _FakeStage()
    stage.is_last = True
    setup, live = _setup(monkeypatch)
    setup(stage, 4)
    _forward(stage, live)
    assert pooltk.stage_state(stage).release
    setup, _ = _setup(monkeypatch, pool=False, live=live)  # e.g. a GPipe schedule sets it up now
    setup(stage, 4)
    _forward(stage, live)
    assert not pooltk.stage_state(stage).release


def test_on_the_lazy_layout_uninstall_gives_a_stage_back_and_the_next_install_decides_again():
    from pooltk.pool.torch_compat.layouts import Layout

    lazy = Layout(name="lazy", per_receive=True)
    stage, installs = _FakeStage(), []
    stage.is_last = True
    for _ in range(2):
        report = install_mod.InstallReport.of(lazy, "test", PoolConfig(), installed=True)
        installs.append(install_mod._Install(PoolConfig(), None, "1f1b", False, lazy, report))
        _forward(stage, installs[-1])
        assert stage in installs[-1].stages and pooltk.stage_state(stage).release
        assert [e.kind for e in report.stage_events()] == ["released"]
        stage_mod.give_back_stock(stage, installs[-1], "uninstalled")
        assert not pooltk.stage_state(stage).release


def test_a_shared_rings_first_re_home_of_each_stage_is_a_warning(caplog):
    from types import SimpleNamespace

    state = stage_mod.StageState(install=SimpleNamespace(events=[]))
    fields = dict(direction="forward", slot=0, bytes=8, holders=1, check="python", incoming=2)
    with caplog.at_level(logging.DEBUG, logger="pooltk"):
        for stage in (1, 3, 1):
            stage_mod._ring_said(state, "re-homed", stage=stage, incoming_stage=stage, **fields)
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING, logging.DEBUG]


def test_probe_reports_what_install_would_do_on_the_lazy_layout(clean_install, monkeypatch):
    from pooltk.pool.torch_compat.layouts import Layout

    lazy = Layout(name="lazy", per_receive=True)
    monkeypatch.setattr(install_mod, "_layout", lambda: (lazy, "torch 2.15 allocates per receive"))
    monkeypatch.setattr(install_mod, "_bind", lambda inst, stage: None)  # nothing of torch changes
    probed = pooltk.probe()
    report = pooltk.install()
    assert (probed.installed, probed.mode, probed.reason) == (True, "release", report.reason)
    assert report.reason.endswith("installs the last-stage release alone")
