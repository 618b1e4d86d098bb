"""Named pipeline shapes with their provenance: what was published, what is derived, what is assumed.

[Note: the Kimi-K3 boundary calibration]
Published (NVIDIA-NeMo/Automodel PR #3780 description, and the header of its
``examples/llm_benchmark/kimi/kimi_k3_gb200_2k.yaml``): Kimi-K3 on 64 GB200 nodes, pp 8,
dp 32, micro batch 2, global batch 4096, 2048-token rows -> 64 microbatches, "64 buffer sets
per direction, ~52 GiB on middle stages", "~45 GiB saved" by the ring with slack 2.
Published (KimiK3TextConfig): hidden size 7168, bf16.

One bf16 hidden state of ``(2, 2048, 7168)`` is 56 MiB; 128 sets of it (64 per direction)
are 7 GiB, not 52. So the boundary carries more than one hidden state. The calibrated
presets assume the ~52 GiB is the sum over both directions of a middle stage (64 forward +
64 grad sets), which gives 52 GiB / 128 = 416 MiB per set: the 56 MiB hidden state plus a
360 MiB remainder this project cannot attribute to named tensors (the width is written as a
bf16 ``(2, seq, 46080)`` tensor). The 1k calibrated preset further assumes the boundary
bytes scale linearly with tokens per row (208 MiB per set): derived, never measured.
The hidden-state-only presets make no calibration: they show what the plain hidden state
alone would cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, MemoryModel, MemoryModelError, PipelineShape, TensorSpec, model_memory

__all__ = [
    "PRESETS",
    "ConfigKeyError",
    "Figure",
    "Preset",
    "get_preset",
    "load_automodel_config",
    "preset_names",
    "published_vs_model",
]

_PR = (
    "NVIDIA-NeMo/Automodel PR #3780 'perf(distributed): ring-pooled PP recv buffers and Kimi-K3 2k benchmark "
    "shape' (description text)"
)
_YAML_2K = "NVIDIA-NeMo/Automodel examples/llm_benchmark/kimi/kimi_k3_gb200_2k.yaml header and keys (@532737d)"
_YAML_1K = "NVIDIA-NeMo/Automodel examples/llm_benchmark/kimi/kimi_k3_gb200.yaml (seq_len 1024)"
_CONFIG = "NVIDIA-NeMo/Automodel KimiK3TextConfig (hidden_size 7168, bfloat16)"

_HIDDEN = 7168
_ROWS = 2
_CAL_SET_BYTES_2K = 52 * 2**30 // 128  # 416 MiB: see [Note: the Kimi-K3 boundary calibration]
_CAL_WIDTH = _CAL_SET_BYTES_2K // (_ROWS * 2048 * 2)  # bf16 elements per token: 53248 = 7168 + 46080


@dataclass(kw_only=True, slots=True, frozen=True)
class Figure:
    """One number attached to a preset, with what kind of number it is and where it comes from."""

    name: str
    """Short key, e.g. ``stock_middle_stage_gib``."""
    value: float
    """The number."""
    unit: str
    """Its unit (``gib``, ``mib``, ``sets``, ...)."""
    kind: str
    """``published`` (stated in the source), ``derived`` (arithmetic on published facts) or
    ``assumed`` (a choice this project made to fill a gap)."""
    source: str
    """Where it comes from, or how it was derived."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Preset:
    """A named shape: pipeline, boundary tensors, the pool config of the published run, provenance."""

    name: str
    """CLI / widget name."""
    title: str
    """One line for tables."""
    shape: PipelineShape
    """pp, microbatches (derived from the batch sizes), schedule."""
    boundary: Boundary
    """What one microbatch sends across every stage boundary."""
    config: PoolConfig
    """The pool config the published figures refer to."""
    seq_len: int
    """Tokens per row."""
    hidden: int
    """Model hidden size."""
    assumption: str
    """The assumption that produces this preset's bytes, in one paragraph."""
    figures: tuple[Figure, ...]
    """Published, derived and assumed numbers, each with its source."""
    sources: tuple[str, ...]
    """Everything the preset is built from."""

    def model(self, config: PoolConfig | None = None) -> MemoryModel:
        """The memory model of this preset (its own config unless another is given)."""
        return model_memory(self.shape, self.boundary, self.config if config is None else config)

    def figure(self, name: str) -> Figure:
        """The figure called ``name``."""
        for f in self.figures:
            if f.name == name:
                return f
        raise KeyError(f"preset {self.name!r} has no figure {name!r}; it has {[f.name for f in self.figures]}")


