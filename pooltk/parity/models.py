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

__all__ = [
    "AUX_MODES",
    "BODIES",
    "OUTSIDE_CONTRACT",
    "SPLIT_BACKWARD_BODIES",
    "SPLIT_BACKWARD_RACY",
    "STATEFUL_BODIES",
    "VIEW_OUTPUT_BODIES",
    "Block",
    "FuzzStage",
    "ToyModel",
    "fuzz_loss",
    "make_batch",
    "make_stage_module",
]


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
    """A stack of blocks; ``first_layer`` offsets the seeds so a slice equals the whole model's
    slice."""

    def __init__(self, hidden: int, n_layers: int, *, first_layer: int = 0, seed: int = 0) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            *(Block(hidden, seed * 100_003 + first_layer + k) for k in range(n_layers))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def make_stage_module(
    *, hidden: int, layers_per_stage: int, stage_index: int, seed: int
) -> ToyModel:
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

BODIES: tuple[str, ...] = (
    "block",
    "view",
    "slice",
    "passthrough",
    "residual_detach",
    "inplace",
    "checkpoint",
    "hook",
    "transpose",
    "grad_hook",
    "keep_prev",
    "keep_prev_graph",
    "keep_graph",
    "keep_window",
    "ptr_cache",
    "dlpack",
    "dlpack_numpy",
)
"""Stage body kinds the fuzzer draws from (see :class:`FuzzStage`)."""

VIEW_OUTPUT_BODIES: tuple[str, ...] = ("view", "slice", "inplace", "transpose")
"""Bodies whose stage output is a view (``inplace`` too: a 3-D linear's output is a view). torch's
split backward (``stage_backward_input``) detaches stage outputs in place, which a view refuses,
so the zero-bubble and V schedules reject these in training; the fuzzer does not draw them there."""

SPLIT_BACKWARD_RACY: tuple[str, ...] = ("keep_prev_graph", "keep_graph")
"""Bodies whose backward adds into the *previous* microbatch's input gradient. torch's split
backward accumulates that in place (``inp.grad += dinput``) while the previous gradient's send may
still be in flight, so stock torch itself is not reproducible with them: measured on DualPipeV
(pp3/pp4, seed 2026 cases 41, 53, 455 of ``pooltk fuzz``), two stock runs of the same model differ
by up to 4.2e-4."""

SPLIT_BACKWARD_BODIES: tuple[str, ...] = tuple(
    b for b in BODIES if b not in VIEW_OUTPUT_BODIES and b not in SPLIT_BACKWARD_RACY
)
"""Bodies the fuzzer draws for training on split-backward schedules: torch accepts them (checked
against torch in ``tests/unit/test_fuzz_bodies.py``) and stock is reproducible with them."""

STATEFUL_BODIES: dict[str, str] = {
    "grad_hook": "a gradient hook registered on the received input every forward",
    "keep_prev": "the previous microbatch's input kept without its graph (h.detach())",
    "keep_prev_graph": "the previous microbatch's input kept with its graph (self.prev = h)",
    "keep_graph": "the previous microbatch's graph kept (a term over its input; only autograd "
    "holds the input)",
    "keep_window": "the previous step's inputs kept in a list (a gradient-accumulation window)",
    "ptr_cache": "a cache keyed by the received input's x.data_ptr(), cleared every step",
    "dlpack": "a DLPack export of the previous microbatch's input kept (torch.from_dlpack)",
    "dlpack_numpy": "a DLPack export of the previous microbatch's input kept (numpy.from_dlpack)",
}
"""Bodies that keep something of their received input beyond its forward, and what."""

OUTSIDE_CONTRACT: dict[str, str] = {
    "ptr_cache": (
        "a cache keyed by the received input's x.data_ptr(): an address is not an identity (under "
        "torch 2.15's per-receive buffers a freed buffer's address goes to the next allocation, "
        "measured in data/validation/address_reuse_2026-12-02.csv), so such a cache is outside "
        "what torch itself promises and outside pooltk's contract (docs/safety.md)"
    ),
}
"""Bodies whose numbers depend on something neither torch nor pooltk promises, and why (verdict
``outside``)."""

