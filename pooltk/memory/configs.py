"""Real configs into a :class:`~pooltk.memory.source.Preset`: Automodel YAML and Hugging Face
``config.json``.

[Note: where the hidden size comes from]
In this order, the first that answers wins:

1. an explicit override (``Overrides.hidden``: the CLI's ``--hidden``, the explorer's field): they
   always beat the file;
2. the file: ``model.config.hidden_size`` or ``model.hidden_size`` (YAML), ``hidden_size``
   (also ``text_config.hidden_size``, ``n_embd``, ``d_model``) in a ``config.json``;
3. the config class the YAML names in ``model.config._target_``: imported, built with the
   YAML's other ``model.config`` keys, and asked for ``hidden_size``;
4. the class's defaults in pooltk's table (:mod:`pooltk.memory.known_models`), when it is not
   importable;
5. otherwise an error naming ``model.config._target_`` (or the missing key) and the fix
   (``Overrides.hidden``).

``Preset.sources`` records which step answered, so a table can say where its hidden size came from.
Everything else a pipeline needs (pp, microbatches, rows, tokens per row) comes from the YAML's
own keys or from overrides; a ``config.json`` describes only the model, so those must be given.
"""

from __future__ import annotations

import importlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError, is_positive_int
from pooltk.memory.known_models import KNOWN_MODEL_CONFIGS, known_model_config
from pooltk.memory.model import Boundary, PipelineShape
from pooltk.memory.tensors import dtype_name
from pooltk.memory.source import Preset

__all__ = [
    "ConfigKeyError",
    "Overrides",
    "config_json_pipeline",
    "field",
    "load_automodel_config",
    "load_config",
    "load_hf_config",
    "load_overrides",
    "lookup",
    "pipeline_from_overrides",
    "read_file",
]


class ConfigKeyError(MemoryModelError):
    """A key of a config file is missing or has the wrong type; ``key`` is its dotted path."""

    def __init__(self, key: str, *, found: str, required: str, fix: str) -> None:
        self.key = key
        super().__init__(f"config key {key!r}", found=found, required=required, fix=fix)

    def __reduce__(self):  # noqa: ANN204 - rebuild from the key, not the composed ``what``
        return _rebuild_key_error, (self.key, self.found, self.required, self.fix)


def _rebuild_key_error(key: str, found: str, required: str, fix: str) -> ConfigKeyError:
    return ConfigKeyError(key, found=found, required=required, fix=fix)


@dataclass(kw_only=True, slots=True, frozen=True)
class Overrides:
    """Values given outside the file (flags, widgets). ``None`` keeps the file's value."""

    pp: int | None = None
    """Pipeline-parallel size."""
    microbatches: int | None = None
    """Microbatches per step ``M`` (replaces what the batch sizes give)."""
    micro_batch: int | None = None
    """Rows per microbatch."""
    seq_len: int | None = None
    """Tokens per row."""
    hidden: int | None = None
    """Hidden size."""
    dtype: str | None = None
    """Boundary dtype."""
    global_batch: int | None = None
    """Global batch in rows (with ``micro_batch`` and ``dp`` gives ``M``)."""
    dp: int | None = None
    """Data-parallel size."""
    schedule: str | None = None
    """Schedule name."""

    def __post_init__(self) -> None:
        from pooltk._validate import check_int

        for name in (
            "pp",
            "microbatches",
            "micro_batch",
            "seq_len",
            "hidden",
            "global_batch",
            "dp",
        ):
            value = getattr(self, name)
            if value is not None:
                check_int(
                    field(name),
                    value,
                    low=1,
                    error=MemoryModelError,
                    fix=f"give {field(name)} as a whole number >= 1; a zero or negative size is "
                    "never a shape.",
                )

    def given(self) -> list[str]:
        """Names of the overrides that are set."""
        return [n for n in self.__slots__ if getattr(self, n) is not None]


def field(name: str) -> str:
    """How an error names an override: ``Overrides.hidden``. The CLI shows its flag instead
    (``--hidden``)."""
    return f"Overrides.{name}"


_MISSING = object()


