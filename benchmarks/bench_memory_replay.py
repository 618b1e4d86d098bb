"""How long does the whole-stage estimate take, and what peak does it find? Per stage, at full \
widths.

Run: ``.venv/bin/python benchmarks/bench_memory_replay.py [--preset kimi-k3-gb200-2k]
[--ranks 0,3,7] [--variants stock,pooled] [--microbatches 64]``

Replays each rank of a named estimate (:data:`pooltk.memory.replay.presets.ESTIMATE_PRESETS`, or the
Kimi-K3 study's :data:`pooltk.studies.kimi_k3.ESTIMATE`, the default: K3's published widths at pp 8
x 64 microbatches, 2 x 2048 tokens, ep 32, activation checkpointing on) on fake tensors and prints,
per stage and variant: the wall time and this process's CPU time of the replay, the storages it
logged, the peak and where in the step it is, and the receive buffers against the analytic model.
Wall time depends on what else the machine runs; CPU time less so.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from pooltk.memory.replay.estimate import estimate_memory
from pooltk.memory.replay.presets import estimate_preset
from pooltk.studies.kimi_k3 import ESTIMATE, named_estimates

NAMED = named_estimates()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=ESTIMATE.name, choices=sorted(NAMED))
    parser.add_argument("--ranks", default=None, help="comma-separated (default: every rank)")
    parser.add_argument("--variants", default="stock,pooled")
    parser.add_argument(
        "--microbatches", type=int, default=None, help="override the preset's microbatches"
    )
    args = parser.parse_args()

    inputs = estimate_preset(args.preset, NAMED).inputs()
    shape = (
        inputs.shape
        if args.microbatches is None
        else dataclasses.replace(inputs.shape, n_microbatches=args.microbatches)
    )
    ranks = None if args.ranks is None else [int(r) for r in args.ranks.split(",")]
    print(f"{args.preset}: {inputs.description}; {shape.describe()}")
    print(
        f"{'rank':>4} {'stages':>6} {'variant':>10} {'wall s':>7} {'cpu s':>7} {'storages':>9} "
        f"{'peak GiB':>9} {'recv GiB':>8}  peak at"
    )
    last_cpu = [time.process_time()]
    rows: list = []

    def report(r) -> None:
        cpu = time.process_time() - last_cpu[0]
        last_cpu[0] = time.process_time()
        rows.append((r, cpu))
        print(
            f"{r.rank:>4} {','.join(map(str, r.stages)):>6} {r.variant:>10} {r.wall_s:>7.1f} "
            f"{cpu:>7.1f} {r.storages:>9} {r.peak.bytes / 2**30:>9.2f} "
            f"{r.category_max['recv_buffers'] / 2**30:>8.2f}  {r.peak.describe()}",
            flush=True,
        )

    est = estimate_memory(
        inputs.builder,
        shape,
        config=inputs.config,
        ranks=ranks,
        variants=[v for v in args.variants.split(",") if v],
        progress=report,
    )
    print()
    print(f"{'rank':>4} {'variant':>10} {'replayed recv GiB':>18} {'modelled recv GiB':>18}")
    for x in est.receive_frame().itertuples():
        print(
            f"{x.rank:>4} {x.variant:>10} {x.replayed_bytes / 2**30:>18.3f} "
            f"{x.modelled_bytes / 2**30:>18.3f}"
        )


if __name__ == "__main__":
    main()
