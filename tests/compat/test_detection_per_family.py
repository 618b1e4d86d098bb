"""Detection per layout family, pinned on fakes shaped exactly like each real release's pipelining
modules.

The shapes in ``layouts/torch-<release>.json`` were read from the real wheels (class and
method names, parameters, module-level names; see ``_shapes.py``). Each test swaps them in
for torch's own modules, so these run in seconds on any torch, and the matrix proves the
fixtures match the real releases (``test_real_torch.py`` under each release's venv).
"""

from __future__ import annotations

import copy
import types
import warnings

import pytest

import pooltk
from pooltk.pool.torch_compat.layouts import detect
from pooltk.pool.torch_compat.stage_api import HOT_METHODS
from pooltk.pool.errors import PoolWarning

from _shapes import FAMILY_BY_MINOR, LAYOUTS, expected_family, load_shape

RELEASES = sorted(p.stem.removeprefix("torch-") for p in LAYOUTS.glob("torch-*.json"))


def _without(
    shape: dict,
    module: str,
    cls: str | None = None,
    method: str | None = None,
    name: str | None = None,
):
    """A copy of ``shape`` with one class, method or module-level name removed."""
    s = copy.deepcopy(shape)
    m = s["modules"][module]
    if cls is not None and method is not None:
        del m["classes"][cls]["methods"][method]
    elif cls is not None:
        del m["classes"][cls]
    if name is not None:
        m["functions"].pop(name, None)
        if name in m["names"]:
            m["names"].remove(name)
    return s


def _classes(mods: dict) -> dict:
    stage = mods["stage"]
    return {n: getattr(stage, n) for n in ("_PipelineStageBase", "PipelineStage", "_PipelineStage")}


def _snapshot(mods: dict) -> dict:
    return {(c, k): v for c, cls in _classes(mods).items() for k, v in vars(cls).items()}


def test_fixtures_cover_every_release_line_from_2_11_to_2_15():
    assert {tuple(int(x) for x in r.split(".")[:2]) for r in RELEASES} == set(FAMILY_BY_MINOR)


@pytest.mark.parametrize("release", RELEASES)
def test_each_real_release_shape_is_detected_as_its_family(fake_torch, release):
    fake_torch(load_shape(release))
    d = detect()
    assert d.layout is not None, d.reason
    assert d.layout.name == expected_family(release)


def test_detection_ignores_the_version_string(fake_torch, monkeypatch):
    import torch

    monkeypatch.setattr(torch, "__version__", "9.99.0")
    fake_torch(load_shape("2.11.0"))
    assert detect().layout.name == "prepare-infra"
    fake_torch(load_shape("2.15.0"))
    assert detect().layout.name == "lazy"


@pytest.mark.parametrize("release", [r for r in RELEASES if expected_family(r) != "lazy"])
def test_eager_families_make_only_k_sets_and_name_their_setup_methods(fake_torch, release):
    mods = fake_torch(load_shape(release))
    layout = detect().layout
    assert not layout.per_receive and len(layout.setup_targets) == 3
    assert all(
        t.alloc_free for t in layout.setup_targets
    )  # _make_tensor_from_meta exists in every eager release
    stage = mods["stage"]
    for t in layout.setup_targets:
        assert t.name in vars(t.owner), (t.owner, t.name)
        assert t.owner in (stage._PipelineStageBase, stage.PipelineStage, stage._PipelineStage)
    by_dir = {t.direction: t.infos_attr for t in layout.setup_targets}
    assert by_dir == {"forward": "args_recv_info", "grad": "grad_recv_info"}
    if expected_family(release) == "prepare-infra":
        assert {(t.owner.__name__, t.name) for t in layout.setup_targets} == {
            ("PipelineStage", "_prepare_forward_infra"),
            ("_PipelineStage", "_prepare_forward_infra"),
            ("_PipelineStageBase", "_prepare_backward_infra"),
        }
    else:
        assert {(t.owner.__name__, t.name) for t in layout.setup_targets} == {
            ("PipelineStage", "_setup_forward_recv_info"),
            ("_PipelineStage", "_prepare_forward_infra"),
            ("_PipelineStageBase", "_setup_backward_recv_info"),
        }


def test_prepare_infra_without_the_meta_factory_keeps_torch_allocating_all_m(fake_torch):
    fake_torch(_without(load_shape("2.11.0"), "stage", name="_make_tensor_from_meta"))
    layout = detect().layout
    assert layout.name == "prepare-infra"
    assert not any(t.alloc_free for t in layout.setup_targets)
    assert layout.reason  # why the setup is not shape-only is said, not silent


