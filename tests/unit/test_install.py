"""install / uninstall / pooled / pool_stage: identity restore, idempotence, the reinstall rule, fail-open."""

import subprocess
import sys
import textwrap
import warnings

import pytest

import pooltk
from pooltk import PoolConfig
from pooltk.pool.adapters import HOT_METHODS, detect

_LAYOUT = detect().layout
needs_pooling_layout = pytest.mark.skipif(
    _LAYOUT is None or _LAYOUT.per_receive,
    reason=f"this torch's layout ({_LAYOUT.name if _LAYOUT else 'unknown'}) is not pooled: install() stands down",
)


def _stage_classes():
    from torch.distributed.pipelining import stage as m

    return m._PipelineStageBase, m.PipelineStage, m._PipelineStage


def _snapshot():
    out = {}
    for cls in _stage_classes():
        for name, value in vars(cls).items():
            if callable(value):
                out[(cls.__name__, name)] = value
    return out


def test_this_torch_is_detected_by_feature(clean_install):
    d = detect()
    assert d.layout is not None and d.layout.name in {"setup-recv-info", "prepare-infra", "lazy"}


@needs_pooling_layout
def test_install_wraps_and_uninstall_restores_the_exact_function_objects(clean_install):
    before = _snapshot()
    report = pooltk.install(slack=1)
    assert report.installed and report.layout
    base = _stage_classes()[0]
    assert all(hasattr(getattr(base, m), "__pooltk_original__") for m in HOT_METHODS)
    assert _snapshot() != before
    assert pooltk.uninstall() is True
    after = _snapshot()
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)
    assert pooltk.uninstall() is False


@needs_pooling_layout
def test_install_twice_with_same_settings_is_a_no_op(clean_install):
    r1 = pooltk.install(PoolConfig(slack=3))
    r2 = pooltk.install(PoolConfig(slack=3))
    assert r1 is r2


@needs_pooling_layout
def test_install_with_different_config_raises_and_names_both(clean_install):
    pooltk.install(slack=2)
    with pytest.raises(ValueError) as info:
        pooltk.install(slack=0)
    msg = str(info.value)
    assert "slack=2" in msg and "slack=0" in msg and "uninstall" in msg


def test_config_and_overrides_together_are_refused(clean_install):
    with pytest.raises(ValueError, match="not both"):
        pooltk.install(PoolConfig(), slack=1)


def test_shortfall_needs_force(clean_install):
    with pytest.raises(ValueError, match="force=True"):
        pooltk.install(PoolConfig(forward_shortfall=1))


@needs_pooling_layout
def test_pooled_context_manager_uninstalls_on_exit_even_after_an_error(clean_install):
    before = _snapshot()
    with pytest.raises(KeyError):
        with pooltk.pooled(slack=2) as report:
            assert report.installed and pooltk.installed() is report
            raise KeyError("boom")
    assert pooltk.installed() is None
    after = _snapshot()
    assert all(after[k] is before[k] for k in before)


@needs_pooling_layout
def test_pool_stage_binds_on_the_instance_only_and_unpool_removes_it(clean_install):
    base, manual, _ = _stage_classes()
    before = _snapshot()
    stage = object.__new__(manual)  # no process group needed to bind methods
    report = pooltk.pool_stage(stage, slack=1)
    assert report.installed and report.scope == "stage"
    own_targets = [t.name for t in _LAYOUT.setup_targets if isinstance(stage, t.owner)]
    assert own_targets and all(name in stage.__dict__ for name in own_targets)
    assert "get_fwd_recv_ops" in stage.__dict__
    assert _snapshot() == before
    assert all(_snapshot()[k] is before[k] for k in before)
    assert pooltk.unpool_stage(stage) is True
    assert "get_fwd_recv_ops" not in stage.__dict__


@needs_pooling_layout
def test_pool_stage_refuses_when_installed_process_wide(clean_install):
    _, manual, _ = _stage_classes()
    pooltk.install()
    with pytest.raises(ValueError, match="process-wide"):
        pooltk.pool_stage(object.__new__(manual))


FAIL_OPEN = textwrap.dedent(
    """
    import warnings
    from torch.distributed.pipelining import stage as m
    from pooltk.pool.adapters import detect
    # Simulate a torch whose private layout moved: the manual frontend's forward setup hook
    # is no longer defined on PipelineStage (it still resolves through the base, so torch works).
    name = next(t.name for t in detect().layout.setup_targets if t.owner is m.PipelineStage)
    fn = m.PipelineStage.__dict__[name]
    delattr(m.PipelineStage, name)
    setattr(m._PipelineStageBase, name, fn)
    before = {k: v for k, v in vars(m._PipelineStageBase).items()}
    import pooltk
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        report = pooltk.install()
    assert report.installed is False, report
    assert "PipelineStage." + name in report.reason or "no known receive-buffer layout" in report.reason, report.reason
    assert any(issubclass(x.category, pooltk.PoolWarning) for x in w), [str(x.message) for x in w]
    assert all(vars(m._PipelineStageBase)[k] is v for k, v in before.items())
    print("FAIL-OPEN-OK")
    """
)


@needs_pooling_layout
def test_unknown_layout_fails_open_with_a_warning_and_touches_nothing(tmp_path):
    script = tmp_path / "failopen.py"
    script.write_text(FAIL_OPEN)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "FAIL-OPEN-OK" in out.stdout


def test_probe_changes_nothing(clean_install):
    before = _snapshot()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = pooltk.probe()
    assert report.scope == "probe" and report.layout
    assert all(_snapshot()[k] is before[k] for k in before)
