"""The stage builder for a decoder config: each stage's modules, one microbatch's inputs, the
loss."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pooltk.memory.decoder.config import DecoderConfig
from pooltk.memory.decoder.modules import DecoderStage, cross_entropy
from pooltk.memory.decoder.split import StagePlan, stage_plans
from pooltk.memory.errors import MemoryModelError, positive_int
from pooltk.memory.replay.stages import StageSpec

__all__ = ["DecoderBuilder", "decoder_builder"]


@dataclass(kw_only=True, slots=True, frozen=True)
class DecoderBuilder:
    """A stage builder ([Note: a stage builder]) for a :class:`DecoderConfig` at one micro batch
    shape."""

    config: DecoderConfig
    """The decoder's dimensions."""
    rows: int
    """Rows (sequences) per microbatch."""
    seq_len: int
    """Tokens per row."""
    checkpointing: bool = False
    """Full activation checkpointing: every decoder layer recomputed in the backward."""
    split: str | tuple[int, ...] = "automodel"
    """How layers are dealt to stages ([Note: stage splits])."""
    ep: int = 1
    """Expert parallelism: each rank holds ``experts / ep`` routed experts."""

    def __post_init__(self) -> None:
        positive_int("rows", self.rows, "give the rows per microbatch, e.g. 1.")
        positive_int("seq_len", self.seq_len, "give the tokens per row, e.g. 4096.")
        positive_int("ep", self.ep, "give the expert-parallel size, e.g. 1.")
        moe = self.config.moe
        if moe is not None and moe.experts % self.ep:
            raise MemoryModelError(
                "ep",
                found=f"{self.ep} for {moe.experts} experts",
                required="a divisor of the routed experts",
                fix="choose an expert-parallel size that divides the experts.",
            )
        if not isinstance(self.split, str):
            object.__setattr__(self, "split", tuple(self.split))

    def plans(self, num_stages: int) -> tuple[StagePlan, ...]:
        """What every stage holds."""
        return stage_plans(self.config.layers, num_stages, self.split)

    def describe(self) -> str:
        """The decoder, its split and its checkpointing, in one line."""
        split = self.split if isinstance(self.split, str) else ",".join(map(str, self.split))
        extra = f", ep {self.ep}" if self.ep > 1 else ""
        return (
            f"{self.config.describe()}; {self.rows} x {self.seq_len} tokens per microbatch; "
            f"{split} split; activation checkpointing "
            f"{'full' if self.checkpointing else 'off'}{extra}"
        )

    def stage_inputs(self, stage: int, num_stages: int) -> tuple[torch.Tensor, ...]:
        """One microbatch's inputs to ``stage`` (meta tensors): token ids on stage 0, the hidden
        state elsewhere."""
        shape = (self.rows, self.seq_len)
        if self.plans(num_stages)[stage].embedding:
            return (torch.empty(shape, dtype=torch.long, device="meta"),)
        return (
            torch.empty(
                *shape, self.config.hidden, dtype=getattr(torch, self.config.dtype), device="meta"
            ),
        )

    def __call__(self, stage: int, num_stages: int) -> StageSpec:
        plan = self.plans(num_stages)[stage]
        cfg = self.config
        module = DecoderStage(
            cfg,
            layers=plan.layers,
            embedding=plan.embedding,
            head=plan.head,
            seq_len=self.seq_len,
            checkpointing=self.checkpointing,
            ep=self.ep,
        )
        shape = (self.rows, self.seq_len)
        inputs = self.stage_inputs(stage, num_stages)
        last = stage == num_stages - 1
        return StageSpec(
            module=module,
            inputs=inputs,
            name=plan.describe(),
            target=torch.empty(shape, dtype=torch.long, device="meta") if last else None,
            loss_fn=cross_entropy if last else None,
        )


def decoder_builder(
    config: DecoderConfig,
    *,
    rows: int,
    seq_len: int,
    checkpointing: bool = False,
    split: str | Sequence[int] = "automodel",
    ep: int = 1,
) -> DecoderBuilder:
    """A :class:`DecoderBuilder`; see its fields."""
    return DecoderBuilder(
        config=config,
        rows=rows,
        seq_len=seq_len,
        checkpointing=checkpointing,
        split=split if isinstance(split, str) else tuple(split),
        ep=ep,
    )
