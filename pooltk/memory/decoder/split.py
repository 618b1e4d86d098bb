"""Which layers each pipeline stage holds: Automodel's split and torchtitan's, embedding first.

[Note: stage splits]
- ``"automodel"`` (Automodel's ``generate_hf_model_fqn_per_model_part`` when no split is given):
  ``divmod(layers, stages)``, the first ``layers % stages`` stages one layer more; the embedding
  joins stage 0 and the final norm and head the last stage, counting for no layer
  (:func:`layer_split`; 93 layers at pp8: 12, 12, 12, 12, 12, 11, 11, 11).
- ``"torchtitan"`` (torchtitan's ``generate_llm_fqn_per_model_part``, read 2026-12): the embedding
  and the head each count as ``input_weight`` / ``output_weight`` layers (default 1); the
  ``layers + weights`` effective layers are dealt out by ``divmod``, the first stages one more;
  stage 0 then holds its share less ``input_weight`` decoder layers, the last its share less
  ``output_weight`` (80 layers at 8 stages: 10, 11, 10, 10, 10, 10, 10, 9 decoder layers).
- an explicit tuple of decoder layers per stage (it must sum to the layers).

Under a multi-stage schedule there are ``pp x stages_per_rank`` stages, split the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pooltk.memory.errors import MemoryModelError, positive_int

__all__ = [
    "SPLITS",
    "StagePlan",
    "boundary_layers",
    "layer_split",
    "stage_plans",
    "torchtitan_split",
]

SPLITS: tuple[str, ...] = ("automodel", "torchtitan")
"""The named splits of [Note: stage splits]."""


@dataclass(kw_only=True, slots=True, frozen=True)
class StagePlan:
    """What one stage of the decoder holds."""

    stage: int
    """Stage index."""
    layers: range
    """Its decoder layers (global indices)."""
    embedding: bool
    """True on stage 0: the token embedding."""
    head: bool
    """True on the last stage: the final norm and the output head."""

    def describe(self) -> str:
        """e.g. ``embedding + layers 0-9``."""
        parts = ["embedding"] if self.embedding else []
        if len(self.layers):
            parts.append(
                f"layers {self.layers.start}-{self.layers.stop - 1}"
                if len(self.layers) > 1
                else f"layer {self.layers.start}"
            )
        if self.head:
            parts.append("norm + head")
        return " + ".join(parts) or "nothing"


def layer_split(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Layers per stage as Automodel splits them by default: ``divmod``, the remainder to the first
    stages. See [Note: stage splits]."""
    layers = positive_int("num_layers", num_layers, "give the model's layer count, e.g. 93.")
    stages = positive_int("num_stages", num_stages, "give the pipeline's stage count.")
    if stages > layers:
        raise MemoryModelError(
            "num_stages",
            found=str(stages),
            required=f"at most the layers ({layers})",
            fix="use fewer stages than layers.",
        )
    each, extra = divmod(layers, stages)
    return tuple(each + (i < extra) for i in range(stages))


def boundary_layers(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Layers before each of the ``num_stages - 1`` boundaries under :func:`layer_split`."""
    split = layer_split(num_layers, num_stages)
    return tuple(sum(split[: b + 1]) for b in range(num_stages - 1))


def torchtitan_split(
    num_layers: int, num_stages: int, input_weight: int = 1, output_weight: int = 1
) -> tuple[int, ...]:
    """Decoder layers per stage as torchtitan deals them out. See [Note: stage splits]."""
    layers = positive_int("num_layers", num_layers, "give the model's layer count.")
    stages = positive_int("num_stages", num_stages, "give the pipeline's stage count.")
    if stages == 1:
        return (layers,)
    effective = layers + input_weight + output_weight
    each, extra = divmod(effective, stages)
    if each < max(1, input_weight, output_weight):
        raise MemoryModelError(
            "stage split",
            found=f"{layers} layers (+{input_weight} embedding, +{output_weight} head) over "
            f"{stages} stages",
            required="at least one layer per stage and no more weight than a stage's share",
            fix="use fewer stages, or the automodel split.",
        )
    shares = [each + (i < extra) for i in range(stages)]
    shares[0] -= input_weight
    shares[-1] -= output_weight
    return tuple(shares)


def stage_plans(
    num_layers: int, num_stages: int, split: str | Sequence[int] = "automodel"
) -> tuple[StagePlan, ...]:
    """One :class:`StagePlan` per stage. See [Note: stage splits]."""
    if isinstance(split, str):
        if split not in SPLITS:
            raise MemoryModelError(
                "split",
                found=repr(split),
                required=f"one of {', '.join(SPLITS)} or layers per stage",
                fix="use 'automodel' (default) or 'torchtitan'.",
            )
        counts = (
            layer_split(num_layers, num_stages)
            if split == "automodel"
            else torchtitan_split(num_layers, num_stages)
        )
    else:
        counts = tuple(split)
        if len(counts) != num_stages or sum(counts) != num_layers or any(c < 0 for c in counts):
            raise MemoryModelError(
                "split",
                found=f"{counts} ({sum(counts)} layers over {len(counts)} stages)",
                required=f"{num_stages} non-negative counts summing to {num_layers}",
                fix="give one layer count per stage, or a named split.",
            )
    plans, start = [], 0
    for i, c in enumerate(counts):
        plans.append(
            StagePlan(
                stage=i, layers=range(start, start + c), embedding=i == 0, head=i == num_stages - 1
            )
        )
        start += c
    return tuple(plans)
