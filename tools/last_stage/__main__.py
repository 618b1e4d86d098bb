"""``python -m tools.last_stage``: measure the last stage's re-homes, print a table, optionally write the CSV."""

from __future__ import annotations

import argparse
import sys
import time

from tools.last_stage.records import MODELS, FIELDS, measure, write_csv

SHOWN = ("model", "microbatches", "variant", "slack", "release", "stage", "direction", "rehomes", "rehomed_bytes",
         "ring_sets", "storages", "counted_bytes", "peak_live", "bitwise_equal")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.last_stage", description=__doc__)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--microbatches", nargs="+", type=int, default=[8, 16, 64])
    p.add_argument("--slack", nargs="+", type=int, default=[0, 2])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per launch (all ranks killed after)")
    p.add_argument("--csv", help="write the records here")
    a = p.parse_args(argv)
    records = []
    for model in a.models:
        for m in a.microbatches:
            t0 = time.perf_counter()
            records += measure(model, m, slacks=a.slack, steps=a.steps, timeout_s=a.timeout)
            print(f"# {model} M={m}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    widths = {k: max(len(k), *(len("" if getattr(r, k) is None else str(getattr(r, k))) for r in records))
              for k in SHOWN}
    print("  ".join(k.rjust(widths[k]) for k in SHOWN))
    for r in records:
        print("  ".join(("" if getattr(r, k) is None else str(getattr(r, k))).rjust(widths[k]) for k in SHOWN))
    if a.csv:
        write_csv(records, a.csv)
        print(f"# wrote {len(records)} records ({len(FIELDS)} columns) to {a.csv}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
