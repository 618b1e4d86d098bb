"""``pooltk cpu-runs``: write real logs of pooltk's own CPU parity runs (Automodel training.jsonl)."""

from __future__ import annotations

import argparse
import sys


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="data/cpu_runs", help="output folder (default data/cpu_runs)")
    parser.add_argument("--seq-lens", nargs="+", type=int, default=[16384, 32768], help="row lengths (default 16384 32768)")
    parser.add_argument("--pp", type=int, default=4)
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=64)


def run(args: argparse.Namespace) -> int:
    from pooltk.parity.cpu_runs import write_cpu_runs
    from pooltk.parity.rss import RssLaunchError

    try:
        paths = write_cpu_runs(args.out, seq_lens=tuple(args.seq_lens), pp=args.pp, microbatches=args.microbatches,
                               steps=args.steps, hidden=args.hidden,
                               progress=lambda m: print(f"[cpu-runs] {m}", file=sys.stderr, flush=True))
    except (ValueError, RuntimeError, RssLaunchError) as exc:
        print(f"pooltk cpu-runs: {exc}", file=sys.stderr)
        return 1
    for p in paths:
        print(p)
    return 0
