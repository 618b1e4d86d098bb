"""``pooltk memory``: receive-buffer memory per stage -- stock, automodel policy, tight, live set.

Three ways to give the shape (exactly one):

- ``--preset NAME`` (``--list-presets`` shows them with their provenance),
- explicit flags: ``--pp`` and either ``--microbatches`` or ``--global-batch --micro-batch --dp``,
  plus ``--seq-len --hidden [--dtype] [--micro-batch]`` for the boundary tensor,
- ``--config FILE.yaml``, an Automodel-style config.

``--slack``, ``--grad-slack``, ``--policy``, ``--boundary-mib`` and ``--schedule`` override
whatever the shape source says. ``--json`` prints the full model as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register", "run"]

_SHAPE_FLAGS = ("pp", "microbatches", "global_batch", "micro_batch", "dp", "seq_len", "hidden", "dtype")


def register(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("shape source (one of)")
    src.add_argument("--preset", metavar="NAME", help="a named shape; see --list-presets")
    src.add_argument("--config", metavar="FILE.yaml", help="an Automodel-style YAML config")
    src.add_argument("--list-presets", action="store_true", help="list presets with their provenance and exit")
    shape = parser.add_argument_group("explicit shape")
    shape.add_argument("--pp", type=int, help="pipeline-parallel size N")
    shape.add_argument("--microbatches", type=int, help="microbatches per step M")
    shape.add_argument("--global-batch", type=int, help="global batch in rows (with --micro-batch and --dp gives M)")
    shape.add_argument("--micro-batch", type=int, help="rows per microbatch (default 1 with --microbatches)")
    shape.add_argument("--dp", type=int, help="data-parallel size")
    shape.add_argument("--seq-len", type=int, help="tokens per row")
    shape.add_argument("--hidden", type=int, help="hidden size")
    shape.add_argument("--dtype", default=None, help="boundary dtype (default bfloat16)")
    pool = parser.add_argument_group("pool and overrides")
    pool.add_argument("--schedule", default=None, help="1f1b (default) or gpipe")
    pool.add_argument("--allow-unpoolable", action="store_true", help="model a GPipe shape with the pool standing down")
    pool.add_argument("--slack", type=int, default=None, help="forward ring slack (default: the source's, else 2)")
    pool.add_argument("--grad-slack", type=int, default=None, help="grad ring slack, tight policy (default 1)")
    pool.add_argument("--policy", choices=("tight", "automodel"), default=None, help="policy for the saved column")
    pool.add_argument("--boundary-mib", type=float, default=None, help="override bytes per buffer set, in MiB (2**20)")
    out = parser.add_argument_group("output")
    out.add_argument("--unit", choices=("gib", "gb", "mib"), default="gib", help="table unit (gib = 2**30, gb = 1e9)")
    out.add_argument("--json", action="store_true", help="print the model as JSON instead of a table")


def _fail(message: str) -> int:
    print(f"pooltk memory: error: {message}", file=sys.stderr)
    return 2


def _source(args: argparse.Namespace) -> Any:
    """The Preset the arguments describe (preset, config file, or explicit flags)."""
    from pooltk.memory.model import Boundary, MemoryModelError, PipelineShape
    from pooltk.studies.kimi_k3.presets import Preset, get_preset, load_automodel_config
    from pooltk.config import PoolConfig

    explicit = [f"--{f.replace('_', '-')}" for f in _SHAPE_FLAGS if getattr(args, f) is not None]
    chosen = [name for name, on in (("--preset", args.preset), ("--config", args.config), ("shape flags", explicit)) if on]
    if len(chosen) != 1:
        raise MemoryModelError(
            "shape source",
            found=(" and ".join(chosen) + (f" ({' '.join(explicit)})" if explicit else "")) if chosen else "none",
            required="exactly one of --preset, --config, or explicit shape flags",
            fix="e.g. `pooltk memory --preset kimi-k3-gb200-2k-calibrated`, or --pp 8 --microbatches 64 --seq-len 2048 --hidden 7168.",
        )
    if args.preset:
        return get_preset(args.preset)
    if args.config:
        return load_automodel_config(args.config)
    missing = [flag for flag, v in (("--pp", args.pp), ("--seq-len", args.seq_len), ("--hidden", args.hidden)) if v is None]
    if missing:
        raise MemoryModelError(
            "explicit shape",
            found=f"no {', '.join(missing)}",
            required="--pp, --seq-len and --hidden, plus --microbatches or --global-batch/--micro-batch/--dp",
            fix="add the missing flags, or use --preset / --config.",
        )
    schedule = args.schedule or "1f1b"
    if args.microbatches is not None:
        if args.global_batch is not None or args.dp is not None:
            raise MemoryModelError(
                "microbatches",
                found="--microbatches together with --global-batch/--dp",
                required="M given directly, or derived from the batch sizes, not both",
                fix="drop --microbatches, or drop --global-batch and --dp.",
            )
        shape = PipelineShape(pp=args.pp, n_microbatches=args.microbatches, schedule=schedule)
        rows = 1 if args.micro_batch is None else args.micro_batch
    else:
        need = [f for f, v in (("--global-batch", args.global_batch), ("--micro-batch", args.micro_batch), ("--dp", args.dp)) if v is None]
        if need:
            raise MemoryModelError(
                "microbatches",
                found=f"neither --microbatches nor {', '.join(need)}",
                required="--microbatches M, or all of --global-batch, --micro-batch, --dp",
                fix="e.g. --global-batch 4096 --micro-batch 2 --dp 32 (M = 64).",
            )
        shape = PipelineShape.from_batch(
            pp=args.pp, global_batch=args.global_batch, micro_batch=args.micro_batch, dp=args.dp, schedule=schedule
        )
        rows = args.micro_batch
    boundary = Boundary.hidden_state(rows=rows, seq_len=args.seq_len, hidden=args.hidden, dtype=args.dtype or "bfloat16")
    return Preset(
        name="flags",
        title=f"explicit flags: {shape.describe()}",
        shape=shape,
        boundary=boundary,
        config=PoolConfig(),
        seq_len=args.seq_len,
        hidden=args.hidden,
        assumption=f"one hidden state ({rows}, {args.seq_len}, {args.hidden}) per microbatch and direction",
        figures=(),
        sources=("command-line flags",),
    )


def _model(args: argparse.Namespace) -> tuple[Any, Any]:
    import dataclasses

    from pooltk.config import PoolConfig
    from pooltk.memory.model import Boundary, model_memory

    preset = _source(args)
    base = preset.config
    config = PoolConfig(
        slack=base.slack if args.slack is None else args.slack,
        grad_slack=base.grad_slack if args.grad_slack is None else args.grad_slack,
        policy=base.policy if args.policy is None else args.policy,
    )
    shape = preset.shape
    if args.schedule is not None and (args.preset or args.config):
        shape = dataclasses.replace(shape, schedule=args.schedule)
    boundary = preset.boundary
    if args.boundary_mib is not None:
        if not args.boundary_mib > 0:
            from pooltk.memory.model import MemoryModelError

            raise MemoryModelError("--boundary-mib", found=repr(args.boundary_mib), required="> 0", fix="give MiB per buffer set, e.g. 416.")
        boundary = Boundary.opaque(round(args.boundary_mib * 2**20), name="boundary_override")
    model = model_memory(shape, boundary, config, unpoolable="stock" if args.allow_unpoolable else "error")
    return preset, model


def _table(preset: Any, model: Any, unit: str) -> str:
    from pooltk.memory.model import to_unit

    cfg = model.config
    lines = [
        preset.title,
        f"  shape: {model.shape.describe()}",
        f"  boundary: {model.boundaries[0].describe()}" if model.boundaries else "  boundary: none (pp=1)",
        f"  config: policy={cfg.policy} slack={cfg.slack} grad_slack={cfg.grad_slack}"
        + ("" if model.pool_active else "  (schedule cannot be pooled: every ring column is stock)"),
        f"  assumption: {preset.assumption}",
        f"  sets are forward+grad per stage; memory in {unit.upper()} ({'2**30' if unit == 'gib' else '2**20' if unit == 'mib' else '1e9'} bytes)",
        "",
    ]
    header = ["stage", "stock", "automodel", "tight", "live set", f"saved ({cfg.policy})"]
    rows = []
    for i in range(model.shape.pp):
        f, g = model.row(i, "forward"), model.row(i, "grad")
        cells = [str(i)]
        for v in ("stock", "automodel", "tight", "live_set"):
            cells.append(f"{f.sets(v)}+{g.sets(v)} = {to_unit(model.stage_bytes(i, v), unit):,.2f}")
        cells.append(f"{to_unit(model.saved_bytes(i), unit):,.2f}")
        rows.append(cells)
    totals = ["total"] + [f"{to_unit(model.total_bytes(v), unit):,.2f}" for v in ("stock", "automodel", "tight", "live_set")]
    totals.append(f"{to_unit(model.total_bytes('stock') - model.total_bytes('pooled'), unit):,.2f}")
    peak = ["peak stage"] + [f"{to_unit(model.peak_stage_bytes(v), unit):,.2f}" for v in ("stock", "automodel", "tight", "live_set")]
    peak.append("")
    widths = [max(len(r[c]) for r in [header, *rows, totals, peak]) for c in range(len(header))]
    rule = ["-" * w for w in widths]
    lines += [_row(r, widths) for r in (header, rule, *rows, rule, totals, peak)]
    return "\n".join(lines)


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(cell.rjust(w) for cell, w in zip(cells, widths))


def _list_presets() -> str:
    from pooltk.studies.kimi_k3.presets import PRESETS

    out = []
    for p in PRESETS.values():
        out.append(f"{p.name}\n  {p.title}\n  {p.shape.describe()}; {p.boundary.describe()}")
        out.append(f"  assumption: {p.assumption}")
        for f in p.figures:
            out.append(f"  [{f.kind}] {f.name} = {f.value:g} {f.unit}  <- {f.source}")
        out.append("")
    return "\n".join(out).rstrip()


def run(args: argparse.Namespace) -> int:
    from pooltk.memory.model import MemoryModelError

    if args.list_presets:
        print(_list_presets())
        return 0
    try:
        preset, model = _model(args)
    except (MemoryModelError, ValueError) as exc:
        return _fail(str(exc))
    if args.json:
        payload = {"source": {"name": preset.name, "title": preset.title, "assumption": preset.assumption,
                              "sources": list(preset.sources)}, **model.to_dict()}
        print(json.dumps(payload, indent=2))
    else:
        print(_table(preset, model, args.unit))
    return 0
