"""``pooltk parity``: stock vs pooled on real gloo ranks; exit 1 unless bitwise equal."""

from __future__ import annotations

import argparse
import json
import sys

from pooltk.cli.errors import fail
from pooltk.parity.command import FIELDS, check_args, register, spec_from_args

__all__ = ["register", "run", "spec_from_args"]


def run(args: argparse.Namespace) -> int:
    from pooltk.pool.guard import PoolOverrunError
    from pooltk.parity import ParityRankError, ParityTimeoutError, format_report, run_parity

    try:
        check_args(args)
        spec = spec_from_args(args)
    except ValueError as exc:
        return fail("parity", exc, fields=FIELDS)
    try:
        report = run_parity(spec)
    except PoolOverrunError as exc:
        print(f"pooltk parity: the guard stopped the run.\n{exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"bitwise_equal": False, "error": "PoolOverrunError", "message": str(exc)}))
        return 1
    except (ParityRankError, ParityTimeoutError) as exc:
        print(f"pooltk parity: {exc}", file=sys.stderr)
        if args.json:
            print(json.dumps({"bitwise_equal": False, "error": type(exc).__name__, "message": str(exc)}))
        return 1
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(format_report(report))
    return 0 if report.bitwise_equal else 1
