"""A plain ``nn.Linear`` last stage (MSE loss, torch's own), put into the parity harness by a
prelude.

[Note: the linear head in the parity harness]
The parity harness builds every stage with ``pooltk.parity.worker.make_stage_module`` and every
batch with ``pooltk.parity.worker.make_batch``; a launch's prelude module is imported in each rank
before the stages are built (``run_parity(prelude=...)``). :func:`patch` replaces the worker's
names there: the last stage becomes one ``nn.Linear(hidden, hidden)`` (no activation, no residual:
the loss's graph reaches the received input through nothing but the linear), the other stages stay
the parity model, and the loss stays the harness's ``mse_loss``. With ``two_d`` the batch is
``(rows * seq_len, hidden)`` instead of ``(rows, seq_len, hidden)``, so every boundary tensor is
2-D and the linear is a plain ``addmm`` (on a 3-D input torch 2.13's linear returns a view of a
2-D result). The weights come from their own generator, seeded by the spec's seed, so every
variant of a launch starts from the same bits (the harness seeds torch once per launch, not per
variant). The stage count comes from the rank's ``sys.argv`` (the zygote passes rank and world).
"""

from __future__ import annotations

import sys

import torch
from torch import nn

__all__ = ["LinearHead", "patch"]


class LinearHead(nn.Module):
    """``nn.Linear(hidden, hidden)`` with weights from a generator seeded by ``seed``."""

    def __init__(self, hidden: int, seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed * 1_000_003 + 77)
        self.lin = nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.lin.weight.copy_(torch.randn(hidden, hidden, generator=gen) / hidden**0.5)
            self.lin.bias.copy_(torch.randn(hidden, generator=gen) * 0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


def _world() -> int:
    try:
        return int(sys.argv[2])
    except (IndexError, ValueError):
        raise RuntimeError(
            "tools.last_stage.heads: found no world size in sys.argv[2]; required a rank started "
            "by pooltk.parity.rank (argv = [prog, rank, world, out_dir, port]). Fix: launch "
            "through pooltk.parity.run_parity(spec, prelude='tools.last_stage.prelude_linear3d')."
        ) from None


def patch(*, two_d: bool) -> None:
    """Make this rank's last stage a :class:`LinearHead`; with ``two_d``, flatten every batch to
    2-D."""
    from pooltk.parity import worker

    world = _world()
    original_module, original_batch = worker.make_stage_module, worker.make_batch

    def make_stage_module(
        *, hidden: int, layers_per_stage: int, stage_index: int, seed: int
    ) -> nn.Module:
        if stage_index == world - 1:
            return LinearHead(hidden, seed)
        return original_module(
            hidden=hidden, layers_per_stage=layers_per_stage, stage_index=stage_index, seed=seed
        )

    def make_batch(*, rows: int, seq_len: int, hidden: int, step: int, seed: int):
        x, y = original_batch(rows=rows, seq_len=seq_len, hidden=hidden, step=step, seed=seed)
        return x.reshape(rows * seq_len, hidden), y.reshape(rows * seq_len, hidden)

    worker.make_stage_module = make_stage_module
    if two_d:
        worker.make_batch = make_batch
