"""The Kimi-K3 on GB200 study (NVIDIA-NeMo/Automodel PR #3780): its data, presets, story and claims.

The numbers are data, each row with its source (package data, links to ``data/published/``):
``kimi_k3_gb200.csv`` (the published run: throughput, MFU, memory, config), ``kimi_k3_presets.csv``
(what the presets carry beyond the pipeline: the study's inputs, each preset's set size, the 2k
run's published memory figures) and ``kimi_k3_boundary_widths.csv`` (published boundary widths).
Everything below reads them: the presets (:data:`PRESETS`, ``pooltk memory --preset``), the
estimate at K3's widths (:data:`ESTIMATE`, ``pooltk estimate --preset``), the story
(:func:`k3_story`, ``pooltk memory --k3-story``) and the claims ledger (:func:`claims_ledger`,
notebook 03). pandas is imported only by the functions that return DataFrames, and the log
metrics' bases and the replay only on first use (:func:`__getattr__`): the presets and the story
serve ``pooltk memory`` in the torch-only install.

[Note: the Kimi-K3 boundary calibration]
Published: Kimi-K3 on 64 GB200 nodes, pp 8, dp 32, micro batch 2, global batch 4096, 2048-token
rows -> 64 microbatches, "64 buffer sets per direction, ~52 GiB on middle stages", "~45 GiB saved"
by the ring with slack 2; hidden size 7168, bf16 (KimiK3TextConfig). One bf16 hidden state of
``(2, 2048, 7168)`` is 56 MiB; 128 sets of it are 7 GiB, not 52, so the boundary carries more
than one hidden state. The calibrated presets read the ~52 GiB as both directions of a middle
stage: 52 GiB / 128 = 416 MiB per set, the hidden state plus a 360 MiB remainder pooltk cannot
attribute (a bf16 ``(2, seq, 46080)`` tensor). The 1k calibrated preset assumes the bytes scale
with tokens per row (208 MiB): never measured. The hidden-state presets calibrate nothing.

[Note: Kimi-K3 boundary widths]
Published (``kimi_k3_boundary_widths.csv``): Megatron-Bridge PR #5130, full K3 (93 layers) at
PP3, "4x hidden at the first boundary and 7x hidden at the second"; ROCm/Megatron-LM PR #162, the
first boundary (1 + 1) x 8192 x 7168 x 2 B = 224.0 MiB, i.e. 2 hidden states. Inferred, **not
published** (:func:`k3_width`): ``2 + floor(layers / 12)`` hidden states after ``layers`` layers
(the hidden state, the open attention-residual block, one state per completed block of
``attn_res_block_size = 12``); it reproduces the three points (PP3 of 93 cuts after 31 and 62
layers; the ROCm figure after 4). Unverified at a multiple of 12, where the open block may be
empty: ``at_block_end="closed"`` is that reading. Assumed for pp8: Automodel's default split
(:func:`pooltk.memory.decoder.split.layer_split`: 12, 12, 12, 12, 12, 11, 11, 11), the width sent
as the hidden state plus one stacked tensor of the others, gradients alike.

[Note: the Kimi-K3 story]
Published: the stock 2k shape "OOMs during step 1 on 64 GB200 nodes (by only 56 MiB, measured)";
the pooled run (Automodel's ring, slack 2) peaks at 139.6 GiB "(44 GiB headroom)". Read as: 139.6
GiB is ``max_memory_allocated`` on the rank that logs, the headroom is the capacity minus it
(184.31 - 139.6 = 44.71 agrees on the one GB200 capacity). The model's verdict is the anchored
one ([Note: the fits model] in :mod:`pooltk.memory.fits`: K3's KDA and MLA layers and its
widening boundary are not the decoder's) with the stated overhead; the anchor's stage is not
published, so both readings are shown: the fullest pooled stage, and stage 0. ``56 MiB`` is one
bf16 (2, 2048, 7168) hidden state: most likely the allocation that failed, which bounds the
shortfall from above; only the sign of the margin can be checked.

[Note: GB200 memory]
Three capacities circulate: 184.31 GiB, what torch reports usable (its out-of-memory message;
:data:`pooltk.memory.fits.GB200`, the one pooltk judges against: 139.6 + 44 = 183.6 agrees);
the datasheet's 186 GB (173.2 GiB), a stated alternative the 44 GiB claim does not fit; and
torchtitan's setup line, 187.28 GiB (device properties, counting memory torch cannot allocate).

[Note: agreement]
Published figures are rounded (495.7, 13.7%), so a claim agrees when pooltk's figure rounds to the
published one at the published precision (half a unit in the last digit shown), unless the claim
states its own looseness ("~2%", "about the same"); the tolerance is written in the ledger row.
Nothing here is measured on GB200 by pooltk: every input is a published figure.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from pooltk._validate import check_choice
from pooltk.config import PoolConfig
from pooltk.memory.decoder.split import boundary_layers, layer_split
from pooltk.memory.errors import MemoryModelError, positive_int
from pooltk.memory.fits import (
    DEFAULT_OVERHEAD,
    GB200,
    GIB,
    MIB,
    Device,
    Overhead,
    ReferencePeak,
    Verdict,
    anchored,
    get_device,
)
from pooltk.memory.known_models import known_model_config
from pooltk.memory.model import Boundary, MemoryModel, PipelineShape, TensorSpec, middle_stage
from pooltk.memory.source import Figure, Preset

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from pooltk.logs.metrics import Bubble, DeviceCapacity, FlopsBasis, PeakBasis
    from pooltk.memory.replay.presets import EstimatePreset

__all__ = [
    "ESTIMATE",
    "GB200_DATASHEET",
    "GB200_NOMINAL",
    "GB200_TORCH_REPORTED",
    "K3_ACTIVE_6N",
    "K3_LAYERS",
    "PEAK_GB200_2250",
    "PEAK_GB200_2500",
    "PRESETS",
    "PUBLISHED_CSV",
    "Claim",
    "K3Story",
    "Ledger",
    "Published",
    "alignment_expectation",
    "claims_ledger",
    "get_preset",
    "headroom_by_capacity",
    "k3_bubble",
    "k3_story",
    "k3_width",
    "k3_widths_preset",
    "load_published",
    "mfu_by_shape",
    "named_estimates",
    "published_figures",
    "published_table",
    "published_vs_model",
    "published_widths",
    "width_boundaries",
]

DATA = files("pooltk.studies.kimi_k3").joinpath("data")
PUBLISHED_CSV = DATA.joinpath("kimi_k3_gb200.csv")
"""The published run figures (the repository's ``data/published/kimi_k3_gb200.csv``)."""


# --------------------------------------------------------------------------- the data


@dataclass(kw_only=True, slots=True, frozen=True)
class Published:
    """The rows of one of the study's CSVs, by ``id`` (``kimi_k3_gb200.csv``: the published run)."""

    text: str
    """The CSV as read."""
    rows: tuple[Mapping[str, str], ...]
    """Its rows, every field as written."""

    def row(self, fig_id: str) -> Mapping[str, str]:
        found = next((r for r in self.rows if r["id"] == fig_id), None)
        if found is None:
            ids = ", ".join(r["id"] for r in self.rows)
            raise KeyError(f"published figure {fig_id!r} not found; ids: {ids}")
        return found

    def value(self, fig_id: str) -> float:
        return float(self.row(fig_id)["value"])

    def source(self, fig_id: str) -> str:
        return self.row(fig_id)["source"]

    def approximate(self, fig_id: str) -> bool:
        """True when the source states ``fig_id`` as approximate (``~135 GiB``, ``about``)."""
        stated = (self.row(fig_id).get("as_stated") or "").strip().lower()
        return stated.startswith(("~", "about"))

    @property
    def frame(self) -> pd.DataFrame:
        """The CSV as a DataFrame (id, shape, quantity, value, unit, kind, source, ...)."""
        import pandas as pd

        return pd.read_csv(io.StringIO(self.text))

    def table(self, kind: str | None = None) -> pd.DataFrame:
        """The figures, of one ``kind`` (measured, expected, config, ...) if given."""
        f = self.frame
        return (f if kind is None else f[f["kind"] == kind]).reset_index(drop=True)


def _read(path: Any, required: Sequence[str]) -> Published:
    """A study CSV, every required column present and every row with a source."""
    if not path.is_file():
        raise FileNotFoundError(
            f"published figures: found no file at {path}; required a CSV with the columns "
            f"{', '.join(required)} (shipped inside pooltk). Fix: pass path= to an existing file, "
            "or reinstall pooltk."
        )
    text = path.read_text(encoding="utf-8")
    reader = csv.DictReader(io.StringIO(text))
    rows = tuple(reader)
    missing = set(required) - set(reader.fieldnames or ())
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {sorted(missing)}; required {sorted(required)}."
        )
    bad = [r.get("id") or r.get("name") for r in rows if not (r["source"] or "").strip()]
    if bad:
        raise ValueError(f"{path}: row(s) {bad} have no source; every published figure needs one.")
    return Published(text=text, rows=rows)


