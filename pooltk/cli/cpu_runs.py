"""``pooltk cpu-runs``: write real logs of pooltk's own CPU parity runs (Automodel training.jsonl)."""

from __future__ import annotations

import argparse
import sys

from pooltk.cli.errors import check_flag_int, fail


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", default="data/cpu_runs", help="output folder (default data/cpu_runs)"
    )
    parser.add_argument(
        "--seq-lens",
        nargs="+",
        type=int,
        default=[16384, 32768],
        help="row lengths (default 16384 32768)",
    )
    parser.add_argument("--pp", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=64)


FIELDS = {
    "RssSpec.pp": "--pp",
    "RssSpec.microbatches": "--microbatches",
    "RssSpec.steps": "--steps",
    "RssSpec.hidden": "--hidden",
    "RssSpec.seq_len": "--seq-lens",
}
"""The library fields these flags set ([Note: command-line errors] in pooltk.cli.errors)."""


def run(args: argparse.Namespace) -> int:
    from pooltk.parity.cpu_runs import write_cpu_runs
    from pooltk.parity.rss import RssLaunchError

    try:
        check_flag_int("--pp", args.pp, low=2, fix="--pp 4 (the default): one gloo rank per stage.")
        check_flag_int(
            "--microbatches",
            args.microbatches,
            low=args.pp if isinstance(args.pp, int) else 2,
            fix=f"--microbatches {args.pp} or more (1F1B needs one per stage); 16 is the default.",
        )
        check_flag_int("--steps", args.steps, low=1, fix="--steps 6 (the default).")
        check_flag_int("--hidden", args.hidden, low=1, fix="--hidden 64 (the default).")
        for length in args.seq_lens:
            check_flag_int(
                "--seq-lens",
                length,
                low=1,
                fix="row lengths of 1 or more, e.g. --seq-lens 16384 32768.",
            )
        paths = write_cpu_runs(
            args.out,
            seq_lens=tuple(args.seq_lens),
            pp=args.pp,
            microbatches=args.microbatches,
            steps=args.steps,
            hidden=args.hidden,
            progress=lambda m: print(f"[cpu-runs] {m}", file=sys.stderr, flush=True),
        )
    except ValueError as exc:
        return fail("cpu-runs", exc, fields=FIELDS)
    except (RuntimeError, RssLaunchError) as exc:
        return fail("cpu-runs", exc, code=1)
    for p in paths:
        print(p)
    return 0
