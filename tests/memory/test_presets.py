"""The Kimi-K3 presets reproduce the seed's published figures, and say where every number comes from."""

from __future__ import annotations

import pytest

from pooltk.config import PoolConfig
from pooltk.memory.model import MemoryModelError, compare_configs, middle_stage
from pooltk.studies.kimi_k3.presets import PRESETS, get_preset, published_vs_model

CAL = "kimi-k3-gb200-2k-calibrated"
HIDDEN = "kimi-k3-gb200-2k-hidden"
GIB = 2**30
MIB = 2**20


def test_the_seed_shape_has_64_microbatches_and_64_stock_sets_per_direction_on_middle_stages():
    m = get_preset(CAL).model()
    assert m.shape.n_microbatches == 64 and m.shape.pp == 8
    for i in range(1, 7):
        assert (m.row(i, "forward").stock_sets, m.row(i, "grad").stock_sets) == (64, 64)


def test_calibrated_preset_reproduces_52_gib_stock_and_45_gib_saved_within_5_percent():
    p = get_preset(CAL)
    assert (p.config, p.policy) == (PoolConfig(slack=2), "automodel")  # the published run's ring
    m = p.model()
    for stage in (3, 4):  # the two middle stages of eight
        assert m.stage_gib(stage, "stock") == pytest.approx(52, rel=0.05)
        assert m.saved_gib(stage, "automodel") == pytest.approx(45, rel=0.05)
    assert middle_stage(8) == 3


def test_calibration_is_416_mib_per_set_of_which_56_mib_is_the_hidden_state():
    cal, hidden = get_preset(CAL), get_preset(HIDDEN)
    assert cal.boundary.forward_bytes == 416 * MIB == 52 * GIB // 128
    assert hidden.boundary.forward_bytes == 56 * MIB == 2 * 2048 * 7168 * 2
    assert cal.boundary.activations[0] == hidden.boundary.activations[0]
    assert cal.figure("set_mib").kind == "derived" and "416" in cal.figure("set_mib").source


def test_hidden_state_only_preset_cannot_produce_the_published_bytes():
    m = get_preset(HIDDEN).model()
    assert m.stage_gib(3, "stock") == 7.0  # 128 x 56 MiB
    table = published_vs_model(get_preset(HIDDEN)).set_index("figure")
    assert table.filter(like="stock receive", axis=0).relative_difference.iloc[0] < -0.8


def test_published_vs_model_table_for_the_calibrated_preset():
    table = published_vs_model(get_preset(CAL))
    assert list(table.published) == [64, 52, 45]
    assert table.model_middle_stage.tolist() == pytest.approx([64, 52.0, 46.3125])
    assert (table.relative_difference.abs() < 0.05).all()
    assert (table.kind == "published").all() and table.source.str.contains("PR #3780").all()


def test_tight_and_slack_zero_save_beyond_the_published_policy():
    p = get_preset(CAL)
    table = compare_configs(
        p.shape,
        p.boundary,
        {
            "automodel s2": (PoolConfig(slack=2), "automodel"),
            "tight s2 g1": (PoolConfig(slack=2, grad_slack=1), "tight"),
            "tight s0 g0": PoolConfig(slack=0, grad_slack=0),  # a PoolConfig alone: tight
        },
        stage=3,
    ).set_index("label")
    # stage 3 of 8: W = 5. automodel K = 7 both ways; tight 7 + 2; live set 5 + 1. 416 MiB a set.
    assert table.loc["automodel s2", ["forward_sets", "grad_sets"]].tolist() == [7, 7]
    assert table.loc["tight s2 g1", "saved_beyond_baseline_gib"] == 5 * 416 / 1024
    assert table.loc["tight s0 g0", "saved_beyond_baseline_gib"] == 8 * 416 / 1024
    assert table.loc["tight s0 g0", "pooled_gib"] == 6 * 416 / 1024


def test_every_preset_states_its_assumption_and_labels_each_figure():
    assert set(PRESETS) == {
        "kimi-k3-gb200-2k-calibrated",
        "kimi-k3-gb200-2k-widths",
        "kimi-k3-gb200-2k-hidden",
        "kimi-k3-gb200-1k-calibrated",
        "kimi-k3-gb200-1k-hidden",
    }
    for p in PRESETS.values():
        assert p.assumption and p.sources
        assert all(
            f.kind in ("published", "derived", "inferred", "assumed") and f.source
            for f in p.figures
        )
        assert p.shape.n_microbatches == 64 and p.hidden == 7168
    assert get_preset("kimi-k3-gb200-1k-calibrated").figure("set_mib").kind == "assumed"
    assert get_preset("kimi-k3-gb200-1k-calibrated").boundary.forward_bytes == 208 * MIB
    assert get_preset("kimi-k3-gb200-1k-hidden").boundary.forward_bytes == 28 * MIB


def test_unknown_preset_lists_the_known_names():
    with pytest.raises(
        MemoryModelError,
        match=r"preset: found 'k3'; required one of 'kimi-k3-gb200-2k-calibrated'.*--list-presets",
    ):
        get_preset("k3")