def load_published(path: str | Path | None = None) -> Published:
    """The published run figures (default: the shipped ``kimi_k3_gb200.csv``)."""
    columns = ("id", "shape", "quantity", "value", "unit", "kind", "source")
    return _read(Path(path) if path is not None else PUBLISHED_CSV, columns)


_PUB = load_published()
_PRESET_ROWS = _read(DATA.joinpath("kimi_k3_presets.csv"), ("preset", "name", "value", "source"))
_WIDTH_ROWS = _read(DATA.joinpath("kimi_k3_boundary_widths.csv"), ("id", "value", "source"))


def _as_figure(row: Mapping[str, str], *, name: str, source: str) -> Figure:
    return Figure(
        name=name, value=float(row["value"]), unit=row["unit"], kind=row["kind"], source=source
    )


def _figures(preset: str) -> tuple[Figure, ...]:
    """The figures ``kimi_k3_presets.csv`` gives ``preset`` (a preset, a run, or the study)."""
    rows = [r for r in _PRESET_ROWS.rows if r["preset"] == preset]
    return tuple(_as_figure(r, name=r["name"], source=r["source"]) for r in rows)


def _figure(preset: str, name: str) -> Figure:
    return next(f for f in _figures(preset) if f.name == name)


def published_widths() -> tuple[Figure, ...]:
    """Every published Kimi-K3 boundary width (``kimi_k3_boundary_widths.csv``), named by its id."""
    return tuple(
        _as_figure(r, name=r["id"], source=f"{r['source']} ({r['setting']})")
        for r in _WIDTH_ROWS.rows
    )


# --------------------------------------------------------------------------- constants of the study

_K3_CONFIG = known_model_config("nemo_automodel.components.models.kimi_k3.config.KimiK3TextConfig")
assert _K3_CONFIG is not None  # pooltk's own table holds it
HIDDEN: int = _K3_CONFIG.defaults["hidden_size"]
"""KimiK3TextConfig ``hidden_size`` (:mod:`pooltk.memory.known_models`)."""
K3_LAYERS: int = _K3_CONFIG.defaults["num_hidden_layers"]
"""KimiK3TextConfig ``num_hidden_layers``."""
K3_ATTN_RES_BLOCK = int(_figure("kimi-k3-gb200", "attn_res_block_size").value)
"""KimiK3TextConfig ``attn_res_block_size`` ([Note: Kimi-K3 boundary widths])."""
SEQ: Mapping[str, int] = MappingProxyType(
    {"2k": int(_PUB.value("k3_cfg_seq_2k")), "1k": int(_PUB.value("k3_cfg_seq_1k"))}
)
"""Tokens per row of the two published runs."""
_SLACK = int(_figure("kimi-k3-gb200", "pool_slack").value)
_OOM = _figure("kimi-k3-gb200-2k", "oom_margin_mib")
"""The stock 2k run's published "by only 56 MiB" ([Note: the Kimi-K3 story])."""

_PR = (
    "NVIDIA-NeMo/Automodel PR #3780 'perf(distributed): ring-pooled PP recv buffers and Kimi-K3 2k "
    "benchmark shape' (description text)"
)
_YAML = {
    "2k": "NVIDIA-NeMo/Automodel examples/llm_benchmark/kimi/kimi_k3_gb200_2k.yaml header and keys "
    "(@532737d)",
    "1k": "NVIDIA-NeMo/Automodel examples/llm_benchmark/kimi/kimi_k3_gb200.yaml (seq_len 1024)",
}
_CONFIG = f"NVIDIA-NeMo/Automodel KimiK3TextConfig (hidden_size {HIDDEN}, bfloat16)"


def _run_config(pub: Published, *keys: str) -> tuple[int, ...]:
    """The published run's config figures ``k3_cfg_<key>`` (pp, gbs, mbs, dp, ...), as integers."""
    return tuple(int(pub.value(f"k3_cfg_{key}")) for key in keys)


def _shape() -> PipelineShape:
    """The published pipeline (``kimi_k3_gb200.csv``'s config rows): M = GBS / (mbs x dp)."""
    pp, gbs, mbs, dp = _run_config(_PUB, "pp", "gbs", "mbs", "dp")
    return PipelineShape.from_batch(pp=pp, global_batch=gbs, micro_batch=mbs, dp=dp)


# --------------------------------------------------------------------------- boundary widths

BlockEnd = Literal["open", "closed"]


def k3_width(layers: int, *, at_block_end: BlockEnd = "open") -> int:
    """Hidden states a boundary after ``layers`` layers carries: ``2 + floor(layers / 12)``.

    **Inferred**, [Note: Kimi-K3 boundary widths]. ``at_block_end="closed"``: the other reading,
    one fewer when ``layers`` is a multiple of 12 (the open block still empty there).
    """
    n = positive_int("layers", layers, "give the layers before the boundary, >= 1.")
    check_choice(
        "at_block_end",
        at_block_end,
        ("open", "closed"),
        fix="use 'open' (the rule that reproduces the published points).",
        error=MemoryModelError,
    )
    width = 2 + n // K3_ATTN_RES_BLOCK
    return width - 1 if at_block_end == "closed" and n % K3_ATTN_RES_BLOCK == 0 else width


