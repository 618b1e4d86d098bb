"""The parity check's command-line form, shared by ``pooltk parity`` and the torchrun entry.

``python -m pooltk.parity`` (:func:`torchrun_main`) is what multi-node users run under their own
launcher: torchrun sets RANK / WORLD_SIZE / MASTER_*; this joins with ``env://`` (NCCL when CUDA
is available, else gloo), runs the same variants as ``pooltk parity`` on this rank's stage,
gathers on rank 0, and rank 0 prints the report (``--json`` for machine-readable). Exit status 1
on every rank unless bitwise equal.

[Note: a rank's clean exit]
Under ``torchrun`` a rank ends by running Python's finalization, so every gloo worker thread
must be gone before it starts. torch's ``ProcessGroupGloo`` joins its threads only when the
C++ group object dies; ``destroy_process_group`` merely drops torch's own references to it. If
anything else still holds the group, its ``pt_gloo_runloop`` threads live on into finalization,
where a thread releasing a finished work's tensors takes the GIL, Python ends that thread with
``pthread_exit``, the forced unwind meets a ``noexcept`` destructor and the rank aborts:
``terminate called without an active exception`` (SIGABRT; torchrun then SIGTERMs the other
ranks). Measured cause in this entry: ``torch.distributed.nn.functional`` writes
``group=group.WORLD`` as a default argument, so importing it *after* ``init_process_group``
(``torch.distributed.pipelining`` imports it through ``fsdp`` and ``_shard``) keeps the live
default group in a function default for the life of the process. Hence: every torch module the
ranks use is imported before the group exists (:func:`_import_before_group`), the group is
destroyed with nothing of ours holding it, and :func:`group_threads_left` checks that no gloo thread
survived (a rank says so on stderr, naming the cause; tests/dist holds every rank to a clean
exit).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

__all__ = [
    "FIELDS",
    "check_args",
    "group_threads_left",
    "register",
    "spec_from_args",
    "torchrun_main",
]

_GLOO_THREADS = ("pt_gloo_runloop", "gloo_tcp_loop")
"""Thread names (``/proc/self/task/*/comm``) of a live gloo process group."""


def register(parser: argparse.ArgumentParser) -> None:
    _shape_flags(parser.add_argument_group("shape"))
    _pool_flags(parser.add_argument_group("pool"))
    o = parser.add_argument_group("output")
    o.add_argument(
        "--json", action="store_true", help="machine-readable report (top-level bitwise_equal)"
    )
    o.add_argument(
        "--timeout", type=float, default=120.0, help="wall-clock bound in seconds (default 120)"
    )


def _shape_flags(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--pp", type=int, default=4, help="pipeline stages = ranks (default 4)")
    g.add_argument(
        "--microbatches", type=int, default=16, help="microbatches per step (default 16)"
    )
    g.add_argument("--steps", type=int, default=3, help="optimizer steps per variant (default 3)")
    g.add_argument(
        "--hidden", type=int, default=64, help="hidden size of the toy model (default 64)"
    )
    g.add_argument("--seq-len", type=int, default=8, help="tokens per row (default 8)")
    g.add_argument("--rows", type=int, default=2, help="rows per microbatch (default 2)")
    g.add_argument(
        "--vpp",
        type=int,
        default=None,
        help="stages per rank for multi-stage schedules (Interleaved1F1B, ZBVZeroBubble, ...; "
        "default 2 for those, 1 for single-stage schedules)",
    )


def _pool_flags(p: argparse._ArgumentGroup) -> None:
    p.add_argument(
        "--slack", type=int, default=2, help="forward ring sets beyond the live set (default 2)"
    )
    p.add_argument(
        "--grad-slack", type=int, default=1, help="grad ring sets beyond the live set (default 1)"
    )
    p.add_argument(
        "--policy",
        default="tight",
        choices=["tight", "automodel"],
        help="ring sizing: pooltk's live set + slack, or Automodel's pool's formula (default "
        "tight)",
    )
    p.add_argument(
        "--schedule",
        default="1F1B",
        help="torch schedule name, case-insensitive (default 1F1B; any other is kept stock unless "
        "--auto or --force)",
    )
    p.add_argument(
        "--auto",
        action="store_true",
        help="pool any schedule pooltk can analyse, rings from its own action order "
        "(pooltk.install(schedule='auto'))",
    )
    p.add_argument(
        "--sharing",
        default="rank",
        choices=["rank", "stage"],
        help="multi-stage schedules: one ring per rank and direction, or one per stage (default "
        "rank)",
    )
    p.add_argument("--frontend", default="manual", choices=["manual", "tracing", "both"])
    p.add_argument(
        "--force", action="store_true", help="pool even if the schedule is not allowlisted"
    )
    p.add_argument(
        "--no-guard",
        action="store_true",
        help="turn the overrun guard off (shows silent corruption)",
    )
    p.add_argument(
        "--shortfall",
        type=int,
        default=0,
        help="experiments: forward ring this many sets below the policy (needs --force)",
    )
    p.add_argument(
        "--eval-between-steps", action="store_true", help="run schedule.eval after each step"
    )


FIELDS = {
    "Harness.slack": "--slack",
    "Harness.grad_slack": "--grad-slack",
    "Harness.forward_shortfall": "--shortfall",
    "Harness.policy": "--policy",
    "Harness.sharing": "--sharing",
    "PoolConfig.slack": "--slack",
    "PoolConfig.grad_slack": "--grad-slack",
}
"""Library fields these flags set, for re-wording an error that names a field ([Note: command-line
errors])."""


def check_args(args: argparse.Namespace) -> None:
    """Check every flag before a library object is built, so the error names the flag and a fix in
    flag terms.

    Raises :class:`pooltk._validate.InputError` whose ``what`` is the flag (``--pp``).
    """
    from pooltk._validate import check_int, check_number

    check_int(
        "--pp",
        args.pp,
        low=2,
        fix="--pp 2 or more (one gloo rank per stage; --pp 4 is the default).",
    )
    check_int(
        "--microbatches",
        args.microbatches,
        low=1,
        fix=f"--microbatches {args.pp} or more (1F1B needs at least one per stage).",
    )
    for flag, value in (
        ("--steps", args.steps),
        ("--hidden", args.hidden),
        ("--seq-len", args.seq_len),
        ("--rows", args.rows),
    ):
        check_int(flag, value, low=1, fix=f"{flag} 1 or more (the default is a good start).")
    for flag, value, fix in (
        ("--slack", args.slack, "--slack 0 for the live-set limit, or 2 (the default)."),
        (
            "--grad-slack",
            args.grad_slack,
            "--grad-slack 0 for the live-set limit, or 1 (the default).",
        ),
        (
            "--shortfall",
            args.shortfall,
            "leave it at 0 (it builds undersized rings for negative controls, with --force).",
        ),
    ):
        check_int(flag, value, low=0, fix=fix)
    _check_shortfall(args)
    fix = "--timeout 120 (the default) or more for big shapes."
    check_number("--timeout", args.timeout, required="a finite number of seconds > 0", fix=fix)
    _check_schedule(args)


def _check_shortfall(args: argparse.Namespace) -> None:
    """``--shortfall`` builds a ring below the live set only with ``--force`` (every rank's install
    refused it, naming ``force=True``)."""
    from pooltk._validate import InputError

    if args.shortfall and not args.force:
        raise InputError(
            "--shortfall",
            found=f"{args.shortfall} without --force",
            required="--force: a forward ring below the live set is a negative control",
            fix="add --force, or leave --shortfall at 0.",
        )


def _check_schedule(args: argparse.Namespace) -> None:
    """``--schedule`` names a torch schedule, and ``--vpp`` suits it."""
    from torch.distributed.pipelining.schedules import get_schedule_class

    from pooltk._validate import InputError
    from pooltk.analysis.catalog import CATALOG

    try:
        cls = get_schedule_class(args.schedule)
    except ValueError:
        raise InputError(
            "--schedule",
            found=repr(args.schedule),
            required="a torch schedule name, one of " + ", ".join(CATALOG),
            fix="--schedule 1F1B (the default); other schedules are kept stock "
            "unless --auto or --force is given.",
        ) from None
    _check_stages_per_rank(args, cls)


def _check_stages_per_rank(args: argparse.Namespace, cls: type) -> None:
    """``--vpp`` against the schedule's kind, then the whole shape against torch's own constructor.

    Sets ``args.vpp`` where it was left to its default (2 for a multi-stage schedule, else 1), so a
    shape torch refuses is named here, in flag terms, and not by a rank's traceback.
    """
    from pooltk._validate import InputError, check_int
    from pooltk.analysis.catalog import is_single_stage, schedule_key, v_schedules

    single = is_single_stage(cls)
    if args.vpp is None:
        args.vpp = 1 if single else 2
    check_int("--vpp", args.vpp, low=1, fix="--vpp 2 for a multi-stage schedule, or leave it out.")
    if single and args.vpp != 1:
        raise InputError(
            "--vpp",
            found=f"{args.vpp} with --schedule {args.schedule}",
            required=f"1: {cls.__name__} runs one stage per rank",
            fix="leave --vpp out, or choose a multi-stage schedule (--schedule Interleaved1F1B).",
        )
    v_shape = schedule_key(cls) in {schedule_key(name) for name in v_schedules()}
    if not single and (args.vpp < 2 or (v_shape and args.vpp != 2)):
        raise InputError(
            "--vpp",
            found=f"{args.vpp} with --schedule {args.schedule}",
            required=f"exactly 2: {cls.__name__} runs two stages per rank, in a V"
            if v_shape
            else f"2 or more: {cls.__name__} runs several stages per rank",
            fix="--vpp 2 (the default for multi-stage schedules).",
        )
    if args.vpp > 1 and args.frontend != "manual":
        raise InputError(
            "--frontend",
            found=f"{args.frontend!r} with --vpp {args.vpp}",
            required="'manual': the tracing frontend splits one model into one stage per rank",
            fix="--frontend manual (the default) for multi-stage schedules.",
        )
    _check_shape_builds(args)


def _check_shape_builds(args: argparse.Namespace) -> None:
    """The whole shape against torch's own constructor, named as ``--microbatches``."""
    from pooltk._validate import InputError
    from pooltk.analysis.catalog import ScheduleAnalysisError
    from pooltk.analysis.programs import program

    try:
        program(
            args.schedule, pp=args.pp, n_microbatches=args.microbatches, stages_per_rank=args.vpp
        )
    except ScheduleAnalysisError as exc:
        raise InputError(
            "--microbatches",
            found=f"{args.microbatches} with --schedule {args.schedule} "
            f"--pp {args.pp} --vpp {args.vpp}",
            required=f"a shape torch builds ({exc})",
            fix=f"--microbatches {2 * args.pp * args.vpp} (two per stage), or another --pp/--vpp.",
        ) from None


def spec_from_args(args: argparse.Namespace):
    from pooltk.parity import ParitySpec, default_variants
    from pooltk.parity.experiments import Harness

    config = Harness(
        slack=args.slack,
        grad_slack=args.grad_slack,
        policy=args.policy,
        guard=not args.no_guard,
        forward_shortfall=args.shortfall,
        sharing=args.sharing,
    )
    frontends = ("manual", "tracing") if args.frontend == "both" else (args.frontend,)
    variants = default_variants(
        [config],
        frontends=frontends,
        schedule=args.schedule,
        force=args.force,
        eval_between_steps=args.eval_between_steps,
        stages_per_rank=args.vpp or 1,
        install_schedule="auto" if args.auto else None,
    )
    return ParitySpec(
        pp=args.pp,
        microbatches=args.microbatches,
        steps=args.steps,
        hidden=args.hidden,
        seq_len=args.seq_len,
        rows_per_microbatch=args.rows,
        timeout_s=args.timeout,
        variants=variants,
    )


def _import_before_group() -> None:
    """Import every torch module the ranks use while no process group exists (see [Note: a rank's
    clean exit])."""
    # (binds group.WORLD as a default argument at import)
    import torch.distributed.nn.functional  # noqa: F401
    import torch.distributed.pipelining  # noqa: F401
    import torch.distributed.pipelining.schedules  # noqa: F401


def group_threads_left() -> list[str]:
    """Names of gloo process-group threads still running in this process (``[]`` where ``/proc`` is
    absent)."""
    import gc

    gc.collect()  # a work object in a reference cycle may still hold the group
    task = "/proc/self/task"
    if not os.path.isdir(task):
        return []
    names = []
    for tid in os.listdir(task):
        try:
            with open(os.path.join(task, tid, "comm"), encoding="utf-8") as fh:
                name = fh.read().strip()
        except OSError:  # the thread ended while we looked
            continue
        if name.startswith(_GLOO_THREADS):
            names.append(name)
    return sorted(names)


def torchrun_main(argv: list[str] | None = None) -> int:
    import torch.distributed as dist

    _import_before_group()
    if "RANK" not in os.environ:
        print(
            "pooltk.parity: RANK is not set; run under torchrun (torchrun --nproc-per-node N -m "
            "pooltk.parity), or use `pooltk parity`, which spawns its own gloo ranks.",
            file=sys.stderr,
        )
        return 2
    try:
        args, spec = _torchrun_spec(argv)
    except ValueError as exc:
        from pooltk._validate import InputError, problem

        text = (
            problem(FIELDS[exc.what], found=exc.found, required=exc.required, fix=exc.fix)
            if isinstance(exc, InputError) and exc.what in FIELDS
            else str(exc)
        )
        print(f"python -m pooltk.parity: {text}", file=sys.stderr)
        return 2
    status = _run_in_torchrun_group(spec, as_json=args.json)
    dist.destroy_process_group()
    left = group_threads_left()
    if left:
        print(
            f"pooltk.parity: rank {int(os.environ['RANK'])}: gloo threads {left} outlived "
            "destroy_process_group(): something still holds the process group (a torch module "
            "imported after init_process_group, or a kept work object), and the rank may abort at "
            "exit. Fix: see [Note: a rank's clean exit] in pooltk/parity/command.py.",
            file=sys.stderr,
        )
    return status


def _torchrun_spec(argv: list[str] | None) -> tuple[argparse.Namespace, Any]:
    """The flags and the spec; ``--pp`` defaults to torchrun's world size."""
    parser = argparse.ArgumentParser(prog="python -m pooltk.parity")
    register(parser)
    args = parser.parse_args(argv)
    if "--pp" not in (argv if argv is not None else sys.argv[1:]):
        args.pp = int(os.environ["WORLD_SIZE"])
    check_args(args)
    return args, spec_from_args(args)


def _run_in_torchrun_group(spec: Any, *, as_json: bool) -> int:
    """Join torchrun's group (NCCL on GPUs, else gloo), run this rank, and on rank 0 print the
    report; every rank returns 0 only if it is bitwise equal. What held the group is gone on
    return (the caller destroys it)."""
    import time

    import torch
    import torch.distributed as dist

    from pooltk.parity import format_report, gather_report
    from pooltk.parity.worker import run_in_group

    t0 = time.perf_counter()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if use_cuda:
        device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")
        torch.cuda.set_device(device)
    records = run_in_group(spec, rank, world, device)
    gathered: list = [None] * world if rank == 0 else None  # type: ignore[assignment]
    dist.gather_object(records, gathered, dst=0)
    ok = torch.tensor([1], device=device)
    if rank == 0:
        report = gather_report(spec, gathered, wall_s=time.perf_counter() - t0)
        print(json.dumps(report.to_dict(), indent=2) if as_json else format_report(report))
        ok[0] = int(report.bitwise_equal)
    dist.broadcast(ok, src=0)
    return 0 if int(ok[0]) else 1