def _shape() -> PipelineShape:
    return PipelineShape.from_batch(pp=8, global_batch=4096, micro_batch=_ROWS, dp=32, schedule="1f1b")


def _published_2k() -> tuple[Figure, ...]:
    return (
        Figure(name="sets_per_direction", value=64, unit="sets", kind="published", source=_PR),
        Figure(name="stock_middle_stage_gib", value=52, unit="gib", kind="published", source=f"{_PR}: '~52 GiB on middle stages'"),
        Figure(name="saved_middle_stage_gib", value=45, unit="gib", kind="published", source=f"{_PR}: '~45 GiB saved on middle stages' (slack 2)"),
        Figure(name="oom_margin_mib", value=56, unit="mib", kind="published", source=f"{_PR}: stock OOMs in step 1 'by only 56 MiB, measured'"),
        Figure(name="peak_memory_pooled_gib", value=139.6, unit="gib", kind="published", source=f"{_PR}: validation table, 2k x GBS4096 + recv pool"),
    )


def _hidden_preset(seq_len: int, tag: str, yaml_source: str) -> Preset:
    boundary = Boundary.hidden_state(rows=_ROWS, seq_len=seq_len, hidden=_HIDDEN, dtype="bfloat16")
    mib = boundary.forward_bytes / 2**20
    figures = (
        Figure(
            name="set_mib",
            value=mib,
            unit="mib",
            kind="derived",
            source=f"{_ROWS} x {seq_len} x {_HIDDEN} x 2 bytes (bf16) / 2**20",
        ),
    ) + (_published_2k() if tag == "2k" else ())
    return Preset(
        name=f"kimi-k3-gb200-{tag}-hidden",
        title=f"Kimi-K3 GB200 {tag} rows, hidden state only ({mib:g} MiB/set)",
        shape=_shape(),
        boundary=boundary,
        config=PoolConfig(slack=2, policy="automodel"),
        seq_len=seq_len,
        hidden=_HIDDEN,
        assumption=(
            f"Each boundary carries exactly one bf16 hidden state ({_ROWS}, {seq_len}, {_HIDDEN}) = {mib:g} MiB per set. "
            "A lower bound: it reproduces the published set count but not the published bytes, which need ~416 MiB "
            "per set at 2k (see the calibrated preset)."
        ),
        figures=figures,
        sources=(yaml_source, _CONFIG, _PR),
    )


