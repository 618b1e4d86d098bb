"""Model config classes pooltk knows without importing them: their defaults, with provenance.

Automodel YAMLs build their model from a config class (``model.config._target_``) and often
carry no ``hidden_size``. :mod:`pooltk.memory.configs` reads the class's defaults by importing
it when it can; where the class is not installed (nemo-automodel is large and not a pooltk
dependency) it falls back to this table.

[Note: known model configs]
Every entry was read from the class's source in a named release, not from documentation:
the defaults of ``__init__`` as the class builds them when the YAML passes no arguments. An
entry is keyed by the class's dotted import path (what ``_target_`` says); a YAML that passes
arguments overrides the matching defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["KNOWN_MODEL_CONFIGS", "KnownModelConfig", "known_model_config"]


@dataclass(kw_only=True, slots=True, frozen=True)
class KnownModelConfig:
    """The defaults of one model config class, as read from a named release."""

    target: str
    """Dotted import path of the class, as a YAML's ``_target_`` names it."""
    defaults: MappingProxyType
    """Constructor defaults that matter to pooltk (``hidden_size``, ``num_hidden_layers``, ...)."""
    source: str
    """Where the defaults were read: package, version, file, and the wheel's sha256."""
    read_on: str
    """Date the source was read (UTC)."""

    @property
    def class_name(self) -> str:
        """The class's own name (the last part of ``target``)."""
        return self.target.rsplit(".", 1)[-1]

    def with_args(self, args: dict[str, Any]) -> dict[str, Any]:
        """The defaults with a YAML's constructor arguments laid over them."""
        return {**self.defaults, **args}


_K3 = KnownModelConfig(
    target="nemo_automodel.components.models.kimi_k3.config.KimiK3TextConfig",
    defaults=MappingProxyType(
        {
            "hidden_size": 7168,
            "num_hidden_layers": 93,
            "num_attention_heads": 96,
            "intermediate_size": 33792,
            "moe_intermediate_size": 3072,
            "num_experts": 896,
            "num_experts_per_token": 16,
            "num_shared_experts": 2,
            "vocab_size": 163840,
        }
    ),
    source=(
        "nemo-automodel 0.7.0 from the package index (nemo_automodel-0.7.0-py3-none-any.whl, "
        "sha256 37b8397a73c17e4a8bffd0cd3becc0507abecc1ebfea3b3eb6468eed57ba6674), "
        "nemo_automodel/components/models/kimi_k3/config.py, KimiK3TextConfig.__init__ defaults; "
        "the class sets no torch_dtype default"
    ),
    read_on="2026-11-30",
)

KNOWN_MODEL_CONFIGS: MappingProxyType = MappingProxyType({_K3.target: _K3})
"""Known config classes by dotted path. See [Note: known model configs]."""


def known_model_config(target: str) -> KnownModelConfig | None:
    """The table entry for ``target`` (a dotted path), or ``None``."""
    return KNOWN_MODEL_CONFIGS.get(str(target).strip())