def width_boundaries(
    *,
    num_stages: int,
    rows: int,
    seq_len: int,
    hidden: int,
    num_layers: int = K3_LAYERS,
) -> tuple[Boundary, ...]:
    """One bf16 :class:`Boundary` per stage boundary, :func:`k3_width` hidden states wide
    (gradients alike): the hidden state, then the other states stacked in one tensor."""
    hidden_state = Boundary.hidden_state(rows=rows, seq_len=seq_len, hidden=hidden).activations[0]
    out = []
    for layers in boundary_layers(num_layers, num_stages):
        w = k3_width(layers)
        tensors = [hidden_state]
        if w > 1:
            stacked = (w - 1, *hidden_state.shape)
            tensors.append(TensorSpec(shape=stacked, dtype="bfloat16", name="attn_res_states"))
        out.append(Boundary(activations=tuple(tensors)))
    return tuple(out)


def _width_figures(num_stages: int, layers: Sequence[int]) -> tuple[Figure, ...]:
    """The published widths, the inferred rule at boundary 0 (after ``layers[0]`` layers) and the
    assumed split, as figures."""
    split = layer_split(K3_LAYERS, num_stages)
    return published_widths() + (
        Figure(
            name="width_rule_hidden_states",
            value=float(k3_width(layers[0])),
            unit="hidden states",
            kind="inferred",
            source=f"2 + floor(layers / {K3_ATTN_RES_BLOCK}) at boundary 0 (after {layers[0]} "
            "layers); fitted to the published points 4 layers -> 2, 31 -> 4, 62 -> 7, unverified "
            "elsewhere",
        ),
        Figure(
            name="layers_per_stage",
            value=float(split[0]),
            unit="layers",
            kind="assumed",
            source="Automodel's default split (generate_hf_model_fqn_per_model_part: divmod, the "
            f"remainder to the first stages): {', '.join(map(str, split))}",
        ),
    )


def _widths_assumption(layers: Sequence[int], widths: Sequence[int], hidden_mib: float) -> str:
    """What is published, inferred and assumed about boundaries after ``layers`` layers."""
    closed = ", ".join(str(k3_width(n, at_block_end="closed")) for n in layers)
    block = K3_ATTN_RES_BLOCK
    return (
        "Boundary widths from published Kimi-K3 figures (Megatron-Bridge PR #5130: 4x and 7x "
        "hidden at PP3's two boundaries; ROCm/Megatron-LM PR #162: 2x hidden at its first). "
        f"INFERRED, not published: width = 2 + floor(layers / {block}) hidden states after that "
        "many layers, which reproduces those points. ASSUMED: the "
        f"{K3_LAYERS} layers split as Automodel splits them by default, so the boundaries lie "
        f"after {', '.join(map(str, layers))} layers -> widths {', '.join(map(str, widths))} x "
        f"{hidden_mib:g} MiB; gradients have the activations' shapes. At a multiple of {block} "
        f"layers no published point decides the rule: the other reading gives widths {closed}."
    )


def k3_widths_preset(base: Preset) -> Preset:
    """``base`` (a Kimi-K3 preset) with one boundary per stage boundary from the published widths.

    Keeps ``base``'s shape, config and published figures; says which part is published, inferred
    and assumed ([Note: Kimi-K3 boundary widths]) in ``assumption``, ``figures`` and ``sources``.
    """
    shape, seq, hidden = base.shape, base.seq_len, base.hidden
    rows = shape.micro_batch or base.boundary.activations[0].shape[0]

    def rule(num_stages: int) -> tuple[Boundary, ...]:
        return width_boundaries(num_stages=num_stages, rows=rows, seq_len=seq, hidden=hidden)

    bounds = rule(shape.num_stages)
    layers = boundary_layers(K3_LAYERS, shape.num_stages)
    widths = [k3_width(n) for n in layers]
    split_source = "NVIDIA-NeMo/Automodel generate_hf_model_fqn_per_model_part (layer split)"
    own = [s for s in base.sources if "KimiK3TextConfig" in s or "yaml" in s]
    widths_sources = [r["source"] for r in _WIDTH_ROWS.rows]
    return dataclasses.replace(
        base,
        boundary_rule=rule,
        name=base.name.replace("calibrated", "widths").replace("hidden", "widths"),
        title=f"Kimi-K3 GB200 {seq // 1024}k rows, boundaries from the published widths "
        f"({min(widths)}-{max(widths)} hidden states)",
        boundary=bounds[0],
        boundaries=bounds,
        assumption=_widths_assumption(layers, widths, rows * seq * hidden * 2 / MIB),
        figures=_width_figures(shape.num_stages, layers)
        + tuple(f for f in base.figures if f.kind == "published"),
        sources=tuple(dict.fromkeys([*widths_sources, split_source, *own])),
    )


# --------------------------------------------------------------------------- the presets


def _preset(run: str, reading: str, boundary: Boundary, title: str, assumption: str) -> Preset:
    """A preset of the ``run`` (``2k``, ``1k``) read one way, its figures from the data."""
    name = f"kimi-k3-gb200-{run}-{reading}"
    sources = (_PR, _YAML[run], _CONFIG) if reading == "calibrated" else (_YAML[run], _CONFIG, _PR)
    return Preset(
        name=name,
        title=title,
        shape=_shape(),
        boundary=boundary,
        config=PoolConfig(slack=_SLACK),
        policy="automodel",
        seq_len=SEQ[run],
        hidden=HIDDEN,
        assumption=assumption,
        figures=_figures(name) + _figures(f"kimi-k3-gb200-{run}"),
        sources=sources,
    )


def _hidden(run: str) -> Preset:
    """One bf16 hidden state per boundary: a lower bound, calibrated to nothing."""
    rows, seq = _shape().micro_batch, SEQ[run]
    boundary = Boundary.hidden_state(rows=rows, seq_len=seq, hidden=HIDDEN, dtype="bfloat16")
    mib = boundary.forward_bytes / MIB
    calibrated = _figure("kimi-k3-gb200-2k-calibrated", "set_mib").value
    assumption = (
        f"Each boundary carries exactly one bf16 hidden state ({rows}, {seq}, {HIDDEN}) = {mib:g} "
        "MiB per set. A lower bound: it reproduces the published set count but not the published "
        f"bytes, which need ~{calibrated:g} MiB per set at 2k (see the calibrated preset)."
    )
    title = f"Kimi-K3 GB200 {run} rows, hidden state only ({mib:g} MiB/set)"
    return _preset(run, "hidden", boundary, title, assumption)


