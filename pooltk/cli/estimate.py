"""``pooltk estimate``: the whole stage of every rank, by replay on fake tensors.

Replays every rank's real stage modules through torch's own schedule on fake tensors
(:mod:`pooltk.memory.replay`): parameters, gradients, optimizer states, activations, receive
buffers and what the schedule keeps, per rank, for stock torch, torch 2.15's per-receive buffers,
the pool and the live set. What to replay, exactly one: ``--config`` (a config.json, an Automodel
YAML, a torchtitan TOML), ``--preset`` (a named estimate) or ``--builder
package.module:function``; pipeline flags override the file. ``--capacity`` adds a verdict with a
stated overhead (``--overhead-gib``, or one calibrated from a run's logged peak by
``--run-log``). docs/memory.md, "The whole stage".

This was ``pooltk memory --estimate``; that spelling still runs this command, saying so.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, NamedTuple

from pooltk._validate import check_number
from pooltk.cli.errors import flag_of
from pooltk.cli.memory import (
    FIELDS,
    SHAPE_FLAGS,
    add_pipeline_flags,
    add_schedule_flags,
    in_unit,
    pool_config,
    print_error,
)
from pooltk.cli.tables import Column, render

__all__ = ["register", "run"]


# ---- flags -------------------------------------------------------------------------------------


def register(parser: argparse.ArgumentParser) -> None:
    _add_source_flags(parser.add_argument_group("what to replay (one of)"))
    pipeline = parser.add_argument_group("pipeline (overrides the file)")
    add_pipeline_flags(pipeline, hidden=False, dtype_help="the model's dtype (default: the file's)")
    add_schedule_flags(pipeline)
    _add_pool_flags(parser.add_argument_group("the pooled variants"))
    _add_model_flags(parser.add_argument_group("the model and its split"))
    _add_replay_flags(parser.add_argument_group("the replay"))
    _add_verdict_flags(parser.add_argument_group("fits or OOM"))
    _add_output_flags(parser.add_argument_group("output"))


def _add_source_flags(group: Any) -> None:
    group.add_argument(
        "--preset",
        metavar="NAME",
        help="a named estimate, e.g. llama3-70b-pp8 (an unknown name lists them)",
    )
    group.add_argument(
        "--config",
        metavar="FILE",
        help="a Hugging Face config.json, an Automodel YAML or a torchtitan TOML",
    )
    group.add_argument(
        "--builder",
        metavar="MODULE:FUNC",
        help="a Python entry point build(stage, num_stages) -> StageSpec",
    )
    group.add_argument(
        "--model-config",
        metavar="FILE",
        help="the model's config.json (for a YAML or TOML without the dimensions)",
    )


def _add_pool_flags(group: Any) -> None:
    group.add_argument("--slack", type=int, help="forward ring slack (default: the file's, else 2)")
    group.add_argument(
        "--grad-slack", type=int, help="grad ring slack (default: the file's, else 1)"
    )
    group.add_argument(
        "--sharing",
        choices=("rank", "stage"),
        help="rank (the default, and the only one: the estimate replays the pool as users "
        "install it)",
    )


def _add_model_flags(group: Any) -> None:
    group.add_argument(
        "--checkpointing",
        choices=("full", "none"),
        help="activation checkpointing (default: the file's, else none)",
    )
    group.add_argument(
        "--split",
        default="automodel",
        help="layers per stage: automodel (default), torchtitan, or counts 10,11,...",
    )
    group.add_argument(
        "--ep", type=int, help="expert parallelism (experts per rank = experts / ep)"
    )


def _add_replay_flags(group: Any) -> None:
    group.add_argument(
        "--variants",
        default="stock,stock_lazy,pooled,live_set",
        help="replayed variants, comma-separated",
    )
    group.add_argument("--ranks", help="ranks to replay, comma-separated (default: all)")
    group.add_argument(
        "--optimizer",
        choices=("adamw", "sgd", "none"),
        default="adamw",
        help="optimizer stepped (default adamw)",
    )
    group.add_argument(
        "--optimizer-impl",
        choices=("fused", "foreach", "for-loop"),
        default="fused",
        help="its implementation",
    )
    group.add_argument(
        "--return-outputs",
        action="store_true",
        help="the step returns the merged outputs (torch's default; torchtitan's trainer does not)",
    )
    group.add_argument(
        "--steps", type=int, help="measured steps after the optimizer warm-up (default 1)"
    )
    group.add_argument(
        "--real",
        action="store_true",
        help="real CPU tensors instead of fake ones (small widths only: a check)",
    )
    group.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="replay this many (rank, variant) pairs at once, each in its own process (default 1)",
    )


def _add_verdict_flags(group: Any) -> None:
    group.add_argument(
        "--capacity",
        metavar="DEVICE|GIB",
        help="device (gb200, h100, ...; auto = this machine's GPU) or GiB: adds a fits verdict",
    )
    group.add_argument(
        "--overhead-gib",
        type=float,
        help="memory outside torch's tensors, GiB (default: "
        "CUDA context + NCCL, stated with sources)",
    )
    group.add_argument(
        "--run-log",
        metavar="PATH",
        help="calibrate the overhead from this run's logged peak (Automodel or torchtitan log)",
    )


def _add_output_flags(group: Any) -> None:
    group.add_argument(
        "--unit",
        choices=("gib", "gb", "mib"),
        default="gib",
        help="table unit (gib = 2**30, gb = 1e9)",
    )
    group.add_argument(
        "--json", action="store_true", help="print the estimate as JSON instead of tables"
    )


ESTIMATE_FIELDS = {
    **FIELDS,
    "model": "--model-config",
    "variants": "--variants",
    "ranks": "--ranks",
    "Training.steps": "--steps",
    "ep": "--ep",
    "split": "--split",
    "jobs": "--jobs",
}
"""Library fields this command fills from a flag ([Note: command-line errors] in
:mod:`pooltk.cli.errors`)."""


# ---- the command -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    try:
        return _estimate(args)
    except ValueError as exc:
        return print_error("estimate", exc, ESTIMATE_FIELDS)


def _estimate(args: argparse.Namespace) -> int:
    from pooltk.memory.replay.estimate import VARIANT_TITLES, estimate_memory
    from pooltk.memory.replay.run import Training

    inputs = _inputs(args)
    training = Training(
        optimizer=args.optimizer,
        optimizer_impl=args.optimizer_impl,
        steps=1 if args.steps is None else args.steps,
        return_outputs=args.return_outputs,
    )
    against = _judged_against(args)  # checked before the replay, which may take minutes
    estimate = estimate_memory(
        inputs.builder,
        inputs.shape,
        config=inputs.config,
        training=training,
        variants=[v.strip() for v in args.variants.split(",") if v.strip()],
        ranks=_csv_ints("--ranks", args.ranks),
        fake=not args.real,
        model=inputs.description,
        progress=_progress,
        jobs=args.jobs,
    )
    verdict = None if against is None else _verdict(against, estimate)
    if args.json:
        payload = {
            "inputs": {"description": inputs.description, "sources": list(inputs.sources)},
            **estimate.to_dict(),
        }
        if verdict is not None:
            payload["fits"] = verdict.to_dict()
        print(json.dumps(payload, indent=2))
        return 0
    print("\n".join(_estimate_lines(estimate, inputs, args.unit)))
    if verdict is None:
        print("\n(add --capacity gb200|h100|GIB for a fits verdict)")
    else:
        print("\n" + "\n".join(verdict.lines(VARIANT_TITLES)))
    return 0


def _progress(replay: Any) -> None:
    from pooltk.memory.fits import GIB

    print(
        f"[estimate] rank {replay.rank} {replay.variant}: "
        f"peak {replay.peak.bytes / GIB:.2f} GiB ({replay.wall_s:.1f} s)",
        file=sys.stderr,
        flush=True,
    )


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


# ---- what to replay ----------------------------------------------------------------------------


def _inputs(args: argparse.Namespace) -> Any:
    """The estimate's inputs (a named estimate, or a file or builder under the flags), with the
    pool's slack from the flags."""
    from pooltk._validate import InputError
    from pooltk.memory.replay.presets import estimate_preset
    from pooltk.studies.kimi_k3 import named_estimates

    if args.preset:
        _check_preset_alone(args)
        inputs = estimate_preset(args.preset, named_estimates()).inputs()
    else:
        inputs = _file_inputs(args)
    if args.sharing not in (None, "rank"):
        raise InputError(
            "--sharing",
            found=repr(args.sharing),
            required="rank: the estimate replays the pool as users install it",
            fix="drop --sharing (per-stage rings: `pooltk memory --sharing stage`).",
        )
    return dataclasses.replace(inputs, config=pool_config(args, inputs.config))


