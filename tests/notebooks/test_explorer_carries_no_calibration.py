"""Notebook 01's explorer models what the user chose: no other model's calibration or run's peak.

The trap of issue 29: Llama-3-70B (pp 8, M 32, 1 x 4096 tokens, hidden 8192, bf16) entered on the
default Kimi-K3 preset kept K3's fitted 360 MiB remainder (26.5 GiB stock on a middle stage where
the right figure is 4.0 GiB, 64 MiB a set), and its fits view measured Llama against K3's 139.6 GiB
and printed "fits". Each route a user takes to Llama is checked here: the widgets resized on the K3
preset (with the stale "boundary MiB / set" the K3 preset left), the Llama model chosen by name, and
its config.json, through the same widgets the notebook shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pandas")
mp = pytest.importorskip("pooltk.nb.memory")

from pooltk.memory.fits import GB200  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CAL = "kimi-k3-gb200-2k-calibrated"
LLAMA_CONFIG = ROOT / "data" / "configs" / "llama3_70b_config.json"
K3_PEAK_GIB = 139.6
LLAMA_DIMS = dict(pp=8, microbatches=32, rows=1, seq_len=4096, hidden=8192, dtype="bfloat16")
POOL = dict(slack=2, grad_slack=1, policy="tight")


def _llama_sets_and_no_k3(state: mp.ExplorerState) -> None:
    model = state.last_result
    assert model is not None, state.last_error
    assert {b.forward_bytes for b in model.boundaries} == {
        64 * 2**20
    }  # 1 x 4096 x 8192 bf16: 64 MiB a set
    assert (
        state.figure_of_merit.stage == 3 and state.figure_of_merit.stock_gib == 4.0
    )  # 32 + 32 sets on stage 3
    names = {t.name for b in model.boundaries for t in b.activations}
    assert names == {"hidden_states"}, names  # no calibrated_remainder
    assert state.source.figures == ()  # no published figure of another run


def _fits_borrow_nothing(state: mp.ExplorerState) -> None:
    assert state.fits is None
    assert "no reference peak" in state.fits_note and "run log" in state.fits_note
    printed = "\n".join(mp.explorer_lines(state))
    assert f"{K3_PEAK_GIB}" not in printed and "fits on" not in printed, printed


def test_llama_dimensions_on_the_k3_preset_give_64_mib_a_set_and_drop_k3s_calibration() -> None:
    state = mp.ExplorerState()
    mp.explore(
        state, preset=CAL, **LLAMA_DIMS, **POOL, boundary_mib=416.0, device="gb200"
    )  # 416: the K3 preset's set
    _llama_sets_and_no_k3(state)
    assert (
        "calibrated_remainder" in state.boundary_note
        and "no calibration carried" in state.boundary_note
    )
    _fits_borrow_nothing(state)
    assert "describes its own run" in state.fits_note


def test_llama_chosen_by_name_is_its_config_json_with_no_published_peak() -> None:
    state = mp.ExplorerState()
    controls = mp.explorer_controls("llama3-70b-pp8")
    values = {name: c.value for name, c in controls.items()}
    assert {k: values[k] for k in LLAMA_DIMS} == LLAMA_DIMS and values["boundary_mib"] == 64.0
    mp.explore(state, **values)
    _llama_sets_and_no_k3(state)
    _fits_borrow_nothing(state)
    assert "pooltk estimate --preset llama3-70b-pp8" in state.fits_note


def test_llama_from_its_config_file_gives_the_same_sets_and_no_borrowed_peak() -> None:
    state = mp.ExplorerState()
    mp.explore(
        state,
        preset=CAL,
        config_path=str(LLAMA_CONFIG),
        **LLAMA_DIMS,
        **POOL,
        boundary_mib=64.0,
        device="gb200",
    )
    _llama_sets_and_no_k3(state)
    _fits_borrow_nothing(state)
    assert "pooltk estimate --config" in state.fits_note and "--seq-len 4096" in state.fits_note


def test_the_widgets_moved_from_the_k3_preset_to_llama_follow_with_the_set_size() -> None:
    pytest.importorskip("ipywidgets")
    controls = mp.explorer_controls(CAL)
    assert controls["boundary_mib"].value == 416.0
    for name, value in LLAMA_DIMS.items():
        controls[name].value = value
    assert (
        controls["boundary_mib"].value == 64.0
    )  # the field follows the resized set, so it is no stale choice
    state = mp.ExplorerState()
    mp.explore(state, **{name: c.value for name, c in controls.items()})
    _llama_sets_and_no_k3(state)
    _fits_borrow_nothing(state)
    controls["preset"].value = "llama3-70b-pp8"  # choosing the model resets every control to it
    assert controls["policy"].value == "tight" and controls["boundary_mib"].value == 64.0


def test_a_reference_the_user_gives_anchors_the_fits_view_and_says_so() -> None:
    state = mp.ExplorerState()
    mp.explore(
        state,
        preset="llama3-70b-pp8",
        **LLAMA_DIMS,
        **POOL,
        boundary_mib=64.0,
        device="gb200",
        reference_peak_gib=150.0,
        reference_variant="stock",
    )
    ref = state.fits.reference
    assert ref.peak_bytes == 150 * 2**30 and ref.variant == "stock" and "your peak" in ref.source
    stock = state.fits.worst("stock")
    assert (
        stock.tensor_bytes == 150 * 2**30
        and stock.overhead_bytes == state.fits.overhead.total_bytes
    )
    assert stock.capacity_bytes == GB200.capacity_bytes
    printed = "\n".join(mp.explorer_lines(state))
    assert "your peak" in printed and f"{K3_PEAK_GIB}" not in printed


def test_a_run_log_without_peak_memory_is_named_in_the_fits_note(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text("nothing a trainer wrote\n")
    state = mp.ExplorerState()
    model = mp.explore(
        state, preset="llama3-70b-pp8", **LLAMA_DIMS, **POOL, device="gb200", reference_log=str(log)
    )
    assert model is not None and state.fits is None
    assert state.fits_note.startswith("reference: ") and str(log) in state.fits_note


def test_the_k3_preset_at_its_own_shape_keeps_its_calibration_and_its_own_published_peak() -> None:
    from pooltk.studies.kimi_k3 import k3_story

    state = mp.ExplorerState()
    mp.explore(
        state,
        preset=CAL,
        pp=8,
        microbatches=64,
        rows=2,
        seq_len=2048,
        hidden=7168,
        dtype="bfloat16",
        slack=2,
        grad_slack=1,
        policy="automodel",
        boundary_mib=416.0,
        device="gb200",
    )
    assert (
        state.source is state.origin
        and state.last_result.boundaries[0].forward_bytes == 416 * 2**20
    )
    assert state.fits.reference.peak_bytes == round(K3_PEAK_GIB * 2**30)
    # the explorer's verdict is the K3 story's (one verdict, one capacity): stock OOMs by its margin
    story = k3_story()
    stock = state.fits.worst("stock")
    assert stock == story.anchored[0][1].worst("stock") and not stock.fits
    assert f"OOM by {-stock.margin_bytes / 2**30:.2f} GiB" in story.rows[1].pooltk
    assert state.fits.worst("automodel").fits


def test_the_device_choices_are_none_gb200_b200_h100_with_gb200_by_default() -> None:
    pytest.importorskip("ipywidgets")
    device = mp.explorer_controls(CAL)["device"]
    assert list(device.options) == ["none", "gb200", "b200", "h100"] and device.value == "gb200"
    state = mp.ExplorerState()
    mp.explore(state, preset=CAL, pp=8, microbatches=64, **POOL, device="none")
    assert state.fits is None and state.fits_note == "no device chosen"