def _calibrated(run: str) -> Preset:
    """The hidden state plus the remainder the set size calibrated to ~52 GiB needs
    ([Note: the Kimi-K3 boundary calibration])."""
    rows, seq = _shape().micro_batch, SEQ[run]
    set_mib = _figure(f"kimi-k3-gb200-{run}-calibrated", "set_mib").value
    extra = round(set_mib * MIB) // (rows * seq * 2) - HIDDEN  # bf16 elements per token beyond
    hidden_state = Boundary.hidden_state(rows=rows, seq_len=seq, hidden=HIDDEN).activations[0]
    remainder = TensorSpec(shape=(rows, seq, extra), dtype="bfloat16", name="calibrated_remainder")
    stock = _figure("kimi-k3-gb200-2k", "stock_middle_stage_gib").value
    sets = 2 * int(_figure("kimi-k3-gb200-2k", "sets_per_direction").value)
    cal = _figure("kimi-k3-gb200-2k-calibrated", "set_mib").value
    hidden = _figure("kimi-k3-gb200-2k-hidden", "set_mib").value
    assumption = (
        f"Calibrated to the published ~{stock:g} GiB for {sets // 2} sets per direction on a "
        f"middle stage, read as the sum of both directions: {stock:g} GiB / {sets} sets = "
        f"{cal:g} MiB per set = the {hidden:g} MiB bf16 hidden state plus a {cal - hidden:g} MiB "
        f"remainder (written as a bf16 ({rows}, seq, {extra}) tensor) that the published text "
        "does not attribute."
    )
    if run != "2k":
        assumption += (
            f" At {seq}-token rows the set is scaled by tokens per row ({set_mib:g} MiB): derived, "
            "not measured."
        )
    title = f"Kimi-K3 GB200 {run} rows, calibrated to the published ~{stock:g} GiB"
    title += f" ({set_mib:g} MiB/set)"
    boundary = Boundary(activations=(hidden_state, remainder))
    return _preset(run, "calibrated", boundary, title, assumption)


def _presets() -> dict[str, Preset]:
    calibrated = _calibrated("2k")
    readings = (calibrated, k3_widths_preset(calibrated), _hidden("2k"))
    return {p.name: p for p in (*readings, _calibrated("1k"), _hidden("1k"))}


PRESETS: Mapping[str, Preset] = MappingProxyType(_presets())
"""Every preset by name, in display order. The first is the one notebook 01 opens with."""


def get_preset(name: str) -> Preset:
    """The preset called ``name``; an error listing the names otherwise."""
    check_choice(
        "preset",
        name,
        PRESETS,
        fix="run `pooltk memory --list-presets` to see them with their provenance.",
        error=MemoryModelError,
    )
    return PRESETS[name]


def published_vs_model(preset: Preset) -> pd.DataFrame:
    """The preset's published memory figures next to what the model gives.

    Columns: ``figure``, ``published``, ``model_middle_stage`` (stage ``(pp - 1) // 2``),
    ``model_inner_stages_range`` (min-max over stages 1 .. pp - 2), ``unit``,
    ``relative_difference`` (model middle stage / published - 1), ``kind``, ``source``; on the
    preset's own config (the published run's policy and slack).
    """
    import pandas as pd

    model = preset.model()
    mid = middle_stage(preset.shape.pp)
    inner = range(1, preset.shape.pp - 1) or range(preset.shape.pp)
    ring = f"{preset.policy}, slack {preset.config.slack}"
    measures = {
        "sets_per_direction": (
            "stock buffer sets per direction",
            lambda i: model.row(i, "forward").stock_sets,
        ),
        "stock_middle_stage_gib": (
            "stock receive buffers per stage (GiB)",
            lambda i: model.stage_gib(i, "stock"),
        ),
        "saved_middle_stage_gib": (
            f"saved by the ring ({ring}) per stage (GiB)",
            lambda i: model.saved_gib(i, "pooled"),
        ),
    }
    records = []
    for f in preset.figures:
        if f.name not in measures or f.kind != "published":
            continue
        label, fn = measures[f.name]
        values = [fn(i) for i in inner]
        records.append(
            {
                "figure": label,
                "published": f.value,
                "model_middle_stage": fn(mid),
                "model_inner_stages_range": f"{min(values):.2f} .. {max(values):.2f}",
                "unit": f.unit,
                "relative_difference": fn(mid) / f.value - 1,
                "kind": f.kind,
                "source": f.source,
            }
        )
    return pd.DataFrame.from_records(records)


# --------------------------------------------------------------------------- K3's widths replayed

K3_WIDTHS: Mapping[str, Any] = MappingProxyType(
    {
        **_K3_CONFIG.defaults,
        "model_type": "kimi_k3",
        "v_head_dim": 128,
        "first_k_dense": 1,
        "torch_dtype": "bfloat16",
    }
)
"""Kimi-K3's published widths as a decoder config: KimiK3TextConfig's defaults (pooltk's table of
known model configs: hidden 7168, 93 layers, 96 heads, FFN 33792, 896 experts top-16 x 3072, 2
shared, vocab 163840) and, from the same class, v head dim 128 and the first layer dense. K3's KDA
and MLA attention and its attention-residual boundary are not what the decoder builds."""


def _estimate() -> EstimatePreset:
    from pooltk.memory.replay.presets import EstimatePreset

    shape, ep = _shape(), int(_figure("kimi-k3-gb200", "ep").value)
    checkpointing = bool(_figure("kimi-k3-gb200", "activation_checkpointing").value)
    return EstimatePreset(
        name="kimi-k3-gb200-2k",
        config=K3_WIDTHS,
        pp=shape.pp,
        microbatches=shape.n_microbatches,
        rows=shape.micro_batch,
        seq_len=SEQ["2k"],
        checkpointing=checkpointing,
        ep=ep,
        slack=_SLACK,
        source="Kimi-K3's published widths (K3_WIDTHS); NVIDIA-NeMo/Automodel PR #3780 and "
        f"kimi_k3_gb200_2k.yaml: pp {shape.pp}, ep {ep}, {shape.n_microbatches} microbatches of "
        f"{shape.micro_batch} x {SEQ['2k']} tokens, activation checkpointing "
        f"{'on' if checkpointing else 'off'}, pool slack {_SLACK}",
    )


def named_estimates() -> dict[str, EstimatePreset]:
    """Every named whole-stage estimate: the replay's presets and this study's ``ESTIMATE`` (what
    ``pooltk estimate --preset`` takes)."""
    from pooltk.memory.replay.presets import ESTIMATE_PRESETS

    estimate = _lazy()["ESTIMATE"]
    return {**ESTIMATE_PRESETS, estimate.name: estimate}


_LAZY = (
    "K3_ACTIVE_6N",
    "PEAK_GB200_2250",
    "PEAK_GB200_2500",
    "GB200_TORCH_REPORTED",
    "GB200_DATASHEET",
    "GB200_NOMINAL",
    "ESTIMATE",
)


@functools.cache
def _lazy() -> dict[str, Any]:
    """The names :func:`__getattr__` makes on first use, each documented in :func:`__getattr__`."""
    from pooltk.logs.metrics import DeviceCapacity, PeakBasis

    def peak(fig_id: str, what: str) -> PeakBasis:
        name = f"GB200 {_PUB.value(fig_id):g} TFLOP/s ({what})"
        return PeakBasis.tflops(_PUB.value(fig_id), name=name, source=_PUB.source(fig_id))

    sheet = _PUB.value("gb200_hbm_nominal")
    datasheet = DeviceCapacity.from_gb(sheet, source=_PUB.source("gb200_hbm_nominal"))
    return {
        "K3_ACTIVE_6N": _six_n(_PUB),
        "PEAK_GB200_2250": peak("k3_cfg_peak", "K3 configs"),
        "PEAK_GB200_2500": peak("gb200_peak_other", "other GB200 configs, Automodel table"),
        "GB200_TORCH_REPORTED": DeviceCapacity(gib=GB200.gib, source=GB200.source),
        "GB200_DATASHEET": datasheet,
        "GB200_NOMINAL": datasheet,
        "ESTIMATE": _estimate(),
    }