def _check_preset_alone(args: argparse.Namespace) -> None:
    """A named estimate fixes its model, shape and split: a flag that would change them is
    refused, not ignored (as ``pooltk memory --preset`` refuses shape flags)."""
    from pooltk._validate import InputError

    given = [
        flag
        for flag, value in (
            ("--config", args.config),
            ("--builder", args.builder),
            ("--model-config", args.model_config),
            *((flag_of(f), getattr(args, f)) for f in SHAPE_FLAGS if f != "hidden"),
            ("--schedule", args.schedule),
            ("--vpp", args.vpp),
            ("--checkpointing", args.checkpointing),
            ("--ep", args.ep),
        )
        if value is not None
    ]
    if args.split != "automodel":
        given.append("--split")
    if given:
        raise InputError(
            "--preset",
            found=f"--preset {args.preset} with {', '.join(given)}",
            required="--preset alone: a named estimate fixes its model, shape and split (the "
            "pool, replay and verdict flags apply)",
            fix=f"drop {', '.join(given)}, or drop --preset and give --config or --builder.",
        )


def _file_inputs(args: argparse.Namespace) -> Any:
    """A config file or a builder, with the pipeline flags over it."""
    from pooltk.memory.configs import Overrides
    from pooltk.memory.replay.inputs import estimate_inputs

    split: Any = args.split
    if split not in ("automodel", "torchtitan"):
        split = _csv_ints("--split", split)
    pipeline = {f: getattr(args, f) for f in SHAPE_FLAGS if f != "hidden"}
    checkpointing = None if args.checkpointing is None else args.checkpointing == "full"
    return estimate_inputs(
        args.config,
        Overrides(**pipeline, schedule=args.schedule),
        builder=args.builder,
        model_config=args.model_config,
        checkpointing=checkpointing,
        split=split,
        ep=args.ep,
        vpp=args.vpp,
    )


