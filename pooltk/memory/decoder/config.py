"""A decoder's dimensions read from a Hugging Face ``config.json``: dense (Llama, Qwen, Mistral) and
MoE.

[Note: decoder config keys]
Read, first key that is present wins (``text_config.<key>`` too, for multimodal wrappers):

- hidden ``hidden_size``; layers ``num_hidden_layers``; heads ``num_attention_heads``; kv heads
  ``num_key_value_heads`` (default: the heads); head dim ``head_dim`` (default hidden / heads);
  FFN width ``intermediate_size``; vocabulary ``vocab_size``; tied embeddings
  ``tie_word_embeddings`` (default false, as LlamaConfig, Qwen2Config and MistralConfig set it);
  q/k/v bias ``attention_bias`` (Qwen2's ``model_type`` ``qwen2`` / ``qwen2_moe`` always has it);
  per-head q/k RMSNorm for ``qwen3`` / ``qwen3_moe``; dtype ``torch_dtype`` / ``dtype``;
- experts ``num_local_experts`` (Mixtral), ``num_experts`` (Qwen-MoE, Kimi), ``n_routed_experts``
  (DeepSeek); top-k ``num_experts_per_tok`` / ``num_experts_per_token``; expert width
  ``moe_intermediate_size`` (else ``intermediate_size``, as Mixtral); shared experts
  ``n_shared_experts`` / ``num_shared_experts`` (that many experts' width) or
  ``shared_expert_intermediate_size`` (one of that width, Qwen2-MoE); dense layers first
  ``first_k_dense_replace`` / ``first_k_dense``; every ``decoder_sparse_step``-th layer MoE;
  ``mlp_only_layers`` dense.

Keys of architectures this decoder does not build (multi-head latent attention's
``q_lora_rank`` / ``kv_lora_rank``, linear attention, sliding windows, attention residuals) are
listed in :attr:`DecoderConfig.not_modelled`: attention there is modelled as grouped-query
attention of ``heads x head_dim``, which is what the estimate then measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltk.memory.errors import MemoryModelError
from pooltk.memory.tensors import dtype_name

__all__ = ["DecoderConfig", "MoeConfig", "decoder_config"]

_IGNORED_KEYS: dict[str, str] = {
    "q_lora_rank": "multi-head latent attention (low-rank q)",
    "kv_lora_rank": "multi-head latent attention (low-rank kv)",
    "sliding_window": "sliding-window attention (a mask: no change to what SDPA keeps)",
    "linear_attn_config": "linear attention layers",
    "attn_res_block_size": "attention residual blocks (the stage boundary carries more than one "
    "hidden state)",
    "num_nextn_predict_layers": "multi-token prediction layers",
}


def floating_dtype(dtype: Any, what: str) -> str:
    """torch's name of a floating ``dtype`` (a decoder's weights and activations), else
    :class:`MemoryModelError` naming ``what``."""
    name = dtype_name(dtype, what)
    if not name.startswith(("float", "bfloat")):
        raise MemoryModelError(
            what,
            found=repr(dtype),
            required="a floating dtype (bfloat16, float16, float32)",
            fix="give e.g. bfloat16.",
        )
    return name


@dataclass(kw_only=True, slots=True, frozen=True)
class MoeConfig:
    """The mixture-of-experts part of a decoder. See [Note: decoder config keys]."""

    experts: int
    """Routed experts per MoE layer (the whole model's; divided over expert parallelism at
    build)."""
    top_k: int
    """Experts each token is routed to."""
    intermediate: int
    """Width of one routed expert's FFN."""
    shared_intermediate: int = 0
    """Total width of the shared experts' FFN (0: none)."""
    first_dense: int = 0
    """Leading layers that keep a dense FFN."""
    every: int = 1
    """Every ``every``-th layer (counting from 1) is MoE, the others dense."""
    dense_layers: tuple[int, ...] = ()
    """Layers named dense explicitly (``mlp_only_layers``)."""

    def is_moe(self, layer: int) -> bool:
        """Whether ``layer`` (0-based) has routed experts."""
        return (
            layer >= self.first_dense
            and (layer + 1) % self.every == 0
            and layer not in self.dense_layers
        )