def _six_n(pub: Published) -> FlopsBasis:
    """The report's FLOPs basis: 6 x the aligned active parameters per token."""
    from pooltk.logs.metrics import FlopsBasis

    return FlopsBasis.six_n(pub.value("k3_active_aligned"), source=pub.source("k3_active_aligned"))


def __getattr__(name: str) -> Any:
    """The study's bases and its estimate, made on first use (they import :mod:`pooltk.logs` and
    the replay, which the presets and the story do not need):

    - ``K3_ACTIVE_6N``: the report's FLOPs basis, 6 x 104e9 active parameters per token;
    - ``PEAK_GB200_2250`` / ``PEAK_GB200_2500``: GB200 peaks as the K3 configs state them, and as
      other GB200 configs and Automodel's device table do;
    - ``GB200_TORCH_REPORTED``: the one GB200 capacity (:data:`pooltk.memory.fits.GB200`) as the
      log metrics take it, the ledger's default; ``GB200_DATASHEET``: the datasheet's 186 GB, the
      stated alternative ([Note: GB200 memory]), also under its earlier name ``GB200_NOMINAL``;
    - ``ESTIMATE``: the whole-stage estimate at Kimi-K3's published widths (``pooltk estimate
      --preset kimi-k3-gb200-2k``).
    """
    if name in _LAZY:
        return _lazy()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------- claims


@dataclass(kw_only=True, slots=True, frozen=True)
class Claim:
    """One published claim, recomputed by pooltk."""

    claim: str
    source: str
    inputs: str
    """The inputs pooltk's figure is computed from."""
    published: str
    """The published figure ('' for claims with none)."""
    pooltk: str
    agrees: bool | None
    """None when there is nothing to agree with (informational rows)."""
    rule: str
    """How agreement was judged ([Note: agreement])."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Ledger:
    """The claims ledger."""

    claims: tuple[Claim, ...]

    def to_frame(self) -> pd.DataFrame:
        """claim, source, inputs, published, pooltk, agrees ('yes', 'no', '-'), rule."""
        import pandas as pd

        agrees = {None: "-", True: "yes", False: "no"}
        return pd.DataFrame(
            [{**dataclasses.asdict(c), "agrees": agrees[c.agrees]} for c in self.claims]
        )

    def __getitem__(self, claim_start: str) -> Claim:
        found = next((c for c in self.claims if c.claim.startswith(claim_start)), None)
        if found is None:
            raise KeyError(f"no claim starting with {claim_start!r}")
        return found


def _implied_capacity_gib(pub: Published) -> float:
    """The capacity the 44 GiB claim implies: the pooled 2k peak plus its stated headroom."""
    return pub.value("k3_2k_seed_mem") + pub.value("k3_2k_seed_headroom")


def _within_1_gib(pooltk_gib: float, published_gib: float) -> bool:
    """The headroom rule of the story and the ledger: within 1 GiB of the published figure."""
    return abs(pooltk_gib - published_gib) <= 1.0


def _gain_2k_over_1k_pct(pub: Published) -> float:
    """The seed runs' tok/s/GPU gain of 2k rows over 1k, percent (the same code tree)."""
    return 100 * (pub.value("k3_2k_seed_tok") / pub.value("k3_1k_seed_tok") - 1)


def _expected_after_alignment(pub: Published) -> float:
    """The seed 2k rate scaled by the active parameters, 101.5B -> 104B (tok/s/GPU)."""
    rate = pub.value("k3_2k_seed_tok")
    return rate * pub.value("k3_active_pre3792") / pub.value("k3_active_aligned")


def _rounds_to(value: float, published: float, decimals: int) -> bool:
    """Whether ``value`` rounds to ``published`` at ``decimals`` decimals (half a unit of slack)."""
    return abs(value - published) <= 0.5 * 10 ** (-decimals) + 1e-12


_SHAPES = (
    ("1k_seed", "1k x GBS4096", "1k x GBS4096, seed (PR #3780)"),
    ("2k_seed", "2k x GBS4096 + pool", "2k x GBS4096 + pool, seed (PR #3780)"),
    ("2k_aligned", "2k aligned 104B", "2k aligned 104B (2k config header)"),
    ("1k_later", "1k later tree", "1k, later tree (1k config header)"),
)
"""The measured shapes: the key in their figure ids (``k3_<key>_tok``), the ledger's name, the
label beside a user's runs."""


def claims_ledger(
    published: Published | None = None,
    *,
    flops: FlopsBasis | None = None,
    peak: PeakBasis | None = None,
    other_peak: PeakBasis | None = None,
    capacity: DeviceCapacity | None = None,
) -> Ledger:
    """Every derived claim of the Kimi-K3 1k vs 2k report, recomputed ([Note: agreement]).

    ``flops`` defaults to 6 x (the CSV's aligned active parameters); ``peak`` to the K3 configs'
    2250 TFLOP/s (``other_peak`` shown alongside); ``capacity`` to the one GB200 capacity (the
    datasheet shown alongside, [Note: GB200 memory]). A ratio across code trees is flagged as such.
    """
    pub = published or load_published()
    flops = flops or _six_n(pub)
    peak, other_peak = peak or _lazy()["PEAK_GB200_2250"], other_peak or _lazy()["PEAK_GB200_2500"]
    capacity = capacity or _lazy()["GB200_TORCH_REPORTED"]
    return Ledger(
        claims=(
            *_mfu_claims(pub, flops, peak, other_peak),
            *_step_claims(pub),
            _headroom_claim(pub, capacity),
            *_alignment_claims(pub, flops, peak),
            *_later_claims(pub, capacity),
        )
    )


def _mfu_claims(
    pub: Published, flops: FlopsBasis, peak: PeakBasis, other_peak: PeakBasis
) -> list[Claim]:
    from pooltk.logs.metrics import mfu

    out = []
    for key, label, _ in _SHAPES:
        rate, pub_mfu = pub.value(f"k3_{key}_tok"), pub.value(f"k3_{key}_mfu")
        fig, other = mfu(rate, flops, peak), mfu(rate, flops, other_peak)
        ok = _rounds_to(fig.mfu_pct, pub_mfu, 1)
        rule = "rounds to the published figure (0.05 pp)"
        if key == "2k_aligned":
            rule = (
                "published 17.5% is the recipe's MFU on config-derived FLOPs; on 6 x 104e9 it must "
                "round to it within 0.15 pp (the two bases differ by ~0.3%)"
            )
            ok = abs(fig.mfu_pct - pub_mfu) <= 0.15
        out.append(
            Claim(
                claim=f"MFU of {label} = {pub_mfu:g}%",
                source=pub.source(f"k3_{key}_mfu"),
                inputs=fig.basis,
                published=f"{pub_mfu:g}%",
                pooltk=f"{fig.mfu_pct:.2f}% (at {other_peak.name}: {other.mfu_pct:.2f}%)",
                agrees=ok,
                rule=rule,
            )
        )
    return out