AUX_MODES: tuple[str, ...] = ("pass", "mix")
"""``pass``: the aux tensor is handed on unchanged (an alias of its slot); ``mix``: recomputed."""

_INFERENCE_FRAMES = frozenset({"_forward_metadata_inference", "_shape_inference"})


def _in_shape_inference() -> bool:
    """True inside torch's shape/metadata inference forward (run on uninitialised example inputs).

    Stateful bodies must not keep anything from it: its input is ``torch.empty`` garbage that
    differs run to run, stock included.
    """
    import sys

    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name in _INFERENCE_FRAMES:
            return True
        f = f.f_back
    return False


class FuzzStage(nn.Module):
    """One fuzz stage: a body (one of :data:`BODIES`) over ``h``, optionally an aux tensor of
    another dtype.

    ``kept`` collects what the ``hook`` body's forward hook stored (a view of the received input);
    the harness digests and clears it after every step, then calls :meth:`step_end`.
    Stateful bodies (:data:`STATEFUL_BODIES`) act on non-first stages only (the first stage's
    input is the root argument, not a receive buffer).
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
        self.prev = None  # keep_prev, keep_prev_graph, dlpack, dlpack_numpy
        self.window: list[torch.Tensor] = []  # keep_window: the previous step's inputs
        self.current: list[torch.Tensor] = []
        self.cache: dict[int, torch.Tensor] = {}  # ptr_cache
        if body == "hook":
            self.block.register_forward_hook(
                lambda _m, inp, _out: self.kept.append(inp[0][..., :2])
            )

    def step_end(self) -> None:
        """Called by the harness after every step: the window moves on, the address cache is
        cleared."""
        self.window, self.current = self.current, []
        self.cache.clear()

    def _stateful(self, h: torch.Tensor) -> torch.Tensor:
        b, out = self.body, self.block(h)
        live = not _in_shape_inference()
        if b == "grad_hook":
            if live and h.requires_grad:
                h.register_hook(lambda g: g * 0.5)
            return out
        if b in ("keep_prev", "keep_prev_graph"):
            if self.prev is not None and self.prev.shape == h.shape:
                out = out + 0.1 * (h * self.prev).mean()
            if live:
                self.prev = h if b == "keep_prev_graph" else h.detach()
            return out
        if b == "keep_graph":
            if self.prev is not None:
                out = out + 0.1 * self.prev
            if live:
                self.prev = (h * h).mean()  # saves h in the graph; Python holds only the result
            return out
        if b == "keep_window":
            if live:
                i = len(self.current)
                if i < len(self.window) and self.window[i].shape == h.shape:
                    out = out + 0.1 * (h * self.window[i]).mean()
                self.current.append(h.detach())
            return out
        if b == "ptr_cache":
            if live:
                key = h.data_ptr()
                if key not in self.cache:
                    self.cache[key] = (h.detach() ** 2).mean(-1, keepdim=True).clone()
                out = out + 0.1 * self.cache[key]
            return out
        if b in ("dlpack", "dlpack_numpy"):
            if self.prev is not None:
                prev = self.prev if b == "dlpack" else torch.from_numpy(self.prev.copy())
                out = out + 0.1 * prev.mean()
            if live:
                src = (
                    h.detach() if h.requires_grad else h
                )  # DLPack refuses tensors that require grad
                if b == "dlpack":
                    self.prev = torch.from_dlpack(src)
                else:
                    import numpy as np

                    self.prev = np.from_dlpack(src)
            return out
        raise AssertionError(b)

    def _body(self, h: torch.Tensor) -> torch.Tensor:
        b = self.body
        if b in STATEFUL_BODIES:
            return self._stateful(h)
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
        plain_first = self.first and (
            self.body in ("block", "hook") or self.body in STATEFUL_BODIES
        )
        out = h if plain_first else self._body(h)
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