def _calibrated_preset(seq_len: int, tag: str, yaml_source: str) -> Preset:
    scale = seq_len / 2048
    extra = _CAL_WIDTH - _HIDDEN
    boundary = Boundary(
        activations=(
            TensorSpec(shape=(_ROWS, seq_len, _HIDDEN), dtype="bfloat16", name="hidden_states"),
            TensorSpec(shape=(_ROWS, seq_len, extra), dtype="bfloat16", name="calibrated_remainder"),
        )
    )
    mib = boundary.forward_bytes / 2**20
    cal = Figure(
        name="set_mib",
        value=mib,
        unit="mib",
        kind="derived" if tag == "2k" else "assumed",
        source=(
            "52 GiB / (64 forward + 64 grad sets) = 416 MiB, assuming the published ~52 GiB covers both directions"
            if tag == "2k"
            else f"the 2k calibration (416 MiB per set) x {scale:g}, assuming bytes scale with tokens per row"
        ),
    )
    figures = (cal,) + (_published_2k() if tag == "2k" else ())
    assumption = (
        "Calibrated to the published ~52 GiB for 64 sets per direction on a middle stage, read as the sum of both "
        "directions: 52 GiB / 128 sets = 416 MiB per set = the 56 MiB bf16 hidden state plus a 360 MiB remainder "
        f"(written as a bf16 ({_ROWS}, seq, {extra}) tensor) that the published text does not attribute."
    )
    if tag != "2k":
        assumption += f" At {seq_len}-token rows the set is scaled by tokens per row ({mib:g} MiB): derived, not measured."
    return Preset(
        name=f"kimi-k3-gb200-{tag}-calibrated",
        title=f"Kimi-K3 GB200 {tag} rows, calibrated to the published ~52 GiB ({mib:g} MiB/set)",
        shape=_shape(),
        boundary=boundary,
        config=PoolConfig(slack=2, policy="automodel"),
        seq_len=seq_len,
        hidden=_HIDDEN,
        assumption=assumption,
        figures=figures,
        sources=(_PR, yaml_source, _CONFIG),
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        _calibrated_preset(2048, "2k", _YAML_2K),
        _hidden_preset(2048, "2k", _YAML_2K),
        _calibrated_preset(1024, "1k", _YAML_1K),
        _hidden_preset(1024, "1k", _YAML_1K),
    )
}
"""Every preset by name. The first is the one the notebook opens with."""


def preset_names() -> list[str]:
    """Names of every preset, in display order."""
    return list(PRESETS)