def _step_claims(pub: Published) -> list[Claim]:
    r1, r2 = pub.value("k3_1k_seed_tok"), pub.value("k3_2k_seed_tok")
    gain = _gain_2k_over_1k_pct(pub)
    gbs, mbs, dp = _run_config(pub, "gbs", "mbs", "dp")
    b, bubble = k3_bubble(pub), pub.value("k3_2k_seed_bubble")
    return [
        Claim(
            claim="2k rows give +24% tok/s/GPU over 1k",
            source="derived from the PR #3780 Validation table",
            inputs=f"{r2:g} / {r1:g} - 1",
            published="+24%",
            pooltk=f"+{gain:.2f}%",
            agrees=round(gain) == 24,
            rule="rounds to the whole percent stated",
        ),
        Claim(
            claim="64 microbatches per step",
            source=pub.source("k3_2k_seed_bubble"),
            inputs=f"GBS {gbs} / (mbs {mbs} x dp {dp})",
            published="64",
            pooltk=str(b.microbatches),
            agrees=b.microbatches == 64 and gbs % (mbs * dp) == 0,
            rule="exact",
        ),
        Claim(
            claim="PP bubble 9.9% (pp8, 64 microbatches)",
            source=pub.source("k3_2k_seed_bubble"),
            inputs=f"1F1B bubble {b.formula}",
            published=f"{bubble:g}%",
            pooltk=f"{100 * b.fraction:.2f}%",
            agrees=_rounds_to(100 * b.fraction, bubble, 1),
            rule="rounds to the published figure (0.05 pp)",
        ),
    ]


def _headroom_claim(pub: Published, capacity: DeviceCapacity) -> Claim:
    peak_mem, room = pub.value("k3_2k_seed_mem"), pub.value("k3_2k_seed_headroom")
    from pooltk.logs.metrics import headroom

    implied, sheet = _implied_capacity_gib(pub), _lazy()["GB200_DATASHEET"]
    judged, against_sheet = headroom(peak_mem, capacity), headroom(peak_mem, sheet)
    return Claim(
        claim="44 GiB headroom at 139.6 GiB peak",
        source=pub.source("k3_2k_seed_headroom"),
        inputs=f"implied capacity {peak_mem:g} + {room:g} = {implied:.1f} GiB "
        f"({implied * GIB / 1e9:.1f} GB); device: {capacity.gib:.2f} GiB = {capacity.gb:.1f} GB "
        f"({capacity.source}); alternative: datasheet {sheet.gb:.0f} GB = {sheet.gib:.1f} GiB",
        published=f"{room:g} GiB",
        pooltk=f"{judged.headroom_gib:.1f} GiB against {capacity.gib:.2f} GiB; "
        f"{against_sheet.headroom_gib:.1f} GiB against the datasheet's {sheet.gib:.1f} GiB",
        agrees=_within_1_gib(judged.headroom_gib, room),
        rule="within 1 GiB against the device capacity given (default: what torch reports usable "
        "on GB200, 184.31 GiB)",
    )


def _alignment_claims(pub: Published, flops: FlopsBasis, peak: PeakBasis) -> list[Claim]:
    from pooltk.logs.metrics import mfu

    r2, measured = pub.value("k3_2k_seed_tok"), pub.value("k3_2k_aligned_tok")
    a_old, a_new = pub.value("k3_active_pre3792"), pub.value("k3_active_aligned")
    expected, change = _expected_after_alignment(pub), 100 * (measured / r2 - 1)
    mfu_new, mfu_old = mfu(measured, flops, peak).mfu_pct, mfu(r2, flops, peak).mfu_pct
    mem_change = pub.value("k3_2k_aligned_mem") - pub.value("k3_2k_seed_mem")
    return [
        Claim(
            claim="~2% fewer tok/s after the 101.5B -> 104B alignment",
            source=pub.source("k3_2k_expect_tok"),
            inputs=f"expected {r2:g} x {a_old / 1e9:g}/{a_new / 1e9:g} = {expected:.1f} "
            f"({100 * (expected / r2 - 1):+.1f}%); measured {measured:g}",
            published=f"{pub.value('k3_2k_expect_tok'):+g}%",
            pooltk=f"{change:+.2f}% measured ({measured:g} vs {r2:g})",
            agrees=change < 0 and abs(change - pub.value("k3_2k_expect_tok")) <= 1.0,
            rule="the measured change is negative and within 1 pp of -2%",
        ),
        Claim(
            claim="about the same MFU on the aligned shape",
            source=pub.source("k3_2k_expect_mfu"),
            inputs=f"{measured:g} and {r2:g} tok/s/GPU on {flops.name} / {peak.name}",
            published=f"{pub.value('k3_2k_seed_mfu'):g}% -> about the same",
            pooltk=f"{mfu_old:.2f}% -> {mfu_new:.2f}% ({mfu_new - mfu_old:+.2f} pp)",
            agrees=abs(mfu_new - mfu_old) <= 0.5,
            rule="within 0.5 pp",
        ),
        Claim(
            claim="~1 GiB more per GPU on the aligned shape",
            source=pub.source("k3_2k_expect_mem"),
            inputs=f"{pub.value('k3_2k_aligned_mem'):g} - {pub.value('k3_2k_seed_mem'):g} GiB",
            published=f"+{pub.value('k3_2k_expect_mem'):g} GiB",
            pooltk=f"{mem_change:+.1f} GiB",
            agrees=abs(mem_change - pub.value("k3_2k_expect_mem")) <= 1.0,
            rule="within 1 GiB of +1 GiB",
        ),
    ]