@dataclass(kw_only=True, slots=True, frozen=True)
class DecoderConfig:
    """A decoder-only transformer's dimensions. See [Note: decoder config keys]."""

    hidden: int
    """Model width."""
    layers: int
    """Decoder layers."""
    heads: int
    """Attention (query) heads."""
    kv_heads: int
    """Key/value heads (grouped-query attention)."""
    head_dim: int
    """Width of one head."""
    intermediate: int
    """Dense FFN width (SwiGLU: gate, up, down)."""
    vocab: int
    """Vocabulary size (embedding and output head rows)."""
    tie_embeddings: bool = False
    """Whether the output head shares the embedding's weight (under PP the first and last stage each
    hold a copy)."""
    qkv_bias: bool = False
    """Biases on the q, k, v projections."""
    qk_norm: bool = False
    """Per-head RMSNorm on q and k (Qwen3)."""
    dtype: str = "bfloat16"
    """Parameter and activation dtype."""
    moe: MoeConfig | None = None
    """The MoE part, when the config has routed experts."""
    family: str = ""
    """``model_type`` (``llama``, ``qwen2``, ``mistral``, ``mixtral``, ...)."""
    not_modelled: tuple[str, ...] = ()
    """Config keys present that describe structure this decoder does not build (see the note)."""
    source: str = ""
    """Where the dimensions come from."""
    rope_theta: float = 10000.0
    """RoPE base (no memory effect; kept for completeness)."""

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MemoryModelError(
                    f"DecoderConfig.{name}",
                    found=repr(value),
                    required="an integer >= 1",
                    fix="give the model's dimension as a whole number.",
                )
        if self.heads % self.kv_heads:
            raise MemoryModelError(
                "DecoderConfig.kv_heads",
                found=f"{self.kv_heads} with {self.heads} heads",
                required="a divisor of the attention heads (grouped-query attention)",
                fix="check num_key_value_heads against num_attention_heads.",
            )
        object.__setattr__(self, "dtype", floating_dtype(self.dtype, "DecoderConfig.dtype"))

    def describe(self) -> str:
        """One line: family, widths, MoE."""
        text = (
            f"{self.family or 'decoder'}: hidden {self.hidden}, {self.layers} layers, {self.heads} "
            f"heads ({self.kv_heads} kv, head dim {self.head_dim}), FFN {self.intermediate}, vocab "
            f"{self.vocab}, {self.dtype}"
        )
        if self.tie_embeddings:
            text += ", tied embeddings"
        if self.moe is not None:
            m = self.moe
            text += f"; MoE {m.experts} experts top-{m.top_k} x {m.intermediate}"
            if m.shared_intermediate:
                text += f", shared {m.shared_intermediate}"
            if m.first_dense:
                text += f", first {m.first_dense} dense"
        return text


_MISSING = object()


def _get(cfg: dict, *keys: str, default: Any = _MISSING) -> tuple[str, Any]:
    for key in keys:
        for scope in (
            cfg,
            cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None,
        ):
            if scope is not None and key in scope and scope[key] is not None:
                return key, scope[key]
    return keys[0], default


