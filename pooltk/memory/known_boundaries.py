"""Stage boundaries pooltk knows for a named model: published widths, and what is inferred from them.

[Note: Kimi-K3 boundary widths]
Published (``data/published/kimi_k3_boundary_widths.csv``, read by :func:`published_widths`):

- Megatron-Bridge PR #5130, full Kimi-K3 (93 layers) at PP3: "4x hidden at the first boundary
  and 7x hidden at the second";
- ROCm/Megatron-LM PR #162 (``kimi_k3/tools/activation_mem_model.py``): the first boundary is
  (1 + 1) x 8192 x 7168 x 2 B = 224.0 MiB, i.e. 2 hidden states.

Inferred here, **not published**: the width after ``l`` layers is ``2 + floor(l / 12)`` hidden
states (:func:`k3_width`): the hidden state, the open attention-residual block, and one state per
completed block of ``attn_res_block_size = 12`` layers (KimiK3TextConfig). It reproduces the
three published points, reading PP3 of 93 layers as boundaries after 31 and 62 layers
(4 and 7) and pairing the ROCm figure with 4 layers, as the project's research notes do
(2). Unverified: no published point lies at a multiple of 12 layers, where the open block may
be empty; :func:`k3_width` with ``at_block_end="closed"`` gives that other reading (one hidden
state fewer exactly at a multiple of 12).

Also assumed for the pp8 preset: the layers are split the way Automodel's
``generate_hf_model_fqn_per_model_part`` splits them when no split is given (``divmod``, the
first ``93 % 8 = 5`` stages one layer more: 12, 12, 12, 12, 12, 11, 11, 11), so the seven
boundaries lie after 12, 24, 36, 48, 60, 71 and 82 layers; the width is sent as the hidden
state plus one stacked tensor of the other states (the packing changes no byte count); and
the gradients have the activations' shapes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from dataclasses import dataclass
from importlib.resources import files
from typing import Literal

from pooltk.memory.errors import MemoryModelError, positive_int
from pooltk.memory.source import Figure, Preset
from pooltk.memory.tensors import Boundary, TensorSpec

__all__ = [
    "K3_ATTN_RES_BLOCK",
    "K3_LAYERS",
    "PublishedWidth",
    "boundary_layers",
    "k3_width",
    "k3_widths_preset",
    "layer_split",
    "published_widths",
    "width_boundaries",
]

K3_LAYERS = 93
"""KimiK3TextConfig ``num_hidden_layers`` (:mod:`pooltk.memory.known_models`)."""
K3_ATTN_RES_BLOCK = 12
"""KimiK3TextConfig ``attn_res_block_size`` (the project's research notes on the class)."""

WIDTHS_CSV = "kimi_k3_boundary_widths.csv"
"""The published widths, package data of :mod:`pooltk.memory` (``data/published/`` in the repository)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PublishedWidth:
    """One published figure about a Kimi-K3 stage boundary, as the data file states it."""

    id: str
    """Row key in the data file."""
    setting: str
    """Whose model and pipeline split the figure describes."""
    boundary: int
    """0 = what stage 0 sends to stage 1."""
    value: float
    """The figure."""
    unit: str
    """``hidden states`` or ``MiB``."""
    kind: str
    """``published``."""
    source: str
    """Where it was published."""
    note: str
    """What it means."""


def published_widths() -> tuple[PublishedWidth, ...]:
    """Every row of ``kimi_k3_boundary_widths.csv``."""
    text = files("pooltk.memory").joinpath("data", WIDTHS_CSV).read_text(encoding="utf-8")
    rows = csv.DictReader(io.StringIO(text))
    return tuple(
        PublishedWidth(
            id=r["id"],
            setting=r["setting"],
            boundary=int(r["boundary"]),
            value=float(r["value"]),
            unit=r["unit"],
            kind=r["kind"],
            source=r["source"],
            note=r["note"],
        )
        for r in rows
    )


BlockEnd = Literal["open", "closed"]


def k3_width(layers: int, *, at_block_end: BlockEnd = "open") -> int:
    """Hidden states a Kimi-K3 boundary after ``layers`` layers carries: ``2 + floor(layers / 12)``. **Inferred**.

    See [Note: Kimi-K3 boundary widths]. ``at_block_end="closed"``: the other reading, one fewer
    when ``layers`` is a multiple of 12 (the open block is still empty there).
    """
    n = positive_int("layers", layers, "give the layers before the boundary, >= 1.")
    if at_block_end not in ("open", "closed"):
        raise MemoryModelError(
            "at_block_end",
            found=repr(at_block_end),
            required="'open' or 'closed'",
            fix="use 'open' (the rule that reproduces the published points).",
        )
    width = 2 + n // K3_ATTN_RES_BLOCK
    return width - 1 if at_block_end == "closed" and n % K3_ATTN_RES_BLOCK == 0 else width


def layer_split(num_layers: int, num_stages: int) -> tuple[int, ...]:
    """Layers per stage as Automodel splits them by default: ``divmod``, the remainder to the first stages."""
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


def width_boundaries(
    *,
    num_stages: int,
    rows: int,
    seq_len: int,
    hidden: int,
    num_layers: int = K3_LAYERS,
    dtype: str = "bfloat16",
    at_block_end: BlockEnd = "open",
) -> tuple[Boundary, ...]:
    """One :class:`Boundary` per stage boundary, each :func:`k3_width` hidden states wide (gradients alike)."""
    out = []
    for layers in boundary_layers(num_layers, num_stages):
        w = k3_width(layers, at_block_end=at_block_end)
        tensors = [TensorSpec(shape=(rows, seq_len, hidden), dtype=dtype, name="hidden_states")]
        if w > 1:
            tensors.append(
                TensorSpec(
                    shape=(w - 1, rows, seq_len, hidden), dtype=dtype, name="attn_res_states"
                )
            )
        out.append(Boundary(activations=tuple(tensors)))
    return tuple(out)


def k3_widths_preset(base: Preset, *, name: str | None = None) -> Preset:
    """``base`` (a Kimi-K3 preset: shape, rows, seq, hidden, config) with boundaries from the published widths.

    Keeps ``base``'s shape, config and published figures; replaces its boundary by one per
    stage boundary from [Note: Kimi-K3 boundary widths], and says which part is published and
    which inferred in ``assumption``, ``figures`` and ``sources``.
    """
    shape = base.shape
    rows = shape.micro_batch or base.boundary.activations[0].shape[0]
    bounds = width_boundaries(
        num_stages=shape.num_stages, rows=rows, seq_len=base.seq_len, hidden=base.hidden
    )
    layers = boundary_layers(K3_LAYERS, shape.num_stages)
    widths = [k3_width(n) for n in layers]
    closed = [k3_width(n, at_block_end="closed") for n in layers]
    hidden_mib = rows * base.seq_len * base.hidden * 2 / 2**20
    published = published_widths()
    figures = (
        tuple(
            Figure(
                name=p.id,
                value=p.value,
                unit=p.unit,
                kind="published",
                source=f"{p.source} ({p.setting})",
            )
            for p in published
        )
        + (
            Figure(
                name="width_rule_hidden_states",
                value=float(widths[0]),
                unit="hidden states",
                kind="inferred",
                source=f"2 + floor(layers / {K3_ATTN_RES_BLOCK}) at boundary 0 (after {layers[0]} layers); fitted to the "
                "published points 4 layers -> 2, 31 -> 4, 62 -> 7, unverified elsewhere",
            ),
            Figure(
                name="layers_per_stage",
                value=float(layer_split(K3_LAYERS, shape.num_stages)[0]),
                unit="layers",
                kind="assumed",
                source="Automodel's default split (generate_hf_model_fqn_per_model_part: divmod, the "
                f"remainder to the first stages): {', '.join(map(str, layer_split(K3_LAYERS, shape.num_stages)))}",
            ),
        )
        + tuple(f for f in base.figures if f.kind == "published")
    )
    assumption = (
        f"Boundary widths from published Kimi-K3 figures (Megatron-Bridge PR #5130: 4x and 7x hidden at PP3's two "
        f"boundaries; ROCm/Megatron-LM PR #162: 2x hidden at its first). INFERRED, not published: width = 2 + "
        f"floor(layers / {K3_ATTN_RES_BLOCK}) hidden states after that many layers, which reproduces those points. "
        f"ASSUMED: the {K3_LAYERS} layers split as Automodel splits them by default, so the boundaries lie after "
        f"{', '.join(map(str, layers))} layers -> widths {', '.join(map(str, widths))} x {hidden_mib:g} MiB; gradients "
        f"have the activations' shapes. At a multiple of {K3_ATTN_RES_BLOCK} layers no published point decides the "
        f"rule: the other reading gives widths {', '.join(map(str, closed))}."
    )

    def rule(num_stages: int) -> tuple[Boundary, ...]:
        return width_boundaries(
            num_stages=num_stages, rows=rows, seq_len=base.seq_len, hidden=base.hidden
        )

    return dataclasses.replace(
        base,
        boundary_rule=rule,
        name=name or base.name.replace("calibrated", "widths").replace("hidden", "widths"),
        title=f"Kimi-K3 GB200 {base.seq_len // 1024}k rows, boundaries from the published widths "
        f"({min(widths)}-{max(widths)} hidden states)",
        boundary=bounds[0],
        boundaries=bounds,
        assumption=assumption,
        figures=figures,
        sources=tuple(
            dict.fromkeys(
                [p.source for p in published]
                + ["NVIDIA-NeMo/Automodel generate_hf_model_fqn_per_model_part (layer split)"]
                + [s for s in base.sources if "KimiK3TextConfig" in s or "yaml" in s]
            )
        ),
    )
