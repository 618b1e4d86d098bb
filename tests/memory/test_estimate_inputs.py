"""What the estimate replays, from a config.json, an Automodel YAML, a torchtitan TOML, a named
estimate or a builder."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from pooltk.memory.configs import Overrides
from pooltk.memory.model import MemoryModelError
from pooltk.memory.replay.inputs import estimate_inputs
from pooltk.memory.replay.presets import ESTIMATE_PRESETS, LLAMA3_70B, estimate_preset
from pooltk.studies.kimi_k3 import ESTIMATE

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
TINY = {
    "model_type": "llama",
    "hidden_size": 16,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "intermediate_size": 24,
    "vocab_size": 40,
}


def _toml(tmp_path: Path, mode: str = "full", assets: bool = True) -> Path:
    (tmp_path / "assets" / "tiny").mkdir(parents=True)
    if assets:
        (tmp_path / "assets" / "tiny" / "config.json").write_text(json.dumps(TINY))
    path = tmp_path / "job.toml"
    path.write_text(
        textwrap.dedent(f"""
        [model]
        name = "llama3"
        flavor = "tiny"
        hf_assets_path = "./assets/tiny"
        [training]
        local_batch_size = 16
        seq_len = 32
        [parallelism]
        pipeline_parallel_degree = 4
        pipeline_parallel_schedule = "Interleaved1F1B"
        pipeline_parallel_microbatch_size = 2
        [activation_checkpoint]
        mode = "{mode}"
    """)
    )
    return path


def test_a_torchtitan_toml_gives_the_pipeline_and_its_hf_assets_give_the_model(tmp_path):
    got = estimate_inputs(_toml(tmp_path))
    assert (got.shape.pp, got.shape.n_microbatches, got.shape.schedule, got.shape.num_stages) == (
        4,
        8,
        "interleaved1f1b",
        8,
    )
    assert got.builder.checkpointing and (got.builder.rows, got.builder.seq_len) == (2, 32)
    assert got.builder.config.hidden == 16 and any("config.json" in s for s in got.sources)


def test_a_toml_the_estimate_cannot_honour_says_so(tmp_path):
    with pytest.raises(
        MemoryModelError,
        match=r"activation_checkpoint\.mode'?: found 'selective'.*--checkpointing full",
    ):
        estimate_inputs(_toml(tmp_path, mode="selective"))
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(
        MemoryModelError, match=r"^model: found no model dimensions.*Fix: give --model-config"
    ):
        estimate_inputs(_toml(other, assets=False))


def test_the_k3_automodel_yaml_gives_pipeline_checkpointing_and_experts_and_asks_for_a_head_width():
    with pytest.raises(
        MemoryModelError, match=r"^config key 'head_dim': found nothing, and hidden 7168 / 96 heads"
    ):
        estimate_inputs(CONFIGS / "kimi_k3_gb200_2k_automodel.yaml")
    k3 = ESTIMATE.inputs()
    assert (k3.shape.pp, k3.shape.n_microbatches, k3.builder.ep, k3.builder.checkpointing) == (
        8,
        64,
        32,
        True,
    )
    assert k3.builder.config.moe.experts == 896 and k3.builder.config.head_dim == 128


def test_a_config_json_takes_its_pipeline_from_the_flags():
    got = estimate_inputs(
        CONFIGS / "llama3_70b_config.json", Overrides(pp=8, microbatches=32, seq_len=4096)
    )
    assert got.shape.describe() == "pp=8 M=32 schedule=1f1b" and got.builder.config.layers == 80
    with pytest.raises(MemoryModelError, match=r"no Overrides\.seq_len"):
        estimate_inputs(CONFIGS / "llama3_70b_config.json", Overrides(pp=8, microbatches=32))


def test_a_builder_entry_point_is_loaded_or_refused_by_name():
    with pytest.raises(
        MemoryModelError, match=r"^--builder: found 'nocolon'.*package\.module:function"
    ):
        estimate_inputs(builder="nocolon", overrides=Overrides(pp=2, microbatches=2))
    with pytest.raises(
        MemoryModelError, match=r"^--builder: found 'json:nothing_here': json has no callable"
    ):
        estimate_inputs(builder="json:nothing_here", overrides=Overrides(pp=2, microbatches=2))
    with pytest.raises(MemoryModelError, match=r"^estimate source: found neither"):
        estimate_inputs()


def test_the_named_llama_estimate_is_the_committed_config():
    assert dict(LLAMA3_70B) == json.loads((CONFIGS / "llama3_70b_config.json").read_text())
    assert set(ESTIMATE_PRESETS) == {"llama3-70b-pp8"}  # Kimi-K3's is its study's ESTIMATE
    with pytest.raises(
        MemoryModelError,
        match=r"^preset: found 'kimi-k3-gb200-2k-calibrated'; required one of llama3-70b-pp8",
    ):
        estimate_preset("kimi-k3-gb200-2k-calibrated")
