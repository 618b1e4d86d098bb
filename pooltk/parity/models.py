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

__all__ = ["AUX_MODES", "BODIES", "Block", "FuzzStage", "ToyModel", "fuzz_loss", "make_batch", "make_stage_module"]


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


# ---------------------------------------------------------------------------------------
# Fuzz stage bodies (pooltk.parity.fuzz): what a stage does with what it received.
#
# Each body maps the received main activation ``h`` (float32, (rows, seq, hidden)) to the
# next one; several deliberately hand back tensors that share storage with ``h``, which in
# a pooled stage is a receive slot (views, slices, passthroughs, transposes), or keep such
# a tensor after the forward (a hook). With ``aux`` every boundary also carries a second
# tensor of another dtype (float64, (rows, seq, 1)).
# ---------------------------------------------------------------------------------------

BODIES: tuple[str, ...] = ("block", "view", "slice", "passthrough", "residual_detach", "inplace", "checkpoint",
                           "hook", "transpose")
"""Stage body kinds the fuzzer draws from (see :class:`FuzzStage`)."""

AUX_MODES: tuple[str, ...] = ("pass", "mix")
"""``pass``: the aux tensor is handed on unchanged (an alias of its slot); ``mix``: recomputed."""


class FuzzStage(nn.Module):
    """One fuzz stage: a body (one of :data:`BODIES`) over ``h``, optionally an aux tensor of another dtype.

    ``kept`` collects what the ``hook`` body's forward hook stored (a view of the received input);
    the harness digests and clears it after every step.
    """

    def __init__(self, body: str, *, hidden: int, seed: int, first: bool, aux: str | None) -> None:
        super().__init__()
        if body not in BODIES:
            raise ValueError(f"FuzzStage: body found {body!r}; required one of {BODIES}.")
        if aux is not None and aux not in AUX_MODES:
            raise ValueError(f"FuzzStage: aux found {aux!r}; required None or one of {AUX_MODES}.")
        self.body, self.first, self.aux_mode = body, first, aux
        self.block = Block(hidden, seed)
        gen = torch.Generator().manual_seed(seed + 17)
        self.aux_w = nn.Parameter(torch.randn(hidden, generator=gen, dtype=torch.float64) / hidden)
        self.kept: list[torch.Tensor] = []
        if body == "hook":
            self.block.register_forward_hook(lambda _m, inp, _out: self.kept.append(inp[0][..., :2]))

    def _body(self, h: torch.Tensor) -> torch.Tensor:
        b = self.body
        if b == "block" or b == "hook":
            return self.block(h)
        if b == "view":
            return h.view(-1, h.shape[-1]).view(h.shape)
        if b == "slice":
            return h.narrow(0, 0, max(1, h.shape[0] - 1))  # fewer rows: a contiguous view
        if b == "passthrough":
            return h
        if b == "residual_detach":
            return torch.tanh(self.block.lin(h)) + h.detach()
        if b == "inplace":
            y = self.block.lin(h)
            y.mul_(0.5).add_(h)
            return y
        if b == "checkpoint":
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self.block, h, use_reentrant=False)
        if b == "transpose":
            return h.transpose(1, 2).transpose(1, 2)
        raise AssertionError(b)

    def _aux_of(self, h: torch.Tensor) -> torch.Tensor:
        """(rows, 1, 1) float64 summary of ``h`` (shape-independent of slicing)."""
        return (h.double() * self.aux_w).sum(-1, keepdim=True).mean(1, keepdim=True)

    def forward(self, *inputs: torch.Tensor):  # -> Tensor | tuple[Tensor, Tensor]
        h = inputs[0]
        if self.first:
            h = self.block(h)  # stage 0 always computes (its input is the root argument)
            aux = None if self.aux_mode is None else self._aux_of(h)
        else:
            aux = inputs[1] if len(inputs) > 1 else None
        out = self._body(h) if not self.first or self.body not in ("block", "hook") else h
        if self.aux_mode is None:
            return out
        if self.aux_mode == "mix" and not self.first:
            aux = aux * 0.5 + self._aux_of(h)
        return out, aux


def fuzz_loss(output, target) -> torch.Tensor:  # noqa: ANN001 - any output structure
    """Loss over any last-stage output (one tensor or a tuple), independent of its shape."""
    del target
    outs = output if isinstance(output, (tuple, list)) else (output,)
    return sum((t.float() ** 2).mean() for t in outs)