def test_lazy_family_installs_the_release_alone_and_says_so(fake_torch):
    mods = fake_torch(load_shape("2.15.0"))
    before = _snapshot(mods)
    report = pooltk.install()
    assert report.installed is True and report.layout == "lazy"
    assert (report.mode, report.alloc_free) == ("release", False)
    assert report.events[0].fields["mode"] == "release"
    wrapped = {
        m
        for (c, m), v in _snapshot(mods).items()
        if c == "_PipelineStageBase" and v is not before.get((c, m))
    }
    assert {"forward_one_chunk", "backward_one_chunk", "clear_runtime_states"} <= wrapped
    assert not wrapped & {
        "get_fwd_recv_ops",
        "get_bwd_recv_ops",
    }  # no rings: receive posts stay torch's own
    pooltk.uninstall()


def test_lazy_family_with_the_release_turned_off_stands_down_with_the_reason(fake_torch):
    fake_torch(load_shape("2.15.0"))
    with pytest.warns(PoolWarning, match="release=False"):
        report = pooltk.install(release=False)
    assert report.installed is False and report.layout == "lazy" and report.mode == "stock"


def test_lazy_family_is_still_recognised_if_the_recv_buffers_module_moves(fake_torch):
    shape = load_shape("2.15.0")
    moved = copy.deepcopy(shape)
    # _RecvInfo now defined in stage.py itself; no _recv_buffers module.
    moved["modules"]["stage"]["classes"]["_RecvInfo"] = shape["modules"]["_recv_buffers"][
        "classes"
    ]["_RecvInfo"]
    moved["modules"]["stage"]["names"].remove("_RecvInfo")
    del moved["modules"]["_recv_buffers"]
    fake_torch(moved)
    assert detect().layout.name == "lazy"


@pytest.mark.parametrize("release", RELEASES)
def test_install_then_uninstall_restores_every_class_attribute_exactly_on_each_release_shape(
    fake_torch, release
):
    mods = fake_torch(load_shape(release))
    before = _snapshot(mods)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        report = pooltk.install(slack=1)
    assert report.installed
    lazy = expected_family(release) == "lazy"
    wrapped = (
        ("forward_one_chunk", "backward_one_chunk", "clear_runtime_states") if lazy else HOT_METHODS
    )
    now = _snapshot(mods)
    assert all(
        now[("_PipelineStageBase", m)] is not before[("_PipelineStageBase", m)] for m in wrapped
    )
    assert pooltk.uninstall() is True
    after = _snapshot(mods)
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


UNKNOWN = {
    "2.13 without PipelineStage._setup_forward_recv_info": lambda: _without(
        load_shape("2.13.0"), "stage", "PipelineStage", "_setup_forward_recv_info"
    ),
    "2.14 without the base _setup_backward_recv_info": lambda: _without(
        load_shape("2.14.1"), "stage", "_PipelineStageBase", "_setup_backward_recv_info"
    ),
    "2.11 without _RootArgPlaceholder": lambda: _without(
        load_shape("2.11.0"), "stage", "_RootArgPlaceholder"
    ),
    "2.11 without the tracing frontend's _prepare_forward_infra": lambda: _without(
        load_shape("2.11.0"), "stage", "_PipelineStage", "_prepare_forward_infra"
    ),
    "2.13 without get_bwd_recv_ops": lambda: _without(
        load_shape("2.13.0"), "stage", "_PipelineStageBase", "get_bwd_recv_ops"
    ),
    "2.11 without backward_one_chunk": lambda: _without(
        load_shape("2.11.0"), "stage", "_PipelineStageBase", "backward_one_chunk"
    ),
    "2.15 without take_buffer": lambda: _without(
        load_shape("2.15.0"), "_recv_buffers", "_RecvInfo", "take_buffer"
    ),
}


@pytest.mark.parametrize("case", sorted(UNKNOWN))
def test_unknown_shapes_get_no_layout_a_reason_per_family_and_a_stock_install(fake_torch, case):
    mods = fake_torch(UNKNOWN[case]())
    d = detect()
    assert d.layout is None, (case, d.layout)
    assert len(d.tried) == 3 and [t.split(":")[0] for t in d.tried] == [
        "lazy",
        "setup-recv-info",
        "prepare-infra",
    ]
    before = _snapshot(mods)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = pooltk.install()
    assert report.installed is False and report.layout is None
    assert "no known receive-buffer layout" in report.reason
    assert any(issubclass(w.category, PoolWarning) for w in caught)
    assert _snapshot(mods) == before and all(_snapshot(mods)[k] is v for k, v in before.items())


def test_a_stage_module_that_raises_on_lookup_is_reported_never_raised(fake_torch):
    mods = fake_torch(load_shape("2.13.0"))

    class Exploding(types.ModuleType):
        def __getattr__(self, name):
            raise RuntimeError(f"boom on {name}")

    exploding = Exploding(mods["stage"].__name__)
    import sys

    import torch.distributed.pipelining as pkg

    sys.modules[exploding.__name__] = exploding
    pkg.stage = exploding
    d = detect()
    assert d.layout is None
    assert any("probe failed (RuntimeError: boom on" in t for t in d.tried), d.tried
