"""The ``pooltk`` command line: one subcommand per job, each in its own module.

Each module named in ``_COMMANDS`` defines ``register(parser)`` (adds its arguments to
an argparse subparser) and ``run(args) -> int`` (the exit status). Heavy imports
(pandas, seaborn, torch.distributed) happen inside ``run`` so ``pooltk --help`` is fast.
"""

from __future__ import annotations

import time

# when pooltk's command line was imported: the start of pooltk's own time
_IMPORTED = time.perf_counter()

import argparse  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402

__all__ = ["cli_started_s", "main"]


def cli_started_s() -> float:
    """Seconds since ``pooltk.cli`` was imported (what the closing wall-time lines count as
    pooltk's)."""
    return time.perf_counter() - _IMPORTED


# name -> (module, one-line help). Keep in the order a new user meets them.
_COMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("pooltk.cli.probe", "which torch layout is here and whether the pool would install"),
    "parity": (
        "pooltk.cli.parity",
        "stock, fresh and pooled on real gloo ranks: three-way verdicts, bytes per stage and "
        "rank, step times",
    ),
    "memory": (
        "pooltk.cli.memory",
        "receive-buffer memory per stage and per rank: stock, automodel policy, tight, live "
        "set, rank-shared",
    ),
    "estimate": (
        "pooltk.cli.estimate",
        "the whole stage per rank by replay on fake tensors: parameters, gradients, optimizer, "
        "activations, receive buffers; fits or OOM",
    ),
    "schedules": (
        "pooltk.cli.schedules",
        "live receive buffers derived from any torch schedule's action order",
    ),
    "logs": ("pooltk.cli.logs", "read Automodel / torchtitan run logs into a per-run summary"),
    "report": ("pooltk.cli.report", "run every notebook headless and write HTML + PNG reports"),
    "fuzz": (
        "pooltk.cli.fuzz",
        "random models on every poolable schedule, pooled vs stock on gloo: zero silent "
        "differences",
    ),
}


def _build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Build the parser; with ``only``, import just that subcommand's module (fast path)."""
    parser = argparse.ArgumentParser(
        prog="pooltk",
        description="Receive-buffer memory of torch.distributed.pipelining: ring pool, memory "
        "model, parity, logs.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in _COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.register(p)
        p.set_defaults(_module=module)
    return parser


# (command, flag) -> the command that took the job over. The old spelling keeps working: its
# flag is dropped, the rest runs under the new command, and one line on stderr says so.
_MOVED: dict[tuple[str, str], str] = {("memory", "--estimate"): "estimate"}


def _forward_moved(argv: list[str]) -> list[str]:
    """``pooltk memory --estimate ...`` as ``pooltk estimate ...``, saying where it moved."""
    for (command, flag), new_command in _MOVED.items():
        if argv[:1] == [command] and flag in argv[1:]:
            print(
                f"pooltk: `pooltk {command} {flag}` is now `pooltk {new_command}`; running it",
                file=sys.stderr,
            )
            return [new_command, *(arg for arg in argv[1:] if arg != flag)]
    return argv


def main(argv: list[str] | None = None) -> int:
    argv = _forward_moved(sys.argv[1:] if argv is None else list(argv))
    only = argv[0] if argv and argv[0] in _COMMANDS else None
    parser = _build_parser(only)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args._module.run(args) or 0)
    except ModuleNotFoundError as exc:  # a lab command in the core install ([Note: core and lab])
        if not exc.name or exc.name.partition(".")[0] == "pooltk":
            raise
        from pooltk.cli.errors import LAB_EXTRA, fail

        return fail(
            args.command,
            f"{exc.name}: found not installed; required: the lab stack (pooltk's core is the "
            f"pool, probe, memory and schedules). Fix: {LAB_EXTRA}.",
        )


if __name__ == "__main__":
    sys.exit(main())
