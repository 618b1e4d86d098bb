"""The Kimi-K3 schedule shape itself on CPU gloo: per-stage receive bytes counted vs the memory \
model.

The shape is the Kimi-K3 GB200 preset's pipeline (``pooltk.studies.kimi_k3``: pp 8, M 64, 1F1B, from
global batch 4096 / (dp 32 x micro batch 2)) with small tensors (default one row x 1 token x hidden
16 float32 per microbatch, one residual block per stage), so 8 ranks fit a 2-core machine. One gloo
launch runs stock, then pooltk with the tight policy at slack 2 and at slack 0 (release on, the
default), one after another in the same process group; every pooled variant is compared with stock
bit for bit (parameters, per-microbatch losses, merged outputs of every step).

Per variant and stage the table gives:

- ``counted``: bytes of the distinct storages behind the stage's receive buffers at the end of the
  run (:func:`pooltk.parity.worker.measure_recv_storage`, both directions) plus every storage copy
  on conflict allocated during the run (``rehomed_bytes``): all the receive storage the run made;
- ``model``: :func:`pooltk.memory.model.model_memory`'s bytes for the same shape and boundary
  (``stock`` for stock, ``pooled`` -- the config's policy -- for pooltk), summed over directions;
- ``ratio`` = counted / model (1.000 when the run holds exactly what the model says), ``sets``
  counted / modelled, ``rehomes`` and ``bitwise``.

Resident memory is not measured here (``pooltk memory --measure`` does that).

Usage: .venv/bin/python benchmarks/bench_kimi_k3_shape.py [--steps 3] [--hidden 16] [--timeout 480]
"""

from __future__ import annotations

import argparse
import sys
import time

from pooltk import PoolConfig
from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.memory.model import harness_boundary, model_memory
from pooltk.parity import ParitySpec, Variant, run_parity
from pooltk.studies.kimi_k3 import get_preset

PRESET = "kimi-k3-gb200-2k-hidden"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1)
    ap.add_argument("--rows", type=int, default=1, help="rows per microbatch")
    ap.add_argument("--slack", type=int, nargs="+", default=[2, 0])
    ap.add_argument(
        "--timeout",
        type=float,
        default=480.0,
        help="seconds for the whole launch (ranks killed after)",
    )
    a = ap.parse_args(argv)

    shape = get_preset(PRESET).shape
    configs = {f"tight-s{s}": PoolConfig(slack=s) for s in a.slack}
    variants = (Variant(name="stock", schedule="1F1B"),) + tuple(
        Variant(name=name, schedule="1F1B", pooled=True, config=cfg)
        for name, cfg in configs.items()
    )
    spec = ParitySpec(
        pp=shape.pp,
        microbatches=shape.n_microbatches,
        steps=a.steps,
        hidden=a.hidden,
        seq_len=a.seq_len,
        rows_per_microbatch=a.rows,
        layers_per_stage=1,
        variants=variants,
        timeout_s=a.timeout,
    )
    boundary = harness_boundary(rows=a.rows, seq_len=a.seq_len, hidden=a.hidden)
    print(
        f"# Kimi-K3 schedule shape ({PRESET}): {shape.describe()}; "
        f"boundary {a.rows} x {a.seq_len} x {a.hidden} float32 = "
        f"{boundary.forward_bytes} B per set; {a.steps} steps; gloo on 127.0.0.1"
    )
    t0 = time.perf_counter()
    report = run_parity(spec)
    wall = time.perf_counter() - t0
    import torch

    print(f"# torch {torch.__version__}, launch wall {wall:.1f} s")
    cols = (
        "variant",
        "stage",
        "counted_B",
        "model_B",
        "ratio",
        "sets",
        "model_sets",
        "rehomes",
        "rehomed_B",
        "bitwise",
    )
    rows = []
    worst = 0.0
    for res in report.variants:
        cfg = configs.get(res.name, PoolConfig())
        model = model_memory(shape, boundary, cfg)
        column = "pooled" if res.pooled else "stock"
        for stage in sorted(res.recv):
            recv = res.recv[stage]
            counted = sum(recv[d]["bytes"] for d in DIRECTIONS)  # ring storages + re-homed ones
            sets = sum(recv[d]["storages"] for d in DIRECTIONS)
            rehomes = sum(recv[d].get("rehomes", 0) for d in DIRECTIONS)
            rehomed = sum(recv[d].get("rehomed_bytes", 0) for d in DIRECTIONS)
            want = model.stage_bytes(stage, column)
            want_sets = sum(model.row(stage, d).sets(column) for d in DIRECTIONS)
            ratio = counted / want if want else (1.0 if counted == 0 else float("inf"))
            worst = max(worst, abs(ratio - 1.0))
            rows.append(
                (
                    res.name,
                    stage,
                    counted,
                    want,
                    f"{ratio:.3f}",
                    sets,
                    want_sets,
                    rehomes,
                    rehomed,
                    "ref" if res.reference is None else res.bitwise_equal,
                )
            )
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(cols)]
    print("  ".join(str(c).rjust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(str(v).rjust(w) for v, w in zip(r, widths)))
    pooled = [v for v in report.variants if v.pooled]
    print(
        f"# every pooled variant bitwise equal to stock: {all(v.bitwise_equal for v in pooled)}; "
        f"largest |counted/model - 1| over all stages: {worst:.3f}"
    )
    return 0 if report.bitwise_equal else 1


if __name__ == "__main__":
    sys.exit(main())
