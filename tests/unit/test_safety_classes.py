"""Issue #11, classes 3-7, single process: each test failed on the pool before the fix (checked in a worktree).

Classes 1-2 (outputs and input gradients aliasing a slot) need real ranks: tests/dist/test_model_fuzz.py and
tests/dist/test_aliasing_outputs.py.
"""

import importlib.util
import logging
import sys
import types

import pytest
import torch

import pooltk
import pooltk.pool._patch as patch_mod
import pooltk.pool.install as install_mod
from pooltk.pool.state import ProcessState, Settings
from pooltk import PoolConfig
from pooltk.pool.adapters import SetupTarget, detect

_LAYOUT = detect().layout
pytestmark = pytest.mark.skipif(_LAYOUT is None or _LAYOUT.per_receive, reason="this torch is not pooled")


class _Info:
    def __init__(self, buffer):
        self.buffer = buffer
        self.is_root_arg = False


def _has_meta_factory() -> bool:
    try:
        from torch.distributed.pipelining._utils import _TensorMeta  # noqa: F401
        from torch.distributed.pipelining.stage import _make_tensor_from_meta  # noqa: F401
    except ImportError:
        return False
    return True


# The fake setups below make buffers the way the setup-recv-info family (torch 2.12-2.14) does,
# through the module-level factory; older torch (the prepare-infra family) has no such factory.
needs_meta_factory = pytest.mark.skipif(not _has_meta_factory(), reason="this torch has no module-level "
                                        "_make_tensor_from_meta/_TensorMeta (prepare-infra family, torch <= 2.11)")


class _FakeStage:
    """What the setup wrapper reads of a stage; its setup makes buffers through torch's module-level factory."""

    def __init__(self, stage_index=1, num_stages=2):
        self.stage_index, self.num_stages, self.has_backward = stage_index, num_stages, True
        self.grad_recv_info = {}


def _fake_setup(self, n_mb):
    from torch.distributed.pipelining import stage as stage_mod
    from torch.distributed.pipelining._utils import _TensorMeta

    meta = _TensorMeta.from_tensor(torch.zeros(2, 3))
    self.grad_recv_info = {c: (_Info(stage_mod._make_tensor_from_meta(meta, "cpu")),) for c in range(n_mb)}


def _ctx(config=PoolConfig(), report=None):
    """A context both the old (settings) and new (settings + report) wrapper signatures accept."""
    settings = Settings(config=config, schedule="1f1b", force=False)
    ns = types.SimpleNamespace(settings=settings, report=report, config=config, schedule="1f1b", force=False)
    return lambda _stage: ns


def _target():
    return SetupTarget(owner=_FakeStage, name="setup", direction="grad", infos_attr="grad_recv_info", alloc_free=True)


def _decision(monkeypatch, pool=True, plan=None, reason="test"):
    from pooltk.pool.gating import GateDecision

    monkeypatch.setattr(patch_mod, "decide", lambda **_: GateDecision(pool=pool, schedule="x", observed=True,
                                                                        reason=reason, plan=plan))


@needs_meta_factory
def test_class3_a_direction_planned_without_a_ring_gets_real_stock_buffers_not_meta(monkeypatch, clean_install):
    from pooltk.pool.gating import RingPlan

    plan = RingPlan(schedule="ZBVZeroBubble", n_microbatches=4, sizes={(1, "grad"): 0}, min_safe={(1, "grad"): 0})
    _decision(monkeypatch, plan=plan)
    stage = _FakeStage()
    patch_mod.setup_wrapper(_fake_setup, _target(), _ctx())(stage, 4)
    bufs = [infos[0].buffer for infos in stage.grad_recv_info.values()]
    assert not any(b.is_meta for b in bufs)
    assert len({b.untyped_storage().data_ptr() for b in bufs}) == 4  # stock: one set per microbatch


def test_class4_a_second_copy_of_the_module_refuses_to_nest_and_its_uninstall_restores_torch(clean_install):
    from torch.distributed.pipelining import stage as stage_mod

    before = {n: v for n, v in vars(stage_mod._PipelineStageBase).items() if callable(v)}
    spec = importlib.util.spec_from_file_location("pooltk_pool_install_copy", install_mod.__file__)
    copy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = copy  # dataclasses resolve their module while the copy executes
    try:
        spec.loader.exec_module(copy)
    finally:
        del sys.modules[spec.name]
    copy.STATE = ProcessState()  # a second copy of the package has its own process state
    assert pooltk.install(slack=1).installed
    with pytest.raises(ValueError, match="another copy"):
        copy.install(slack=1)
    assert copy.uninstall() is True  # the copy removes the first copy's wrappers too
    after = {n: v for n, v in vars(stage_mod._PipelineStageBase).items() if callable(v)}
    assert all(after[n] is before[n] for n in before)
    assert not hasattr(stage_mod._make_tensor_from_meta, "__pooltk_original__")
    install_mod.uninstall()