def lookup(cfg: dict, dotted: str, missing: Any = _MISSING) -> Any:
    """The value at the dotted path ``a.b.c`` of ``cfg``, or ``missing`` where a part is absent."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return missing
        node = node[part]
    return node


def _first(cfg: dict, keys: tuple[str, ...]) -> tuple[str, Any]:
    """(key, value) of the first of ``keys`` present; (keys[0], _MISSING) if none is."""
    for key in keys:
        value = lookup(cfg, key)
        if value is not _MISSING:
            return key, value
    return keys[0], _MISSING


def _int_key(
    cfg: dict,
    keys: tuple[str, ...],
    meaning: str,
    example: int,
    *,
    default: Any = _MISSING,
    override: str | None = None,
) -> Any:
    flag = None if override is None else field(override)
    key, value = _first(cfg, keys)
    if value is _MISSING or value is None:
        if default is not _MISSING:
            return default
        alt = f" (or {', '.join(repr(k) for k in keys[1:])})" if len(keys) > 1 else ""
        raise ConfigKeyError(
            key,
            found="nothing (missing)" if value is _MISSING else "null",
            required=f"{meaning}, an integer >= 1{alt}",
            fix=f"add `{key}: {example}` to the file"
            + (f", or pass {flag} {example}." if flag else "."),
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigKeyError(
            key,
            found=f"{value!r} ({type(value).__name__})",
            required=f"{meaning}, an integer >= 1",
            fix=f"write it as a plain integer, e.g. `{key}: {example}`"
            + (f", or override it with {flag}." if flag else "."),
        )
    return value


def _parse(text: str, path: Path, kind: str) -> Any:
    """``text`` parsed as ``kind``; a syntax error names the file and the position."""
    if kind == "JSON":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise MemoryModelError(
                "config file",
                found=f"{str(path)!r}: not valid JSON at line {exc.lineno}, column {exc.colno} "
                f"({exc.msg})",
                required="a JSON object (a Hugging Face config.json)",
                fix="fix the syntax at the position given.",
            ) from None
    if kind == "TOML":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise MemoryModelError(
                "config file",
                found=f"{str(path)!r}: not valid TOML ({exc})",
                required="a torchtitan job config",
                fix="fix the syntax at the position given.",
            ) from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        raise MemoryModelError(
            "config file",
            found=f"{str(path)!r}: not valid YAML{at} ({getattr(exc, 'problem', None) or exc})",
            required="YAML that yaml.safe_load reads",
            fix="fix the syntax at the position given.",
        ) from None


def read_file(source: str | Path | dict, kind: str) -> tuple[dict, str]:
    """``(the parsed mapping, where it came from)`` of a ``JSON``, ``YAML`` or ``TOML`` file (or a
    dict, as is); an unreadable or unparsable file, or one that is not a mapping, is a
    :class:`MemoryModelError` naming the file and the position."""
    if isinstance(source, dict):
        return source, "<dict>"
    path = Path(source)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MemoryModelError(
            "config file",
            found=f"{str(path)!r} ({exc.strerror or exc})",
            required=f"a readable {kind} file",
            fix="check the path.",
        ) from None
    cfg = _parse(text, path, kind)
    if not isinstance(cfg, dict):
        raise MemoryModelError(
            "config file",
            found=f"{str(path)!r} holds a {type(cfg).__name__}, not a mapping",
            required="a mapping (Automodel YAML: distributed / step_scheduler / dataset / model "
            "sections; config.json: an object with hidden_size)",
            fix="see data/configs/ for examples of both.",
        )
    return cfg, str(path)


def _imported_hidden(target: str, args: dict) -> tuple[tuple[int, Any, str] | None, str]:
    """``((hidden, dtype or None, provenance), "")`` from the class ``target`` names, built with
    the YAML's ``args``; ``(None, why not)`` when it does not import or has no hidden size."""
    module_name, _, cls_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except AttributeError:
        return None, f"module {module_name} has no {cls_name}"
    except Exception as exc:  # noqa: BLE001 - any import failure means: not importable here
        return None, f"{type(exc).__name__}: {exc}"
    try:
        obj = cls(**args)
    except Exception as exc:  # noqa: BLE001 - the class rejects the YAML's arguments
        raise ConfigKeyError(
            "model.config",
            found=f"{target}({', '.join(f'{k}={v!r}' for k, v in args.items())}) raised "
            f"{type(exc).__name__}: {exc}",
            required="arguments the config class accepts",
            fix=f"fix the arguments under model.config, or give {field('hidden')}.",
        ) from None
    hidden = getattr(obj, "hidden_size", None)
    if not is_positive_int(hidden):
        return None, f"{cls_name}() has no integer hidden_size (found {hidden!r})"
    package = target.split(".")[0]
    version = getattr(importlib.import_module(package), "__version__", "unknown version")
    provenance = f"{target} imported ({package} {version}): hidden_size {hidden}"
    return (hidden, getattr(obj, "torch_dtype", None), provenance), ""


