"""Kimi-K3 boundaries from the published widths: the data file, the inferred rule, the preset.

The published points are read from ``data/published/kimi_k3_boundary_widths.csv`` (Megatron-Bridge
PR #5130, ROCm/Megatron-LM PR #162); the layer split is checked against Automodel's documented
example (``generate_hf_model_split(4, 32)``: layers 0-7, 8-15, 16-23, 24-31).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from pooltk.memory.known_boundaries import (
    K3_LAYERS,
    boundary_layers,
    k3_width,
    k3_widths_preset,
    layer_split,
    published_widths,
    width_boundaries,
)
from pooltk.memory.model import MemoryModelError, PipelineShape, TensorSpec
from pooltk.studies.kimi_k3.presets import get_preset

ROOT = Path(__file__).resolve().parents[2]


def _published(id_: str) -> float:
    return next(p.value for p in published_widths() if p.id == id_)


def test_the_data_file_holds_only_published_figures_each_with_its_source():
    with (ROOT / "data" / "published" / "kimi_k3_boundary_widths.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and {r["kind"] for r in rows} == {"published"}
    assert all(r["source"].strip() and "PR #" in r["source"] for r in rows)
    assert [p.id for p in published_widths()] == [
        r["id"] for r in rows
    ]  # the package data is that file


def test_the_inferred_rule_reproduces_every_published_width():
    pp3 = boundary_layers(K3_LAYERS, 3)
    assert pp3 == (31, 62)
    assert [k3_width(n) for n in pp3] == [
        _published("k3_pp3_boundary0_width"),
        _published("k3_pp3_boundary1_width"),
    ]
    assert k3_width(4) == _published(
        "k3_rocm_boundary0_width"
    )  # the ROCm model's first boundary, after 4 layers
    # and its bytes: (1 + 1) x 8192 x 7168 x 2 B
    rocm = width_boundaries(num_stages=2, rows=1, seq_len=8192, hidden=7168, num_layers=8)[0]
    assert rocm.forward_bytes / 2**20 == _published("k3_rocm_boundary0_bytes") == 224.0


def test_the_two_readings_differ_only_at_a_multiple_of_twelve_layers():
    for layers in range(1, 94):
        gap = k3_width(layers) - k3_width(layers, at_block_end="closed")
        assert gap == (1 if layers % 12 == 0 else 0)


def test_layers_split_as_automodel_splits_them():
    assert layer_split(32, 4) == (8, 8, 8, 8)
    assert layer_split(K3_LAYERS, 8) == (12, 12, 12, 12, 12, 11, 11, 11)
    assert boundary_layers(K3_LAYERS, 8) == (12, 24, 36, 48, 60, 71, 82)
    with pytest.raises(
        MemoryModelError, match=r"num_stages: found 9; required at most the layers \(8\)"
    ):
        layer_split(8, 9)


def test_the_widths_preset_states_what_is_published_inferred_and_assumed():
    base = get_preset("kimi-k3-gb200-2k-calibrated")
    preset = k3_widths_preset(base)
    assert (
        preset.name == "kimi-k3-gb200-2k-widths"
        and preset.shape == base.shape
        and preset.config == base.config
    )
    kinds = {f.name: f.kind for f in preset.figures}
    assert {kinds[p.id] for p in published_widths()} == {"published"}
    assert (
        kinds["width_rule_hidden_states"] == "inferred" and kinds["layers_per_stage"] == "assumed"
    )
    assert "INFERRED, not published" in preset.assumption and "ASSUMED" in preset.assumption
    widths = [b.forward_bytes // (2 * 2048 * 7168 * 2) for b in preset.boundary_list]
    assert widths == [3, 4, 5, 6, 7, 7, 8]
    hidden = TensorSpec(shape=(2, 2048, 7168), dtype="bfloat16")
    assert all(
        b.activations[0] == TensorSpec(shape=hidden.shape, dtype="bfloat16", name="hidden_states")
        for b in preset.boundary_list
    )


def test_the_widths_preset_beside_the_calibrated_one_per_stage():
    base = get_preset("kimi-k3-gb200-2k-calibrated")
    widths, calibrated = k3_widths_preset(base).model(), base.model()
    # stage 3 (the "middle" stage): 64 sets over boundary 2 (5 x 56 MiB) + 64 over boundary 3 (6 x 56 MiB)
    assert widths.stage_gib(3, "stock") == 64 * (5 + 6) * 56 / 1024 == 38.5
    assert calibrated.stage_gib(3, "stock") == 52.0
    # the widths grow along the pipeline; the calibration is flat
    stock = [widths.stage_bytes(i, "stock") for i in range(1, 7)]
    assert stock == sorted(stock) and len(set(stock)) == 6


def test_the_widths_follow_the_stage_count_when_ranks_run_more_stages():
    preset = k3_widths_preset(get_preset("kimi-k3-gb200-2k-calibrated"))
    shape = PipelineShape(pp=8, n_microbatches=64, schedule="Interleaved1F1B", stages_per_rank=2)
    bounds = preset.boundaries_for(shape)
    assert len(bounds) == 15
    assert [b.forward_bytes // (2 * 2048 * 7168 * 2) for b in bounds] == [
        k3_width(n) for n in boundary_layers(K3_LAYERS, 16)
    ]
    fixed = get_preset("kimi-k3-gb200-2k-calibrated")
    assert fixed.boundaries_for(shape) == (fixed.boundary,) * 15