def test_class5_a_stage_set_up_before_install_is_reported_kept_stock(clean_install, caplog):
    report = pooltk.install(slack=1)
    stage = _FakeStage()
    stage.args_recv_info = {0: (_Info(torch.zeros(2)),)}  # set up by torch before install: no pooltk state
    from torch.distributed.pipelining import stage as stage_mod

    with caplog.at_level(logging.WARNING, logger="pooltk"), pytest.raises(Exception):
        stage_mod._PipelineStageBase.forward_one_chunk(stage, 0)  # the fake stage cannot really compute
    kept = report.stage_events("kept-stock")
    assert kept and "set up before pooltk.install()" in kept[0].message
    assert any("stage 1 kept stock (reason=set up before" in r.getMessage() for r in caplog.records)


@needs_meta_factory
def test_class5_uninstall_gives_a_live_pooled_stage_stock_buffers_and_says_unpooled_not_kept_stock(monkeypatch, clean_install):
    report = pooltk.install(slack=0, grad_slack=0)
    _decision(monkeypatch)
    stage = _FakeStage(stage_index=0)  # stage 0 of 2 receives gradients
    patch_mod.setup_wrapper(_fake_setup, _target(), _ctx(PoolConfig(slack=0, grad_slack=0), report))(stage, 4)
    assert pooltk.stage_rings(stage)["grad"].size == 1
    pooltk.uninstall()
    assert pooltk.stage_rings(stage) == {}
    ptrs = {infos[0].buffer.untyped_storage().data_ptr() for infos in stage.grad_recv_info.values()}
    assert len(ptrs) == 4
    # It was pooled until then: the line says "unpooled", never "kept stock" (which reads as "never pooled").
    assert any("pooltk.uninstall(): the stage was pooled until now" in e.message for e in report.stage_events("unpooled"))
    assert report.stage_events("kept-stock") == []


@needs_meta_factory
def test_class6_an_error_inside_a_recognised_layout_raises_naming_stage_and_cause(monkeypatch, clean_install):
    from pooltk.pool.gating import PoolSetupError

    _decision(monkeypatch)

    def broken(*_a, **_k):
        raise KeyError("boom")

    monkeypatch.setattr(patch_mod, "build_ring", broken)
    with pytest.raises(PoolSetupError, match=r"stage 1 grad.*KeyError") as info:
        patch_mod.setup_wrapper(_fake_setup, _target(), _ctx())(_FakeStage(), 4)
    assert info.value.stage == 1 and info.value.direction == "grad" and isinstance(info.value.cause, KeyError)


def test_class7_overriding_subclass_and_custom_compute_callbacks_are_refused_with_a_reason(clean_install):
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _ComputationType

    from pooltk.pool.gating import refusal

    class MyStage(PipelineStage):
        def get_fwd_recv_ops(self, fwd_chunk_id):  # bypasses the pool's wrapper
            return []

    stage = MyStage.__new__(MyStage)
    assert "MyStage overrides get_fwd_recv_ops" in refusal(stage, None)
    plain = PipelineStage.__new__(PipelineStage)
    assert refusal(plain, None) is None
    sched = types.SimpleNamespace(_comp_type_to_function_map={_ComputationType.FORWARD: lambda *a: None})
    assert "custom functions registered for F" in refusal(plain, sched)
    sched_ok = types.SimpleNamespace(_comp_type_to_function_map={_ComputationType.UNSHARD: lambda *a: None})
    assert refusal(plain, sched_ok) is None
    report = pooltk.pool_stage(stage, slack=1)
    assert not report.installed and "overrides get_fwd_recv_ops" in report.reason
    assert "get_fwd_recv_ops" not in stage.__dict__  # nothing bound over the subclass's own method


def test_class7_install_and_uninstall_hold_one_lock(clean_install):
    assert isinstance(install_mod.LOCK, type(__import__("threading").RLock()))
    acquired = []
    real = install_mod.LOCK

    class Spy:
        def __enter__(self):
            acquired.append(True)
            return real.__enter__()

        def __exit__(self, *exc):
            return real.__exit__(*exc)

    install_mod.LOCK = Spy()
    try:
        pooltk.install(slack=1)
        pooltk.uninstall()
    finally:
        install_mod.LOCK = real
    assert len(acquired) >= 2