def _class_hidden(cfg: dict) -> tuple[int, Any, str] | None:
    """``(hidden, dtype or None, provenance)`` from ``model.config._target_``; None when there is no
    target.

    See [Note: where the hidden size comes from], steps 3-5.
    """
    target = lookup(cfg, "model.config._target_", None)
    if target is None:
        return None
    if not isinstance(target, str) or "." not in target:
        raise ConfigKeyError(
            "model.config._target_",
            found=f"{target!r} ({type(target).__name__})",
            required="a dotted import path of a config class, e.g. "
            "nemo_automodel.components.models.kimi_k3.config.KimiK3TextConfig",
            fix=f"write the class's full import path, or give {field('hidden')}.",
        )
    args = {k: v for k, v in (lookup(cfg, "model.config") or {}).items() if k != "_target_"}
    imported, why = _imported_hidden(target, args)
    if imported is not None:
        return imported
    known = known_model_config(target)
    if known is not None:
        values = known.with_args(args)
        hidden = values["hidden_size"]
        return (
            hidden,
            values.get("torch_dtype"),
            (
                f"{target} not importable here ({why}); hidden_size {hidden} from pooltk's table "
                f"of known model configs: {known.source} (read {known.read_on})"
            ),
        )
    raise ConfigKeyError(
        "model.config._target_",
        found=f"{target!r}: not importable here ({why}) and not in pooltk's table of known model "
        "configs",
        required="an importable config class, one of the known classes "
        f"({', '.join(c.class_name for c in KNOWN_MODEL_CONFIGS.values())}), or "
        "model.config.hidden_size",
        fix=f"give {field('hidden')} (e.g. 7168), add hidden_size under model.config, or install "
        "the package that provides the class.",
    )


def _resolve_hidden(cfg: dict, override: int | None) -> tuple[int, Any, str]:
    if override is not None:
        return override, None, f"{field('hidden')} = {override} (overrides the file)"
    key, value = _first(cfg, ("model.config.hidden_size", "model.hidden_size"))
    if value is not _MISSING and value is not None:
        return (
            _int_key(cfg, (key,), "the model hidden size", 7168, override="hidden"),
            None,
            f"{key} in the file",
        )
    from_class = _class_hidden(cfg)
    if from_class is not None:
        return from_class
    return (
        _int_key(
            cfg,
            ("model.config.hidden_size", "model.hidden_size"),
            "the model hidden size",
            7168,
            override="hidden",
        ),
        None,
        "",
    )


def _dtype_of(value: Any) -> str | None:
    if value is None or value is _MISSING:
        return None
    return str(value).removeprefix("torch.")


def _hidden_boundary(
    cfg: dict,
    dtype_keys: tuple[str, ...],
    o: Overrides,
    dims: tuple[int, int, int],
    fallback: Any = None,
) -> Boundary:
    """One ``(rows, seq_len, hidden)`` hidden state each way, in the first dtype given of: the
    override, the file's ``dtype_keys``, ``fallback``, bfloat16. A dtype the model does not know is
    a :class:`ConfigKeyError` on the key (or the override) that gave it."""
    dtype_key, dtype = _first(cfg, dtype_keys)
    dtype = o.dtype or _dtype_of(dtype) or _dtype_of(fallback) or "bfloat16"
    rows, seq_len, hidden = dims
    try:
        return Boundary.hidden_state(rows=rows, seq_len=seq_len, hidden=hidden, dtype=str(dtype))
    except MemoryModelError as exc:
        raise ConfigKeyError(
            field("dtype") if o.dtype else dtype_key,
            found=repr(dtype),
            required=exc.required,
            fix=exc.fix,
        ) from None


