"""The torch imported here: its shape matches its release's fixture, its family is detected, install
is exact.

These run on whatever torch the environment has (2.13.0 in the project's .venv; each
release in turn under ``python -m tools.compat_matrix``), and are written per family so the same
file is meaningful on every release.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import pooltk
from pooltk.pool.torch_compat.layouts import detect
from pooltk.pool.torch_compat.stage_api import HOT_METHODS
from pooltk.pool.errors import PoolWarning

from _shapes import LAYOUTS, expected_family, load_shape, relevant, shape_from_live

RELEASE = torch.__version__.split("+")[0]


def _classes():
    from torch.distributed.pipelining import stage as m

    return m._PipelineStageBase, m.PipelineStage, m._PipelineStage


def _snapshot():
    return {(cls.__name__, k): v for cls in _classes() for k, v in vars(cls).items()}


def test_this_torch_matches_the_shape_recorded_for_its_release():
    if not (LAYOUTS / f"torch-{RELEASE}.json").exists():
        pytest.skip(
            f"no recorded shape for torch {RELEASE} (tests/compat/layouts/); record one with "
            "python -m tools.compat_matrix --record-shape WHEEL"
        )
    assert relevant(shape_from_live()) == relevant(load_shape(RELEASE))


def test_this_torch_is_detected_as_the_family_of_its_release_line():
    expected = expected_family(torch.__version__)
    if expected is None:
        pytest.skip(f"torch {torch.__version__} is outside the release lines measured (2.11-2.15)")
    d = detect()
    assert d.layout is not None, d.reason
    assert d.layout.name == expected, d.reason


def test_install_pools_or_releases_and_uninstall_restores_exactly(clean_install):
    layout = detect().layout
    before = _snapshot()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = pooltk.install(slack=1)
    if layout is None:
        assert report.installed is False and report.reason
        assert any(issubclass(w.category, PoolWarning) for w in caught)
        assert _snapshot() == before
        assert pooltk.uninstall() is False
        return
    assert report.installed and report.layout == layout.name
    assert report.mode == ("release" if layout.per_receive else "rings+release")
    base = _classes()[0]
    wrapped = (
        ("forward_one_chunk", "backward_one_chunk", "clear_runtime_states")
        if layout.per_receive
        else HOT_METHODS
    )
    now = _snapshot()
    assert all(now[(base.__name__, m)] is not before[(base.__name__, m)] for m in wrapped)
    assert all(
        now[(t.owner.__name__, t.name)] is not before[(t.owner.__name__, t.name)]
        for t in layout.setup_targets
    )
    assert pooltk.uninstall() is True
    after = _snapshot()
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


MOVE_AND_INSTALL = textwrap.dedent(
    """
    import warnings
    from torch.distributed.pipelining import stage as m
    from pooltk.pool.torch_compat.layouts import detect
    layout = detect().layout
    # Simulate a torch whose private layout moved: the first frontend-specific setup method
    # is no longer defined on its class (it still resolves through the base, so torch works).
    target = next(t for t in layout.setup_targets if t.owner is not m._PipelineStageBase)
    fn = target.owner.__dict__[target.name]
    delattr(target.owner, target.name)
    setattr(m._PipelineStageBase, target.name, fn)
    before = dict(vars(m._PipelineStageBase))
    import pooltk
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        report = pooltk.install()
    assert report.installed is False, report
    assert f"{target.owner.__name__}.{target.name}" in report.reason, report.reason
    assert any(issubclass(x.category, pooltk.PoolWarning) for x in w), [str(x.message) for x in w]
    assert all(vars(m._PipelineStageBase)[k] is v for k, v in before.items())
    print("FAIL-OPEN-OK", target.owner.__name__, target.name)
    """
)


def test_a_moved_setup_method_fails_open_with_a_warning_and_touches_nothing(tmp_path):
    layout = detect().layout
    if layout is None or layout.per_receive:
        pytest.skip(
            f"this torch's layout ({layout.name if layout else None}) has no setup method to move"
        )
    script = tmp_path / "move.py"
    script.write_text(MOVE_AND_INSTALL)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FAIL-OPEN-OK" in out.stdout
