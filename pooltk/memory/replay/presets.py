"""Named whole-stage estimates: a published model at a published pipeline shape, each number with its source.

The decoder dimensions are written here (the wheel carries no ``data/configs``); the test
``tests/memory/test_replay_presets.py`` holds the Llama entry equal to ``data/configs/llama3_70b_config.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pooltk.config import PoolConfig
from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.known_models import known_model_config
from pooltk.memory.replay.inputs import EstimateInputs
from pooltk.memory.shape import PipelineShape

__all__ = ["ESTIMATE_PRESETS", "EstimatePreset", "LLAMA3_70B", "K3_WIDTHS", "estimate_preset"]

LLAMA3_70B: MappingProxyType = MappingProxyType(
    {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "hidden_act": "silu",
        "hidden_size": 8192,
        "intermediate_size": 28672,
        "max_position_embeddings": 8192,
        "num_attention_heads": 64,
        "num_hidden_layers": 80,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 128256,
    }
)
"""Meta-Llama-3-70B's config.json values (its Hugging Face model card; data/configs/README.md gives the source)."""

_K3_CLASS = "nemo_automodel.components.models.kimi_k3.config.KimiK3TextConfig"


def _k3_widths() -> dict[str, Any]:
    known = known_model_config(_K3_CLASS)
    assert known is not None
    return {
        **known.defaults,
        "model_type": "kimi_k3",
        "v_head_dim": 128,
        "first_k_dense": 1,
        "torch_dtype": "bfloat16",
    }


K3_WIDTHS: MappingProxyType = MappingProxyType(_k3_widths())
"""Kimi-K3's published widths as a decoder config: KimiK3TextConfig's defaults (pooltk's table of known model
configs: hidden 7168, 93 layers, 96 heads, FFN 33792, 896 experts top-16 x 3072, 2 shared, vocab 163840) and, from
the same class (NeMo Automodel's ``nemo_automodel.components.models.kimi_k3.config``), v head dim 128 and the first
layer dense.
K3's KDA and MLA attention and its attention-residual boundary are not what the decoder builds (its attention is
96 heads x 128, key/value heads 96)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class EstimatePreset:
    """A published model at a published pipeline shape."""

    name: str
    """CLI name."""
    config: MappingProxyType
    """The decoder's config.json keys."""
    pp: int
    """Pipeline stages."""
    microbatches: int
    """Microbatches per step."""
    rows: int
    """Rows per microbatch."""
    seq_len: int
    """Tokens per row."""
    checkpointing: bool
    """Full activation checkpointing."""
    ep: int
    """Expert parallelism."""
    slack: int
    """The pool's slack."""
    source: str
    """Where the model and the shape come from."""

    def inputs(self) -> EstimateInputs:
        """What :func:`pooltk.memory.replay.estimate.estimate_memory` replays for this preset."""
        builder = decoder_builder(
            decoder_config(dict(self.config)),
            rows=self.rows,
            seq_len=self.seq_len,
            checkpointing=self.checkpointing,
            ep=self.ep,
        )
        return EstimateInputs(
            builder=builder,
            shape=PipelineShape(pp=self.pp, n_microbatches=self.microbatches),
            config=PoolConfig(slack=self.slack),
            description=builder.describe(),
            sources=(self.source,),
        )


ESTIMATE_PRESETS: MappingProxyType = MappingProxyType(
    {
        p.name: p
        for p in (
            EstimatePreset(
                name="llama3-70b-pp8",
                config=LLAMA3_70B,
                pp=8,
                microbatches=32,
                rows=1,
                seq_len=4096,
                checkpointing=False,
                ep=1,
                slack=2,
                source="Meta-Llama-3-70B's config.json (Hugging Face model card); pp 8, 32 microbatches of 1 x 4096 "
                "tokens: the shape of pooltk issue 29",
            ),
            EstimatePreset(
                name="kimi-k3-gb200-2k",
                config=K3_WIDTHS,
                pp=8,
                microbatches=64,
                rows=2,
                seq_len=2048,
                checkpointing=True,
                ep=32,
                slack=2,
                source="Kimi-K3's published widths (K3_WIDTHS); NVIDIA-NeMo/Automodel PR #3780 and kimi_k3_gb200_2k.yaml: "
                "pp 8, ep 32, 64 microbatches of 2 x 2048 tokens, activation checkpointing on, pool slack 2",
            ),
        )
    }
)
"""The named estimates (``pooltk estimate --preset NAME``)."""


def estimate_preset(name: str) -> EstimatePreset:
    """The preset called ``name``."""
    if name not in ESTIMATE_PRESETS:
        raise MemoryModelError(
            "preset",
            found=repr(name),
            required=f"one of {', '.join(ESTIMATE_PRESETS)} (pooltk estimate --preset)",
            fix="pick a listed name, or give --config / --builder.",
        )
    return ESTIMATE_PRESETS[name]
