"""Notebook 01's widget callback (pooltk.nb.memory.explore) computes what the notebook shows."""

from __future__ import annotations

from pathlib import Path

import pytest

from pooltk.nb import memory as mp

REPO = Path(__file__).resolve().parents[2]
CAL = "kimi-k3-gb200-2k-calibrated"
BASE = dict(
    preset=CAL, pp=8, microbatches=64, slack=2, grad_slack=1, policy="automodel", boundary_mib=416.0
)


def test_the_opening_update_shows_the_published_shape():
    state = mp.ExplorerState()
    model = mp.explore(state, **BASE)
    assert model is state.last_result and state.last_error is None
    fom = state.figure_of_merit
    assert (fom.stage, fom.stock_gib, fom.pooled_gib, fom.saved_gib) == (
        3,
        52.0,
        7 * 2 * 416 / 1024,
        52.0 - 7 * 2 * 416 / 1024,
    )
    assert (
        fom.line()
        == "stage 3 pooled: 5.69 GiB, saved 46.31 GiB of 52.00 GiB stock (automodel, slack 2)"
    )
    assert (
        model.boundaries[0].activations[0].name == "hidden_states"
    )  # the preset's tensors are kept


def test_moving_the_slack_changes_the_figure_of_merit_line():
    state = mp.ExplorerState()
    lines = []
    for slack in (0, 1, 2, 3):
        mp.explore(state, **{**BASE, "slack": slack})
        lines.append(state.figure_of_merit.line())
    assert len(set(lines)) == 4
    assert [f.pooled_gib for f in state.history] == [k * 2 * 416 / 1024 for k in (5, 6, 7, 8)]


def test_the_tight_policy_and_the_boundary_slider_feed_the_model():
    state = mp.ExplorerState()
    mp.explore(state, **{**BASE, "policy": "tight", "slack": 0, "grad_slack": 0})
    assert state.figure_of_merit.pooled_gib == 6 * 416 / 1024
    mp.explore(state, **{**BASE, "boundary_mib": 56.0})
    assert state.figure_of_merit.stock_gib == 7.0
    assert state.last_result.boundaries[0].forward_bytes == 56 * 2**20


def test_rejected_inputs_are_recorded_not_raised():
    state = mp.ExplorerState()
    assert mp.explore(state, **{**BASE, "microbatches": 4}) is None
    assert state.last_result is None and "required M >= pp" in state.last_error
    mp.explore(state, **{**BASE, "boundary_mib": 0.0})
    assert "boundary MiB" in state.last_error


@pytest.mark.parametrize("size", [float("inf"), float("nan")])
def test_a_size_that_is_no_finite_number_is_recorded_not_raised(size):
    state = mp.ExplorerState()  # inf raised OverflowError out of the widget's callback
    assert mp.explore(state, **{**BASE, "boundary_mib": size}) is None
    assert f"boundary MiB: found {size}; required a finite number > 0" in state.last_error
    assert mp.explore(state, **{**BASE, "device": "gb200", "reference_peak_gib": size}) is not None
    assert f"reference peak: found {size}; required a finite peak > 0 GiB" in state.fits_note