def _int(cfg: dict, *keys: str, meaning: str, example: int, default: Any = _MISSING) -> int:
    key, value = _get(cfg, *keys, default=default)
    if value is _MISSING:
        raise MemoryModelError(
            f"config key {key!r}",
            found="nothing (missing)",
            required=f"{meaning}, an integer >= 1",
            fix=f'add "{key}": {example} to the config.json.',
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MemoryModelError(
            f"config key {key!r}",
            found=f"{value!r} ({type(value).__name__})",
            required=f"{meaning}, a whole number",
            fix=f"write it as an integer, e.g. {example}.",
        )
    return value


def _moe_config(cfg: dict, inter: int) -> MoeConfig | None:
    """The MoE part of a config.json (``None``: no routed experts).
    See [Note: decoder config keys]."""
    experts = _int(
        cfg,
        "num_local_experts",
        "num_experts",
        "n_routed_experts",
        meaning="routed experts",
        example=8,
        default=0,
    )
    if not experts:
        return None
    top_k = _int(
        cfg,
        "num_experts_per_tok",
        "num_experts_per_token",
        meaning="experts per token",
        example=2,
    )
    width = _int(
        cfg,
        "moe_intermediate_size",
        meaning="a routed expert's FFN width",
        example=inter,
        default=inter,
    )
    return MoeConfig(
        experts=experts,
        top_k=top_k,
        intermediate=width,
        shared_intermediate=_shared_width(cfg, width),
        **_moe_layers(cfg),
    )


def _shared_width(cfg: dict, width: int) -> int:
    """Total width of the shared experts' FFN: ``shared_expert_intermediate_size``, else that
    many experts' ``width`` (0: none)."""
    n_shared = _int(
        cfg,
        "n_shared_experts",
        "num_shared_experts",
        meaning="shared experts",
        example=1,
        default=0,
    )
    return _int(
        cfg,
        "shared_expert_intermediate_size",
        meaning="the shared expert's width",
        example=width,
        default=n_shared * width,
    )


def _moe_layers(cfg: dict) -> dict[str, Any]:
    """Which layers have routed experts: :class:`MoeConfig`'s ``first_dense``, ``every`` and
    ``dense_layers``."""
    first = _int(
        cfg,
        "first_k_dense_replace",
        "first_k_dense",
        meaning="leading dense layers",
        example=1,
        default=0,
    )
    every = (
        _int(cfg, "decoder_sparse_step", meaning="the MoE layer step", example=1, default=1) or 1
    )
    dense = tuple(_get(cfg, "mlp_only_layers", default=())[1] or ())
    return {"first_dense": first, "every": every, "dense_layers": dense}


def _attention(cfg: dict) -> tuple[int, int, int, int]:
    """``(hidden, heads, kv_heads, head_dim)``; a head width is required when the heads do not
    divide the hidden size."""
    hidden = _int(cfg, "hidden_size", "n_embd", "d_model", meaning="the hidden size", example=4096)
    heads = _int(cfg, "num_attention_heads", "n_head", meaning="attention heads", example=32)
    kv = _int(cfg, "num_key_value_heads", meaning="key/value heads", example=8, default=heads)
    if hidden % heads and _get(cfg, "head_dim", "v_head_dim", default=None)[1] is None:
        raise MemoryModelError(
            "config key 'head_dim'",
            found=f"nothing, and hidden {hidden} / {heads} heads = {hidden / heads:g}",
            required="a head width (head_dim or v_head_dim) when the heads do not divide the "
            "hidden size",
            fix='add "head_dim": 128 (the model\'s attention head width) to the config.json.',
        )
    head_dim = _int(
        cfg,
        "head_dim",
        "v_head_dim",
        meaning="the head width",
        example=128,
        default=hidden // heads,
    )
    return hidden, heads, kv, head_dim


def decoder_config(source: str | Path | dict, *, dtype: str | None = None) -> DecoderConfig:
    """A :class:`DecoderConfig` from a Hugging Face ``config.json`` (a path or the parsed dict).

    See [Note: decoder config keys]. Missing or mistyped keys raise :class:`MemoryModelError`
    naming the key and the fix; ``dtype`` overrides the file's ``torch_dtype``.
    """
    from pooltk.memory.configs import read_file  # the one reader of config files

    cfg, where = read_file(source, "JSON")
    family = str(_get(cfg, "model_type", default="")[1] or "")
    hidden, heads, kv, head_dim = _attention(cfg)
    layers = _int(cfg, "num_hidden_layers", "n_layer", meaning="decoder layers", example=32)
    inter = _int(cfg, "intermediate_size", "ffn_dim", meaning="the FFN width", example=14336)
    vocab = _int(cfg, "vocab_size", meaning="the vocabulary size", example=32000)
    tie = bool(_get(cfg, "tie_word_embeddings", default=False)[1])
    qkv_bias = bool(_get(cfg, "attention_bias", default=False)[1]) or family in (
        "qwen2",
        "qwen2_moe",
    )
    moe = _moe_config(cfg, inter)
    file_dtype = _get(cfg, "torch_dtype", "dtype", default=None)[1]
    ignored = tuple(
        f"{k} ({why})"
        for k, why in _IGNORED_KEYS.items()
        if _get(cfg, k, default=None)[1] not in (None, 0, False)
    )
    return DecoderConfig(
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv,
        head_dim=head_dim,
        intermediate=inter,
        vocab=vocab,
        tie_embeddings=tie,
        qkv_bias=qkv_bias,
        qk_norm=family in ("qwen3", "qwen3_moe"),
        dtype=str(dtype or file_dtype or "bfloat16"),
        moe=moe,
        family=family,
        not_modelled=ignored,
        source=where,
        rope_theta=float(_get(cfg, "rope_theta", default=10000.0)[1]),
    )
