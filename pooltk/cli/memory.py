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

``--capacity DEVICE|GIB`` adds the fits view (:func:`pooltk.memory.fits.anchored`, the tensors
alone): per stage, the peak of stock, the automodel policy, tight and the live set on that device,
anchored to a reference peak (the preset's published one, or ``--reference-peak-gib``).
``--measure`` runs stock and pooled pipelines on gloo and prints measured vs modelled saving per
stage. ``--k3-story`` prints the Kimi-K3 PR's figures beside the
model. The whole-stage estimate is ``pooltk estimate`` (:mod:`pooltk.cli.estimate`); ``pooltk
memory --estimate ...`` runs it and says so.

Every table goes through :func:`pooltk.cli.tables.render`, and nothing but ``--measure`` (gloo
runs, the lab extra) imports pandas: the torch-only install runs this command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from typing import Any

from pooltk._validate import InputError, check_number, check_output, write_output
from pooltk.cli.errors import FlagError, check_flag_int, fail, flag_of, from_lab, message
from pooltk.cli.tables import RULE, Column, render

__all__ = [
    "FIELDS",
    "SHAPE_FLAGS",
    "add_pipeline_flags",
    "add_schedule_flags",
    "in_unit",
    "pool_config",
    "print_error",
    "register",
    "run",
]

SHAPE_FLAGS = (
    "pp",
    "microbatches",
    "global_batch",
    "micro_batch",
    "dp",
    "seq_len",
    "hidden",
    "dtype",
)
"""The :class:`~pooltk.memory.configs.Overrides` fields the shape flags set."""


# ---- flags -------------------------------------------------------------------------------------


def register(parser: argparse.ArgumentParser) -> None:
    _add_source_flags(parser.add_argument_group("shape source (one of)"))
    add_pipeline_flags(parser.add_argument_group("explicit shape"), hidden=True)
    pool = parser.add_argument_group("pool and overrides")
    add_schedule_flags(pool)
    _add_pool_flags(pool)
    _add_fits_flags(parser.add_argument_group("fits or OOM"))
    _add_measure_flags(parser.add_argument_group("physical measurement"))
    _add_story_flags(parser.add_argument_group("the whole stage"))
    _add_output_flags(parser.add_argument_group("output"))


def _add_source_flags(group: Any) -> None:
    group.add_argument("--preset", metavar="NAME", help="a named shape; see --list-presets")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="an Automodel-style YAML or a Hugging Face config.json (flags override it)",
    )
    group.add_argument(
        "--list-presets", action="store_true", help="list presets with their provenance and exit"
    )
    group.add_argument(
        "--list-devices",
        action="store_true",
        help="list known device capacities with their sources and exit",
    )


def add_pipeline_flags(
    group: Any, *, hidden: bool, dtype_help: str = "boundary dtype (default bfloat16)"
) -> None:
    """The explicit shape flags (``--pp`` ... ``--dtype``); ``--hidden`` where the boundary
    needs it."""
    group.add_argument("--pp", type=int, help="pipeline-parallel size N")
    group.add_argument("--microbatches", type=int, help="microbatches per step M")
    group.add_argument(
        "--global-batch",
        type=int,
        help="global batch in rows (with --micro-batch and --dp gives M)",
    )
    group.add_argument(
        "--micro-batch", type=int, help="rows per microbatch (default 1 with --microbatches)"
    )
    group.add_argument("--dp", type=int, help="data-parallel size")
    group.add_argument("--seq-len", type=int, help="tokens per row")
    if hidden:
        group.add_argument("--hidden", type=int, help="hidden size")
    group.add_argument("--dtype", help=dtype_help)


def add_schedule_flags(group: Any) -> None:
    """``--schedule`` and ``--vpp``, as ``pooltk memory`` and ``pooltk estimate`` read them."""
    group.add_argument(
        "--schedule",
        help="1f1b (default), gpipe, or a multi-stage schedule (interleaved1f1b, loopedbfs, "
        "interleavedzerobubble, zbvzerobubble, dualpipev: pooled as schedule='auto' pools them)",
    )
    group.add_argument(
        "--vpp", type=int, help="stages per rank for a multi-stage schedule (default 2)"
    )


