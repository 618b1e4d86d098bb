"""The decoder from a config.json: the dense and MoE families' keys, the splits torchtitan and
Automodel make, Llama-3-70B's size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch._subclasses.fake_tensor import FakeTensorMode

from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.decoder.split import stage_plans, torchtitan_split
from pooltk.memory.model import MemoryModelError

LLAMA = Path(__file__).resolve().parents[2] / "data" / "configs" / "llama3_70b_config.json"
BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "intermediate_size": 128,
    "vocab_size": 100,
}


def test_llama_3_70b_built_stage_by_stage_has_its_published_parameter_count():
    # 70,553,706,496 = 2 x 128256 x 8192 (embedding, head) + 80 x 855,654,400 (a layer) + 8192
    # (final norm); the model card gives "70.6B". Built on fake tensors: no memory.
    builder = decoder_builder(decoder_config(LLAMA), rows=1, seq_len=16)
    total = 0
    with FakeTensorMode():
        for stage in range(8):
            total += sum(p.numel() for p in builder(stage, 8).module.parameters())
    assert total == 70_553_706_496


@pytest.mark.parametrize(
    "extra,check",
    [
        (
            {"model_type": "llama"},
            lambda c: (c.kv_heads, c.head_dim, c.qkv_bias, c.moe) == (8, 8, False, None),
        ),
        (
            {"model_type": "qwen2", "num_key_value_heads": 2},
            lambda c: c.qkv_bias and c.kv_heads == 2,
        ),
        ({"model_type": "qwen3", "head_dim": 16}, lambda c: c.qk_norm and c.head_dim == 16),
        (
            {"model_type": "mistral", "sliding_window": 4096},
            lambda c: any("sliding_window" in k for k in c.not_modelled),
        ),
        (
            {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2},
            lambda c: (
                (c.moe.experts, c.moe.top_k, c.moe.intermediate, c.moe.shared_intermediate)
                == (8, 2, 128, 0)
            ),
        ),
        (
            {
                "model_type": "qwen2_moe",
                "num_experts": 60,
                "num_experts_per_tok": 4,
                "moe_intermediate_size": 32,
                "shared_expert_intermediate_size": 96,
            },
            lambda c: (
                (c.moe.experts, c.moe.intermediate, c.moe.shared_intermediate) == (60, 32, 96)
            ),
        ),
        (
            {
                "model_type": "deepseek_v3",
                "n_routed_experts": 16,
                "num_experts_per_tok": 2,
                "n_shared_experts": 1,
                "moe_intermediate_size": 32,
                "first_k_dense_replace": 1,
                "kv_lora_rank": 16,
                "v_head_dim": 8,
            },
            lambda c: (
                c.moe.first_dense == 1
                and not c.moe.is_moe(0)
                and c.moe.is_moe(1)
                and c.moe.shared_intermediate == 32
                and any("kv_lora_rank" in k for k in c.not_modelled)
            ),
        ),
    ],
)
def test_each_family_reads_its_own_keys(extra, check):
    assert check(decoder_config({**BASE, **extra}))


def test_bad_configs_name_the_key_and_the_fix():
    with pytest.raises(
        MemoryModelError,
        match=r"^config key 'vocab_size': found nothing \(missing\).*Fix: add \"vocab_size\"",
    ):
        decoder_config({k: v for k, v in BASE.items() if k != "vocab_size"})
    with pytest.raises(
        MemoryModelError, match=r"^config key 'head_dim': found nothing, and hidden 7168 / 96 heads"
    ):
        decoder_config({**BASE, "hidden_size": 7168, "num_attention_heads": 96})
    with pytest.raises(MemoryModelError, match=r"^DecoderConfig.kv_heads: found 3 with 8 heads"):
        decoder_config({**BASE, "num_key_value_heads": 3})
    with pytest.raises(MemoryModelError, match=r"^ep: found 3 for 8 experts"):
        decoder_builder(
            decoder_config({**BASE, "num_local_experts": 8, "num_experts_per_tok": 2}),
            rows=1,
            seq_len=4,
            ep=3,
        )


def test_the_splits_are_automodels_and_torchtitans():
    assert tuple(len(p.layers) for p in stage_plans(93, 8)) == (12, 12, 12, 12, 12, 11, 11, 11)
    assert torchtitan_split(80, 8) == (10, 11, 10, 10, 10, 10, 10, 9)
    plans = stage_plans(80, 8, "torchtitan")
    assert (
        plans[0].embedding
        and plans[-1].head
        and plans[-1].describe() == "layers 71-79 + norm + head"
    )
    assert stage_plans(4, 2, (3, 1))[1].layers == range(3, 4)
    with pytest.raises(
        MemoryModelError, match=r"^split: found \(3, 3\) \(6 layers over 2 stages\)"
    ):
        stage_plans(4, 2, (3, 3))


def test_the_committed_llama_config_is_the_model_cards():
    cfg = json.loads(LLAMA.read_text())
    assert (
        cfg["hidden_size"],
        cfg["num_hidden_layers"],
        cfg["num_attention_heads"],
        cfg["num_key_value_heads"],
        cfg["intermediate_size"],
        cfg["vocab_size"],
        cfg["tie_word_embeddings"],
    ) == (8192, 80, 64, 8, 28672, 128256, False)


def test_a_config_file_that_is_not_a_json_object_is_named_with_its_position(tmp_path):
    """The decoder reads config.json through the one config-file reader (pooltk.memory.configs)."""
    broken = tmp_path / "config.json"
    broken.write_text('{"hidden_size": 64,\n "vocab_size": }')
    with pytest.raises(MemoryModelError, match=r"not valid JSON at line 2, column \d+"):
        decoder_config(broken)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(MemoryModelError, match=r"holds a list, not a mapping"):
        decoder_config(listed)
    with pytest.raises(MemoryModelError, match=r"missing\.json.*readable JSON file"):
        decoder_config(tmp_path / "missing.json")
