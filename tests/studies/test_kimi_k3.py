"""The Kimi-K3 study is data plus one module: every number comes from a CSV row with its source,
and the presets, the published widths, the story and the estimate read them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from pooltk.config import PoolConfig
from pooltk.memory.decoder.split import boundary_layers, layer_split
from pooltk.memory.fits import GB200, Device, Overhead
from pooltk.memory.model import MemoryModelError, PipelineShape, TensorSpec, compare_configs
from pooltk.memory.model import middle_stage
from pooltk.studies import kimi_k3 as k3

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "data" / "published"
CAL, HIDDEN = "kimi-k3-gb200-2k-calibrated", "kimi-k3-gb200-2k-hidden"
GIB, MIB = 2**30, 2**20


def _rows(name: str) -> list[dict[str, str]]:
    with (PUBLISHED / name).open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _width(id_: str) -> float:
    return next(f.value for f in k3.published_widths() if f.name == id_)


# --------------------------------------------------------------------------- the data


def test_every_row_of_the_studys_data_has_a_source_and_its_package_data_is_that_file():
    for name in ("kimi_k3_gb200.csv", "kimi_k3_presets.csv", "kimi_k3_boundary_widths.csv"):
        rows = _rows(name)
        assert rows and all(len(r["source"].strip()) > 10 for r in rows), name
        shipped = (ROOT / "pooltk" / "studies" / "kimi_k3" / "data" / name).read_text()
        assert shipped == (PUBLISHED / name).read_text(), name
    assert {r["kind"] for r in _rows("kimi_k3_boundary_widths.csv")} == {"published"}
    kinds = {r["kind"] for r in _rows("kimi_k3_presets.csv")}
    assert kinds == {"published", "derived", "assumed"}


def test_every_figure_a_preset_shows_is_a_row_of_the_data_or_made_by_a_stated_rule():
    rows = {(r["preset"], r["name"]): float(r["value"]) for r in _rows("kimi_k3_presets.csv")}
    widths = {r["id"] for r in _rows("kimi_k3_boundary_widths.csv")}
    ruled = {"width_rule_hidden_states", "layers_per_stage"}
    for p in k3.PRESETS.values():
        run = p.name.rsplit("-", 1)[0]
        for f in p.figures:
            data = rows.get((p.name, f.name), rows.get((run, f.name)))
            assert f.value == data or f.name in widths | ruled, (p.name, f.name)


def test_the_derived_set_sizes_are_the_arithmetic_their_sources_state():
    rows = {(r["preset"], r["name"]): float(r["value"]) for r in _rows("kimi_k3_presets.csv")}
    stock, sets = rows["kimi-k3-gb200-2k", "stock_middle_stage_gib"], 2 * 64
    assert rows[CAL, "set_mib"] == stock * 1024 / sets == 416
    assert rows["kimi-k3-gb200-1k-calibrated", "set_mib"] == 416 * 1024 / 2048
    assert rows[HIDDEN, "set_mib"] == 2 * 2048 * 7168 * 2 / MIB == 56
    assert rows["kimi-k3-gb200-1k-hidden", "set_mib"] == 2 * 1024 * 7168 * 2 / MIB
    assert rows["kimi-k3-gb200-2k", "peak_memory_pooled_gib"] == k3.load_published().value(
        "k3_2k_seed_mem"
    )  # the presets' published peak is the ledger's


# --------------------------------------------------------------------------- the presets


def test_the_seed_shape_has_64_microbatches_and_64_stock_sets_per_direction_on_middle_stages():
    m = k3.get_preset(CAL).model()
    assert m.shape.n_microbatches == 64 and m.shape.pp == 8
    for i in range(1, 7):
        assert (m.row(i, "forward").stock_sets, m.row(i, "grad").stock_sets) == (64, 64)


def test_the_calibrated_preset_reproduces_52_gib_stock_and_45_gib_saved_within_5_percent():
    p = k3.get_preset(CAL)
    assert (p.config, p.policy) == (PoolConfig(slack=2), "automodel")  # the published run's ring
    m = p.model()
    for stage in (3, 4):  # the two middle stages of eight
        assert m.stage_gib(stage, "stock") == pytest.approx(52, rel=0.05)
        assert m.saved_gib(stage, "automodel") == pytest.approx(45, rel=0.05)
    assert middle_stage(8) == 3


def test_the_calibration_is_416_mib_per_set_of_which_56_mib_is_the_hidden_state():
    cal, hidden = k3.get_preset(CAL), k3.get_preset(HIDDEN)
    assert cal.boundary.forward_bytes == 416 * MIB == 52 * GIB // 128
    assert hidden.boundary.forward_bytes == 56 * MIB == 2 * 2048 * 7168 * 2
    assert cal.boundary.activations[0] == hidden.boundary.activations[0]
    assert cal.figure("set_mib").kind == "derived" and "416" in cal.figure("set_mib").source


def test_the_hidden_state_alone_cannot_produce_the_published_bytes():
    m = k3.get_preset(HIDDEN).model()
    assert m.stage_gib(3, "stock") == 7.0  # 128 x 56 MiB
    table = k3.published_vs_model(k3.get_preset(HIDDEN)).set_index("figure")
    assert table.filter(like="stock receive", axis=0).relative_difference.iloc[0] < -0.8


def test_published_vs_model_for_the_calibrated_preset():
    table = k3.published_vs_model(k3.get_preset(CAL))
    assert list(table.published) == [64, 52, 45]
    assert table.model_middle_stage.tolist() == pytest.approx([64, 52.0, 46.3125])
    assert (table.relative_difference.abs() < 0.05).all()
    assert (table.kind == "published").all() and table.source.str.contains("PR #3780").all()


def test_tight_and_slack_zero_save_beyond_the_published_policy():
    p = k3.get_preset(CAL)
    configs = {
        "automodel s2": (PoolConfig(slack=2), "automodel"),
        "tight s2 g1": (PoolConfig(slack=2, grad_slack=1), "tight"),
        "tight s0 g0": PoolConfig(slack=0, grad_slack=0),  # a PoolConfig alone: tight
    }
    table = compare_configs(p.shape, p.boundary, configs, stage=3).set_index("label")
    # stage 3 of 8: W = 5. automodel K = 7 both ways; tight 7 + 2; live set 5 + 1. 416 MiB a set.
    assert table.loc["automodel s2", ["forward_sets", "grad_sets"]].tolist() == [7, 7]
    assert table.loc["tight s2 g1", "saved_beyond_baseline_gib"] == 5 * 416 / 1024
    assert table.loc["tight s0 g0", "saved_beyond_baseline_gib"] == 8 * 416 / 1024
    assert table.loc["tight s0 g0", "pooled_gib"] == 6 * 416 / 1024


def test_every_preset_states_its_assumption_and_labels_each_figure():
    assert list(k3.PRESETS) == [
        "kimi-k3-gb200-2k-calibrated",
        "kimi-k3-gb200-2k-widths",
        "kimi-k3-gb200-2k-hidden",
        "kimi-k3-gb200-1k-calibrated",
        "kimi-k3-gb200-1k-hidden",
    ]
    for p in k3.PRESETS.values():
        assert p.assumption and p.sources
        kinds = ("published", "derived", "inferred", "assumed")
        assert all(f.kind in kinds and f.source for f in p.figures)
        assert p.shape.n_microbatches == 64 and p.hidden == 7168
    assert k3.get_preset("kimi-k3-gb200-1k-calibrated").figure("set_mib").kind == "assumed"
    assert k3.get_preset("kimi-k3-gb200-1k-calibrated").boundary.forward_bytes == 208 * MIB
    assert k3.get_preset("kimi-k3-gb200-1k-hidden").boundary.forward_bytes == 28 * MIB


def test_an_unknown_preset_lists_the_known_names():
    with pytest.raises(
        MemoryModelError,
        match=r"preset: found 'k3'; required one of 'kimi-k3-gb200-2k-calibrated'.*--list-presets",
    ):
        k3.get_preset("k3")


# --------------------------------------------------------------------------- the widths


def test_the_inferred_rule_reproduces_every_published_width():
    pp3 = boundary_layers(k3.K3_LAYERS, 3)
    assert pp3 == (31, 62)
    assert [k3.k3_width(n) for n in pp3] == [
        _width("k3_pp3_boundary0_width"),
        _width("k3_pp3_boundary1_width"),
    ]
    assert k3.k3_width(4) == _width("k3_rocm_boundary0_width")  # ROCm's first boundary, 4 layers
    rocm = k3.width_boundaries(num_stages=2, rows=1, seq_len=8192, hidden=7168, num_layers=8)[0]
    assert rocm.forward_bytes / MIB == _width("k3_rocm_boundary0_bytes") == 224.0


def test_the_two_readings_differ_only_at_a_multiple_of_twelve_layers():
    for layers in range(1, 94):
        gap = k3.k3_width(layers) - k3.k3_width(layers, at_block_end="closed")
        assert gap == (1 if layers % 12 == 0 else 0)


def test_layers_split_as_automodel_splits_them():
    assert layer_split(32, 4) == (8, 8, 8, 8)  # Automodel's documented generate_hf_model_split
    assert layer_split(k3.K3_LAYERS, 8) == (12, 12, 12, 12, 12, 11, 11, 11)
    assert boundary_layers(k3.K3_LAYERS, 8) == (12, 24, 36, 48, 60, 71, 82)
    with pytest.raises(MemoryModelError, match=r"num_stages: found 9; required at most the layers"):
        layer_split(8, 9)


def test_the_widths_preset_states_what_is_published_inferred_and_assumed():
    base = k3.get_preset(CAL)
    preset = k3.k3_widths_preset(base)
    shown = k3.PRESETS["kimi-k3-gb200-2k-widths"]
    assert preset.name == shown.name and preset.figures == shown.figures
    assert (preset.shape, preset.config) == (base.shape, base.config)
    kinds = {f.name: f.kind for f in preset.figures}
    assert {kinds[f.name] for f in k3.published_widths()} == {"published"}
    assert (kinds["width_rule_hidden_states"], kinds["layers_per_stage"]) == ("inferred", "assumed")
    assert "INFERRED, not published" in preset.assumption and "ASSUMED" in preset.assumption
    widths = [b.forward_bytes // (2 * 2048 * 7168 * 2) for b in preset.boundary_list]
    assert widths == [3, 4, 5, 6, 7, 7, 8]
    hidden = TensorSpec(shape=(2, 2048, 7168), dtype="bfloat16", name="hidden_states")
    assert all(b.activations[0] == hidden for b in preset.boundary_list)


def test_the_widths_preset_beside_the_calibrated_one_per_stage():
    widths, calibrated = (
        k3.get_preset("kimi-k3-gb200-2k-widths").model(),
        k3.get_preset(CAL).model(),
    )
    # stage 3: 64 sets over boundary 2 (5 x 56 MiB) + 64 over boundary 3 (6 x 56 MiB)
    assert widths.stage_gib(3, "stock") == 64 * (5 + 6) * 56 / 1024 == 38.5
    assert calibrated.stage_gib(3, "stock") == 52.0
    stock = [widths.stage_bytes(i, "stock") for i in range(1, 7)]
    assert stock == sorted(stock) and len(set(stock)) == 6  # they grow; the calibration is flat


def test_the_widths_follow_the_stage_count_when_ranks_run_more_stages():
    preset = k3.get_preset("kimi-k3-gb200-2k-widths")
    shape = PipelineShape(pp=8, n_microbatches=64, schedule="Interleaved1F1B", stages_per_rank=2)
    bounds = preset.boundaries_for(shape)
    assert [b.forward_bytes // (2 * 2048 * 7168 * 2) for b in bounds] == [
        k3.k3_width(n) for n in boundary_layers(k3.K3_LAYERS, 16)
    ]
    fixed = k3.get_preset(CAL)
    assert fixed.boundaries_for(shape) == (fixed.boundary,) * 15


# --------------------------------------------------------------------------- the story


def test_the_story_shows_the_prs_oom_and_headroom_beside_the_verdict_and_says_why_they_agree():
    story = k3.k3_story()
    frame = story.to_frame()
    assert story.device is GB200
    assert frame.loc[0, "published"] == "44 GiB" and "44.71 GiB" in frame.loc[0, "modelled"]
    stock = frame[frame.claim.str.startswith("stock 2k")]
    assert len(stock) == 2 and stock.agrees.all() and stock.modelled.str.contains("OOM by").all()
    assert story.sentence.startswith("They agree:") and "one 56 MiB hidden state" in story.sentence
    for (_, verdict), row in zip(story.anchored, story.rows[1:3]):  # the rows are the verdicts'
        assert verdict.worst("stock").text in row.pooltk and verdict.overhead is story.overhead
    none = Overhead(cuda_context_bytes=0, nccl_bytes=0, allocator_bytes=0, source="none")
    # anchored on the fullest stage, stock then fits by 23 MiB
    assert k3.k3_story(overhead=none).sentence.startswith("They differ:")


def test_the_storys_headroom_agrees_within_1_gib_inclusive_as_the_ledgers_does():
    # the ledger's "44 GiB headroom" row agrees at |pooltk - published| <= 1 GiB; the story's
    # "pooled 2k headroom" row states the same rule ("within 1 GiB") and must judge alike
    published = k3.load_published()
    peak = round(published.value("k3_2k_seed_mem") * GIB)
    room = published.value("k3_2k_seed_headroom") + 1  # exactly 1 GiB more than published
    device = Device(name="edge", capacity_bytes=peak + round(room * GIB), source="test")
    row = k3.k3_story(device=device).rows[0]
    assert row.claim == "pooled 2k headroom" and row.rule == "within 1 GiB"
    assert row.agrees is True
    beyond = Device(name="beyond", capacity_bytes=device.capacity_bytes + 1, source="test")
    assert k3.k3_story(device=beyond).rows[0].agrees is False


def test_the_story_takes_a_replay_beside_the_measured_peak():
    from pooltk.memory.decoder.builder import decoder_builder
    from pooltk.memory.decoder.config import decoder_config
    from pooltk.memory.replay.estimate import estimate_memory

    tiny = {"model_type": "llama", "hidden_size": 16, "num_hidden_layers": 2}
    tiny.update(num_attention_heads=2, intermediate_size=24, vocab_size=40)
    builder = decoder_builder(decoder_config(tiny), rows=1, seq_len=8)
    estimate = estimate_memory(builder, PipelineShape(pp=2, n_microbatches=2), variants=("pooled",))
    row = k3.k3_story(estimate=estimate).rows[-1]
    assert row.agrees is None and row.published.startswith("139.6 GiB")
    assert "pooled, fullest rank" in row.claim and "not K3's own layers" in row.inputs


def test_the_estimate_at_k3s_widths_reads_the_published_shape():
    e = k3.ESTIMATE
    assert (e.pp, e.microbatches, e.rows, e.seq_len, e.ep, e.slack) == (8, 64, 2, 2048, 32, 2)
    assert e.checkpointing and e.config["hidden_size"] == 7168 and e.config["v_head_dim"] == 128
    assert "ep 32, 64 microbatches of 2 x 2048 tokens, activation checkpointing on" in e.source


def test_the_named_estimates_are_the_replays_presets_and_the_studys_and_the_notebooks_take_them():
    from pooltk.memory.replay.presets import ESTIMATE_PRESETS
    from pooltk.nb.whole_stage import _named

    named = k3.named_estimates()
    assert named == {**ESTIMATE_PRESETS, k3.ESTIMATE.name: k3.ESTIMATE}
    assert all(_named(name) is preset for name, preset in named.items())