def _add_pool_flags(group: Any) -> None:
    group.add_argument(
        "--sharing",
        choices=("rank", "stage"),
        help="rings shared by a rank's stages (rank, default) or one per stage (stage)",
    )
    group.add_argument(
        "--allow-unpoolable",
        action="store_true",
        help="model a GPipe shape with the pool standing down",
    )
    group.add_argument(
        "--slack", type=int, help="forward ring slack (default: the source's, else 2)"
    )
    group.add_argument("--grad-slack", type=int, help="grad ring slack, tight policy (default 1)")
    group.add_argument(
        "--policy", choices=("tight", "automodel"), help="policy for the saved column"
    )
    group.add_argument(
        "--boundary-mib", type=float, help="override bytes per buffer set, in MiB (2**20)"
    )


def _add_fits_flags(group: Any) -> None:
    group.add_argument(
        "--capacity",
        metavar="DEVICE|GIB",
        help="device (gb200, h100, ...; auto = this machine's GPU) or GiB",
    )
    group.add_argument(
        "--reference-peak-gib", type=float, help="measured/published peak of the reference run, GiB"
    )
    group.add_argument(
        "--reference-variant",
        help="variant of the reference peak: pooled (default), stock, automodel, tight",
    )
    group.add_argument(
        "--reference-stage",
        type=int,
        help="stage the reference peak describes (default: the fullest)",
    )
    group.add_argument(
        "--weights-gib",
        type=float,
        help="per-GPU weights no policy can shed, GiB (checked against capacity)",
    )


def _add_measure_flags(group: Any) -> None:
    group.add_argument(
        "--measure",
        action="store_true",
        help="measure stock vs pooled peak RSS per stage on gloo (minutes)",
    )
    group.add_argument(
        "--reps", type=int, default=2, help="stock/pooled pairs per shape (default 2)"
    )
    group.add_argument(
        "--csv",
        metavar="PATH",
        help="write the raw per-rank measurements here, if every claim holds "
        "(python -m pooltk.parity.measured --check PATH re-checks one)",
    )
    group.add_argument("--steps", type=int, help="steps per launch (default 2)")


def _add_story_flags(group: Any) -> None:
    group.add_argument(
        "--k3-story",
        action="store_true",
        help="print the Kimi-K3 story: the PR's OOM and headroom beside the model",
    )
    group.add_argument(
        "--estimate",
        action="store_true",
        help="moved: the whole-stage estimate is `pooltk estimate` (this flag runs it, saying so)",
    )


def _add_output_flags(group: Any) -> None:
    group.add_argument(
        "--unit",
        choices=("gib", "gb", "mib"),
        default="gib",
        help="table unit (gib = 2**30, gb = 1e9)",
    )
    group.add_argument(
        "--compare",
        metavar="PRESET",
        help="another preset beside this one, per stage (rank), with the difference",
    )
    group.add_argument(
        "--json", action="store_true", help="print the model as JSON instead of a table"
    )


# ---- errors ------------------------------------------------------------------------------------

