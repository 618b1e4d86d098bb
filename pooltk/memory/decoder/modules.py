"""The decoder's modules, laid out the way torchtitan's Llama 3 lays them out, plus a
balanced-routing MoE.

[Note: what the decoder computes]
Memory follows from which tensors a forward allocates and autograd keeps, so the op sequence is
torchtitan's Llama 3 (``torchtitan/models/llama3/model/model.py``, read 2026-12), on the GPU's
kernels where the CPU's differ in what they keep (RMSNorm keeps its input and float32 ``rstd`` as
torch's CUDA ``_fused_rms_norm`` does; attention is CPU flash attention, which keeps its output and
log-sum-exp as CUDA's does): RMSNorm before
attention and FFN; q, k, v projections; rotary embedding applied in float32 through complex
numbers; k and v repeated to the query heads (``repeat_kv``); causal scaled-dot-product attention;
the output projection; a SwiGLU FFN (w2(silu(w1 x) * w3 x)); a final RMSNorm and the output
head; cross-entropy on the float32 logits (torchtitan's ``cross_entropy_loss``). Activation
checkpointing ("full") wraps every decoder layer in non-reentrant ``torch.utils.checkpoint``, as
torchtitan's ``checkpoint_wrapper`` does.

The MoE layer routes with a softmax over the experts and top-k, and assumes **balanced routing**:
every (local) expert gets ``tokens x top_k / experts`` tokens, so the grouped expert matmul has
static shapes (a data-dependent count has no fake value). With expert parallelism ``ep`` a rank
holds ``experts / ep`` experts and, balanced, still processes ``tokens x top_k`` token copies;
dispatch and combine are a gather and an ``index_add`` on the rank (the all-to-all's own buffers
are not modelled). Shared experts are one dense SwiGLU of their total width.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from pooltk.memory.decoder.config import DecoderConfig, MoeConfig

__all__ = ["DecoderStage", "FeedForward", "Layer", "MoE", "cross_entropy"]


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


class _FusedRMSNormFn(torch.autograd.Function):
    """RMSNorm keeping for its backward what torch's CUDA kernel (``_fused_rms_norm``) keeps: the
    input, the weight and the float32 ``rstd``; on the CPU ``torch.rms_norm`` is composite and keeps
    float32 copies besides."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        y, rstd = torch._fused_rms_norm(x, [x.shape[-1]], weight, eps)
        ctx.save_for_backward(x, weight, rstd)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight, rstd = ctx.saved_tensors
        normed = x.float() * rstd
        grad_weight = (grad.float() * normed).sum(dim=tuple(range(x.dim() - 1))).to(weight.dtype)
        g = grad.float() * weight.float()
        grad_x = rstd * (g - normed * (g * normed).mean(dim=-1, keepdim=True))
        return grad_x.to(x.dtype), grad_weight, None


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension, with a weight (see :class:`_FusedRMSNormFn` for what it
    keeps)."""

    def __init__(self, dim: int, dtype: torch.dtype, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FusedRMSNormFn.apply(x, self.weight, self.eps)


def _freqs_cis(head_dim: int, seq_len: int, theta: float) -> torch.Tensor:
    # theta ** (-2j / d), written without lifting a Python float into a tensor (a fake mode caches
    # such constants)
    freqs = torch.exp(
        torch.arange(0, head_dim, 2, dtype=torch.float32)[: head_dim // 2]
        * (-math.log(theta) / head_dim)
    )
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return torch.polar(torch.ones_like(angles), angles)  # complex64, (seq, head_dim / 2)


def _rotary(x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs.view(1, x.shape[1], 1, -1)).flatten(3).type_as(x)


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    if n_rep == 1:
        return x
    b, s, kv, d = x.shape
    return x.unsqueeze(3).expand(b, s, kv, n_rep, d).reshape(b, s, kv * n_rep, d)


class Attention(nn.Module):
    """Grouped-query attention with rotary embeddings (see [Note: what the decoder computes])."""

    def __init__(self, cfg: DecoderConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.hidden, cfg.heads * cfg.head_dim, bias=cfg.qkv_bias, dtype=dtype)
        self.wk = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=cfg.qkv_bias, dtype=dtype)
        self.wv = nn.Linear(cfg.hidden, cfg.kv_heads * cfg.head_dim, bias=cfg.qkv_bias, dtype=dtype)
        self.wo = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden, bias=False, dtype=dtype)
        self.q_norm = RMSNorm(cfg.head_dim, dtype=dtype) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(cfg.head_dim, dtype=dtype) if cfg.qk_norm else nn.Identity()

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = _rotary(self.q_norm(q), freqs), _rotary(self.k_norm(k), freqs)
        rep = self.heads // self.kv_heads
        k, v = _repeat_kv(k, rep), _repeat_kv(v, rep)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.wo(out.transpose(1, 2).contiguous().view(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, hidden: int, width: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, width, bias=False, dtype=dtype)
        self.w2 = nn.Linear(width, hidden, bias=False, dtype=dtype)
        self.w3 = nn.Linear(hidden, width, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class MoE(nn.Module):
    """Routed experts (balanced routing, ``experts / ep`` on this rank) plus shared experts."""

    def __init__(self, hidden: int, moe: MoeConfig, ep: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.top_k = moe.top_k
        self.local = moe.experts // ep
        self.router = nn.Linear(hidden, moe.experts, bias=False, dtype=dtype)
        self.w1 = nn.Parameter(torch.empty(self.local, hidden, moe.intermediate, dtype=dtype))
        self.w2 = nn.Parameter(torch.empty(self.local, moe.intermediate, hidden, dtype=dtype))
        self.w3 = nn.Parameter(torch.empty(self.local, hidden, moe.intermediate, dtype=dtype))
        self.shared = (
            FeedForward(hidden, moe.shared_intermediate, dtype) if moe.shared_intermediate else None
        )
        for w in (self.w1, self.w2, self.w3):
            nn.init.normal_(w, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        flat = x.view(b * s, h)
        scores = self.router(flat).float().softmax(dim=-1)
        weights, chosen = scores.topk(self.top_k, dim=-1)
        order = chosen.flatten().argsort()
        tokens = order // self.top_k
        routed = flat[tokens]  # dispatch: tokens x top_k copies, grouped by expert
        n = routed.shape[0]
        per_expert = -(-n // self.local)
        if per_expert * self.local != n:
            routed = torch.cat([routed, routed.new_zeros(per_expert * self.local - n, h)])
        grouped = routed.view(self.local, per_expert, h)
        y = torch.bmm(F.silu(torch.bmm(grouped, self.w1)) * torch.bmm(grouped, self.w3), self.w2)
        y = y.view(-1, h)[:n] * weights.flatten()[order].unsqueeze(-1).to(x.dtype)
        out = torch.zeros_like(flat).index_add(0, tokens, y)  # combine
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(b, s, h)


class Layer(nn.Module):
    """One decoder layer: pre-norm attention and pre-norm FFN (dense or MoE), both residual."""

    def __init__(self, cfg: DecoderConfig, index: int, ep: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.hidden, dtype=dtype)
        self.attention = Attention(cfg, dtype)
        self.ffn_norm = RMSNorm(cfg.hidden, dtype=dtype)
        moe = cfg.moe is not None and cfg.moe.is_moe(index)
        self.feed_forward = (
            MoE(cfg.hidden, cfg.moe, ep, dtype)
            if moe
            else FeedForward(cfg.hidden, cfg.intermediate, dtype)
        )  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), freqs)
        return x + self.feed_forward(self.ffn_norm(x))


class DecoderStage(nn.Module):
    """The part of the decoder one pipeline stage holds: maybe the embedding, some layers, maybe the
    head."""

    def __init__(
        self,
        cfg: DecoderConfig,
        *,
        layers: range,
        embedding: bool,
        head: bool,
        seq_len: int,
        checkpointing: bool,
        ep: int = 1,
    ) -> None:
        super().__init__()
        dtype = _dtype(cfg.dtype)
        self.checkpointing = checkpointing
        self.tok_embeddings = (
            nn.Embedding(cfg.vocab, cfg.hidden, dtype=dtype) if embedding else None
        )
        self.layers = nn.ModuleDict({str(i): Layer(cfg, i, ep, dtype) for i in layers})
        self.norm = RMSNorm(cfg.hidden, dtype=dtype) if head else None
        self.output = nn.Linear(cfg.hidden, cfg.vocab, bias=False, dtype=dtype) if head else None
        self.register_buffer(
            "freqs_cis", _freqs_cis(cfg.head_dim, seq_len, cfg.rope_theta), persistent=True
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        for layer in self.layers.values():
            if self.checkpointing:
                h = checkpoint(layer, h, self.freqs_cis, use_reentrant=False)
            else:
                h = layer(h, self.freqs_cis)
        if self.output is not None:
            h = self.output(self.norm(h))  # type: ignore[misc]
        return h


def cross_entropy(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """torchtitan's ``cross_entropy_loss``: cross-entropy over float32 logits, mean over tokens."""
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