def _later_claims(pub: Published, capacity: DeviceCapacity) -> list[Claim]:
    from pooltk.logs.metrics import headroom

    gbs, world, seq = _run_config(pub, "gbs", "world", "seq_2k")
    it, measured = pub.value("k3_2k_aligned_iter"), pub.value("k3_2k_aligned_tok")
    mem, r1_later = pub.value("k3_2k_aligned_mem"), pub.value("k3_1k_later_tok")
    implied, gain = _implied_capacity_gib(pub), _gain_2k_over_1k_pct(pub)
    rate = gbs * seq / (it * world)
    return [
        Claim(
            claim="627.3 tok/s/GPU at 52.2 s/iteration",
            source=pub.source("k3_2k_aligned_iter"),
            inputs=f"GBS x seq / (iteration time x world) = {gbs} x {seq} / ({it:g} x {world})",
            published=f"{measured:g} tok/s/GPU",
            pooltk=f"{rate:.1f} tok/s/GPU",
            agrees=abs(rate / measured - 1) <= 0.05 / it + 1e-9,
            rule=f"within the rounding of 52.2 s (+-0.05 s = +-{100 * 0.05 / it:.2f}%)",
        ),
        Claim(
            claim="headroom on the aligned 2k shape (informational)",
            source=pub.source("k3_2k_aligned_mem"),
            inputs=f"{mem:g} GiB peak; device {capacity.gib:.2f} GiB; implied capacity from the 44 "
            f"GiB claim {implied:.1f} GiB",
            published="",
            pooltk=f"{headroom(mem, capacity).headroom_gib:.1f} GiB (device); "
            f"{implied - mem:.1f} GiB (implied capacity)",
            agrees=None,
            rule="no published figure",
        ),
        Claim(
            claim="CROSS-TREE: aligned 2k re-run over the 2026-09-04 tree's 1k (informational, "
            "not like for like)",
            source=f"{pub.source('k3_2k_aligned_tok')}; {pub.source('k3_1k_later_tok')}",
            inputs=f"{measured:g} / {r1_later:g} - 1: two measurements from different code trees",
            published="",
            pooltk=f"+{100 * (measured / r1_later - 1):.1f}% (cross-tree; the same-tree figure is "
            f"the seed's +{gain:.0f}%)",
            agrees=None,
            rule="no published figure; a ratio across code trees mixes the code change with the "
            "shape change",
        ),
    ]


def k3_bubble(published: Published | None = None) -> Bubble:
    """The 1F1B bubble of the 2k shape from its config (pp, GBS / (mbs x dp) microbatches)."""
    from pooltk.logs.metrics import bubble_1f1b

    pub = published or load_published()
    pp, gbs, mbs, dp = _run_config(pub, "pp", "gbs", "mbs", "dp")
    return bubble_1f1b(pp, gbs // (mbs * dp))


def published_table(published: Published | None = None) -> pd.DataFrame:
    """The measured figures as the report's table: shape x (tok/s/GPU, MFU %, peak GiB, s/step)."""
    f = (published or load_published()).table("measured")
    f = f[f["id"].str.startswith("k3_")]
    wide = f.pivot_table(
        index="shape", columns="quantity", values="value", aggfunc="first", sort=False
    )
    names = {"mfu": "mfu_pct", "peak_mem": "peak_mem_gib", "iteration_time": "iteration_time_s"}
    return wide.rename(columns={**names, "headroom": "headroom_gib"}).reset_index()


_BESIDE_QUANTITIES = ("tok_per_s_per_gpu", "mfu", "peak_mem")
"""The measured quantities drawn beside a user's runs, in this order."""


def published_figures(published: Published | None = None) -> pd.DataFrame:
    """The measured figures of each shape, one row per (shape, quantity), for drawing beside a
    user's runs: id, label, quantity, value, unit, approximate (``~`` or "about"), source."""
    import pandas as pd

    pub = published or load_published()
    columns = ["id", "label", "quantity", "value", "unit", "approximate", "source"]
    rows = [
        {
            "id": r["id"],
            "label": label,
            "quantity": q,
            "value": float(r["value"]),
            "unit": r["unit"],
            "approximate": pub.approximate(r["id"]),
            "source": r["source"],
        }
        for key, _, label in _SHAPES
        for q in _BESIDE_QUANTITIES
        for r in pub.rows
        if r["kind"] == "measured" and r["id"].startswith(f"k3_{key}_") and r["quantity"] == q
    ]
    return pd.DataFrame(rows, columns=columns)


def mfu_by_shape(
    published: Published | None = None,
    *,
    flops: FlopsBasis | None = None,
    peaks: tuple[PeakBasis, ...] | None = None,
) -> pd.DataFrame:
    """MFU of every published shape on one FLOPs basis against each peak, beside the published."""
    import pandas as pd

    from pooltk.logs.metrics import mfu

    pub = published or load_published()
    flops = flops or _six_n(pub)
    peaks = peaks or (_lazy()["PEAK_GB200_2250"], _lazy()["PEAK_GB200_2500"])
    rows = []
    for key, _, label in _SHAPES:
        rate = pub.value(f"k3_{key}_tok")
        for peak in peaks:
            fig = mfu(rate, flops, peak)
            rows.append(
                {
                    "shape": label,
                    "tok_per_s_per_gpu": rate,
                    "flops_per_token": flops.flops_per_token,
                    "peak_tflops": peak.flops_per_s / 1e12,
                    "mfu_pct": fig.mfu_pct,
                    "published_mfu_pct": pub.value(f"k3_{key}_mfu"),
                    "basis": fig.basis,
                }
            )
    return pd.DataFrame(rows)


def headroom_by_capacity(
    published: Published | None = None, *, capacities: tuple[DeviceCapacity, ...] | None = None
) -> pd.DataFrame:
    """Headroom of the 2k shape's 139.6 GiB peak against each capacity; the 44 GiB claim's implied
    capacity first."""
    import pandas as pd

    from pooltk.logs.metrics import DeviceCapacity, headroom

    pub = published or load_published()
    peak, room = pub.value("k3_2k_seed_mem"), pub.value("k3_2k_seed_headroom")
    implied = DeviceCapacity.from_gib(
        _implied_capacity_gib(pub),
        source=f"implied by the claim: {peak:g} GiB peak + {room:g} GiB headroom",
    )
    caps = (implied, *(capacities or (_lazy()["GB200_TORCH_REPORTED"], _lazy()["GB200_DATASHEET"])))
    return pd.concat([headroom(peak, c).to_frame() for c in caps], ignore_index=True)


def alignment_expectation(published: Published | None = None) -> pd.DataFrame:
    """The '~2% fewer tok/s' expectation (active parameters 101.5B -> 104B) against the later
    measurement."""
    import pandas as pd

    pub = published or load_published()
    r2, a_old, a_new = (
        pub.value(k) for k in ("k3_2k_seed_tok", "k3_active_pre3792", "k3_active_aligned")
    )
    stated, measured = pub.value("k3_2k_expect_tok"), pub.value("k3_2k_aligned_tok")
    expected = _expected_after_alignment(pub)
    rows = [
        ("seed measurement (101.5B active)", r2),
        (f"expected on 104B: {r2:g} x {a_old / 1e9:g}/{a_new / 1e9:g}", expected),
        ("PR's stated expectation", r2 * (1 + stated / 100)),
        ("later measurement (aligned 104B)", measured),
    ]
    return pd.DataFrame(
        [
            {"figure": f, "tok_per_s_per_gpu": rate, "change_pct": 100 * (rate / r2 - 1)}
            for f, rate in rows
        ]
    )


# --------------------------------------------------------------------------- the story


@dataclass(kw_only=True, slots=True, frozen=True)
class K3Story:
    """The PR's OOM and headroom beside the model's verdicts. See [Note: the Kimi-K3 story]."""

    device: Device
    """The one capacity judged against."""
    overhead: Overhead
    """What is added to every modelled peak."""
    rows: tuple[Claim, ...]
    """The claims, published beside modelled (``pooltk``); ``inputs`` say how it was made."""
    anchored: tuple[tuple[str, Verdict], ...]
    """Per reading of the anchor's stage, its label and the anchored verdict."""
    sentence: str
    """Why they agree or differ, in one sentence."""

    def records(self) -> list[dict[str, Any]]:
        """One dict per claim: ``claim``, ``published``, ``modelled``, ``agrees``, ``note``."""
        return [
            {
                "claim": r.claim,
                "published": r.published,
                "modelled": r.pooltk,
                "agrees": r.agrees,
                "note": r.inputs,
            }
            for r in self.rows
        ]

    def to_frame(self) -> pd.DataFrame:
        """The columns of :meth:`records`, one row per claim."""
        import pandas as pd

        return pd.DataFrame.from_records(self.records())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "device": {"name": self.device.name, "capacity_bytes": self.device.capacity_bytes},
            "overhead_bytes": self.overhead.total_bytes,
            "sentence": self.sentence,
            "rows": self.records(),
        }