FIELDS = {
    "RssSpec.microbatches": "--microbatches",
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
"""Library fields this command fills from a flag, always ([Note: command-line errors] in
:mod:`pooltk.cli.errors`)."""


def print_error(command: str, exc: BaseException, fields: Mapping[str, str]) -> int:
    """Print ``pooltk <command>: error: <message>`` in flags, never library fields; return 2."""
    return fail(command, _flags_in(message(exc, fields)))


def _flags_in(message: str) -> str:
    """The library names overrides as fields (``Overrides.seq_len``); the command line names its
    flags."""
    return re.sub(r"Overrides\.([a-z_]+)", lambda m: flag_of(m.group(1)), message)


# ---- the command -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.list_presets:
        print(_list_presets())
        return 0
    if args.estimate:
        # `pooltk memory --estimate` is forwarded before parsing (pooltk.cli.main); an
        # abbreviation of the flag is not, and is told where the estimate went
        moved = FlagError(
            "--estimate",
            found="`pooltk memory --estimate`",
            required="`pooltk estimate` (the whole-stage estimate's own command)",
            fix="run `pooltk estimate` with the same flags, without --estimate.",
        )
        return print_error("memory", moved, FIELDS)
    if args.k3_story:
        try:
            return _k3_story(args)
        except ValueError as exc:
            return print_error("memory", exc, FIELDS)
    if args.list_devices:
        print(_list_devices())
        return 0
    return _model_command(args)


def _model_command(args: argparse.Namespace) -> int:
    """The model (and its fits, and another preset beside it) as tables or JSON."""
    fields = dict(FIELDS)
    if args.reference_peak_gib is not None:  # a peak the user typed; a preset's is not a flag
        fields["reference peak"] = "--reference-peak-gib"
    if args.measure:
        return _measure(args)
    try:
        preset, model = _model(args)
        fits = _fits(args, preset, model) if args.capacity is not None else None
        compared = _compared(args) if args.compare else None
        comparison = _compare_lines(model, *compared, args.unit) if compared else []
    except ValueError as exc:
        return print_error("memory", exc, fields)
    if args.json:
        print(json.dumps(_payload(preset, model, compared, fits), indent=2))
        return 0
    print(_model_table(preset, model, args.unit))
    if comparison:
        print("\n".join(comparison))
    if fits is not None:
        print(_fits_table(fits))
    return 0


def _payload(preset: Any, model: Any, compared: Any, fits: Any) -> dict[str, Any]:
    """What ``--json`` prints: the source, the model, the compared preset and the fits."""
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
        other_preset, other_model = compared
        payload["compare"] = {
            "name": other_preset.name,
            "assumption": other_preset.assumption,
            **other_model.to_dict(),
        }
    if fits is not None:
        payload["fits"] = fits.to_dict()
    return payload


def _study(flag: str) -> Any:
    """The Kimi-K3 study (its presets and story: torch-only at import), for ``flag``."""
    return from_lab("pooltk.studies.kimi_k3", flag=flag)


# ---- the model ---------------------------------------------------------------------------------


def _source(args: argparse.Namespace) -> Any:
    """The Preset the arguments describe (preset, config file with flag overrides, or flags)."""
    from pooltk.memory.configs import Overrides, load_config, load_overrides
    from pooltk.memory.model import MemoryModelError

    explicit = [flag_of(f) for f in SHAPE_FLAGS if getattr(args, f) is not None]
    chosen = [name for name, on in (("--preset", args.preset), ("--config", args.config)) if on]
    if len(chosen) > 1 or (args.preset and explicit) or not (chosen or explicit):
        shape_flags = [f"shape flags ({' '.join(explicit)})"] if explicit else []
        raise MemoryModelError(
            "shape source",
            found=" and ".join(chosen + shape_flags) or "none",
            required="exactly one of --preset, --config (shape flags may override it), "
            "or explicit shape flags",
            fix="e.g. `pooltk memory --preset kimi-k3-gb200-2k-calibrated`, --config FILE "
            "--hidden 7168, or --pp 8 --microbatches 64 --seq-len 2048 --hidden 7168.",
        )
    if args.preset:
        return _study("--preset").get_preset(args.preset)
    overrides = Overrides(**{f: getattr(args, f) for f in SHAPE_FLAGS}, schedule=args.schedule)
    return load_config(args.config, overrides) if args.config else load_overrides(overrides)


def _model(args: argparse.Namespace, preset: Any = None) -> tuple[Any, Any]:
    """The preset (``--preset``, ``--config`` or flags) and its model under the overrides."""
    from pooltk.memory.model import model_memory

    preset = _source(args) if preset is None else preset
    config = pool_config(args, preset.config)  # first: a bad slack is the error a user sees first
    shape = _shape(args, preset.shape)
    model = model_memory(
        shape,
        _boundaries(args, preset, shape),
        config,
        policy=preset.policy if args.policy is None else args.policy,
        sharing="rank" if args.sharing is None else args.sharing,
        unpoolable="stock" if args.allow_unpoolable else "error",
    )
    return preset, model


def pool_config(args: argparse.Namespace, base: Any) -> Any:
    """A :class:`~pooltk.config.PoolConfig` of ``base``'s slacks, ``--slack`` and ``--grad-slack``
    where given."""
    from pooltk.config import PoolConfig

    return PoolConfig(
        slack=base.slack if args.slack is None else args.slack,
        grad_slack=base.grad_slack if args.grad_slack is None else args.grad_slack,
    )


def _shape(args: argparse.Namespace, shape: Any) -> Any:
    """The source's shape under ``--schedule`` and ``--vpp``."""
    from pooltk.analysis.catalog import schedule_key

    changes: dict[str, Any] = {}
    if args.schedule is not None and shape.schedule != schedule_key(args.schedule):
        changes["schedule"] = args.schedule
        changes["stages_per_rank"] = None  # the new schedule's own, unless --vpp says
    if args.vpp is not None:
        changes["stages_per_rank"] = args.vpp
    return dataclasses.replace(shape, **changes) if changes else shape


def _boundaries(args: argparse.Namespace, preset: Any, shape: Any) -> Any:
    """The preset's boundaries for ``shape``, or one opaque set of ``--boundary-mib``."""
    from pooltk.memory.model import Boundary, MemoryModelError

    if args.boundary_mib is None:
        return preset.boundaries_for(shape)
    fix = "give MiB per buffer set, e.g. 416."
    check_number("--boundary-mib", args.boundary_mib, fix=fix, error=MemoryModelError)
    return Boundary.opaque(round(args.boundary_mib * 2**20), name="boundary_override")


def in_unit(n_bytes: float, unit: str) -> str:
    """One format for every byte cell of ``pooltk memory``'s and ``pooltk estimate``'s tables."""
    from pooltk.memory.units import to_unit

    return f"{to_unit(n_bytes, unit):,.2f}"


# ---- the stage table ---------------------------------------------------------------------------

# The columns `pooltk memory` prints, in order: what torch holds (<= 2.14, >= 2.15, >= 2.15 with
# pooltk's release), the two ring policies, and the live set no pool can go below.
_SHOWN = ("stock", "stock_lazy", "lazy_released", "automodel", "tight", "live_set")


def _model_table(preset: Any, model: Any, unit: str) -> str:
    from pooltk.memory.model import VARIANT_LABELS

    multi = model.shape.multi_stage
    saved = "saved (per-stage auto rings)" if multi else f"saved ({model.policy})"
    columns = [
        Column("stage"),
        *(Column(v, VARIANT_LABELS[v]) for v in _SHOWN),
        Column("saved", saved),
    ]
    lines = _model_lines(preset, model, unit)
    lines += render(_stage_records(model, unit), columns, rule_under_header=True)
    if multi:
        lines += ["", *_rank_table(model, unit)]
    else:
        lines.append(
            "  one stage per rank: each rank holds its stage's row "
            "(rank-shared rings = the per-stage rings)"
        )
    return "\n".join(lines)


def _model_lines(preset: Any, model: Any, unit: str) -> list[str]:
    """What the stage table is of: the shape, boundaries, config, assumption and units."""
    config = model.config
    auto = model.shape.pool_mode == "auto"
    unpoolable = "  (schedule cannot be pooled: every ring column is stock)"
    bytes_per_unit = {"gib": "2**30", "mib": "2**20"}.get(unit, "1e9")
    lines = [
        preset.title,
        f"  shape: {model.shape.describe()}"
        + (
            f"; pooled as install(schedule='auto') pools it, sharing={model.sharing}"
            if auto
            else ""
        ),
        *_boundary_lines(model),
        f"  config: policy={model.policy} slack={config.slack} grad_slack={config.grad_slack}"
        + ("" if model.pool_active else unpoolable),
        f"  assumption: {preset.assumption}",
        f"  sets are forward+grad per stage; memory in {unit.upper()} ({bytes_per_unit} bytes)",
        "  stock: torch <= 2.14 (M sets up front); stock-lazy: torch >= 2.15 (the live set, all M "
        "forward on the last stage); lazy-released: 2.15 with pooltk's last-stage release",
    ]
    if model.shape.multi_stage:
        lines.append(
            "  automodel: Automodel's released pool pools 1F1B only (stock here); tight / saved: "
            "per-stage rings; a (local) stage is fed by a same-rank handoff: no receive buffer, "
            "but M in stock torch <= 2.14"
        )
    return lines + [""]


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


def _stage_records(model: Any, unit: str) -> list[dict[str, str] | None]:
    """One record per stage (sets forward+grad = bytes per variant), then the total and peak."""
    records: list[dict[str, str] | None] = []
    for stage in range(model.shape.num_stages):
        forward, grad = model.row(stage, "forward"), model.row(stage, "grad")
        record = {"stage": _stage_label(stage, forward, grad, model.shape.multi_stage)}
        for v in _SHOWN:
            stage_bytes = in_unit(model.stage_bytes(stage, v), unit)
            record[v] = f"{forward.sets(v)}+{grad.sets(v)} = {stage_bytes}"
        record["saved"] = in_unit(model.saved_bytes(stage), unit)
        records.append(record)
    saved_in_all = model.total_bytes("stock") - model.total_bytes("pooled")
    total = {v: in_unit(model.total_bytes(v), unit) for v in _SHOWN}
    peak = {v: in_unit(model.peak_stage_bytes(v), unit) for v in _SHOWN}
    records.append(RULE)
    records.append({"stage": "total", **total, "saved": in_unit(saved_in_all, unit)})
    records.append({"stage": "peak stage", **peak, "saved": ""})
    return records


def _stage_label(stage: int, forward: Any, grad: Any, multi: bool) -> str:
    """``3``, or under a multi-stage schedule ``3 (r1)`` / ``3 (r1, local)`` (a handoff)."""
    if not multi:
        return f"{stage}"
    local = ", local" if forward.handoff or grad.handoff else ""
    return f"{stage} (r{forward.rank}{local})"


# ---- the rank table ----------------------------------------------------------------------------

# The rank table: the per-stage variants summed over a rank's stages, then the rank-level ones.
_RANK_SHOWN = ("stock", "stock_lazy", "tight", "live_set", "shared", "rank_live")


def _rank_table(model: Any, unit: str) -> list[str]:
    from pooltk.memory.model import VARIANT_LABELS

    columns = [
        Column("rank"),
        Column("stages"),
        *(Column(v, VARIANT_LABELS[v]) for v in _RANK_SHOWN),
        Column("saved", f"saved (sharing={model.sharing})"),
        Column("rings", "rings: dir stages: live->K"),
    ]
    peak = {v: in_unit(model.peak_rank_bytes(v), unit) for v in _RANK_SHOWN}
    records = [_rank_record(model, rank, unit) for rank in range(model.shape.pp)]
    records += [RULE, {"rank": "peak rank", "stages": "", **peak, "saved": "", "rings": ""}]
    return [
        f"per rank, {unit.upper()}: a rank holds all its stages; rank-shared: one ring per (rank, "
        "direction, boundary tensors), K = the rank's live set + slack; rank live: that live set. "
        "Rank-shared rings have no per-stage share (a slot serves whichever stage receives next): "
        "they are shown per rank only.",
        *render(records, columns, rule_under_header=True),
    ]


def _rank_record(model: Any, rank: int, unit: str) -> dict[str, str]:
    """One rank: its stages, each variant's bytes, what it saves and its rings."""
    rings = " ".join(
        f"{ring.direction[0]}{'+'.join(map(str, ring.stages))}:{ring.live}->{ring.size}"
        for ring in model.rank_rings(rank)
    )
    saved = model.rank_bytes(rank, "stock") - model.rank_bytes(rank, "pooled")
    return {
        "rank": str(rank),
        "stages": ",".join(map(str, model.rank_stages(rank))),
        **{v: in_unit(model.rank_bytes(rank, v), unit) for v in _RANK_SHOWN},
        "saved": in_unit(saved, unit),
        "rings": rings,
    }


# ---- another preset beside this one -----------------------------------------------------------


def _compared(args: argparse.Namespace) -> tuple[Any, Any]:
    """The ``--compare`` preset and its model, under this command's overrides."""
    from pooltk.memory.model import MemoryModelError

    try:
        other = _study("--compare").get_preset(args.compare)
    except MemoryModelError as exc:
        raise MemoryModelError(
            "--compare", found=exc.found, required=exc.required, fix=exc.fix
        ) from None
    return _model(args, other)


def _compare_lines(model: Any, other_preset: Any, other: Any, unit: str) -> list[str]:
    """Stock and pooled per stage (per rank when they differ) of two models of one pipeline,
    with the difference."""
    from pooltk.memory.model import MemoryModelError

    if (other.shape.pp, other.shape.num_stages) != (model.shape.pp, model.shape.num_stages):
        raise MemoryModelError(
            "--compare",
            found=f"{other_preset.name}: {other.shape.describe()}",
            required=f"the same pipeline ({model.shape.describe()})",
            fix="compare presets of one pipeline shape.",
        )
    what = "rank" if model.shape.multi_stage else "stage"
    columns = [Column("at", what)]
    for variant in ("stock", "pooled"):
        columns += [
            Column(variant),
            Column(f"{variant} (other)"),
            Column(f"{variant} difference", "difference"),
        ]
    count = model.shape.pp if what == "rank" else model.shape.num_stages
    records = [_compare_record(model, other, what, at, unit) for at in range(count)]
    return [
        "",
        f"beside {other_preset.name} (other), {unit.upper()}, per {what}; "
        "difference = this - other:",
        *render(records, columns, rule_under_header=True),
    ]


def _compare_record(model: Any, other: Any, what: str, at: int, unit: str) -> dict[str, str]:
    """One stage (or rank) of both models: stock and pooled bytes and their differences."""
    record = {"at": str(at)}
    for variant in ("stock", "pooled"):
        mine = getattr(model, f"{what}_bytes")(at, variant)  # rank_bytes or stage_bytes
        theirs = getattr(other, f"{what}_bytes")(at, variant)
        record[variant] = in_unit(mine, unit)
        record[f"{variant} (other)"] = in_unit(theirs, unit)
        record[f"{variant} difference"] = in_unit(mine - theirs, unit)
    return record


# ---- listings ----------------------------------------------------------------------------------


def _list_presets() -> str:
    out = []
    for p in _study("--list-presets").PRESETS.values():
        where = "boundaries differ per stage; the first: " if p.varies else ""
        out.append(f"{p.name}\n  {p.title}\n  {p.shape.describe()}; {where}{p.boundary.describe()}")
        out.append(f"  assumption: {p.assumption}")
        for f in p.figures:
            out.append(f"  [{f.kind}] {f.name} = {f.value:g} {f.unit}  <- {f.source}")
        out.append("")
    return "\n".join(out).rstrip()


def _list_devices() -> str:
    from pooltk.memory.fits import DEVICES

    return "\n".join(f"{d.name:14} {d.gib:8.2f} GiB  <- {d.source}" for d in DEVICES.values())


# ---- fits or OOM -------------------------------------------------------------------------------


def _fits(args: argparse.Namespace, preset: Any, model: Any) -> Any:
    """The verdict on ``--capacity`` of the tensors alone, anchored to the reference peak."""
    from pooltk.memory.fits import anchored

    reference = _reference(args, preset, model)
    own_run = {}
    if args.reference_peak_gib is None and model.shape != preset.shape:
        # the published peak is of the preset's own run
        own_run = {
            "reference_shape": preset.shape,
            "reference_boundaries": preset.boundaries_for(preset.shape),
        }
    return anchored(model, args.capacity, reference, overhead=None, **own_run)


def _reference(args: argparse.Namespace, preset: Any, model: Any) -> Any:
    """The reference peak: ``--reference-peak-gib``, else the preset's published one."""
    from pooltk.memory.fits import ReferencePeak, published_peak
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
        fix = "give GiB per GPU, e.g. 60."
        check_number("--weights-gib", args.weights_gib, fix=fix, error=MemoryModelError)
        kwargs["weights_bytes"] = round(args.weights_gib * 2**30)
    return ReferencePeak.from_gib(gib, stage=args.reference_stage, source=source, **kwargs)


def _fits_table(verdict: Any) -> str:
    """The anchored verdict: the device, the reference, each stage's (rank's) peaks, the fullest."""
    from pooltk.memory.model import VARIANT_LABELS

    reference, where = verdict.reference, verdict.per
    lines = [
        "",
        f"fits on {verdict.device.name}: {verdict.device.gib:.2f} GiB ({verdict.device.source})",
        f"  reference: {reference.peak_bytes / 2**30:.2f} GiB peak of {reference.variant} "
        f"(slack {reference.config.slack}, {reference.policy}) on {where} "
        f"{verdict.reference_stage} of its own run; {reference.source}",
        f"  assumed: every stage holds the same {verdict.base_bytes / 2**30:.2f} GiB besides "
        "receive buffers (see pooltk.memory.fits, [Note: the fits model])",
        "",
    ]
    columns = [Column("at", where), *(Column(v, VARIANT_LABELS[v]) for v in verdict.variants)]
    lines += render(_fits_records(verdict), columns, rule_under_header=True)
    lines.append("  peak GiB, fits (ok) or not (OOM), margin GiB = capacity - peak")
    width = max(len(VARIANT_LABELS[v]) for v in verdict.variants)
    for v, text in verdict.summary().items():
        lines.append(f"  {VARIANT_LABELS[v]:{width}} fullest {text}")
    return "\n".join(lines)


def _fits_records(verdict: Any) -> list[dict[str, str]]:
    """One record per stage (rank): each variant's peak, whether it fits, and the margin."""
    records: dict[int, dict[str, str]] = {}
    for row in verdict.rows:
        fits = "ok" if row.fits else "OOM"
        cell = f"{row.tensor_bytes / 2**30:,.2f} {fits} {row.margin_bytes / 2**30:+,.2f}"
        records.setdefault(row.rank, {"at": str(row.rank)})[row.variant] = cell
    return [records[rank] for rank in sorted(records)]


# ---- the Kimi-K3 story -------------------------------------------------------------------------


def _k3_story(args: argparse.Namespace) -> int:
    story = _study("--k3-story").k3_story(device=args.capacity or "gb200")
    if args.json:
        print(json.dumps(story.to_dict(), indent=2))
        return 0
    print(
        f"Kimi-K3 2k on {story.device.name} ({story.device.gib:.2f} GiB); "
        f"overhead {story.overhead.describe()}"
    )
    agreement = {True: "agrees", False: "differs", None: "-"}
    columns = [
        Column("claim"),
        Column("published"),
        Column("modelled"),
        Column("agrees", "", text=agreement.__getitem__),
    ]
    print("\n".join(render(story.records(), columns, rule_under_header=True)))
    print(story.sentence)
    return 0


# ---- measured ----------------------------------------------------------------------------------


def _measure(args: argparse.Namespace) -> int:
    try:
        measured = from_lab("pooltk.parity.measured", flag="--measure", needs=("pandas",))
        rss = from_lab("pooltk.parity.rss", flag="--measure")
        specs, config = _measured_shapes(args, measured, rss.RssSpec)
        csv_path = check_output("--csv", args.csv) if args.csv else None
    except ValueError as exc:
        return print_error("memory", exc, FIELDS)
    try:
        launches = rss.measure_rss(
            specs,
            config,
            reps=args.reps,
            progress=lambda m: print(f"[measure] {m}", file=sys.stderr, flush=True),
        )
    except rss.RssLaunchError as exc:
        return fail("memory", exc, code=1)
    frame = measured.launches_frame(launches)
    table = measured.measured_vs_modelled(frame)
    if args.json:
        print(table.to_json(orient="records", indent=2))
    else:
        print(measured.format_comparison(table))
    broken = measured.check_measurement(frame, shapes=[s.label() for s in specs])
    if broken:
        what = measured.refusal(broken, what="the measurement", unwritten=args.csv)
        return fail("memory", what, code=1)
    if csv_path is not None:
        try:
            write_output("--csv", csv_path, lambda path: measured.write_measured(frame, path))
        except InputError as exc:
            return fail("memory", exc, code=1)
    return 0


_MEASURE_SHAPE = {
    "pp": "pp",
    "microbatches": "microbatches",
    "seq_len": "seq_len",
    "hidden": "hidden",
    "micro_batch": "rows_per_microbatch",
}
"""The shape flags ``--measure`` takes: argparse name -> :class:`~pooltk.parity.rss.RssSpec`
field (a flag left out keeps the spec's default)."""


def _measured_shapes(
    args: argparse.Namespace, measured: Any, spec_type: Any
) -> tuple[list[Any], Any]:
    """The shapes ``--measure`` launches (the flags' one, else the shipped ones) and the pool,
    each shape one resident memory can judge (``measured``: :mod:`pooltk.parity.measured`)."""
    from pooltk.config import PoolConfig
    from pooltk.memory.model import MemoryModelError

    if args.policy not in (None, "tight"):  # the ranks install the pool as users do: the tight rule
        raise MemoryModelError(
            "--policy",
            found=f"{args.policy} with --measure",
            required="tight (what pooltk.install pools with)",
            fix="drop --policy.",
        )
    given = {name: getattr(args, name) for name in (*_MEASURE_SHAPE, "steps")}
    for name, value in given.items():  # a flag given is used as given: 0 is refused, not a default
        if value is not None:
            low = 2 if name == "pp" else 1
            fix = f"{low} or more, or leave it out (the shipped shapes' value)."
            check_flag_int(flag_of(name), value, low=low, fix=fix)
    shape = {_MEASURE_SHAPE[n]: v for n, v in given.items() if n != "steps" and v is not None}
    steps = {} if args.steps is None else {"steps": args.steps}
    specs = [spec_type(**shape, **steps)] if shape else measured.default_specs(**steps)
    check_flag_int("--reps", args.reps, low=1, fix="give the stock/pooled pairs per shape, e.g. 2.")
    config = pool_config(args, PoolConfig())
    for spec in specs:
        measured.check_measurable(spec, config)
    return specs, config
