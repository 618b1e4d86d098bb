"""Ring pool benchmark: one table, measured side by side in one run.

- step time pooled / stock and guard on / off: variants alternate inside one gloo launch
  (stock, tight, tight-no-guard, stock, ...), each ratio is the median over rounds of
  per-round medians (steps after the first, slowest rank). The guard includes the copy-on-conflict
  checks ([Note: copy on conflict]). Goal: pooled/stock <= 1.02 at pp2 (one core per rank).
- host microseconds per receive: one ring post + release in-process, guard (ownership and
  conflict checks) on vs off, against the stock path (which does nothing per receive).
- receive bytes per stage: stock, automodel policy, tight (slack 2), live set (tight slack 0),
  as *measured* on the ranks (distinct storages), not modelled.
- wall time of the pp4 parity check (`pooltk parity` defaults). Goal: <= 10 s here.

Usage: .venv/bin/python benchmarks/bench_pool.py [--rounds 5] [--steps 12] [--pp 4]
[--microbatches 16]
"""

from __future__ import annotations

import argparse
import statistics
import time

from pooltk.parity.experiments import Harness
from pooltk.parity import ParitySpec, Variant, default_variants, run_parity


def host_us_per_receive(guard: bool, *, k: int = 3, m: int = 16, reps: int = 2000) -> float:
    """Median over 5 runs of microseconds per (post + release) on a ring of ``k`` over ``m``
    microbatches."""
    import torch

    from pooltk.pool.ring import Ring, Slot

    class Info:
        def __init__(self, buffer):
            self.buffer, self.is_root_arg = buffer, False

    slots = [[torch.zeros(2, 8, 256)] for _ in range(k)]
    infos = {c: (Info(torch.zeros(2, 8, 256)),) for c in range(m)}
    ring = Ring(
        stage=1,
        direction="forward",
        live=k,
        n_microbatches=m,
        slots=[Slot(ts, [False]) for ts in slots],
        guard=guard,
    )
    ring.add_member(1, infos, [0])
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for i in range(reps):
            c = i % m
            ring.post(c, 1, infos[c], training=True)
            ring.release(c, 1)
            if c == m - 1:
                ring.reset()
        runs.append((time.perf_counter() - t0) / reps * 1e6)
    assert ring.rehomes == 0, "a plain ring re-homed: the conflict check is miscounting"
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=256)
    args = ap.parse_args()

    tight, noguard = Harness(slack=2), Harness(slack=2, guard=False)
    variants = []
    for r in range(args.rounds):
        variants += [
            Variant(name=f"stock#{r}"),
            Variant(name=f"tight#{r}", pooled=True, config=tight),
            Variant(name=f"noguard#{r}", pooled=True, config=noguard),
        ]
    variants += [
        Variant(name="automodel", pooled=True, config=Harness(policy="automodel")),
        Variant(name="liveset", pooled=True, config=Harness(slack=0, grad_slack=0)),
    ]
    spec = ParitySpec(
        pp=args.pp,
        microbatches=args.microbatches,
        steps=args.steps,
        hidden=args.hidden,
        timeout_s=900,
        variants=tuple(variants),
    )
    print(
        f"[bench] {len(variants)} variants x {args.steps} steps on {args.pp} gloo ranks ...",
        flush=True,
    )
    report = run_parity(spec)
    med = {v.name: v.median_step_time_s for v in report.variants}
    pooled_ratio = statistics.median(
        med[f"tight#{r}"] / med[f"stock#{r}"] for r in range(args.rounds)
    )
    guard_ratio = statistics.median(
        med[f"tight#{r}"] / med[f"noguard#{r}"] for r in range(args.rounds)
    )
    stock_ms = statistics.median(med[f"stock#{r}"] for r in range(args.rounds)) * 1e3

    us_on, us_off = host_us_per_receive(True), host_us_per_receive(False)

    print("[bench] timing the pp4 parity check (pooltk parity defaults) ...", flush=True)
    t0 = time.perf_counter()
    check = run_parity(
        ParitySpec(pp=4, microbatches=16, steps=3, variants=default_variants([Harness()]))
    )
    parity_wall = time.perf_counter() - t0

    print()
    print(f"{'measure':44} {'value':>12} {'goal':>10}")
    print(f"{'step time pooled/stock (median of rounds)':44} {pooled_ratio:12.3f} {'<= 1.02':>10}")
    print(f"{'step time guard on/off (median of rounds)':44} {guard_ratio:12.3f} {'':>10}")
    print(f"{'stock step time, ms (slowest rank, median)':44} {stock_ms:12.1f} {'':>10}")
    print(f"{'host us per receive, guard+conflict checks':44} {us_on:12.2f} {'':>10}")
    print(f"{'host us per receive, guard off':44} {us_off:12.2f} {'':>10}")
    print(f"{'pp4 parity check wall time, s':44} {parity_wall:12.1f} {'<= 10':>10}")
    print(f"{'pp4 parity check bitwise equal':44} {str(check.bitwise_equal):>12} {'True':>10}")
    print()
    print(
        f"receive bytes per stage, measured (pp{args.pp}, M={args.microbatches}, "
        f"{report.boundary_bytes} B per set):"
    )
    rows = [
        ("stock", "stock#0"),
        ("automodel s2", "automodel"),
        ("tight s2", "tight#0"),
        ("live set", "liveset"),
    ]
    print(
        f"{'stage':>5} " + " ".join(f"{label:>14}" for label, _ in rows) + f" {'tight/stock':>12}"
    )
    for s in range(args.pp):
        vals = [
            report.variant(n).recv[s]["forward"]["bytes"]
            + report.variant(n).recv[s]["grad"]["bytes"]
            for _, n in rows
        ]
        print(f"{s:>5} " + " ".join(f"{v:>14,}" for v in vals) + f" {vals[2] / vals[0]:>12.3f}")
    assert report.bitwise_equal, "a pooled variant diverged from stock"


if __name__ == "__main__":
    main()
