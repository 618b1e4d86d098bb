"""Named whole-stage estimates: a published model at a published pipeline shape, with sources.

The decoder dimensions are written here (the wheel carries no ``data/configs``); the test
``tests/memory/test_estimate_inputs.py`` holds the Llama entry equal to
``data/configs/llama3_70b_config.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pooltk.config import PoolConfig
from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.replay.inputs import EstimateInputs
from pooltk.memory.shape import PipelineShape

__all__ = ["ESTIMATE_PRESETS", "LLAMA3_70B", "EstimatePreset", "estimate_preset"]

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
"""Meta-Llama-3-70B's config.json values (its Hugging Face model card; data/configs/README.md gives
the source)."""


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
                source="Meta-Llama-3-70B's config.json (Hugging Face model card); pp 8, 32 "
                "microbatches of 1 x 4096 tokens: the shape of pooltk issue 29",
            ),
        )
    }
)
"""The named estimates of models pooltk's decoder builds from their own config.json; a study adds
its own (Kimi-K3's published widths: :data:`pooltk.studies.kimi_k3.ESTIMATE`)."""


def estimate_preset(
    name: str, presets: Mapping[str, EstimatePreset] = ESTIMATE_PRESETS
) -> EstimatePreset:
    """The preset called ``name`` among ``presets`` (``pooltk estimate --preset NAME``)."""
    if name not in presets:
        raise MemoryModelError(
            "preset",
            found=repr(name),
            required=f"one of {', '.join(presets)} (pooltk estimate --preset)",
            fix="pick a listed name, or give --config / --builder.",
        )
    return presets[name]
