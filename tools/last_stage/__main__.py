"""``python -m tools.last_stage``: measure the last stage's re-homes, print a table, check it,
optionally write the CSV.

The records are written only when every claim of :mod:`tools.last_stage.claims` holds (the table is
printed either way); ``--check CSV`` checks a written file against the grid the flags describe
(default: the committed table's). A record is written from committed code only (``--allow-dirty``
writes one that says ``+dirty``).
"""

from __future__ import annotations

import argparse
import sys
import time

from tools.last_stage.claims import Grid, check
from tools.last_stage.records import MODELS, FIELDS, code_version, measure, read_csv, write_csv

SHOWN = (
    "model",
    "microbatches",
    "variant",
    "slack",
    "release",
    "stage",
    "direction",
    "rehomes",
    "rehomed_bytes",
    "ring_sets",
    "storages",
    "counted_bytes",
    "peak_live",
    "bitwise_equal",
)
PROG = "python -m tools.last_stage"


def _parser() -> argparse.ArgumentParser:
    grid = Grid()
    p = argparse.ArgumentParser(prog=PROG, description=__doc__)
    p.add_argument("--models", nargs="+", default=list(grid.models), choices=list(MODELS))
    p.add_argument("--microbatches", nargs="+", type=int, default=list(grid.microbatches))
    p.add_argument("--slack", nargs="+", type=int, default=list(grid.slacks))
    p.add_argument("--steps", type=int, default=grid.steps)
    p.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per launch (all ranks killed after)"
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--csv", help="write the records here (only if every claim holds)")
    out.add_argument(
        "--check",
        metavar="CSV",
        help="check a written table against the grid of the other flags; measure nothing",
    )
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="with --csv: write even from uncommitted code "
        "(the code column says +dirty, and --check will say so)",
    )
    return p


def _print_table(records: list) -> None:
    widths = {
        k: max(
            [len(k), *(len("" if getattr(r, k) is None else str(getattr(r, k))) for r in records)]
        )
        for k in SHOWN
    }
    print("  ".join(k.rjust(widths[k]) for k in SHOWN))
    for r in records:
        print(
            "  ".join(
                ("" if getattr(r, k) is None else str(getattr(r, k))).rjust(widths[k])
                for k in SHOWN
            )
        )


def _report(broken: list[str], *, what: str, unwritten: str | None) -> int:
    """Say each broken claim on stderr; 1 if any broke, else 0."""
    if not broken:
        return 0
    tail = f"; nothing written to {unwritten}" if unwritten else ""
    print(f"{PROG}: error: {what} breaks {len(broken)} claim(s){tail}:", file=sys.stderr)
    for line in broken:
        print(f"  {line}", file=sys.stderr)
    print(
        "Fix: find the cause in the rows named (see [Note: the claims of a last-stage table] in "
        "tools/last_stage/claims.py); a record holds every claim.",
        file=sys.stderr,
    )
    return 1


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    grid = Grid(
        models=tuple(a.models),
        microbatches=tuple(a.microbatches),
        slacks=tuple(a.slack),
        steps=a.steps,
    )
    if a.check:
        try:
            records = read_csv(a.check)
        except ValueError as exc:
            print(f"{PROG}: error: {str(exc).removeprefix('tools.last_stage: ')}", file=sys.stderr)
            return 2
        status = _report(
            check(records, grid), what=f"{a.check} ({len(records)} records)", unwritten=None
        )
        if not status:
            print(f"{a.check}: {len(records)} records hold every claim")
        return status
    clean = bool(a.csv) and not a.allow_dirty
    code = code_version()
    if clean and (code == "unknown" or code.endswith("+dirty")):
        print(
            f"{PROG}: error: --csv: found code {code} (uncommitted edits under pooltk/ or "
            "tools/last_stage/, or no git); required a committed tree. Fix: commit, or measure an "
            "export (git archive COMMIT) with POOLTK_CODE_VERSION=COMMIT, or pass --allow-dirty.",
            file=sys.stderr,
        )
        return 2
    records = []
    for model in a.models:
        for m in a.microbatches:
            t0 = time.perf_counter()
            records += measure(model, m, slacks=a.slack, steps=a.steps, timeout_s=a.timeout)
            print(f"# {model} M={m}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    _print_table(records)
    status = _report(check(records, grid, clean=clean), what="the measurement", unwritten=a.csv)
    if a.csv and not status:
        write_csv(records, a.csv)
        print(f"# wrote {len(records)} records ({len(FIELDS)} columns) to {a.csv}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
