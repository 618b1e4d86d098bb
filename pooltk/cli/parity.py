"""``pooltk parity``: stock, fresh and pooled on real gloo ranks.

Exit 0 when every pooled variant is bitwise equal to stock, or to fresh (a new buffer per receive)
where stock's own numbers depend on its buffer reuse ("explained", with the reason on one line);
else 1.
"""

from __future__ import annotations

import argparse
import json

from pooltk.cli.errors import fail
from pooltk.parity.command import FIELDS, check_args, register, spec_from_args

__all__ = ["register", "run"]


def run(args: argparse.Namespace) -> int:
    from pooltk.pool.errors import PoolOverrunError
    from pooltk.parity import ParityRankError, ParityTimeoutError, format_report
    from pooltk.parity.summary import run_three_way

    try:
        check_args(args)
        spec = spec_from_args(args)
    except ValueError as exc:
        return fail("parity", exc, fields=FIELDS)
    try:
        three = run_three_way(spec)
    except (PoolOverrunError, ParityRankError, ParityTimeoutError) as exc:
        stopped = "the guard stopped the run.\n" if isinstance(exc, PoolOverrunError) else ""
        if args.json:
            error = {"bitwise_equal": False, "error": type(exc).__name__, "message": str(exc)}
            print(json.dumps(error))
        return fail("parity", f"{stopped}{exc}", code=1)
    report = three.report
    if args.json:
        out = report.to_dict()
        out.update(verdicts=[j.row() for j in three.judgements], verdict=three.line, ok=three.ok)
        print(json.dumps(out, indent=2))
    else:
        print(format_report(report))
        print(three.line)
    return 0 if three.ok else 1