class _JudgedAgainst(NamedTuple):
    """What a fits verdict needs besides the replay, checked before it."""

    device: Any
    overhead: Any
    """The stated overhead (the default, or ``--overhead-gib``'s)."""
    run_log: str | None
    logged_peak: tuple[int, str] | None
    """``--run-log``'s peak bytes and its basis, to calibrate the overhead against the replay."""


def _judged_against(args: argparse.Namespace) -> _JudgedAgainst | None:
    """The device, overhead and logged peak of the fits verdict; None when none is asked for."""
    from pooltk.memory.fits import DEFAULT_OVERHEAD, GIB, Overhead, get_device
    from pooltk.memory.model import MemoryModelError

    if args.capacity is None and not args.run_log and args.overhead_gib is None:
        return None
    overhead = DEFAULT_OVERHEAD
    if args.overhead_gib is not None:
        fix = "give GiB, e.g. 2."
        check_number(
            "--overhead-gib", args.overhead_gib, zero=True, fix=fix, error=MemoryModelError
        )
        overhead = Overhead(
            cuda_context_bytes=0,
            nccl_bytes=0,
            allocator_bytes=round(args.overhead_gib * GIB),
            source="--overhead-gib",
        )
    logged = _logged_peak(args.run_log) if args.run_log else None
    device = get_device(args.capacity or "gb200")
    return _JudgedAgainst(device, overhead, args.run_log, logged)


def _logged_peak(path: str) -> tuple[int, str]:
    """A run log's peak (its largest ``mem_gib``: rank 0's, as these trainers log it), in bytes,
    and its basis."""
    from pooltk.logs import read_logs
    from pooltk.memory.fits import GIB
    from pooltk.memory.model import MemoryModelError

    table = read_logs(path).steps
    mem = table["mem_gib"].dropna() if "mem_gib" in table else None
    if mem is None or mem.empty:
        raise MemoryModelError(
            "run log",
            found=f"{path}: no peak memory column (mem_gib) in its steps",
            required="a log whose steps report peak memory",
            fix="give an Automodel or torchtitan training log.",
        )
    return round(float(mem.max()) * GIB), str(table.loc[mem.idxmax(), "mem_basis"])


