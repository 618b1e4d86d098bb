"""What a whole-stage estimate is asked about: a stage builder, the pipeline, the pool, where each
came from.

[Note: estimate inputs]
Four ways in, each a :class:`EstimateInputs`:

- a Hugging Face ``config.json`` (:func:`pooltk.memory.decoder.config.decoder_config`): the model;
  the pipeline from the overrides (pp, microbatches or batch sizes, rows per microbatch, tokens
  per row, schedule);
- an Automodel YAML: the pipeline from its keys
  (:func:`pooltk.memory.configs.load_automodel_config`), activation checkpointing from
  ``distributed.activation_checkpointing`` (or under ``distributed.fsdp``), expert parallelism from
  ``distributed.ep_size``; the model from the HF-style keys under ``model.config`` laid over the
  defaults of the class it names, when pooltk knows them (:mod:`pooltk.memory.known_models`), or
  from ``model_config`` (a config.json);
- a torchtitan TOML: ``[parallelism]`` ``pipeline_parallel_degree``, ``pipeline_parallel_schedule``,
  ``pipeline_parallel_microbatch_size``, ``expert_parallel_degree``; ``[training]``
  ``local_batch_size`` (``M = local / microbatch``) and ``seq_len``; ``[activation_checkpoint]``
  ``mode`` (``full``; ``selective`` is not modelled and is refused); the model from the
  ``config.json`` in ``[model] hf_assets_path`` (relative to the TOML's folder or the working
  folder), or from ``model_config``;
- a stage builder (:func:`pooltk.memory.replay.stages.load_builder`) with the pipeline from the
  overrides.

Overrides (the CLI's flags) beat every file, as in [Note: where the hidden size comes from].
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltk.config import PoolConfig
from pooltk.memory.configs import (
    ConfigKeyError,
    Overrides,
    config_json_pipeline,
    field,
    load_automodel_config,
    lookup,
    read_file,
)
from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import DecoderConfig, decoder_config, floating_dtype
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.known_models import known_model_config
from pooltk.memory.replay.stages import StageBuilder, load_builder
from pooltk.memory.shape import PipelineShape

__all__ = ["EstimateInputs", "estimate_inputs"]


@dataclass(kw_only=True, slots=True, frozen=True)
class EstimateInputs:
    """What to replay. See [Note: estimate inputs]."""

    builder: StageBuilder
    """Builds each stage."""
    shape: PipelineShape
    """The pipeline."""
    config: PoolConfig
    """The pool config of the pooled variant (the file's slack where it has one)."""
    description: str
    """One line: the model and its micro batch."""
    sources: tuple[str, ...]
    """Where each part came from."""


def _model_from_json(
    model_config: str | Path | None, *, dtype: str | None, why: str
) -> DecoderConfig:
    if model_config is None:
        raise MemoryModelError(
            "model",
            found=f"no model dimensions ({why})",
            required="a Hugging Face config.json of the model",
            fix="give --model-config PATH/config.json (the model's config.json).",
        )
    return decoder_config(model_config, dtype=dtype)


def _automodel_model(
    cfg: dict, model_config: str | Path | None, dtype: str | None
) -> tuple[DecoderConfig, str]:
    if model_config is not None:
        return decoder_config(model_config, dtype=dtype), f"model: {model_config}"
    section = (cfg.get("model") or {}).get("config") or {}
    args = {k: v for k, v in section.items() if k != "_target_"}
    target = section.get("_target_")
    known = known_model_config(target) if target else None
    merged = known.with_args(args) if known is not None else args
    if "hidden_size" not in merged or "num_hidden_layers" not in merged:
        raise MemoryModelError(
            "model",
            found=f"model.config of the YAML ({target or 'no _target_'}): not enough dimensions",
            required="hidden_size, num_hidden_layers, heads, FFN width and vocabulary, or a class "
            "pooltk knows",
            fix="give --model-config PATH/config.json (the model's config.json).",
        )
    where = (
        f"model: {target} defaults from pooltk's table ({known.source})"
        if known is not None
        else "model: model.config keys"
    )
    return decoder_config(merged, dtype=dtype), where


@dataclass(kw_only=True, slots=True, frozen=True)
class _FileInputs:
    """What one config file gives the estimate, before the overrides of the replay itself."""

    shape: PipelineShape
    rows: int
    """Rows per microbatch."""
    seq_len: int
    model: DecoderConfig
    checkpointing: bool
    ep: int
    """The file's expert parallelism (1 when it names none)."""
    sources: list[str]
    pool: PoolConfig | None = None
    """The file's pool config, where it has one."""


def _need(table: dict, key: str, section: str, flag: int | None, example: int) -> int:
    """A torchtitan key that must be an integer >= 1 (``flag``, when given, replaces it)."""
    value = flag if flag is not None else table.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigKeyError(
            f"{section}.{key}",
            found=repr(value),
            required="an integer >= 1",
            fix=f"write `{key} = {example}` under [{section}].",
        )
    return value


def _torchtitan_pipeline(cfg: dict, o: Overrides) -> tuple[PipelineShape, int, int]:
    """``(shape, rows per microbatch, tokens per row)`` of a torchtitan TOML."""
    par, train = cfg.get("parallelism") or {}, cfg.get("training") or {}
    pp = _need(par, "pipeline_parallel_degree", "parallelism", o.pp, 8)
    rows = (
        _need(par, "pipeline_parallel_microbatch_size", "parallelism", o.micro_batch, 1)
        if (o.micro_batch or "pipeline_parallel_microbatch_size" in par)
        else 1
    )
    seq = _need(train, "seq_len", "training", o.seq_len, 4096)
    if o.microbatches is not None:
        m = o.microbatches
    else:
        local = _need(train, "local_batch_size", "training", None, 8)
        if local % rows:
            raise ConfigKeyError(
                "training.local_batch_size",
                found=f"{local}, not a multiple of the microbatch size {rows}",
                required="local_batch_size = microbatches x pipeline_parallel_microbatch_size",
                fix="make the local batch a multiple of the microbatch size.",
            )
        m = local // rows
    schedule = o.schedule or par.get("pipeline_parallel_schedule") or "1F1B"
    return PipelineShape(pp=pp, n_microbatches=m, schedule=str(schedule)), rows, seq


def _torchtitan_checkpointing(cfg: dict, checkpointing: bool | None) -> bool:
    """``checkpointing`` when given, else the TOML's ``activation_checkpoint.mode`` (``full`` or
    ``none``; ``selective`` is refused)."""
    mode = str((cfg.get("activation_checkpoint") or {}).get("mode", "none")).lower()
    if checkpointing is not None:
        return checkpointing
    if mode == "selective":
        raise ConfigKeyError(
            "activation_checkpoint.mode",
            found="'selective'",
            required="'full' or 'none' (selective checkpointing is not modelled)",
            fix="pass --checkpointing full or --checkpointing none to say which to estimate.",
        )
    return mode == "full"


def _hf_assets(cfg: dict, path: Path) -> Path | None:
    """The ``config.json`` in the TOML's ``[model] hf_assets_path``, relative to the TOML's
    folder or the working folder, where there is one."""
    assets = (cfg.get("model") or {}).get("hf_assets_path")
    if not assets:
        return None
    for base in (path.parent, Path.cwd()):
        candidate = base / assets / "config.json"
        if candidate.is_file():
            return candidate
    return None


def _torchtitan(
    path: Path, o: Overrides, model_config: str | Path | None, checkpointing: bool | None
) -> _FileInputs:
    """What a torchtitan TOML gives. See [Note: estimate inputs]."""
    cfg, _ = read_file(path, "TOML")
    shape, rows, seq = _torchtitan_pipeline(cfg, o)
    ckpt = _torchtitan_checkpointing(cfg, checkpointing)
    ep = int((cfg.get("parallelism") or {}).get("expert_parallel_degree", 1) or 1)
    if model_config is None:
        model_config = _hf_assets(cfg, path)
    model = _model_from_json(
        model_config,
        dtype=o.dtype or (cfg.get("training") or {}).get("mixed_precision_param"),
        why="torchtitan names its model by flavor; the dimensions are in the hf_assets_path's "
        "config.json",
    )
    sources = [str(path), f"model: {model_config}"]
    return _FileInputs(
        shape=shape, rows=rows, seq_len=seq, model=model, checkpointing=ckpt, ep=ep, sources=sources
    )


def _automodel(
    path: Path, o: Overrides, model_config: str | Path | None, checkpointing: bool | None
) -> _FileInputs:
    """What an Automodel YAML gives. See [Note: estimate inputs]."""
    cfg, _ = read_file(path, "YAML")
    preset = load_automodel_config(cfg, o)  # checks the file first: its errors name the keys
    model, where = _automodel_model(cfg, model_config, o.dtype)
    found = next(
        (
            v
            for v in (
                lookup(cfg, "distributed.activation_checkpointing", None),
                lookup(cfg, "distributed.fsdp.activation_checkpointing", None),
            )
            if v is not None
        ),
        False,
    )
    return _FileInputs(
        shape=preset.shape,
        rows=preset.boundary.activations[0].shape[0],
        seq_len=preset.seq_len,
        model=model,
        checkpointing=bool(found) if checkpointing is None else checkpointing,
        ep=int(lookup(cfg, "distributed.ep_size", None) or 1),
        sources=[str(path), where],
        pool=PoolConfig(slack=preset.config.slack),
    )


def _hf_json(path: Path, o: Overrides, checkpointing: bool | None) -> _FileInputs:
    """What a Hugging Face config.json gives (the model), with the pipeline from ``o``."""
    model = decoder_config(path, dtype=o.dtype)
    shape, rows = config_json_pipeline(o)
    return _FileInputs(
        shape=shape,
        rows=rows,
        seq_len=int(o.seq_len),  # config_json_pipeline required it
        model=model,
        checkpointing=bool(checkpointing),
        ep=1,
        sources=[str(path), f"pipeline from flags: {', '.join(o.given())}"],
    )


def _builder_inputs(
    builder: str | StageBuilder, o: Overrides, vpp: int | None, config: PoolConfig | None
) -> EstimateInputs:
    fn = load_builder(builder) if isinstance(builder, str) else builder
    if o.microbatches is None or o.pp is None:
        raise MemoryModelError(
            "pipeline shape for a stage builder",
            found="no --pp or no --microbatches",
            required="--pp and --microbatches (the builder gives the stages, not the pipeline)",
            fix="e.g. --pp 4 --microbatches 16.",
        )
    shape = PipelineShape(
        pp=o.pp, n_microbatches=o.microbatches, schedule=o.schedule or "1f1b", stages_per_rank=vpp
    )
    return EstimateInputs(
        builder=fn,
        shape=shape,
        config=config or PoolConfig(),
        sources=(f"builder: {builder}",),
        description=getattr(fn, "__name__", str(builder)),
    )


def estimate_inputs(
    source: str | Path | None = None,
    overrides: Overrides | None = None,
    *,
    builder: str | StageBuilder | None = None,
    model_config: str | Path | None = None,
    checkpointing: bool | None = None,
    split: Any = "automodel",
    ep: int | None = None,
    vpp: int | None = None,
    config: PoolConfig | None = None,
) -> EstimateInputs:
    """The :class:`EstimateInputs` a config file (or a builder) and the overrides describe.
    See [Note: estimate inputs]."""
    o = overrides or Overrides()
    if (source is None) == (builder is None) and not (source is None and model_config is not None):
        raise MemoryModelError(
            "estimate source",
            found="both a config file and a builder" if source else "neither",
            required="exactly one of a config file (config.json, Automodel YAML, torchtitan TOML) "
            "or a stage builder (package.module:function)",
            fix="e.g. --config config.json --pp 8 --microbatches 32 --seq-len 4096, or --builder "
            "pkg.mod:build --pp 4 --microbatches 8.",
        )
    if o.dtype is not None:  # the override, named as one before any file is read
        floating_dtype(o.dtype, field("dtype"))
    if builder is not None:
        return _builder_inputs(builder, o, vpp, config)
    path = Path(source) if source is not None else Path(model_config)  # type: ignore[arg-type]
    suffix = path.suffix.lower()
    if suffix == ".toml":
        read = _torchtitan(path, o, model_config, checkpointing)
    elif suffix in (".yaml", ".yml"):
        read = _automodel(path, o, model_config, checkpointing)
    else:
        read = _hf_json(path, o, checkpointing)
    shape = read.shape if vpp is None else dataclasses.replace(read.shape, stages_per_rank=vpp)
    built = decoder_builder(
        read.model,
        rows=read.rows,
        seq_len=read.seq_len,
        checkpointing=read.checkpointing,
        split=split,
        ep=read.ep if ep is None else ep,  # 0 is refused, never read as unset
    )
    return EstimateInputs(
        builder=built,
        shape=shape,
        config=config or read.pool or PoolConfig(),
        description=built.describe(),
        sources=tuple(read.sources),
    )
