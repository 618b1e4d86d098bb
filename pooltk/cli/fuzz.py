"""``pooltk fuzz``: random models, every poolable schedule, pooled vs stock on gloo ranks; zero
silent differences."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

from pooltk._validate import InputError, check_output, write_output
from pooltk.cli.errors import check_flag_int, fail
from pooltk.cli.tables import Column, render


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
    parser.add_argument("--csv", type=Path, help="write one row per case to this CSV")


def _write_rows(results: list[Any], path: Path) -> None:
    rows = [r.row() for r in results]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


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
        if args.csv is not None:
            check_output("--csv", args.csv)
    except ValueError as exc:
        return fail("fuzz", exc)
    cases = draw_cases(args.cases, args.seed, pp_choices=tuple(args.pp))
    results = run_fuzz(
        cases,
        steps=args.steps,
        batch=args.batch,
        progress=lambda done, total: print(f"[fuzz] {done}/{total}", file=sys.stderr, flush=True),
    )
    summary = summarize(results)
    print("\n".join(_verdict_table(summary)))
    print(
        f"copy on conflict: {summary.rehomed_cases} cases re-homed {summary.rehomes} slots, "
        f"{summary.rehomed_bytes} bytes"
    )
    for r in results:
        if r.verdict in ("silent", "unnamed"):
            print(f"{r.verdict.upper()} {r.case.label}: {r.detail}")
    if args.csv is not None:
        try:
            write_output("--csv", args.csv, lambda path: _write_rows(results, path))
        except InputError as exc:  # after the verdicts are printed: the cases ran
            return fail("fuzz", exc, code=1)
    return 1 if summary.silent or summary.unnamed else 0


def _verdict_table(summary: Any) -> list[str]:
    """Cases per schedule and verdict, then all of them."""
    from pooltk.parity.fuzz import VERDICTS

    columns = [
        Column("schedule", align="left", width=24),
        Column("cases", width=6),
        *(Column(verdict, width=9) for verdict in VERDICTS),
    ]
    records = [{"schedule": name, **counts} for name, counts in summary.by_schedule.items()]
    every_case = {verdict: getattr(summary, verdict) for verdict in VERDICTS}
    records.append({"schedule": "all", "cases": summary.cases, **every_case})
    return render(records, columns, gap=" ")
