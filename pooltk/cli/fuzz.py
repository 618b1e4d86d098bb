"""``pooltk fuzz``: random models, every poolable schedule, pooled vs stock on gloo ranks; zero silent differences."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from pooltk.cli.errors import check_flag_int, fail


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cases", type=int, default=500, help="cases to draw (default 500)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--steps", type=int, default=2, help="steps per run (>= 2 also checks what hooks kept)"
    )
    parser.add_argument("--batch", type=int, default=10, help="cases per gloo launch")
    parser.add_argument(
        "--pp", type=int, nargs="+", default=[2, 3, 4], help="rank counts to draw from"
    )
    parser.add_argument("--csv", type=Path, default=None, help="write one row per case to this CSV")


def run(args: argparse.Namespace) -> int:
    from pooltk.parity.fuzz import draw_cases, run_fuzz, summarize

    try:
        check_flag_int("--cases", args.cases, low=1, fix="--cases 1 or more (500 is the default).")
        check_flag_int(
            "--steps", args.steps, low=1, fix="--steps 2 (the default) also checks what hooks kept."
        )
        check_flag_int(
            "--batch", args.batch, low=1, fix="--batch 10 (the default): cases per gloo launch."
        )
        for pp in args.pp:
            check_flag_int(
                "--pp", pp, low=2, fix="rank counts of 2 or more, e.g. --pp 2 3 4 (the default)."
            )
    except ValueError as exc:
        return fail("fuzz", exc)
    cases = draw_cases(args.cases, args.seed, pp_choices=tuple(args.pp))
    results = run_fuzz(
        cases,
        steps=args.steps,
        batch=args.batch,
        progress=lambda done, total: print(f"[fuzz] {done}/{total}", file=sys.stderr, flush=True),
    )
    if args.csv is not None:
        rows = [r.row() for r in results]
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        with args.csv.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    s = summarize(results)
    from pooltk.parity.fuzz import VERDICTS

    print(f"{'schedule':24} {'cases':>6} " + " ".join(f"{v:>9}" for v in VERDICTS))
    for name, row in s.by_schedule.items():
        print(f"{name:24} {row['cases']:>6} " + " ".join(f"{row.get(v, 0):>9}" for v in VERDICTS))
    print(f"{'all':24} {s.cases:>6} " + " ".join(f"{getattr(s, v):>9}" for v in VERDICTS))
    print(
        f"copy on conflict: {s.rehomed_cases} cases re-homed {s.rehomes} slots, {s.rehomed_bytes} bytes"
    )
    for r in results:
        if r.verdict in ("silent", "unnamed"):
            print(f"{r.verdict.upper()} {r.case.label}: {r.detail}")
    return 1 if s.silent or s.unnamed else 0
