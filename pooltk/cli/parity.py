"""``pooltk parity``: stock vs pooled on real gloo ranks; exit 1 unless bitwise equal."""

from __future__ import annotations

import argparse
import json
import sys


def register(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("shape")
    g.add_argument("--pp", type=int, default=4, help="pipeline stages = ranks (default 4)")
    g.add_argument("--microbatches", type=int, default=16, help="microbatches per step (default 16)")
    g.add_argument("--steps", type=int, default=3, help="optimizer steps per variant (default 3)")
    g.add_argument("--hidden", type=int, default=64, help="hidden size of the toy model (default 64)")
    g.add_argument("--seq-len", type=int, default=8, help="tokens per row (default 8)")
    g.add_argument("--rows", type=int, default=2, help="rows per microbatch (default 2)")
    p = parser.add_argument_group("pool")
    p.add_argument("--slack", type=int, default=2)
    p.add_argument("--grad-slack", type=int, default=1)
    p.add_argument("--policy", default="tight", choices=["tight", "automodel"])
    p.add_argument("--schedule", default="1F1B", help="torch schedule name (1F1B, GPipe)")
    p.add_argument("--frontend", default="manual", choices=["manual", "tracing", "both"])
    p.add_argument("--force", action="store_true", help="pool even if the schedule is not allowlisted")
    p.add_argument("--no-guard", action="store_true", help="turn the overrun guard off (shows silent corruption)")
    p.add_argument("--shortfall", type=int, default=0,
                   help="experiments: forward ring this many sets below the policy (needs --force)")
    p.add_argument("--eval-between-steps", action="store_true", help="run schedule.eval after each step")
    o = parser.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="machine-readable report (top-level bitwise_equal)")
    o.add_argument("--timeout", type=float, default=120.0, help="wall-clock bound in seconds (default 120)")


def spec_from_args(args: argparse.Namespace):
    from pooltk.config import PoolConfig
    from pooltk.parity import ParitySpec, default_variants

    config = PoolConfig(slack=args.slack, grad_slack=args.grad_slack, policy=args.policy, guard=not args.no_guard,
                        forward_shortfall=args.shortfall)
    frontends = ("manual", "tracing") if args.frontend == "both" else (args.frontend,)
    variants = default_variants([config], frontends=frontends, schedule=args.schedule, force=args.force,
                                eval_between_steps=args.eval_between_steps)
    return ParitySpec(pp=args.pp, microbatches=args.microbatches, steps=args.steps, hidden=args.hidden,
                      seq_len=args.seq_len, rows_per_microbatch=args.rows, timeout_s=args.timeout, variants=variants)


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**10:.1f} KiB" if n < 2**20 else f"{n / 2**20:.2f} MiB"


def print_report(report) -> None:
    print(f"parity pp{report.spec.pp} x {report.spec.microbatches} microbatches x {report.spec.steps} steps "
          f"(boundary tensor {_fmt_bytes(report.boundary_bytes)} per microbatch), wall {report.wall_s:.1f} s")
    print(f"{'variant':34} {'bitwise':>8} {'max|dparam|':>12} {'max|dloss|':>11} {'step ms':>8}")
    for v in report.variants:
        bw = "ref" if v.reference is None else ("yes" if v.bitwise_equal else "NO")
        dp = "" if v.params_max_abs_diff is None else f"{v.params_max_abs_diff:.3g}"
        dl = "" if v.losses_max_abs_diff is None else f"{v.losses_max_abs_diff:.3g}"
        print(f"{v.name:34} {bw:>8} {dp:>12} {dl:>11} {v.median_step_time_s * 1e3:8.1f}")
    print("\nreceive buffers per stage (sets fwd+grad, bytes):")
    for v in report.variants:
        cells = []
        for s in sorted(v.recv):
            f, g = v.recv[s]["forward"], v.recv[s]["grad"]
            cells.append(f"s{s} {f['sets']}+{g['sets']} {_fmt_bytes(f['bytes'] + g['bytes'])}")
        print(f"  {v.name:32} " + " | ".join(cells))
    for v in report.variants:
        if v.pooled and all(not r for r in v.rings.values()):
            why = next((g for g in v.gate.values() if g), None) or "install() did not pool on this torch (run `pooltk probe` for why)"
            print(f"note: {v.name} held no ring on any stage (ran stock): {why}")
    print(f"\nbitwise_equal: {report.bitwise_equal}")


def run(args: argparse.Namespace) -> int:
    from pooltk.guard import PoolOverrunError
    from pooltk.parity import ParityRankError, ParityTimeoutError, run_parity

    try:
        spec = spec_from_args(args)
    except ValueError as exc:
        print(f"pooltk parity: {exc}", file=sys.stderr)
        return 2
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
        print_report(report)
    return 0 if report.bitwise_equal else 1