def get_preset(name: str) -> Preset:
    """The preset called ``name``; a clear error listing the names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise MemoryModelError(
            "preset",
            found=repr(name),
            required=f"one of {', '.join(PRESETS)}",
            fix="run `pooltk memory --list-presets` to see them with their provenance.",
        ) from None


# --------------------------------------------------------------------------- Automodel-style YAML


class ConfigKeyError(MemoryModelError):
    """A key of an Automodel-style YAML config is missing or has the wrong type."""

    def __init__(self, key: str, *, found: str, required: str, fix: str) -> None:
        self.key = key
        super().__init__(f"config key {key!r}", found=found, required=required, fix=fix)


_MISSING = object()


def _lookup(cfg: dict, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _first(cfg: dict, keys: tuple[str, ...]) -> tuple[str, Any]:
    """(key, value) of the first of ``keys`` present; (keys[0], _MISSING) if none is."""
    for key in keys:
        value = _lookup(cfg, key)
        if value is not _MISSING:
            return key, value
    return keys[0], _MISSING


def _int_key(cfg: dict, keys: tuple[str, ...], meaning: str, example: int, *, default: Any = _MISSING) -> Any:
    key, value = _first(cfg, keys)
    if value is _MISSING or value is None:
        if default is not _MISSING:
            return default
        alt = f" (or {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
        raise ConfigKeyError(
            key,
            found="nothing (missing)" if value is _MISSING else "null",
            required=f"{meaning}, an integer >= 1{alt}",
            fix=f"add `{key}: {example}` to the YAML.",
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigKeyError(
            key,
            found=f"{value!r} ({type(value).__name__})",
            required=f"{meaning}, an integer >= 1",
            fix=f"write it as a plain integer, e.g. `{key}: {example}`.",
        )
    return value


def _read_yaml(source: str | Path | dict) -> tuple[dict, str]:
    if isinstance(source, dict):
        return source, "<dict>"
    import yaml

    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MemoryModelError(
            "config file", found=f"{str(path)!r} ({exc.strerror or exc})", required="a readable YAML file", fix="check the path."
        ) from None
    try:
        cfg = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise MemoryModelError(
            "config file",
            found=f"{str(path)!r}: not valid YAML{at} ({getattr(exc, 'problem', None) or exc})",
            required="YAML that yaml.safe_load reads",
            fix="fix the syntax at the position given.",
        ) from None
    if not isinstance(cfg, dict):
        raise MemoryModelError(
            "config file",
            found=f"{str(path)!r} holds a {type(cfg).__name__}, not a mapping",
            required="a YAML mapping with distributed / step_scheduler / dataset / model sections",
            fix="see data/configs/kimi_k3_gb200_2k_example.yaml.",
        )
    return cfg, str(path)


def load_automodel_config(source: str | Path | dict) -> Preset:
    """A :class:`Preset` from an Automodel-style YAML config (a path, or the parsed dict).

    Keys read (dotted paths; Automodel's own layout):

    - ``distributed.pp_size`` (also accepted: ``distributed.pipeline.pp_size``) -- stages.
    - ``distributed.pipeline.pp_schedule`` -- default ``1f1b`` (Automodel's default).
      ``distributed.pipeline.pp_schedule_csv`` is refused: a CSV schedule cannot be pooled.
    - ``distributed.pipeline.pp_microbatch_size`` -- rows per microbatch.
    - ``distributed.pipeline.pp_recv_buffer_pool_slack`` -- default 2 (Automodel's default).
    - ``step_scheduler.global_batch_size``; ``step_scheduler.local_batch_size`` (the batch
      one data-parallel rank runs through the pipeline per step: ``M = local / micro``);
      without it ``distributed.dp_size`` is needed (``M = global / (dp * micro)``).
    - ``distributed.dp_size`` -- optional; checked against the batch sizes when given.
    - ``dataset.seq_len`` -- tokens per row.
    - ``model.config.hidden_size`` (also accepted: ``model.hidden_size``).
    - ``model.torch_dtype`` / ``model.config.dtype`` -- default ``bfloat16``.

    The boundary is modelled as one ``(micro, seq_len, hidden)`` hidden state each way.
    Bad or missing keys raise :class:`ConfigKeyError` naming the key and what is expected.
    """
    cfg, where = _read_yaml(source)
    pp_keys = ("distributed.pp_size", "distributed.pipeline.pp_size")
    found_pp = {k: _lookup(cfg, k) for k in pp_keys if _lookup(cfg, k) is not _MISSING}
    if len(set(map(repr, found_pp.values()))) > 1:
        raise ConfigKeyError(
            pp_keys[1],
            found=", ".join(f"{k}={v!r}" for k, v in found_pp.items()),
            required="one pipeline size",
            fix="keep distributed.pp_size (Automodel's key) and drop the other.",
        )
    pp = _int_key(cfg, pp_keys, "the pipeline-parallel size", 8)
    if _lookup(cfg, "distributed.pipeline.pp_schedule_csv") not in (_MISSING, None):
        raise ConfigKeyError(
            "distributed.pipeline.pp_schedule_csv",
            found=repr(_lookup(cfg, "distributed.pipeline.pp_schedule_csv")),
            required="no CSV schedule (a custom action list has no bounded in-flight depth proof)",
            fix="use distributed.pipeline.pp_schedule: 1f1b to model a pooled pipeline.",
        )
    schedule = _lookup(cfg, "distributed.pipeline.pp_schedule")
    if schedule is _MISSING or schedule is None:
        schedule = "1f1b"
    elif not isinstance(schedule, str):
        raise ConfigKeyError(
            "distributed.pipeline.pp_schedule",
            found=f"{schedule!r} ({type(schedule).__name__})",
            required="a schedule name such as 1f1b",
            fix="write `pp_schedule: 1f1b` under distributed.pipeline.",
        )
    micro = _int_key(cfg, ("distributed.pipeline.pp_microbatch_size",), "rows per pipeline microbatch", 2)
    slack_key = "distributed.pipeline.pp_recv_buffer_pool_slack"
    slack = _lookup(cfg, slack_key)
    if slack is _MISSING or slack is None:
        slack = 2
    elif isinstance(slack, bool) or not isinstance(slack, int) or slack < 0:
        raise ConfigKeyError(
            slack_key,
            found=f"{slack!r} ({type(slack).__name__})",
            required="an integer >= 0 (extra buffer sets beyond the in-flight depth)",
            fix=f"write e.g. `pp_recv_buffer_pool_slack: 2` under distributed.pipeline.",
        )
    gbs = _int_key(cfg, ("step_scheduler.global_batch_size",), "the global batch size in rows", 4096)
    lbs = _int_key(cfg, ("step_scheduler.local_batch_size",), "the per-data-parallel-rank batch", 128, default=None)
    dp = _int_key(cfg, ("distributed.dp_size",), "the data-parallel size", 32, default=None)
    if lbs is None and dp is None:
        raise ConfigKeyError(
            "step_scheduler.local_batch_size",
            found="nothing (missing), and no distributed.dp_size either",
            required="step_scheduler.local_batch_size (M = local / micro) or distributed.dp_size (M = global / (dp * micro))",
            fix="add `local_batch_size: 128` under step_scheduler.",
        )
    if dp is None:
        if gbs % lbs:
            raise ConfigKeyError(
                "step_scheduler.local_batch_size",
                found=f"{lbs} which does not divide global_batch_size {gbs}",
                required="global_batch_size = local_batch_size x dp x gradient-accumulation steps",
                fix="pick a local batch that divides the global batch.",
            )
        dp = gbs // lbs  # display only: dp x grad-accumulation steps when dp_size is not given
    seq = _int_key(cfg, ("dataset.seq_len",), "tokens per row", 2048)
    hidden = _int_key(cfg, ("model.config.hidden_size", "model.hidden_size"), "the model hidden size", 7168)
    dtype_key, dtype = _first(cfg, ("model.torch_dtype", "model.config.dtype", "model.config.torch_dtype"))
    if dtype is _MISSING or dtype is None:
        dtype = "bfloat16"
    try:
        boundary = Boundary.hidden_state(rows=micro, seq_len=seq, hidden=hidden, dtype=str(dtype))
    except MemoryModelError as exc:
        raise ConfigKeyError(dtype_key, found=repr(dtype), required=exc.required, fix=exc.fix) from None
    shape = PipelineShape.from_batch(
        pp=pp, global_batch=gbs, micro_batch=micro, dp=dp, local_batch=lbs, schedule=schedule
    )
    pool_on = _lookup(cfg, "distributed.pipeline.pp_recv_buffer_pool")
    note = "" if pool_on is True else " The config does not enable distributed.pipeline.pp_recv_buffer_pool: its run allocates stock."
    return Preset(
        name=Path(where).stem if where != "<dict>" else "config",
        title=f"{where}: pp {pp}, {shape.n_microbatches} microbatches, {micro} x {seq} x {hidden} {boundary.activations[0].dtype}",
        shape=shape,
        boundary=boundary,
        config=PoolConfig(slack=slack, policy="automodel"),
        seq_len=seq,
        hidden=hidden,
        assumption=(
            f"Each boundary carries one hidden state ({micro}, {seq}, {hidden}) {boundary.activations[0].dtype} per "
            "microbatch and direction (a lower bound when the model sends more across a stage boundary)." + note
        ),
        figures=(),
        sources=(where,),
    )


def published_vs_model(preset: Preset) -> Any:
    """The preset's published memory figures next to what the model gives, as a DataFrame.

    Columns: ``figure``, ``published``, ``model_middle_stage`` (stage ``(pp - 1) // 2``),
    ``model_inner_stages_range`` (min-max over stages 1 .. pp - 2), ``unit``,
    ``relative_difference`` (model middle stage / published - 1), ``kind``, ``source``.
    Uses the preset's own config (the published run's policy and slack).
    """
    import pandas as pd

    from pooltk.memory.model import middle_stage

    model = preset.model()
    mid = middle_stage(preset.shape.pp)
    inner = range(1, preset.shape.pp - 1) or range(preset.shape.pp)
    measures = {
        "sets_per_direction": ("stock buffer sets per direction", lambda i: model.row(i, "forward").stock_sets),
        "stock_middle_stage_gib": ("stock receive buffers per stage (GiB)", lambda i: model.stage_gib(i, "stock")),
        "saved_middle_stage_gib": (
            f"saved by the ring ({preset.config.policy}, slack {preset.config.slack}) per stage (GiB)",
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
