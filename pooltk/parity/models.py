"""Small deterministic models for the parity harness, for both pipelining frontends.

Every stage is ``layers_per_stage`` residual blocks ``x + tanh(x @ W + b)`` over
(rows, seq_len, hidden) float32 activations, so each stage boundary carries exactly one
tensor of shape (rows_per_microbatch, seq_len, hidden) forward and one of the same shape
backward: the memory model's "one boundary tensor" case. The first linear of each stage
reads the stage input in its weight gradient, so a receive buffer overwritten before the
backward changes the gradients (this is what makes the negative controls fail).
Weights are seeded per *global* layer index, so the manual frontend (one module per
stage) and the tracing frontend (one whole model split by ``pipeline()``) start equal.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Block", "ToyModel", "make_batch", "make_stage_module"]


class Block(nn.Module):
    def __init__(self, hidden: int, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.lin = nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(hidden, hidden, generator=gen) / hidden**0.5)
            self.lin.bias.copy_(torch.randn(hidden, generator=gen) * 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.lin(x))


class ToyModel(nn.Module):
    """A stack of blocks; ``first_layer`` offsets the seeds so a slice equals the whole model's slice."""

    def __init__(self, hidden: int, n_layers: int, *, first_layer: int = 0, seed: int = 0) -> None:
        super().__init__()
        self.layers = nn.Sequential(*(Block(hidden, seed * 100_003 + first_layer + k) for k in range(n_layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def make_stage_module(*, hidden: int, layers_per_stage: int, stage_index: int, seed: int) -> ToyModel:
    """The manual frontend's module for one stage."""
    return ToyModel(hidden, layers_per_stage, first_layer=stage_index * layers_per_stage, seed=seed)


def make_batch(
    *, rows: int, seq_len: int, hidden: int, step: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Input and regression target of one optimizer step (same on every rank and variant)."""
    gen = torch.Generator().manual_seed(seed * 7919 + step)
    x = torch.randn(rows, seq_len, hidden, generator=gen)
    y = torch.randn(rows, seq_len, hidden, generator=gen)
    return x, y
