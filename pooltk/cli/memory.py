"""``pooltk memory``: receive-buffer memory per stage, per rank and per boundary -- stock, automodel
policy, tight, live set, rank-shared rings.

Three ways to give the shape (exactly one):

- ``--preset NAME`` (``--list-presets`` shows them with their provenance),
- explicit flags: ``--pp`` and either ``--microbatches`` or ``--global-batch --micro-batch --dp``,
  plus ``--seq-len --hidden [--dtype] [--micro-batch]`` for the boundary tensor,
- ``--config FILE``, an Automodel-style YAML (its model may come from a ``_target_`` config class)
  or a Hugging Face ``config.json``; shape flags given with it override the file.

``--slack``, ``--grad-slack``, ``--policy``, ``--sharing``, ``--boundary-mib``, ``--schedule`` and
``--vpp`` override whatever the shape source says. ``--json`` prints the full model as JSON.

Boundaries may differ per stage (a preset built from published widths): the table lists each
one. Under a multi-stage schedule (``--schedule interleaved1f1b --vpp 2``) a second table gives
every rank: its stages, each per-stage variant summed, the rank-shared rings and the rank's live
set ([Note: bytes per rank] in :mod:`pooltk.memory.ranks`). ``--compare NAME`` shows another
preset's stock and pooled bytes beside this one's, per stage (rank), with the difference.

``--estimate`` replays every rank's real stage modules on fake tensors through torch's own schedule
(:mod:`pooltk.memory.replay`): parameters, gradients, optimizer states, activations, receive buffers and
what the schedule keeps, per rank, for stock torch, torch 2.15's per-receive buffers, the pool and the
live set; from ``--config`` (a config.json, an Automodel YAML, a torchtitan TOML), ``--preset`` (a named
estimate) or ``--builder package.module:function``; with ``--capacity`` a verdict that adds a stated
overhead (or one calibrated by ``--run-log``). ``--k3-story`` prints the Kimi-K3 PR's figures beside the model.

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

_SHAPE_FLAGS = (
    "pp",
    "microbatches",
    "global_batch",
    "micro_batch",
    "dp",
    "seq_len",
    "hidden",
    "dtype",
)


def register(parser: argparse.ArgumentParser) -> None:
    src = parser.add_argument_group("shape source (one of)")
    src.add_argument("--preset", metavar="NAME", help="a named shape; see --list-presets")
    src.add_argument(
        "--config",
        metavar="FILE",
        help="an Automodel-style YAML or a Hugging Face config.json (flags override it)",
    )
    src.add_argument(
        "--list-presets", action="store_true", help="list presets with their provenance and exit"
    )
    src.add_argument(
        "--list-devices",
        action="store_true",
        help="list known device capacities with their sources and exit",
    )
    shape = parser.add_argument_group("explicit shape")
    shape.add_argument("--pp", type=int, help="pipeline-parallel size N")
    shape.add_argument("--microbatches", type=int, help="microbatches per step M")
    shape.add_argument(
        "--global-batch",
        type=int,
        help="global batch in rows (with --micro-batch and --dp gives M)",
    )
    shape.add_argument(
        "--micro-batch", type=int, help="rows per microbatch (default 1 with --microbatches)"
    )
    shape.add_argument("--dp", type=int, help="data-parallel size")
    shape.add_argument("--seq-len", type=int, help="tokens per row")
    shape.add_argument("--hidden", type=int, help="hidden size")
    shape.add_argument("--dtype", default=None, help="boundary dtype (default bfloat16)")
    pool = parser.add_argument_group("pool and overrides")
    pool.add_argument(
        "--schedule",
        default=None,
        help="1f1b (default), gpipe, or a multi-stage schedule (interleaved1f1b, loopedbfs, "
        "interleavedzerobubble, zbvzerobubble, dualpipev: pooled as schedule='auto' pools them)",
    )
    pool.add_argument(
        "--vpp",
        type=int,
        default=None,
        help="stages per rank for a multi-stage schedule (default 2)",
    )
    pool.add_argument(
        "--sharing",
        choices=("rank", "stage"),
        default=None,
        help="rings shared by a rank's stages (rank, default) or one per stage (stage)",
    )
    pool.add_argument(
        "--allow-unpoolable",
        action="store_true",
        help="model a GPipe shape with the pool standing down",
    )
    pool.add_argument(
        "--slack", type=int, default=None, help="forward ring slack (default: the source's, else 2)"
    )
    pool.add_argument(
        "--grad-slack", type=int, default=None, help="grad ring slack, tight policy (default 1)"
    )
    pool.add_argument(
        "--policy", choices=("tight", "automodel"), default=None, help="policy for the saved column"
    )
    pool.add_argument(
        "--boundary-mib",
        type=float,
        default=None,
        help="override bytes per buffer set, in MiB (2**20)",
    )
    fit = parser.add_argument_group("fits or OOM")
    fit.add_argument(
        "--capacity",
        metavar="DEVICE|GIB",
        help="device (gb200, h100, ...; auto = this machine's GPU) or GiB",
    )
    fit.add_argument(
        "--reference-peak-gib", type=float, help="measured/published peak of the reference run, GiB"
    )
    fit.add_argument(
        "--reference-variant",
        default=None,
        help="variant of the reference peak: pooled (default), stock, automodel, tight",
    )
    fit.add_argument(
        "--reference-stage",
        type=int,
        default=None,
        help="stage the reference peak describes (default: the fullest)",
    )
    fit.add_argument(
        "--weights-gib",
        type=float,
        default=None,
        help="per-GPU weights no policy can shed, GiB (checked against capacity)",
    )
    meas = parser.add_argument_group("physical measurement")
    meas.add_argument(
        "--measure",
        action="store_true",
        help="measure stock vs pooled peak RSS per stage on gloo (minutes)",
    )
    meas.add_argument(
        "--reps", type=int, default=2, help="stock/pooled pairs per shape (default 2)"
    )
    meas.add_argument(
        "--csv",
        metavar="PATH",
        help="write the raw per-rank measurements here, if every claim holds "
        "(python -m pooltk.parity.measured --check PATH re-checks one)",
    )
    meas.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps per launch (default 2); with --estimate: measured "
        "steps after the optimizer warm-up (default 1)",
    )
    est = parser.add_argument_group("whole-stage estimate (replay on fake tensors; docs/memory.md)")
    est.add_argument(
        "--estimate",
        action="store_true",
        help="replay every rank's real stage modules through torch's schedule on fake tensors: parameters, "
        "gradients, optimizer, activations, receive buffers per rank, stock / stock-lazy / pooled / live set",
    )
    est.add_argument(
        "--builder",
        metavar="MODULE:FUNC",
        help="a Python entry point build(stage, num_stages) -> StageSpec",
    )
    est.add_argument(
        "--model-config",
        metavar="FILE",
        help="the model's config.json (for a YAML or TOML without the dimensions)",
    )
    est.add_argument(
        "--checkpointing",
        choices=("full", "none"),
        default=None,
        help="activation checkpointing (default: the file's, else none)",
    )
    est.add_argument(
        "--split",
        default="automodel",
        help="layers per stage: automodel (default), torchtitan, or counts 10,11,...",
    )
    est.add_argument(
        "--ep", type=int, default=None, help="expert parallelism (experts per rank = experts / ep)"
    )
    est.add_argument(
        "--variants",
        default="stock,stock_lazy,pooled,live_set",
        help="replayed variants, comma-separated",
    )
    est.add_argument(
        "--ranks", default=None, help="ranks to replay, comma-separated (default: all)"
    )
    est.add_argument(
        "--optimizer",
        choices=("adamw", "sgd", "none"),
        default="adamw",
        help="optimizer stepped (default adamw)",
    )
    est.add_argument(
        "--optimizer-impl",
        choices=("fused", "foreach", "for-loop"),
        default="fused",
        help="its implementation",
    )
    est.add_argument(
        "--return-outputs",
        action="store_true",
        help="the step returns the merged outputs (torch's default; torchtitan's trainer does not)",
    )
    est.add_argument(
        "--overhead-gib",
        type=float,
        default=None,
        help="memory outside torch's tensors, GiB (default: "
        "CUDA context + NCCL, stated with sources)",
    )
    est.add_argument(
        "--run-log",
        metavar="PATH",
        help="calibrate the overhead from this run's logged peak (Automodel or torchtitan log)",
    )
    est.add_argument(
        "--k3-story",
        action="store_true",
        help="print the Kimi-K3 story: the PR's OOM and headroom beside the model",
    )
    est.add_argument(
        "--real",
        action="store_true",
        help="real CPU tensors instead of fake ones (small widths only: a check)",
    )
    est.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="replay this many (rank, variant) pairs at once, each in its own process (default 1)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--unit",
        choices=("gib", "gb", "mib"),
        default="gib",
        help="table unit (gib = 2**30, gb = 1e9)",
    )
    out.add_argument(
        "--compare",
        metavar="PRESET",
        help="another preset beside this one, per stage (rank), with the difference",
    )
    out.add_argument(
        "--json", action="store_true", help="print the model as JSON instead of a table"
    )


_FIELDS = {
    "preset": "--preset",
    "capacity": "--capacity",
    "reference variant": "--reference-variant",
    "reference stage": "--reference-stage",
    "weights": "--weights-gib",
    "stages_per_rank": "--vpp",
    "PoolConfig.slack": "--slack",
    "PoolConfig.grad_slack": "--grad-slack",
    "policy": "--policy",
    "sharing": "--sharing",
}
"""Library fields this command fills from a flag, always ([Note: command-line errors] in :mod:`pooltk.cli.errors`)."""


def _fail(exc: BaseException, fields: dict[str, str] | None = None) -> int:
    from pooltk.cli.errors import message

    print(f"pooltk memory: error: {_flags_in(message(exc, fields or _FIELDS))}", file=sys.stderr)
    return 2


def _source(args: argparse.Namespace) -> Any:
    """The Preset the arguments describe (preset, config file with flag overrides, or explicit flags)."""
    from pooltk.memory.configs import Overrides, load_config, load_overrides
    from pooltk.memory.model import MemoryModelError
    from pooltk.studies.kimi_k3.presets import get_preset

    explicit = [_flag(f) for f in _SHAPE_FLAGS if getattr(args, f) is not None]
    chosen = [name for name, on in (("--preset", args.preset), ("--config", args.config)) if on]
    if len(chosen) > 1 or (args.preset and explicit) or not (chosen or explicit):
        found = (
            " and ".join(chosen + ([f"shape flags ({' '.join(explicit)})"] if explicit else []))
            or "none"
        )
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


def _model(args: argparse.Namespace, preset: Any = None) -> tuple[Any, Any]:
    import dataclasses

    from pooltk.analysis.catalog import schedule_key
    from pooltk.config import PoolConfig
    from pooltk.memory.model import Boundary, model_memory

    preset = _source(args) if preset is None else preset
    base = preset.config
    config = PoolConfig(
        slack=base.slack if args.slack is None else args.slack,
        grad_slack=base.grad_slack if args.grad_slack is None else args.grad_slack,
    )
    shape = preset.shape
    changes: dict[str, Any] = {}
    if args.schedule is not None and shape.schedule != schedule_key(args.schedule):
        changes["schedule"] = args.schedule
        changes["stages_per_rank"] = None  # the new schedule's own, unless --vpp says
    if args.vpp is not None:
        changes["stages_per_rank"] = args.vpp
    if changes:
        shape = dataclasses.replace(shape, **changes)
    boundaries: Any = preset.boundaries_for(shape) if args.boundary_mib is None else None
    if args.boundary_mib is not None:
        if not args.boundary_mib > 0:
            from pooltk.memory.model import MemoryModelError

            raise MemoryModelError(
                "--boundary-mib",
                found=repr(args.boundary_mib),
                required="> 0",
                fix="give MiB per buffer set, e.g. 416.",
            )
        boundaries = Boundary.opaque(round(args.boundary_mib * 2**20), name="boundary_override")
    model = model_memory(
        shape,
        boundaries,
        config,
        policy=preset.policy if args.policy is None else args.policy,
        sharing="rank" if args.sharing is None else args.sharing,
        unpoolable="stock" if args.allow_unpoolable else "error",
    )
    return preset, model


# The columns `pooltk memory` prints, in order: what torch holds (<= 2.14, >= 2.15, >= 2.15 with pooltk's
# release), the two ring policies, and the live set no pool can go below.
_SHOWN = ("stock", "stock_lazy", "lazy_released", "automodel", "tight", "live_set")


def _table(preset: Any, model: Any, unit: str) -> str:
    from pooltk.memory.model import VARIANT_LABELS, to_unit

    cfg = model.config
    multi = model.shape.multi_stage
    lines = [
        preset.title,
        f"  shape: {model.shape.describe()}"
        + (
            f"; pooled as install(schedule='auto') pools it, sharing={model.sharing}"
            if model.shape.pool_mode == "auto"
            else ""
        ),
        *_boundary_lines(model),
        f"  config: policy={model.policy} slack={cfg.slack} grad_slack={cfg.grad_slack}"
        + (
            "" if model.pool_active else "  (schedule cannot be pooled: every ring column is stock)"
        ),
        f"  assumption: {preset.assumption}",
        f"  sets are forward+grad per stage; memory in {unit.upper()} ({'2**30' if unit == 'gib' else '2**20' if unit == 'mib' else '1e9'} bytes)",
        "  stock: torch <= 2.14 (M sets up front); stock-lazy: torch >= 2.15 (the live set, all M forward on the last "
        "stage); lazy-released: 2.15 with pooltk's last-stage release",
    ]
    if multi:
        lines.append(
            "  automodel: Automodel's released pool pools 1F1B only (stock here); tight / saved: per-stage rings; "
            "a (local) stage is fed by a same-rank handoff: no receive buffer, but M in stock torch <= 2.14"
        )
    lines.append("")
    size = lambda n: f"{to_unit(n, unit):,.2f}"  # noqa: E731 - one format for every cell
    rows = []
    for i in range(model.shape.num_stages):
        f, g = model.row(i, "forward"), model.row(i, "grad")
        label = f"{i}" + (
            f" (r{f.rank}{', local' if f.handoff or g.handoff else ''})" if multi else ""
        )
        rows.append(
            [label]
            + [f"{f.sets(v)}+{g.sets(v)} = {size(model.stage_bytes(i, v))}" for v in _SHOWN]
            + [size(model.saved_bytes(i))]
        )
    rows.append(None)
    rows.append(
        ["total"]
        + [size(model.total_bytes(v)) for v in _SHOWN]
        + [size(model.total_bytes("stock") - model.total_bytes("pooled"))]
    )
    rows.append(["peak stage"] + [size(model.peak_stage_bytes(v)) for v in _SHOWN] + [""])
    header = (
        ["stage"]
        + [VARIANT_LABELS[v] for v in _SHOWN]
        + ["saved (per-stage auto rings)" if multi else f"saved ({model.policy})"]
    )
    out = lines + _render(header, rows)
    if multi:
        out += ["", *_rank_table(model, unit)]
    else:
        out.append(
            "  one stage per rank: each rank holds its stage's row (rank-shared rings = the per-stage rings)"
        )
    return "\n".join(out)


def _boundary_lines(model: Any) -> list[str]:
    """One line for a boundary shared by every stage, else one per boundary."""
    bounds = model.boundaries
    if not bounds:
        return ["  boundary: none (one stage)"]
    if len(set(bounds)) == 1:
        return [f"  boundary: {bounds[0].describe()}"]
    return ["  boundaries (they differ per stage):"] + [
        f"    {b} (stage {b} -> {b + 1}): {bd.describe()}" for b, bd in enumerate(bounds)
    ]


# The rank table: the per-stage variants summed over a rank's stages, then the rank-level ones.
_RANK_SHOWN = ("stock", "stock_lazy", "tight", "live_set", "shared", "rank_live")


def _rank_table(model: Any, unit: str) -> list[str]:
    from pooltk.memory.model import VARIANT_LABELS, to_unit

    size = lambda n: f"{to_unit(n, unit):,.2f}"  # noqa: E731
    rows = []
    for r in range(model.shape.pp):
        rings = model.rank_rings(r)
        described = " ".join(
            f"{g.direction[0]}{'+'.join(map(str, g.stages))}:{g.live}->{g.size}" for g in rings
        )
        rows.append(
            [str(r), ",".join(map(str, model.rank_stages(r)))]
            + [size(model.rank_bytes(r, v)) for v in _RANK_SHOWN]
            + [size(model.rank_bytes(r, "stock") - model.rank_bytes(r, "pooled")), described]
        )
    rows.append(None)
    rows.append(
        ["peak rank", ""] + [size(model.peak_rank_bytes(v)) for v in _RANK_SHOWN] + ["", ""]
    )
    header = (
        ["rank", "stages"]
        + [VARIANT_LABELS[v] for v in _RANK_SHOWN]
        + [f"saved (sharing={model.sharing})", "rings: dir stages: live->K"]
    )
    return [
        f"per rank, {unit.upper()}: a rank holds all its stages; rank-shared: one ring per (rank, direction, boundary "
        "tensors), K = the rank's live set + slack; rank live: that live set. Rank-shared rings have no per-stage share "
        "(a slot serves whichever stage receives next): they are shown per rank only.",
        *_render(header, rows),
    ]


def _compare_table(model: Any, other_preset: Any, other: Any, unit: str) -> str:
    """Stock and pooled per stage (per rank when they differ) of two models of one pipeline, with the difference."""
    from pooltk.memory.model import to_unit

    size = lambda n: f"{to_unit(n, unit):,.2f}"  # noqa: E731
    if (other.shape.pp, other.shape.num_stages) != (model.shape.pp, model.shape.num_stages):
        from pooltk.memory.model import MemoryModelError

        raise MemoryModelError(
            "--compare",
            found=f"{other_preset.name}: {other.shape.describe()}",
            required=f"the same pipeline ({model.shape.describe()})",
            fix="compare presets of one pipeline shape.",
        )
    per_rank = model.shape.multi_stage
    n = model.shape.pp if per_rank else model.shape.num_stages
    at = (lambda m, i, v: m.rank_bytes(i, v)) if per_rank else (lambda m, i, v: m.stage_bytes(i, v))
    rows = []
    for i in range(n):
        a_st, b_st, a_po, b_po = (
            at(model, i, "stock"),
            at(other, i, "stock"),
            at(model, i, "pooled"),
            at(other, i, "pooled"),
        )
        rows.append(
            [
                str(i),
                size(a_st),
                size(b_st),
                size(a_st - b_st),
                size(a_po),
                size(b_po),
                size(a_po - b_po),
            ]
        )
    what = "rank" if per_rank else "stage"
    header = [
        what,
        "stock",
        "stock (other)",
        "difference",
        "pooled",
        "pooled (other)",
        "difference",
    ]
    return "\n".join(
        [
            "",
            f"beside {other_preset.name} (other), {unit.upper()}, per {what}; difference = this - other:",
            *_render(header, rows),
        ]
    )


def _render(header: list[str], rows: list[list[str] | None]) -> list[str]:
    """Right-aligned text columns; ``None`` draws a rule. The one table layout of this command.

    Plain text, not pandas: ``pooltk memory`` is part of the torch-only install (``pip install pooltk``).
    """
    body = [r for r in rows if r is not None]
    widths = [max(len(r[c]) for r in [header, *body]) for c in range(len(header))]
    rule = "  ".join("-" * w for w in widths)
    out = ["  ".join(cell.rjust(w) for cell, w in zip(header, widths)), rule]
    out += [
        rule if r is None else "  ".join(cell.rjust(w) for cell, w in zip(r, widths)) for r in rows
    ]
    return out


def _list_presets() -> str:
    from pooltk.studies.kimi_k3.presets import PRESETS

    out = []
    for p in PRESETS.values():
        where = "boundaries differ per stage; the first: " if p.varies else ""
        out.append(f"{p.name}\n  {p.title}\n  {p.shape.describe()}; {where}{p.boundary.describe()}")
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
        kwargs.update(config=model.config, policy=model.policy, sharing=model.sharing)
    else:
        figure = published_peak(preset)
        if figure is None:
            raise MemoryModelError(
                "reference peak",
                found=f"none for {preset.name!r} (no published peak)",
                required="a measured or published peak of one configuration of this shape",
                fix="add --reference-peak-gib GIB (and --reference-variant if it was not pooled).",
            )
        gib, source = figure.value, figure.source
        kwargs.update(config=preset.config, policy=preset.policy)
    if args.reference_variant is not None:
        kwargs["variant"] = args.reference_variant
    if args.weights_gib is not None:
        if not args.weights_gib > 0:
            raise MemoryModelError(
                "--weights-gib",
                found=repr(args.weights_gib),
                required="> 0",
                fix="give GiB per GPU, e.g. 60.",
            )
        kwargs["weights_bytes"] = round(args.weights_gib * 2**30)
    reference = ReferencePeak.from_gib(gib, stage=args.reference_stage, source=source, **kwargs)
    if (
        args.reference_peak_gib is None and model.shape != preset.shape
    ):  # the published peak is of the preset's own run
        return fit_report(
            model.shape,
            list(model.boundaries),
            model.config,
            args.capacity,
            reference,
            policy=model.policy,
            sharing=model.sharing,
            reference_shape=preset.shape,
            reference_boundary=list(preset.boundaries_for(preset.shape)),
        )
    return fit_report(
        model.shape,
        list(model.boundaries),
        model.config,
        args.capacity,
        reference,
        policy=model.policy,
        sharing=model.sharing,
    )


def _fits_table(report: Any, *, multi: bool = False) -> str:
    from pooltk.memory.model import VARIANT_LABELS

    ref = report.reference
    lines = [
        "",
        f"fits on {report.device.name}: {report.device.gib:.2f} GiB ({report.device.source})",
        f"  reference: {ref.peak_bytes / 2**30:.2f} GiB peak of {ref.variant} (slack {ref.config.slack}, {ref.policy}) "
        f"on {'rank' if multi else 'stage'} {report.reference_stage} of its own run; {ref.source}",
        f"  assumed: every stage holds the same {report.base_bytes / 2**30:.2f} GiB besides receive buffers "
        "(see pooltk.memory.fits, [Note: the fits model])",
        "",
    ]
    cell = {
        (
            r.stage,
            r.variant,
        ): f"{r.peak_bytes / 2**30:,.2f} {'ok' if r.fits else 'OOM'} {r.margin_bytes / 2**30:+,.2f}"
        for r in report.rows
    }
    stages = sorted({r.stage for r in report.rows})
    rows = [[str(i)] + [cell[(i, v)] for v in report.variants] for i in stages]
    lines += _render(
        ["rank" if multi else "stage"] + [VARIANT_LABELS[v] for v in report.variants], rows
    )
    lines.append("  peak GiB, fits (ok) or not (OOM), margin GiB = capacity - peak")
    width = max(len(VARIANT_LABELS[v]) for v in report.variants)
    for v, text in report.summary().items():
        lines.append(f"  {VARIANT_LABELS[v]:{width}} fullest {text}")
    return "\n".join(lines)


def _list_devices() -> str:
    from pooltk.memory.fits import DEVICES

    return "\n".join(f"{d.name:14} {d.gib:8.2f} GiB  <- {d.source}" for d in DEVICES.values())


def _measure(args: argparse.Namespace) -> int:
    from pooltk.parity.measured import (
        check_measurement,
        default_specs,
        format_comparison,
        launches_frame,
        measured_vs_modelled,
        refusal,
        write_measured,
    )
    from pooltk.parity.rss import RssSpec, measure_rss

    from pooltk.config import PoolConfig
    from pooltk.memory.model import MemoryModelError

    if args.policy not in (
        None,
        "tight",
    ):  # the ranks install the pool as users do: a PoolConfig, the tight rule
        raise MemoryModelError(
            "--policy",
            found=f"{args.policy} with --measure",
            required="tight (what pooltk.install pools with)",
            fix="drop --policy.",
        )
    if any(
        getattr(args, f) is not None
        for f in ("pp", "microbatches", "seq_len", "hidden", "micro_batch")
    ):
        specs = [
            RssSpec(
                pp=args.pp or 4,
                microbatches=args.microbatches or 16,
                seq_len=args.seq_len or 65536,
                hidden=args.hidden or 64,
                rows_per_microbatch=args.micro_batch or 2,
                steps=args.steps or 2,
            )
        ]
    else:
        specs = default_specs(steps=args.steps or 2)
    config = PoolConfig(
        slack=2 if args.slack is None else args.slack,
        grad_slack=1 if args.grad_slack is None else args.grad_slack,
    )
    launches = measure_rss(
        specs,
        config,
        reps=args.reps,
        progress=lambda m: print(f"[measure] {m}", file=sys.stderr, flush=True),
    )
    frame = launches_frame(launches)
    table = measured_vs_modelled(frame)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        print(format_comparison(table))
    broken = check_measurement(
        frame, shapes=[s.label() for s in specs]
    )  # a record holds every claim
    if broken:
        print(
            f"pooltk memory: error: {refusal(broken, what='the measurement', unwritten=args.csv)}",
            file=sys.stderr,
        )
        return 1
    if args.csv:
        write_measured(frame, args.csv)
    return 0


def _csv_ints(flag: str, text: str | None) -> list[int] | None:
    from pooltk.memory.model import MemoryModelError

    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise MemoryModelError(
            flag,
            found=repr(text),
            required="whole numbers separated by commas",
            fix=f"e.g. {flag} 0,3.",
        ) from None


def _estimate_inputs(args: argparse.Namespace) -> Any:
    from pooltk.memory.configs import Overrides
    from pooltk.memory.replay.inputs import estimate_inputs
    from pooltk.memory.replay.presets import estimate_preset

    if args.preset:
        inputs = estimate_preset(args.preset).inputs()
    else:
        split: Any = args.split
        if split not in ("automodel", "torchtitan"):
            split = _csv_ints("--split", split)
        overrides = Overrides(
            **{f: getattr(args, f) for f in _SHAPE_FLAGS if f != "hidden"}, schedule=args.schedule
        )
        ckpt = None if args.checkpointing is None else args.checkpointing == "full"
        inputs = estimate_inputs(
            args.config,
            overrides,
            builder=args.builder,
            model_config=args.model_config,
            checkpointing=ckpt,
            split=split,
            ep=args.ep,
            vpp=args.vpp,
        )
    if args.sharing not in (None, "rank"):
        from pooltk._validate import InputError

        raise InputError(
            "--sharing",
            found=repr(args.sharing),
            required="rank with --estimate: the estimate replays the pool as users install it",
            fix="drop --sharing, or use it without --estimate.",
        )
    from pooltk.config import PoolConfig

    base = inputs.config
    config = PoolConfig(
        slack=base.slack if args.slack is None else args.slack,
        grad_slack=base.grad_slack if args.grad_slack is None else args.grad_slack,
    )
    import dataclasses

    return dataclasses.replace(inputs, config=config)


def _estimate(args: argparse.Namespace) -> int:
    from pooltk.memory.replay.estimate import VARIANT_TITLES, estimate_memory
    from pooltk.memory.replay.run import Training
    from pooltk.memory.verdict import DEFAULT_OVERHEAD, Overhead, fits_verdict, overhead_from_log

    inputs = _estimate_inputs(args)
    training = Training(
        optimizer=args.optimizer,
        optimizer_impl=args.optimizer_impl,
        steps=args.steps or 1,
        return_outputs=args.return_outputs,
    )

    def progress(r: Any) -> None:
        print(
            f"[estimate] rank {r.rank} {r.variant}: peak {r.peak.bytes / 2**30:.2f} GiB ({r.wall_s:.1f} s)",
            file=sys.stderr,
            flush=True,
        )

    estimate = estimate_memory(
        inputs.builder,
        inputs.shape,
        config=inputs.config,
        training=training,
        variants=[v.strip() for v in args.variants.split(",") if v.strip()],
        ranks=_csv_ints("--ranks", args.ranks),
        fake=not args.real,
        model=inputs.description,
        progress=progress,
        jobs=args.jobs,
    )
    verdict = None
    if args.capacity is not None or args.run_log or args.overhead_gib is not None:
        overhead = DEFAULT_OVERHEAD
        if args.overhead_gib is not None:
            if not args.overhead_gib >= 0:
                from pooltk.memory.model import MemoryModelError

                raise MemoryModelError(
                    "--overhead-gib",
                    found=repr(args.overhead_gib),
                    required=">= 0",
                    fix="give GiB, e.g. 2.",
                )
            overhead = Overhead(
                cuda_context_bytes=0,
                nccl_bytes=0,
                allocator_bytes=round(args.overhead_gib * 2**30),
                source="--overhead-gib",
            )
        if args.run_log:
            overhead = overhead_from_log(args.run_log, estimate)
        verdict = fits_verdict(estimate, args.capacity or "gb200", overhead=overhead)
    if args.json:
        payload = {
            "inputs": {"description": inputs.description, "sources": list(inputs.sources)},
            **estimate.to_dict(),
        }
        if verdict is not None:
            payload["fits"] = verdict.to_dict()
        print(json.dumps(payload, indent=2))
        return 0
    print(_estimate_table(estimate, inputs, args.unit, VARIANT_TITLES))
    if verdict is not None:
        print("")
        print("\n".join(verdict.lines()))
    else:
        print("\n(add --capacity gb200|h100|GIB for a fits verdict)")
    return 0


def _estimate_table(estimate: Any, inputs: Any, unit: str, titles: dict[str, str]) -> str:
    from pooltk.memory.model import to_unit
    from pooltk.memory.replay.tracker import CATEGORIES

    size = lambda n: f"{to_unit(n, unit):,.2f}"  # noqa: E731
    variants = estimate.variants
    lines = [
        f"whole-stage estimate: {inputs.description}",
        f"  shape: {estimate.shape.describe()}; pool: {estimate.config.describe()}; "
        f"optimizer {estimate.training.optimizer} ({estimate.training.optimizer_impl}), {estimate.training.steps} step(s); "
        f"{'fake' if estimate.fake else 'REAL'} tensors",
        *(f"  source: {s}" for s in inputs.sources),
        *(f"  note: {n}" for n in estimate.notes),
        f"  peak per rank, {unit.upper()}: " + "; ".join(f"{v} = {titles[v]}" for v in variants),
        "",
    ]
    rows = []
    for rank in estimate.ranks:
        first = estimate.replay(rank, variants[0])
        rows.append(
            [str(rank), ",".join(map(str, first.stages))]
            + [size(estimate.replay(rank, v).peak.bytes) for v in variants]
        )
    lines += _render(["rank", "stages", *variants], rows)
    lines += ["", f"at each peak, {unit.upper()} per category, and where the peak is:"]
    rows = []
    for r in estimate.replays:
        rows.append(
            [str(r.rank), r.variant]
            + [size(r.at_peak[c]) for c in CATEGORIES]
            + [f"{r.wall_s:.1f}", r.peak.describe()]
        )
    lines += _render(["rank", "variant", *CATEGORIES, "wall s", "peak at"], rows)
    recv = estimate.receive_frame()
    lines += [
        "",
        "receive buffers: the replay's maximum against the analytic model (bytes; the pool adds a 0-d anchor "
        "per slot; torch 2.15 may hold one set more than the live set; per-stage maxima summed over a rank's stages "
        "bound the rank from above)",
    ]
    lines += _render(
        ["rank", "variant", "replayed", "modelled", "difference"],
        [
            [
                str(x.rank),
                x.variant,
                f"{x.replayed_bytes:,}",
                f"{x.modelled_bytes:,}",
                f"{x.difference_bytes:+,}",
            ]
            for x in recv.itertuples()
        ],
    )
    names = [f"  stage {i}: {n}" for i, n in enumerate(estimate.stage_names) if n]
    return "\n".join(lines + ["", "stages:", *names])


def _k3(args: argparse.Namespace) -> int:
    from pooltk.memory.k3_story import k3_story

    story = k3_story(device=args.capacity or "gb200")
    if args.json:
        print(json.dumps(story.to_dict(), indent=2))
        return 0
    print(
        f"Kimi-K3 2k on {story.device.name} ({story.device.gib:.2f} GiB); overhead {story.overhead.describe()}"
    )
    rows = [
        [r.claim, r.published, r.modelled, {True: "agrees", False: "differs", None: "-"}[r.agrees]]
        for r in story.rows
    ]
    print("\n".join(_render(["claim", "published", "modelled", ""], rows)))
    print(story.sentence)
    return 0


def run(args: argparse.Namespace) -> int:
    from pooltk.memory.model import MemoryModelError
    from pooltk.parity.rss import RssLaunchError

    if args.list_presets:
        print(_list_presets())
        return 0
    if args.estimate or args.k3_story:
        fields = {
            **_FIELDS,
            "model": "--model-config",
            "variants": "--variants",
            "ranks": "--ranks",
            "Training.steps": "--steps",
            "ep": "--ep",
            "split": "--split",
            "jobs": "--jobs",
        }
        try:
            return _k3(args) if args.k3_story and not args.estimate else _estimate(args)
        except (MemoryModelError, ValueError) as exc:
            return _fail(exc, fields)
    if args.list_devices:
        print(_list_devices())
        return 0
    fields = dict(_FIELDS)
    if (
        args.reference_peak_gib is not None
    ):  # a peak the user typed; a preset's published one is not a flag
        fields["reference peak"] = "--reference-peak-gib"
    try:
        if args.measure:
            return _measure(args)
        preset, model = _model(args)
        fits = _fits(args, preset, model) if args.capacity is not None else None
        compared = _compared(args) if args.compare else None
    except (MemoryModelError, ValueError) as exc:
        return _fail(exc, fields)
    except RssLaunchError as exc:
        print(f"pooltk memory: {exc}", file=sys.stderr)
        return 1
    if compared is not None:
        try:
            comparison = _compare_table(model, compared[0], compared[1], args.unit)
        except MemoryModelError as exc:
            return _fail(exc, fields)
    if args.json:
        payload = {
            "source": {
                "name": preset.name,
                "title": preset.title,
                "assumption": preset.assumption,
                "sources": list(preset.sources),
            },
            **model.to_dict(),
        }
        if compared is not None:
            payload["compare"] = {
                "name": compared[0].name,
                "assumption": compared[0].assumption,
                **compared[1].to_dict(),
            }
        if fits is not None:
            payload["fits"] = {
                "device": {
                    "name": fits.device.name,
                    "capacity_bytes": fits.device.capacity_bytes,
                    "source": fits.device.source,
                },
                "reference_stage": fits.reference_stage,
                "base_bytes": fits.base_bytes,
                "rows": fits.to_records(),
            }
        print(json.dumps(payload, indent=2))
    else:
        print(_table(preset, model, args.unit))
        if compared is not None:
            print(comparison)
        if fits is not None:
            print(_fits_table(fits, multi=model.shape.multi_stage))
    return 0


def _compared(args: argparse.Namespace) -> tuple[Any, Any]:
    """The ``--compare`` preset and its model, under this command's overrides."""
    from pooltk.memory.model import MemoryModelError
    from pooltk.studies.kimi_k3.presets import get_preset

    try:
        other = get_preset(args.compare)
    except MemoryModelError as exc:
        raise MemoryModelError(
            "--compare", found=exc.found, required=exc.required, fix=exc.fix
        ) from None
    return _model(args, other)
