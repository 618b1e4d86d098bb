"""Receive bytes per rank for multi-stage schedules on CPU gloo: stock, per-stage rings, \
rank-shared rings, live set.

Per (pp, M) one gloo launch runs every multi-stage schedule pooltk pools (Interleaved1F1B,
LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV; two stages per rank) as

- ``stock``: torch's own buffers;
- ``per-stage``: ``schedule="auto"``, one ring per (stage, direction), ``sharing="stage"``;
- ``rank``: ``schedule="auto"``, ``sharing="rank"`` ([Note: rank-shared rings] in
  pooltk/analysis/sharing.py), at the default slack (2 / 1) and at slack 0,

each pooled variant compared bit for bit with stock. Per rank the table gives the bytes of the
distinct storages behind the rank's receive buffers at the end of the run, both directions
(:func:`pooltk.parity.worker.measure_rank_recv_storage`: a ring shared by two stages counted once),
and ``live``: the rank's live set from the schedule's action order (slack 0 rank rings, in bytes),
``model``: what :func:`pooltk.memory.model.model_memory` says the rank-shared rings at the default
slack hold (``expected_rank_bytes``, the memory model per rank). Ratios: ``rank/stock``,
``rank/per-stage``, ``rank0/live`` (1.000 when slack 0 holds exactly the live set) and
``rank/model``.

Stock's count on a V schedule includes what each same-rank handoff gave a microbatch: torch leaves
those tensors in the recv infos until the next step; pooltk lets them go after the chunk's backward.

Usage: .venv/bin/python benchmarks/bench_rank_rings.py [--pp 2 4] [--microbatches 8 16] [--csv FILE]
"""

from __future__ import annotations

import argparse
import csv
import sys
import time

from pooltk.parity.experiments import Harness
from pooltk.analysis.lifetimes import DIRECTIONS, ScheduleShape, analyse
from pooltk.analysis.programs import resolve_schedule
from pooltk.analysis.sharing import rank_rings
from pooltk.memory.model import harness_boundary, model_memory
from pooltk.memory.shape import PipelineShape
from pooltk.parity import ParitySpec, Variant, run_parity

SCHEDULES = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
VPP = 2
CONFIGS = {
    "per-stage": Harness(sharing="stage"),
    "rank": Harness(sharing="rank"),
    "rank0": Harness(slack=0, grad_slack=0, sharing="rank"),
}


def _rank0_size(live: int, receives: int, direction: str) -> int:
    """K of a rank-shared ring at slack 0 (what the ``rank0`` variant keeps)."""
    return CONFIGS["rank0"].ring_size(live=live, receives=receives, direction=direction)


def _variants(name: str) -> tuple[Variant, ...]:
    base = dict(schedule=name, stages_per_rank=VPP)
    return (Variant(name=f"{name}/stock", **base),) + tuple(
        Variant(name=f"{name}/{k}", pooled=True, config=c, install_schedule="auto", **base)
        for k, c in CONFIGS.items()
    )


def _rank_bytes(v, rank: int) -> int:
    return sum(v.rank_recv[rank].get(d, {}).get("bytes", 0) for d in DIRECTIONS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pp", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--microbatches", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--schedules", nargs="+", default=list(SCHEDULES))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--csv", default=None, help="also write the rows to this CSV")
    a = ap.parse_args(argv)

    rows, unequal = [], []
    t0 = time.perf_counter()
    for pp in a.pp:
        for m in a.microbatches:
            names = [n for n in a.schedules if not (n == "DualPipeV" and m < pp * VPP)]
            spec = ParitySpec(
                pp=pp,
                microbatches=m,
                steps=a.steps,
                timeout_s=a.timeout,
                variants=tuple(v for n in names for v in _variants(n)),
            )
            report = run_parity(spec)
            set_bytes = report.boundary_bytes
            for name in names:
                got = {k: report.variant(f"{name}/{k}") for k in ("stock", *CONFIGS)}
                unequal += [f"{name} pp{pp} M{m} {k}" for k in CONFIGS if not got[k].bitwise_equal]
                prog, spans = analyse(
                    ScheduleShape(
                        schedule=resolve_schedule(name)[1],
                        pp=pp,
                        n_microbatches=m,
                        stages_per_rank=VPP,
                    )
                )
                live = rank_rings(prog, spans, _rank0_size)
                boundary = harness_boundary(
                    rows=spec.rows_per_microbatch, seq_len=spec.seq_len, hidden=spec.hidden
                )
                model = model_memory(
                    PipelineShape(pp=pp, n_microbatches=m, schedule=name, stages_per_rank=VPP),
                    boundary,
                    CONFIGS["rank"].config,
                    sharing=CONFIGS["rank"].sharing,
                ).expected_rank_bytes()
                for rank in sorted(got["stock"].rank_recv):
                    row = {
                        "schedule": name,
                        "pp": pp,
                        "vpp": VPP,
                        "M": m,
                        "rank": rank,
                        "stock": _rank_bytes(got["stock"], rank),
                        "per_stage": _rank_bytes(got["per-stage"], rank),
                        "rank_bytes": _rank_bytes(got["rank"], rank),
                        "rank0": _rank_bytes(got["rank0"], rank),
                        "live": sum(r.size for r in live if r.rank == rank) * set_bytes,
                        "model": model[rank].pooled_bytes,
                        "bitwise": all(got[k].bitwise_equal for k in CONFIGS),
                    }
                    rows.append(row)
    wall = time.perf_counter() - t0

    def ratio(x: int, y: int) -> str:
        return f"{x / y:.3f}" if y else "-"

    head = (
        "schedule",
        "pp",
        "M",
        "rank",
        "stock B",
        "per-stage B",
        "rank B",
        "rank0 B",
        "live B",
        "rank/stock",
        "rank/per-stage",
        "rank0/live",
        "rank/model",
        "bitwise",
    )
    print(
        f"# receive bytes per rank, gloo on 127.0.0.1, {a.steps} steps per variant, one set = "
        f"{report.boundary_bytes} B; {wall:.0f} s"
    )
    print(" | ".join(head))
    for r in rows:
        print(
            " | ".join(
                str(x)
                for x in (
                    r["schedule"],
                    r["pp"],
                    r["M"],
                    r["rank"],
                    r["stock"],
                    r["per_stage"],
                    r["rank_bytes"],
                    r["rank0"],
                    r["live"],
                    ratio(r["rank_bytes"], r["stock"]),
                    ratio(r["rank_bytes"], r["per_stage"]),
                    ratio(r["rank0"], r["live"]),
                    ratio(r["rank_bytes"], r["model"]),
                    r["bitwise"],
                )
            )
        )
    tot = {
        k: sum(r[k] for r in rows)
        for k in ("stock", "per_stage", "rank_bytes", "rank0", "live", "model")
    }
    print(
        f"total | rank/stock {ratio(tot['rank_bytes'], tot['stock'])} | rank/per-stage "
        f"{ratio(tot['rank_bytes'], tot['per_stage'])} | "
        f"rank0/live {ratio(tot['rank0'], tot['live'])} | "
        f"rank/model {ratio(tot['rank_bytes'], tot['model'])}"
    )
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if unequal:
        print("NOT bitwise equal to stock: " + ", ".join(unequal), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