def test_render_prints_the_line_and_saves_the_figure(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("POOLTK_REPORT_DIR", str(tmp_path))
    state = mp.ExplorerState()
    mp.explore(state, **BASE)
    fig = mp.render_explorer(state)
    assert fig is not None and (tmp_path / "01_explorer_stage_bars.png").stat().st_size > 10_000
    assert "stage 3 pooled: 5.69 GiB" in capsys.readouterr().out
    mp.explore(state, **{**BASE, "pp": 16, "microbatches": 8})
    assert mp.render_explorer(state) is None and "rejected:" in capsys.readouterr().out


def test_choosing_a_preset_resets_the_other_controls():
    pytest.importorskip("ipywidgets")
    controls = mp.explorer_controls(CAL)
    assert controls["boundary_mib"].value == 416.0 and controls["microbatches"].value == 64
    controls["slack"].value = 5
    controls["preset"].value = "kimi-k3-gb200-1k-hidden"
    assert controls["boundary_mib"].value == 28.0 and controls["slack"].value == 2
    import inspect

    assert set(controls) == set(inspect.signature(mp.explore).parameters) - {
        "state"
    }  # every control feeds explore()


def test_a_config_path_with_a_target_class_loads_and_the_widgets_override_it():
    path = str(REPO / "data" / "configs" / "kimi_k3_gb200_2k_automodel.yaml")
    state = mp.ExplorerState()
    model = mp.explore(
        state, **{**BASE, "config_path": path, "boundary_mib": None, "rows": 2, "seq_len": 2048}
    )
    assert (
        model is not None and model.boundaries[0].forward_bytes == 2 * 2048 * 7168 * 2
    )  # hidden from KimiK3TextConfig
    mp.explore(
        state,
        **{
            **BASE,
            "config_path": path,
            "boundary_mib": None,
            "rows": 2,
            "seq_len": 4096,
            "hidden": 1024,
            "dtype": "float32",
        },
    )
    assert state.last_result.boundaries[0].forward_bytes == 2 * 4096 * 1024 * 4


def test_the_fits_view_answers_for_gb200_and_h100():
    state = mp.ExplorerState()
    mp.explore(state, **{**BASE, "device": "gb200"})
    assert state.fits is not None and state.fits.worst("automodel").fits
    mp.explore(state, **{**BASE, "device": "h100"})
    assert not state.fits.worst("tight").fits and not state.fits.worst("stock").fits
    mp.explore(
        state,
        **{**BASE, "preset": "kimi-k3-gb200-1k-hidden", "boundary_mib": None, "device": "h100"},
    )
    assert state.fits is None and "no reference peak" in state.fits_note


def test_an_unknown_config_class_is_an_error_in_the_explorer_not_a_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO / "data" / "configs" / "kimi_k3_gb200_2k_automodel.yaml")
        .read_text()
        .replace("KimiK3TextConfig", "NoSuchConfig")
    )
    state = mp.ExplorerState()
    assert mp.explore(state, **{**BASE, "config_path": str(bad)}) is None
    assert (
        "model.config._target_" in state.last_error
        and "give hidden (e.g. 7168)" in state.last_error
    )


def test_a_preset_whose_boundaries_differ_is_explored_boundary_by_boundary():
    from pooltk.studies.kimi_k3 import get_preset

    widths = get_preset("kimi-k3-gb200-2k-widths")
    state = mp.ExplorerState()
    model = mp.explore(state, **{**BASE, "preset": widths.name, "boundary_mib": None})
    assert (
        model is not None and model.boundaries == widths.boundary_list
    )  # not the first boundary everywhere
    assert state.figure_of_merit.stock_gib == 38.5  # stage 3: 64 x (5 + 6) x 56 MiB
    halved = mp.explore(
        state, **{**BASE, "preset": widths.name, "boundary_mib": None, "seq_len": 1024}
    )
    assert [b.forward_bytes for b in halved.boundaries] == [
        b.forward_bytes // 2 for b in widths.boundary_list
    ]
    fewer = mp.explore(
        state, **{**BASE, "preset": widths.name, "boundary_mib": None, "pp": 4, "microbatches": 64}
    )
    assert (
        len(fewer.boundaries) == 3
    )  # the widths follow where a 4-stage pipeline cuts the 93 layers


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("pp", 0, "pp: found 0; required an integer >= 1. Fix: give pp as"),
        ("rows", 0, "rows: found 0; required an integer >= 1. Fix: give rows as"),
        ("dtype", "float7", "dtype: found 'float7'"),  # was TensorSpec 'hidden_states'.dtype
    ],
)
def test_a_rejected_field_is_named_as_the_explorer_names_it(field, value, needle):
    state = mp.ExplorerState()
    assert mp.explore(state, **{**BASE, field: value}) is None
    assert state.last_error.startswith(needle) and "Overrides." not in state.last_error
