"""What the pool costs the host per receive, where the host dominates: one stage, tiny tensors, \
M 64.

Each stage of a pp4 and a pp8 1F1B pipeline is run alone in this process on a fake process group
(``torch.testing._internal.distributed.fake_pg``: sends and receives cost nothing and move nothing),
so a step is torch's schedule and the stage's Python work on (1, 1, 8) float32 boundaries: nothing
but host time. Stock, unguarded and pooled steps alternate on three stages built from the same seed,
so the machine's load hits all three alike. Per stage: the median step time of each, their ratio,
and the host microseconds per receive the pool adds ((pooled - stock) / receives per step), and the
same for the harness's unguarded ring (fresh aliases and wrappers without the guard), which splits
the cost. Goal: pooled / stock <= 1.02.

    .venv/bin/python benchmarks/bench_host_cost.py [--steps 30] [--pp 4 8] [--microbatches 64]
        [--boundary 1x8 64x512] [--csv PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist


def _stage(index: int, n: int, hidden: int, tokens: int):  # noqa: ANN202
    from torch.distributed.pipelining import PipelineStage

    torch.manual_seed(index)
    module = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.Tanh())
    t = torch.zeros(1, tokens, hidden)
    # every shape given (static inference; see _schedule for the vote): nothing is asked of the fake
    # peers
    return PipelineStage(
        module,
        index,
        n,
        torch.device("cpu"),
        input_args=(t.requires_grad_(index > 0),),
        output_args=(torch.zeros(1, tokens, hidden),),
        input_grads=(torch.zeros(1, tokens, hidden) if index else None,),
        output_grads=(None if index == n - 1 else torch.zeros(1, tokens, hidden),),
    )


def _schedule(  # noqa: ANN202
    index: int, n: int, m: int, hidden: int, tokens: int, *, variant: str
):
    import pooltk
    from pooltk.parity import experiments
    from torch.distributed.pipelining import Schedule1F1B

    from pooltk.memory.replay.seams import set_static, skip_vote

    stage = _stage(index, n, hidden, tokens)
    if variant == "pooled":  # this stage object only: the stock one beside it stays stock
        pooltk.pool_stage(stage)
    elif (
        variant == "unguarded"
    ):  # the harness's ring without ownership, holders' check or version bump
        experiments.pool_stage(stage, experiments.Harness(guard=False))
    schedule = Schedule1F1B(stage, n_microbatches=m, loss_fn=lambda o, t: ((o - t) ** 2).mean())
    schedule.pooltk_stage = stage

    set_static(stage)  # the peers' vote needs real peers: answer it "static"
    skip_vote(schedule)
    return schedule


def _step(schedule, index: int, n: int, m: int, x: torch.Tensor) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    schedule.step(*((x,) if index == 0 else ()), **({"target": x} if index == n - 1 else {}))
    return time.perf_counter() - t0


def measure(pp: int, index: int, m: int, steps: int, *, hidden: int = 8, tokens: int = 1) -> dict:
    """One stage, stock and pooled alternating; the first two steps of each (setup) are not
    counted."""
    import pooltk
    from pooltk.analysis.lifetimes import DIRECTIONS

    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=index, world_size=pp)
    try:
        x = torch.randn(m, tokens, hidden)
        runs = {
            v: _schedule(index, pp, m, hidden, tokens, variant=v)
            for v in ("stock", "unguarded", "pooled")
        }
        times: dict[str, list[float]] = {v: [] for v in runs}
        for _ in range(steps):
            for v, schedule in runs.items():
                times[v].append(_step(schedule, index, pp, m, x))
        stock, pooled = runs["stock"], runs["pooled"]
        state = pooltk.stage_state(pooled.pooltk_stage)
        use = state.usage(index) if state is not None else []
        if pooltk.stage_state(stock.pooltk_stage) is not None:
            raise AssertionError("bench_host_cost: the stock stage was pooled")
        receives = m * sum(
            1
            for d in DIRECTIONS
            if (d == "forward" and index > 0) or (d == "grad" and index < pp - 1)
        )
        s, u, p = (statistics.median(times[k][2:]) for k in ("stock", "unguarded", "pooled"))
        return {
            "pp": pp,
            "stage": index,
            "microbatches": m,
            "tokens": tokens,
            "hidden": hidden,
            "boundary_bytes": tokens * hidden * 4,
            "steps": steps - 2,
            "stock_ms": s * 1e3,
            "pooled_ms": p * 1e3,
            "ratio": p / s,
            "receives_per_step": receives,
            "host_us_per_receive": (p - s) / receives * 1e6 if receives else 0.0,
            "unguarded_ms": u * 1e3,
            "unguarded_us_per_receive": (u - s) / receives * 1e6 if receives else 0.0,
            "rings": "/".join(f"{u.direction}:{u.ring}" for u in use),
            "rehomes": sum(u.rehomes for u in use),
        }
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--pp", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--microbatches", type=int, default=64)
    ap.add_argument(
        "--boundary",
        nargs="+",
        default=["1x8"],
        metavar="TOKENSxHIDDEN",
        help="boundary tensors (1 x tokens x hidden float32), e.g. 1x8 (host only) 64x512",
    )
    ap.add_argument("--csv", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        shapes = [tuple(int(v) for v in b.lower().split("x")) for b in args.boundary]
        if any(len(sh) != 2 or min(sh) < 1 for sh in shapes):
            raise ValueError
    except ValueError:
        ap.error(
            f"--boundary: found {args.boundary}; required TOKENSxHIDDEN with positive integers, "
            "e.g. 1x8 64x512"
        )
    torch.set_num_threads(1)
    rows = [
        measure(pp, i, args.microbatches, args.steps, hidden=h, tokens=t)
        for t, h in shapes
        for pp in args.pp
        for i in range(pp)
    ]
    print(
        f"{'tokens':>6} {'hidden':>6} {'pp':>3} {'stage':>5} {'stock ms':>9} {'pooled ms':>10} "
        f"{'ratio':>6} {'us/recv':>8} {'unguarded':>9}  rings"
    )
    for r in rows:
        print(
            f"{r['tokens']:>6} {r['hidden']:>6} {r['pp']:>3} {r['stage']:>5} {r['stock_ms']:9.2f} "
            f"{r['pooled_ms']:10.2f} {r['ratio']:6.3f} {r['host_us_per_receive']:8.1f} "
            f"{r['unguarded_us_per_receive']:9.1f}  {r['rings']}"
        )
    for t, h in shapes:
        for pp in args.pp:
            mine = [r for r in rows if r["pp"] == pp and (r["tokens"], r["hidden"]) == (t, h)]
            total = sum(r["pooled_ms"] for r in mine) / sum(r["stock_ms"] for r in mine)
            print(
                f"boundary 1x{t}x{h} pp{pp}: pooled/stock over all stages {total:.3f} "
                "(goal <= 1.02)"
            )
    if args.csv is not None:
        import csv

        with args.csv.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
