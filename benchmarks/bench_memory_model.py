"""How fast is the memory model? One widget update and a full sweep, timed side by side.

Run: ``.venv/bin/python benchmarks/bench_memory_model.py [--reps 20]
[--sweep-live-source formula|schedule]``

Rows:
- one widget update at N=16, M=256 (``pooltk.nb.memory.explore``: the full per-stage model
  plus the figure of merit), with the schedule walk already cached (what moving slack,
  policy or boundary costs) -- goal <= 50 ms;
- the same model with the live sets from the closed form (``live_source="formula"``);
- the same model with a cold schedule walk (what moving pp or M to an unseen value costs);
- the full sweep N 2..16 x M N..256 x slack 0..4 (every stage, every variant), live sets by
  formula by default; ``--sweep-live-source schedule`` walks every (N, M) once instead
  (about 10 minutes on a shared 2-core machine).

Each row prints its median time, the 50 ms goal, and the ratio to it.
"""

from __future__ import annotations

import argparse
import statistics
import time

from pooltk.nb import memory as mp
from pooltk.analysis import stage_sets
from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, PipelineShape, model_memory

GOAL_MS = 50.0
PRESET = "kimi-k3-gb200-2k-calibrated"


def _median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--cold-reps", type=int, default=3)
    parser.add_argument("--sweep-live-source", choices=("formula", "schedule"), default="formula")
    args = parser.parse_args()

    boundary = Boundary.opaque(416 * 2**20)
    shape = PipelineShape(pp=16, n_microbatches=256)
    state = mp.ExplorerState()
    kwargs = dict(
        preset=PRESET, pp=16, microbatches=256, grad_slack=1, policy="automodel", boundary_mib=416.0
    )
    mp.explore(state, slack=2, **kwargs)  # warm the walk cache and the imports
    slacks = iter(range(10**9))

    rows = []
    rows.append(
        (
            "widget update, N=16 M=256 (slack moves)",
            args.reps,
            _median_ms(lambda: mp.explore(state, slack=next(slacks) % 9, **kwargs), args.reps),
        )
    )
    sizes = iter(range(10**9))
    rows.append(
        (
            "widget update, N=16, new M each time",
            args.reps,
            _median_ms(
                lambda: mp.explore(state, slack=2, **{**kwargs, "microbatches": 256 - next(sizes)}),
                args.reps,
            ),
        )
    )
    rows.append(
        (
            "model, N=16 M=256, live sets by formula",
            args.reps,
            _median_ms(
                lambda: model_memory(shape, boundary, PoolConfig(), live_source="formula"),
                args.reps,
            ),
        )
    )

    # imported once here, so the cold row times the walk, not the import
    import torch.distributed.pipelining  # noqa: F401

    def cold() -> None:
        stage_sets.cache_clear()  # the receive records and the walker's own memo
        model_memory(shape, boundary, PoolConfig())

    rows.append(
        ("model, N=16 M=256, cold schedule walk", args.cold_reps, _median_ms(cold, args.cold_reps))
    )

    print(f"{'case':<46} {'reps':>5} {'median ms':>10} {'goal ms':>8} {'ratio to goal':>14}")
    for name, reps, ms in rows:
        print(f"{name:<46} {reps:>5} {ms:>10.2f} {GOAL_MS:>8.0f} {ms / GOAL_MS:>14.3f}")

    stage_sets.cache_clear()
    n_models = 0
    t = time.perf_counter()
    for n in range(2, 17):
        for m in range(n, 257):
            sh = PipelineShape(pp=n, n_microbatches=m)
            for slack in range(5):
                model_memory(
                    sh, boundary, PoolConfig(slack=slack), live_source=args.sweep_live_source
                )
                n_models += 1
    total = time.perf_counter() - t
    print()
    print(f"{'sweep':<46} {'models':>7} {'total s':>8} {'us/model':>9}")
    print(
        f"{'N 2..16 x M N..256 x slack 0..4 (' + args.sweep_live_source + ')':<46} {n_models:>7} "
        f"{total:>8.2f} {total / n_models * 1e6:>9.1f}"
    )


if __name__ == "__main__":
    main()
