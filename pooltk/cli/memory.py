"""``pooltk memory``: receive-buffer memory per stage -- stock, automodel policy, tight, live set.

Three ways to give the shape (exactly one):

- ``--preset NAME`` (``--list-presets`` shows them with their provenance),
- explicit flags: ``--pp`` and either ``--microbatches`` or ``--global-batch --micro-batch --dp``,
  plus ``--seq-len --hidden [--dtype] [--micro-batch]`` for the boundary tensor,
- ``--config FILE``, an Automodel-style YAML (its model may come from a ``_target_`` config class)
  or a Hugging Face ``config.json``; shape flags given with it override the file.

``--slack``, ``--grad-slack``, ``--policy``, ``--boundary-mib`` and ``--schedule`` override
whatever the shape source says. ``--json`` prints the full model as JSON.

``--capacity DEVICE|GIB`` adds the fits view: per stage, the peak of stock, the automodel policy,
tight and the live set on that device, anchored to a reference peak (the preset's published one,
or ``--reference-peak-gib``). ``--measure`` runs stock and pooled pipelines on gloo and prints
measured vs modelled saving per stage.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

__all__ = ["register", "run"]

_SHAPE_FLAGS = ("pp", "microbatches", "global_batch", "micro_batch", "dp", "seq_len", "hidden", "dtype")


def register(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("shape source (one of)")
    src.add_argument("--preset", metavar="NAME", help="a named shape; see --list-presets")
    src.add_argument("--config", metavar="FILE", help="an Automodel-style YAML or a Hugging Face config.json (flags override it)")
    src.add_argument("--list-presets", action="store_true", help="list presets with their provenance and exit")
    src.add_argument("--list-devices", action="store_true", help="list known device capacities with their sources and exit")
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
    fit = parser.add_argument_group("fits or OOM")
    fit.add_argument("--capacity", metavar="DEVICE|GIB", help="device (gb200, h100, ...; auto = this machine's GPU) or GiB")
    fit.add_argument("--reference-peak-gib", type=float, help="measured/published peak of the reference run, GiB")
    fit.add_argument("--reference-variant", default=None, help="variant of the reference peak: pooled (default), stock, automodel, tight")
    fit.add_argument("--reference-stage", type=int, default=None, help="stage the reference peak describes (default: the fullest)")
    fit.add_argument("--weights-gib", type=float, default=None, help="per-GPU weights no policy can shed, GiB (checked against capacity)")
    meas = parser.add_argument_group("physical measurement")
    meas.add_argument("--measure", action="store_true", help="measure stock vs pooled peak RSS per stage on gloo (minutes)")
    meas.add_argument("--reps", type=int, default=2, help="stock/pooled pairs per shape (default 2)")
    meas.add_argument("--csv", metavar="PATH", help="write the raw per-rank measurements here")
    meas.add_argument("--steps", type=int, default=2, help="steps per launch (default 2)")
    out = parser.add_argument_group("output")
    out.add_argument("--unit", choices=("gib", "gb", "mib"), default="gib", help="table unit (gib = 2**30, gb = 1e9)")
    out.add_argument("--json", action="store_true", help="print the model as JSON instead of a table")


def _fail(message: str) -> int:
    print(f"pooltk memory: error: {_flags_in(message)}", file=sys.stderr)
    return 2


def _source(args: argparse.Namespace) -> Any:
    """The Preset the arguments describe (preset, config file with flag overrides, or explicit flags)."""
    from pooltk.memory.configs import Overrides, load_config, load_overrides
    from pooltk.memory.model import MemoryModelError
    from pooltk.studies.kimi_k3.presets import get_preset

    explicit = [_flag(f) for f in _SHAPE_FLAGS if getattr(args, f) is not None]
    chosen = [name for name, on in (("--preset", args.preset), ("--config", args.config)) if on]
    if len(chosen) > 1 or (args.preset and explicit) or not (chosen or explicit):
        found = " and ".join(chosen + ([f"shape flags ({' '.join(explicit)})"] if explicit else [])) or "none"
        raise MemoryModelError(
            "shape source",
            found=found,
            required="exactly one of --preset, --config (shape flags may override it), or explicit shape flags",
            fix="e.g. `pooltk memory --preset kimi-k3-gb200-2k-calibrated`, --config FILE --hidden 7168, "
            "or --pp 8 --microbatches 64 --seq-len 2048 --hidden 7168.",
        )
    if args.preset:
        return get_preset(args.preset)
    overrides = Overrides(**{f: getattr(args, f) for f in _SHAPE_FLAGS}, schedule=args.schedule)
    return load_config(args.config, overrides) if args.config else load_overrides(overrides)


def _flag(field: str) -> str:
    """The flag of an :class:`~pooltk.memory.configs.Overrides` field: ``micro_batch`` -> ``--micro-batch``."""
    return "--" + field.replace("_", "-")


def _flags_in(message: str) -> str:
    """The library names overrides as fields (``Overrides.seq_len``); the command line names its flags."""
    return re.sub(r"Overrides\.([a-z_]+)", lambda m: _flag(m.group(1)), message)


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
    if args.schedule is not None and args.preset:
        shape = dataclasses.replace(shape, schedule=args.schedule)
    boundary = preset.boundary
    if args.boundary_mib is not None:
        if not args.boundary_mib > 0:
            from pooltk.memory.model import MemoryModelError

            raise MemoryModelError("--boundary-mib", found=repr(args.boundary_mib), required="> 0", fix="give MiB per buffer set, e.g. 416.")
        boundary = Boundary.opaque(round(args.boundary_mib * 2**20), name="boundary_override")
    model = model_memory(shape, boundary, config, unpoolable="stock" if args.allow_unpoolable else "error")
    return preset, model


# The columns `pooltk memory` prints, in order: what torch holds (<= 2.14, >= 2.15, >= 2.15 with pooltk's
# release), the two ring policies, and the live set no pool can go below.
_SHOWN = ("stock", "stock_lazy", "lazy_released", "automodel", "tight", "live_set")


def _table(preset: Any, model: Any, unit: str) -> str:
    from pooltk.memory.model import VARIANT_LABELS, to_unit

    cfg = model.config
    lines = [
        preset.title,
        f"  shape: {model.shape.describe()}",
        f"  boundary: {model.boundaries[0].describe()}" if model.boundaries else "  boundary: none (pp=1)",
        f"  config: policy={cfg.policy} slack={cfg.slack} grad_slack={cfg.grad_slack}"
        + ("" if model.pool_active else "  (schedule cannot be pooled: every ring column is stock)"),
        f"  assumption: {preset.assumption}",
        f"  sets are forward+grad per stage; memory in {unit.upper()} ({'2**30' if unit == 'gib' else '2**20' if unit == 'mib' else '1e9'} bytes)",
        "  stock: torch <= 2.14 (M sets up front); stock-lazy: torch >= 2.15 (the live set, all M forward on the last "
        "stage); lazy-released: 2.15 with pooltk's last-stage release",
        "",
    ]
    size = lambda n: f"{to_unit(n, unit):,.2f}"  # noqa: E731 - one format for every cell
    rows = []
    for i in range(model.shape.pp):
        f, g = model.row(i, "forward"), model.row(i, "grad")
        rows.append([str(i)] + [f"{f.sets(v)}+{g.sets(v)} = {size(model.stage_bytes(i, v))}" for v in _SHOWN]
                    + [size(model.saved_bytes(i))])
    rows.append(None)
    rows.append(["total"] + [size(model.total_bytes(v)) for v in _SHOWN]
                + [size(model.total_bytes("stock") - model.total_bytes("pooled"))])
    rows.append(["peak stage"] + [size(model.peak_stage_bytes(v)) for v in _SHOWN] + [""])
    header = ["stage"] + [VARIANT_LABELS[v] for v in _SHOWN] + [f"saved ({cfg.policy})"]
    return "\n".join(lines + _render(header, rows))


def _render(header: list[str], rows: list[list[str] | None]) -> list[str]:
    """Right-aligned text columns; ``None`` draws a rule. The one table layout of this command.

    Plain text, not pandas: ``pooltk memory`` is part of the torch-only install (``pip install pooltk``).
    """
    body = [r for r in rows if r is not None]
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    rule = "  ".join("-" * w for w in widths)
    out = ["  ".join(cell.rjust(w) for cell, w in zip(header, widths)), rule]
    out += [rule if r is None else "  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in rows]
    return out


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


def _fits(args: argparse.Namespace, preset: Any, model: Any) -> Any:
    from pooltk.memory.fits import ReferencePeak, fit_report, published_peak
    from pooltk.memory.model import MemoryModelError

    kwargs: dict[str, Any] = {}
    if args.reference_peak_gib is not None:
        gib, source = args.reference_peak_gib, "--reference-peak-gib"
        kwargs["config"] = model.config
    else:
        figure = published_peak(preset)
        if figure is None:
            raise MemoryModelError(
                "reference peak", found=f"none for {preset.name!r} (no published peak)",
                required="a measured or published peak of one configuration of this shape",
                fix="add --reference-peak-gib GIB (and --reference-variant if it was not pooled).",
            )
        gib, source = figure.value, figure.source
        kwargs["config"] = preset.config
    if args.reference_variant is not None:
        kwargs["variant"] = args.reference_variant
    if args.weights_gib is not None:
        if not args.weights_gib > 0:
            raise MemoryModelError("--weights-gib", found=repr(args.weights_gib), required="> 0", fix="give GiB per GPU, e.g. 60.")
        kwargs["weights_bytes"] = round(args.weights_gib * 2**30)
    reference = ReferencePeak.from_gib(gib, stage=args.reference_stage, source=source, **kwargs)
    return fit_report(model.shape, list(model.boundaries), model.config, args.capacity, reference)


def _fits_table(report: Any) -> str:
    from pooltk.memory.fits import FIT_VARIANTS
    from pooltk.memory.model import VARIANT_LABELS

    ref = report.reference
    lines = [
        "",
        f"fits on {report.device.name}: {report.device.gib:.2f} GiB ({report.device.source})",
        f"  reference: {ref.peak_bytes / 2**30:.2f} GiB peak of {ref.variant} (slack {ref.config.slack}, {ref.config.policy}) "
        f"on stage {report.reference_stage}; {ref.source}",
        f"  assumed: every stage holds the same {report.base_bytes / 2**30:.2f} GiB besides receive buffers "
        "(see pooltk.memory.fits, [Note: the fits model])",
        "",
    ]
    cell = {(r.stage, r.variant): f"{r.peak_bytes / 2**30:,.2f} {'ok' if r.fits else 'OOM'} {r.margin_bytes / 2**30:+,.2f}"
            for r in report.rows}
    stages = sorted({r.stage for r in report.rows})
    rows = [[str(i)] + [cell[(i, v)] for v in FIT_VARIANTS] for i in stages]
    lines += _render(["stage"] + [VARIANT_LABELS[v] for v in FIT_VARIANTS], rows)
    lines.append("  peak GiB, fits (ok) or not (OOM), margin GiB = capacity - peak")
    width = max(len(VARIANT_LABELS[v]) for v in FIT_VARIANTS)
    for v, text in report.summary().items():
        lines.append(f"  {VARIANT_LABELS[v]:{width}} fullest {text}")
    return "\n".join(lines)


def _list_devices() -> str:
    from pooltk.memory.fits import DEVICES

    return "\n".join(f"{d.name:14} {d.gib:8.2f} GiB  <- {d.source}" for d in DEVICES.values())


def _measure(args: argparse.Namespace) -> int:
    from pooltk.parity.measured import default_specs, format_comparison, launches_frame, measured_vs_modelled, write_measured
    from pooltk.parity.rss import RssSpec, measure_rss

    from pooltk.config import PoolConfig

    if any(getattr(args, f) is not None for f in ("pp", "microbatches", "seq_len", "hidden", "micro_batch")):
        specs = [RssSpec(pp=args.pp or 4, microbatches=args.microbatches or 16, seq_len=args.seq_len or 65536,
                         hidden=args.hidden or 64, rows_per_microbatch=args.micro_batch or 2, steps=args.steps)]
    else:
        specs = default_specs(steps=args.steps)
    config = PoolConfig(slack=2 if args.slack is None else args.slack,
                        grad_slack=1 if args.grad_slack is None else args.grad_slack, policy=args.policy or "tight")
    launches = measure_rss(specs, config, reps=args.reps,
                           progress=lambda m: print(f"[measure] {m}", file=sys.stderr, flush=True))
    frame = launches_frame(launches)
    if args.csv:
        write_measured(frame, args.csv)
    table = measured_vs_modelled(frame)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        print(format_comparison(table))
    return 0


def run(args: argparse.Namespace) -> int:
    from pooltk.memory.model import MemoryModelError
    from pooltk.parity.rss import RssLaunchError

    if args.list_presets:
        print(_list_presets())
        return 0
    if args.list_devices:
        print(_list_devices())
        return 0
    try:
        if args.measure:
            return _measure(args)
        preset, model = _model(args)
        fits = _fits(args, preset, model) if args.capacity is not None else None
    except (MemoryModelError, ValueError) as exc:
        return _fail(str(exc))
    except RssLaunchError as exc:
        print(f"pooltk memory: {exc}", file=sys.stderr)
        return 1
    if args.json:
        payload = {"source": {"name": preset.name, "title": preset.title, "assumption": preset.assumption,
                              "sources": list(preset.sources)}, **model.to_dict()}
        if fits is not None:
            payload["fits"] = {"device": {"name": fits.device.name, "capacity_bytes": fits.device.capacity_bytes,
                                          "source": fits.device.source},
                               "reference_stage": fits.reference_stage, "base_bytes": fits.base_bytes,
                               "rows": fits.to_records()}
        print(json.dumps(payload, indent=2))
    else:
        print(_table(preset, model, args.unit))
        if fits is not None:
            print(_fits_table(fits))
    return 0