_ANCHORS = (("the fullest pooled stage", None), ("stage 0 (the rank that logs)", 0))
"""The two readings of where the published peak was logged ([Note: the Kimi-K3 story])."""


def k3_story(
    *,
    estimate: Any = None,
    device: Device | str | float = GB200,
    overhead: Overhead = DEFAULT_OVERHEAD,
) -> K3Story:
    """The PR's OOM and headroom beside the model's verdicts, with one sentence.

    The receive buffers are the calibrated 2k preset's model. ``estimate``: a whole-stage
    replay at K3's widths (:data:`ESTIMATE`), shown beside the measured peak when given. See
    [Note: the Kimi-K3 story].
    """
    dev = get_device(device)
    receive = PRESETS["kimi-k3-gb200-2k-calibrated"].model()
    peak = round(_PUB.value("k3_2k_seed_mem") * GIB)
    verdicts = tuple(
        (label, anchored(receive, dev, _published_anchor(receive, peak, stage), overhead=overhead))
        for label, stage in _ANCHORS
    )
    rows = [_headroom_row(dev, overhead, peak)]
    rows += [_stock_row(label, v) for label, v in verdicts]
    if estimate is not None:
        rows.append(_replay_row(estimate))
    sentence = _sentence(dev, overhead, receive, rows[0].agrees, verdicts)
    return K3Story(
        device=dev, overhead=overhead, rows=tuple(rows), anchored=verdicts, sentence=sentence
    )


def _published_anchor(receive: MemoryModel, peak: int, stage: int | None) -> ReferencePeak:
    return ReferencePeak(
        peak_bytes=peak,
        variant="pooled",
        config=receive.config,
        policy=receive.policy,
        sharing=receive.sharing,
        stage=stage,
        source=_PUB.source("k3_2k_seed_mem"),
    )


def _headroom_row(dev: Device, overhead: Overhead, peak: int) -> Claim:
    room, o = dev.capacity_bytes - peak, overhead.total_bytes
    published = _PUB.value("k3_2k_seed_headroom")
    return Claim(
        claim="pooled 2k headroom",
        source=_PUB.source("k3_2k_seed_headroom"),
        inputs=f"capacity {dev.gib:.2f} GiB - the measured {peak / GIB:.1f} GiB peak: the PR's "
        "headroom leaves the overhead out",
        published=f"{published:g} GiB",
        pooltk=f"{room / GIB:.2f} GiB ({(room - o) / GIB:.2f} GiB after the {o / GIB:.2f} GiB "
        "overhead)",
        agrees=_within_1_gib(room / GIB, published),
        rule="within 1 GiB",
    )


def _stock_row(label: str, verdict: Any) -> Claim:
    """The stock run under one reading of the anchor (``verdict``: :func:`anchored`'s)."""
    worst, o = verdict.worst("stock"), verdict.overhead.total_bytes
    margin, ref_gib = worst.margin_bytes, verdict.reference.peak_bytes / GIB
    return Claim(
        claim=f"stock 2k, anchored on {label}",
        source=_OOM.source,
        inputs=f"base {verdict.base_bytes / GIB:.2f} GiB ({ref_gib:.1f} GiB less the anchor "
        f"stage's pooled receive buffers) + stage {worst.rank}'s stock receive buffers "
        f"{worst.recv_bytes / GIB:.2f} GiB",
        published=f"OOM in step 1 ('by only {_OOM.value:g} MiB')",
        pooltk=f"stage {worst.rank}: {worst.tensor_bytes / GIB:.2f} GiB + {o / GIB:.2f} GiB "
        "overhead: "
        + (
            f"OOM by {-margin / GIB:.2f} GiB"
            if margin < 0
            else f"fits, {margin / GIB:.2f} GiB free"
        ),
        agrees=margin < 0,
        rule="the sign of the margin: the 56 MiB is one hidden state, the allocation that failed",
    )


def _replay_row(estimate: Any) -> Claim:
    rep = estimate.worst("pooled" if "pooled" in estimate.variants else "stock")
    return Claim(
        claim=f"whole-stage replay at K3's widths ({rep.variant}, fullest rank {rep.rank})",
        source=_PUB.source("k3_2k_seed_mem"),
        inputs="pooltk's decoder at the published widths, not K3's own layers: "
        + "; ".join(estimate.not_modelled[:2]),
        published=f"{_PUB.value('k3_2k_seed_mem'):g} GiB (pooled, measured)",
        pooltk=f"{rep.peak.bytes / GIB:.2f} GiB",
        agrees=None,
        rule="not comparable: another model's layers",
    )


def _sentence(
    dev: Device,
    overhead: Overhead,
    receive: MemoryModel,
    headroom_agrees: bool | None,
    verdicts: tuple[tuple[str, Verdict], ...],
) -> str:
    margins = [(label, v.worst("stock").margin_bytes) for label, v in verdicts]
    if not (headroom_agrees and all(m < 0 for _, m in margins)):
        reasons = [
            f"anchored on {label}, stock {'fits' if m >= 0 else 'OOMs'} ({m / GIB:+.2f} GiB)"
            for label, m in margins
        ]
        return (
            "They differ: " + "; ".join(reasons) + ", against the PR's measured OOM, because the "
            "model assumes every stage holds the anchor's non-buffer memory and the overhead is "
            "the stated default, not this run's."
        )
    saved = max(receive.saved_bytes(i, "pooled") for i in range(receive.shape.pp))
    over = [-m / GIB for _, m in margins]
    peak, hidden = _PUB.value("k3_2k_seed_mem"), PRESETS["kimi-k3-gb200-2k-hidden"].boundary
    return (
        f"They agree: the PR's {_PUB.value('k3_2k_seed_headroom'):g} GiB headroom is the "
        f"{dev.gib:.2f} GiB capacity minus the pooled run's allocated {peak:g} GiB, and giving "
        f"back the up to {saved / GIB:.1f} GiB of receive buffers the ring removes, plus the "
        f"{overhead.total_bytes / GIB:.2f} GiB the process holds outside its tensors, puts stock "
        f"{min(over):.1f} to {max(over):.1f} GiB over whichever stage the peak was logged on; the "
        f"'{_OOM.value:g} MiB' is one "
        f"{hidden.forward_bytes / MIB:.0f} MiB hidden state, most likely the allocation that "
        "failed, so only the sign of the margin can be checked."
    )
