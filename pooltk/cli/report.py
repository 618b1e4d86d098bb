"""``pooltk report``: probe, pp4 parity, buffer tables, then every notebook to HTML + PNG.

``pooltk report --logs DIR [--run-info FILE]`` instead executes the log-analysis notebook on the
user's logs (its ``parameters`` cell gets the paths) and writes its HTML.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("reports"), help="output folder (default: reports)")
    parser.add_argument("--notebooks", default="notebooks/*.ipynb",
                        help="glob of notebooks to execute (default: notebooks/*.ipynb, from the repository root)")
    parser.add_argument("--no-summary", action="store_true",
                        help="skip the probe, the pp4 parity check and the buffer tables; notebooks only")
    parser.add_argument("--jobs", type=int, default=4, help="notebooks executed at once (default 4)")
    parser.add_argument("--parity-microbatches", type=int, default=16,
                        help="microbatches of the pp4 check (default 16)")
    parser.add_argument("--parity-steps", type=int, default=3, help="optimizer steps of the pp4 check (default 3)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per-cell time bound in seconds (default 600)")
    parser.add_argument("--logs", type=Path, nargs="+", metavar="PATH",
                        help="your run logs (files, folders, .gz): execute the log-analysis notebook (03) on them "
                             "and write its HTML (no probe, no parity check)")
    parser.add_argument("--run-info", type=Path, metavar="FILE",
                        help='JSON run facts for --logs: {"world_size": 256, "pp": 8, ...} or one such object per run name')


def _since_process_start() -> float | None:
    """Seconds since this process started (Linux ``/proc``), so the printed wall time includes imports."""
    import os

    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run(args: argparse.Namespace) -> int:
    import time

    from pooltk.nb.report import ReportConfig, describe, run_report

    t0 = time.perf_counter()
    try:
        config = ReportConfig(out=args.out, notebooks=args.notebooks, summary=not args.no_summary, jobs=args.jobs,
                              parity_microbatches=args.parity_microbatches, parity_steps=args.parity_steps,
                              notebook_timeout_s=args.timeout, logs=tuple(args.logs or ()), run_info=args.run_info)
        result = run_report(config)
    except ValueError as exc:
        print(f"pooltk report: {exc}", file=sys.stderr)
        return 2
    print()
    print(describe(result))
    since_start = _since_process_start()
    if since_start is not None:
        print(f"pooltk report finished in {since_start:.1f} s wall since the process started "
              f"({time.perf_counter() - t0:.1f} s after imports)")
    else:
        print(f"pooltk report finished in {time.perf_counter() - t0:.1f} s (wall, after imports)")
    return 0 if result.ok else 1