def _pp_and_schedule(cfg: dict, o: Overrides) -> tuple[int, str]:
    """The YAML's pipeline size (one of its two keys, or both agreeing) and schedule (no CSV)."""
    pp_keys = ("distributed.pp_size", "distributed.pipeline.pp_size")
    found_pp = {k: lookup(cfg, k) for k in pp_keys if lookup(cfg, k) is not _MISSING}
    if o.pp is None and len(set(map(repr, found_pp.values()))) > 1:
        raise ConfigKeyError(
            pp_keys[1],
            found=", ".join(f"{k}={v!r}" for k, v in found_pp.items()),
            required="one pipeline size",
            fix="keep distributed.pp_size (Automodel's key) and drop the other.",
        )
    pp = o.pp or _int_key(cfg, pp_keys, "the pipeline-parallel size", 8, override="pp")
    csv = lookup(cfg, "distributed.pipeline.pp_schedule_csv", None)
    if csv is not None:
        raise ConfigKeyError(
            "distributed.pipeline.pp_schedule_csv",
            found=repr(csv),
            required="no CSV schedule (a custom action list has no bounded in-flight depth proof)",
            fix="use distributed.pipeline.pp_schedule: 1f1b to model a pooled pipeline.",
        )
    schedule = o.schedule or lookup(cfg, "distributed.pipeline.pp_schedule", None)
    if schedule is None:
        return pp, "1f1b"
    if not isinstance(schedule, str):
        raise ConfigKeyError(
            "distributed.pipeline.pp_schedule",
            found=f"{schedule!r} ({type(schedule).__name__})",
            required="a schedule name such as 1f1b",
            fix="write `pp_schedule: 1f1b` under distributed.pipeline.",
        )
    return pp, schedule