def _verdict(against: _JudgedAgainst, estimate: Any) -> Any:
    """The fits verdict; with a run log, the overhead calibrated from its peak against the replay
    of the rank holding stage 0, pooled if replayed."""
    from pooltk.memory.fits import calibrated_overhead, of_estimate

    overhead = against.overhead
    if against.logged_peak is not None:
        peak_bytes, basis = against.logged_peak
        chosen = "pooled" if "pooled" in estimate.variants else "stock"
        overhead = calibrated_overhead(
            logged_peak_bytes=peak_bytes,
            basis=basis,
            estimate_peak_bytes=estimate.replay(0, chosen).peak.bytes,
            source=f"{against.run_log}, rank 0, {chosen}",
        )
    return of_estimate(estimate, against.device, overhead=overhead)


# ---- tables ------------------------------------------------------------------------------------


def _estimate_lines(estimate: Any, inputs: Any, unit: str) -> list[str]:
    """What was replayed, then the peaks, the categories at each peak and the receive check."""
    from pooltk.memory.replay.estimate import VARIANT_TITLES

    training = estimate.training
    titles = "; ".join(f"{v} = {VARIANT_TITLES[v]}" for v in estimate.variants)
    lines = [
        f"whole-stage estimate: {inputs.description}",
        f"  shape: {estimate.shape.describe()}; pool: {estimate.config.describe()}; "
        f"optimizer {training.optimizer} ({training.optimizer_impl}), {training.steps} step(s); "
        f"{'fake' if estimate.fake else 'REAL'} tensors",
        *(f"  source: {s}" for s in inputs.sources),
        *(f"  note: {n}" for n in estimate.notes),
        f"  peak per rank, {unit.upper()}: {titles}",
        "",
        *_peak_table(estimate, unit),
        "",
        f"at each peak, {unit.upper()} per category, and where the peak is:",
        *_category_table(estimate, unit),
        "",
        *_receive_table(estimate),
    ]
    names = [f"  stage {i}: {n}" for i, n in enumerate(estimate.stage_names) if n]
    return lines + ["", "stages:", *names]


def _peak_table(estimate: Any, unit: str) -> list[str]:
    """One row per rank: its stages and each variant's peak."""
    variants = estimate.variants
    records = []
    for rank in estimate.ranks:
        stages = estimate.replay(rank, variants[0]).stages
        record = {"rank": str(rank), "stages": ",".join(map(str, stages))}
        for v in variants:
            record[v] = in_unit(estimate.replay(rank, v).peak.bytes, unit)
        records.append(record)
    columns = [Column("rank"), Column("stages"), *(Column(v) for v in variants)]
    return render(records, columns, rule_under_header=True)


def _category_table(estimate: Any, unit: str) -> list[str]:
    """One row per (rank, variant): each category at the peak, the time, where the peak is."""
    from pooltk.memory.replay.tracker import CATEGORIES

    columns = [
        Column("rank"),
        Column("variant"),
        *(Column(c, text=lambda n: in_unit(n, unit)) for c in CATEGORIES),
        Column("wall_s", "wall s", text=lambda s: f"{s:.1f}"),
        Column("peak_at", "peak at"),
    ]
    records = [
        {
            "rank": replay.rank,
            "variant": replay.variant,
            **replay.at_peak,
            "wall_s": replay.wall_s,
            "peak_at": replay.peak.describe(),
        }
        for replay in estimate.replays
    ]
    return render(records, columns, rule_under_header=True)


def _receive_table(estimate: Any) -> list[str]:
    """The replay's receive-buffer maximum against the analytic model, per rank and variant."""
    columns = [
        Column("rank"),
        Column("variant"),
        Column("replayed", text="{:,}".format),
        Column("modelled", text="{:,}".format),
        Column("difference", text="{:+,}".format),
    ]
    records = []
    for replay in estimate.replays:
        replayed = replay.category_max["recv_buffers"]
        modelled = estimate.modelled_receive_bytes(replay.rank, replay.variant)
        records.append(
            {
                "rank": replay.rank,
                "variant": replay.variant,
                "replayed": replayed,
                "modelled": modelled,
                "difference": replayed - modelled,
            }
        )
    return [
        "receive buffers: the replay's maximum against the analytic model (bytes; the pool adds a "
        "0-d anchor per slot; torch 2.15 may hold one set more than the live set; per-stage maxima "
        "summed over a rank's stages bound the rank from above)",
        *render(records, columns, rule_under_header=True),
    ]