def _batch_shape(cfg: dict, o: Overrides, *, pp: int, micro: int, schedule: str) -> PipelineShape:
    """The shape whose ``M`` the overrides give, or the YAML's batch sizes: ``local / micro``, or
    ``global / (dp * micro)``."""
    if o.microbatches is not None:
        return PipelineShape(pp=pp, n_microbatches=o.microbatches, schedule=schedule)
    gbs = o.global_batch or _int_key(
        cfg,
        ("step_scheduler.global_batch_size",),
        "the global batch size in rows",
        4096,
        override="microbatches",
    )
    lbs = _int_key(
        cfg,
        ("step_scheduler.local_batch_size",),
        "the per-data-parallel-rank batch",
        128,
        default=None,
    )
    dp = o.dp or _int_key(cfg, ("distributed.dp_size",), "the data-parallel size", 32, default=None)
    if lbs is None and dp is None:
        raise ConfigKeyError(
            "step_scheduler.local_batch_size",
            found="nothing (missing), and no distributed.dp_size either",
            required="step_scheduler.local_batch_size (M = local / micro) or distributed.dp_size "
            "(M = global / (dp * micro))",
            fix="add `local_batch_size: 128` under step_scheduler, or give "
            f"{field('microbatches')}.",
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
    return PipelineShape.from_batch(
        pp=pp, global_batch=gbs, micro_batch=micro, dp=dp, local_batch=lbs, schedule=schedule
    )


def load_automodel_config(source: str | Path | dict, overrides: Overrides | None = None) -> Preset:
    """A :class:`Preset` from an Automodel-style YAML config (a path, or the parsed dict).

    Keys read (dotted paths; Automodel's own layout): ``distributed.pp_size`` (also
    ``distributed.pipeline.pp_size``); ``distributed.pipeline.pp_schedule`` (default ``1f1b``;
    a ``pp_schedule_csv`` is refused); ``distributed.pipeline.pp_microbatch_size``;
    ``distributed.pipeline.pp_recv_buffer_pool_slack`` (default 2);
    ``step_scheduler.global_batch_size`` and ``step_scheduler.local_batch_size`` (``M = local /
    micro``) or ``distributed.dp_size`` (``M = global / (dp * micro)``); ``dataset.seq_len``;
    the hidden size per [Note: where the hidden size comes from]; ``model.torch_dtype`` /
    ``model.config.torch_dtype`` (default ``bfloat16``). ``overrides`` replace any of them.

    The boundary is one ``(micro, seq_len, hidden)`` hidden state each way. Bad or missing keys
    raise :class:`ConfigKeyError` naming the key and the fix.
    """
    o = overrides or Overrides()
    cfg, where = read_file(source, "YAML")
    pp, schedule = _pp_and_schedule(cfg, o)
    micro = o.micro_batch or _micro_batch(cfg)
    slack = _pool_slack(cfg)
    shape = _batch_shape(cfg, o, pp=pp, micro=micro, schedule=schedule)
    seq = o.seq_len or _int_key(
        cfg, ("dataset.seq_len",), "tokens per row", 2048, override="seq_len"
    )
    hidden, class_dtype, hidden_source = _resolve_hidden(cfg, o.hidden)
    dtype_keys = ("model.torch_dtype", "model.config.dtype", "model.config.torch_dtype")
    boundary = _hidden_boundary(cfg, dtype_keys, o, (micro, seq, hidden), fallback=class_dtype)
    dtype = boundary.activations[0].dtype
    given = o.given()
    return Preset(
        name=Path(where).stem if where != "<dict>" else "config",
        title=f"{where}: pp {pp}, {shape.n_microbatches} microbatches, {micro} x {seq} x {hidden} "
        f"{dtype}",
        shape=shape,
        boundary=boundary,
        config=PoolConfig(slack=slack),
        policy="automodel",
        seq_len=seq,
        hidden=hidden,
        assumption=(
            f"Each boundary carries one hidden state ({micro}, {seq}, {hidden}) {dtype} per "
            "microbatch and direction (a lower bound when the model sends more across a stage "
            "boundary)." + _pool_note(cfg)
        ),
        figures=(),
        sources=(where,)
        + ((f"hidden size: {hidden_source}",) if hidden_source else ())
        + ((f"overridden: {', '.join(given)}",) if given else ()),
    )


def _micro_batch(cfg: dict) -> int:
    """The YAML's rows per pipeline microbatch."""
    return _int_key(
        cfg,
        ("distributed.pipeline.pp_microbatch_size",),
        "rows per pipeline microbatch",
        2,
        override="micro_batch",
    )


def _pool_slack(cfg: dict) -> int:
    """The YAML's ``pp_recv_buffer_pool_slack`` (2 when it has none), an integer >= 0."""
    slack_key = "distributed.pipeline.pp_recv_buffer_pool_slack"
    slack = lookup(cfg, slack_key, None)
    if slack is None:
        return 2
    if isinstance(slack, bool) or not isinstance(slack, int) or slack < 0:
        raise ConfigKeyError(
            slack_key,
            found=f"{slack!r} ({type(slack).__name__})",
            required="an integer >= 0 (extra buffer sets beyond the in-flight depth)",
            fix="write e.g. `pp_recv_buffer_pool_slack: 2` under distributed.pipeline.",
        )
    return slack


def _pool_note(cfg: dict) -> str:
    """What the preset's assumption adds when the YAML does not turn the pool on."""
    if lookup(cfg, "distributed.pipeline.pp_recv_buffer_pool") is True:
        return ""
    return (
        " The config does not enable distributed.pipeline.pp_recv_buffer_pool: its run allocates "
        "stock."
    )


_HIDDEN_KEYS = ("hidden_size", "text_config.hidden_size", "n_embd", "d_model")
_DTYPE_KEYS = ("torch_dtype", "dtype", "text_config.torch_dtype", "text_config.dtype")


def load_hf_config(source: str | Path | dict, overrides: Overrides | None = None) -> Preset:
    """A :class:`Preset` from a Hugging Face ``config.json`` plus the pipeline given in
    ``overrides``.

    The file gives the hidden size (``hidden_size``, ``text_config.hidden_size``, ``n_embd`` or
    ``d_model``) and the dtype (``torch_dtype`` / ``dtype``, default bfloat16); a config.json says
    nothing about the pipeline, so ``overrides`` must give ``pp``, ``seq_len`` and either
    ``microbatches`` or ``global_batch`` + ``micro_batch`` + ``dp`` (rows per microbatch default 1).
    """
    o = overrides or Overrides()
    cfg, where = read_file(source, "JSON")
    if o.hidden is not None:
        hidden, hidden_source = o.hidden, f"{field('hidden')} = {o.hidden} (overrides the file)"
    else:
        key, _ = _first(cfg, _HIDDEN_KEYS)
        hidden = _int_key(cfg, _HIDDEN_KEYS, "the model hidden size", 7168, override="hidden")
        hidden_source = f"{key} in the file"
    shape, micro = config_json_pipeline(o)
    boundary = _hidden_boundary(cfg, _DTYPE_KEYS, o, (micro, o.seq_len, hidden))
    return Preset(
        name=Path(where).parent.name or Path(where).stem if where != "<dict>" else "config.json",
        title=f"{where}: pp {o.pp}, {shape.n_microbatches} microbatches, {micro} x {o.seq_len} x "
        f"{hidden} {boundary.activations[0].dtype}",
        shape=shape,
        boundary=boundary,
        config=PoolConfig(),
        seq_len=o.seq_len,
        hidden=hidden,
        assumption=f"Each boundary carries one hidden state ({micro}, {o.seq_len}, {hidden}) per "
        "microbatch and direction.",
        figures=(),
        sources=(
            where,
            f"hidden size: {hidden_source}",
            f"pipeline from flags: {', '.join(o.given())}",
        ),
    )


def pipeline_from_overrides(
    o: Overrides, *, what: str = "pipeline shape", why: str = "", needs: tuple[str, ...] = ()
) -> tuple[PipelineShape, int]:
    """``(shape, rows per microbatch)`` from overrides alone: the one place a shape is built from
    fields.

    Needs ``pp`` and ``seq_len``, and either ``microbatches`` (rows default 1) or all of
    ``global_batch``, ``micro_batch`` and ``dp`` (``M = global / (dp * micro)``), not both. Errors
    name the fields (``Overrides.pp``); the CLI shows them as its flags. ``needs``: further fields
    the caller requires, reported in the same error.
    """
    missing = [field(f) for f in ("pp", "seq_len", *needs) if getattr(o, f) is None]
    batch = {"global_batch": o.global_batch, "micro_batch": o.micro_batch, "dp": o.dp}
    if o.microbatches is None and None in batch.values():
        need = ", ".join(field(f) for f, v in batch.items() if v is None)
        missing.append(f"{field('microbatches')} (or {need})")
    if missing:
        raise MemoryModelError(
            what,
            found=f"no {', '.join(missing)}",
            required=f"{', '.join(field(f) for f in ('pp', 'seq_len', *needs))} and "
            f"{field('microbatches')}, or {field('global_batch')} + {field('micro_batch')} + "
            f"{field('dp')}" + (f" ({why})" if why else ""),
            fix="e.g. "
            + " ".join(
                f"{field(f)}={v}"
                for f, v in (
                    ("pp", 8),
                    ("microbatches", 64),
                    ("micro_batch", 2),
                    ("seq_len", 2048),
                    *(("hidden", 7168),) * ("hidden" in needs),
                )
            )
            + ".",
        )
    if o.microbatches is not None and (o.global_batch is not None or o.dp is not None):
        raise MemoryModelError(
            field("microbatches"),
            found=f"{field('microbatches')} together with {field('global_batch')} / {field('dp')}",
            required="M given directly, or derived from the batch sizes, not both",
            fix=f"drop {field('microbatches')}, or drop {field('global_batch')} and {field('dp')}.",
        )
    schedule = o.schedule or "1f1b"
    if o.microbatches is not None:
        return PipelineShape(
            pp=o.pp, n_microbatches=o.microbatches, schedule=schedule
        ), o.micro_batch or 1
    shape = PipelineShape.from_batch(
        pp=o.pp, global_batch=o.global_batch, micro_batch=o.micro_batch, dp=o.dp, schedule=schedule
    )
    return shape, o.micro_batch


def config_json_pipeline(o: Overrides) -> tuple[PipelineShape, int]:
    """:func:`pipeline_from_overrides` for a config.json, which describes the model, not the
    pipeline."""
    why = "a config.json describes the model, not the pipeline"
    return pipeline_from_overrides(o, what="pipeline shape for a config.json", why=why)


def load_overrides(o: Overrides) -> Preset:
    """A :class:`Preset` from overrides alone (the CLI's explicit shape flags): one hidden state
    each way.

    Needs ``hidden`` besides what :func:`pipeline_from_overrides` needs; ``dtype`` defaults to
    bfloat16.
    """
    shape, rows = pipeline_from_overrides(o, what="explicit shape", needs=("hidden",))
    dtype = "bfloat16" if o.dtype is None else dtype_name(o.dtype, field("dtype"))
    boundary = Boundary.hidden_state(rows=rows, seq_len=o.seq_len, hidden=o.hidden, dtype=dtype)
    return Preset(
        name="flags",
        title=f"explicit flags: {shape.describe()}",
        shape=shape,
        boundary=boundary,
        config=PoolConfig(),
        seq_len=o.seq_len,
        hidden=o.hidden,
        assumption=f"one hidden state ({rows}, {o.seq_len}, {o.hidden}) per microbatch and "
        "direction",
        figures=(),
        sources=("command-line flags",),
    )


def load_config(source: str | Path | dict, overrides: Overrides | None = None) -> Preset:
    """Either reader, chosen by the file: ``.json`` (or a dict with ``hidden_size`` at the top and
    no ``distributed`` section) is a Hugging Face config.json, anything else an Automodel YAML."""
    if isinstance(source, dict):
        hf = (
            "distributed" not in source
            and "step_scheduler" not in source
            and any(k in source for k in ("hidden_size", "text_config", "n_embd", "d_model"))
        )
    else:
        hf = Path(source).suffix.lower() == ".json"
    return (load_hf_config if hf else load_automodel_config)(source, overrides)
