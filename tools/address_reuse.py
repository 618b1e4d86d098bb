"""Do receive buffers share addresses within a step under stock torch? Measured on gloo ranks, CPU.

    python -m tools.address_reuse [--python PY] [--csv PATH]

Runs stock ``Schedule1F1B`` (no pooltk) at pp4 for a few stage models and records, for every receive
a stage posts, the address of the tensor it receives into (``data_ptr()`` of the ``P2POp``'s tensor)
and whether an earlier receive of the same step had that address and was already freed. Under torch
2.15's per-receive buffers a freed buffer's block goes back to the allocator, which may hand it to
the next receive of the step: then two microbatches of one step see one address, and a cache keyed
by ``data_ptr()`` answers the second with the first's entry. Under torch <= 2.14 stock keeps one
buffer per microbatch for the whole run, so addresses repeat every step instead. ``--python`` runs
the ranks under another interpreter (a torch 2.15 venv, e.g. one
``python -m tools.compat_matrix --keep-envs`` built). The record is
``data/validation/address_reuse_<date>.csv`` (docs/safety.md, "The contract").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any

MODELS = {
    "linear-tanh h16": (16, "linear"),
    "linear-tanh h7 (a boundary size no other tensor has)": (7, "widen"),
    "linear-tanh h512": (512, "linear"),
}
PP, MICROBATCHES, STEPS, ROWS, SEQ = 4, 8, 3, 2, 4


def _recorder(rows: list, state: dict, name: str, rank: int, direction: str) -> Any:
    """An after-hook on a receive-ops method: one row per receive, its address and storage."""
    import torch

    def freed(key: int) -> None:
        state["live"].pop(key, None)

    def after(stage: Any, call: Any, ops: Any) -> Any:
        for op in ops or ():
            t = op.tensor
            storage = t.untyped_storage()
            addr, key = t.data_ptr(), storage._cdata
            earlier = state["seen"].get((direction, addr))
            new_storage = key not in state["live"]
            if new_storage:
                state["live"][key] = weakref.finalize(storage, freed, key)
            rows.append(
                {
                    "torch": torch.__version__,
                    "model": name,
                    "stage": rank,
                    "direction": direction,
                    "step": state["step"],
                    "microbatch": call.chunk,
                    "address": addr,
                    "bytes": storage.nbytes(),
                    "new_storage": new_storage,
                    "address_seen_this_step_for": -1 if earlier is None else earlier,
                }
            )
            state["seen"][(direction, addr)] = call.chunk
        return ops

    return after


def _module(kind: str, hidden: int, stage: int):  # noqa: ANN202
    import torch
    from torch import nn

    torch.manual_seed(stage)

    class Stage(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(hidden, 3 * hidden if kind == "widen" else hidden)
            self.out = nn.Linear(3 * hidden, hidden) if kind == "widen" else None

        def forward(self, x):  # noqa: ANN001, ANN202
            h = torch.tanh(self.lin(x))
            return x + (self.out(h) if self.out is not None else h)

    return Stage()


def rank_main(rank: int, world: int, port: int, out: Path) -> None:
    import datetime

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    from pooltk.pool.torch_compat.bind import Hooks, bind

    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=300)
    store = dist.TCPStore("127.0.0.1", port, world + 1, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    rows: list[dict[str, Any]] = []
    for name, (hidden, kind) in MODELS.items():
        stage = PipelineStage(_module(kind, hidden, rank), rank, world, torch.device("cpu"))
        state = {"step": -1, "live": {}, "seen": {}}
        hooks = {
            method: Hooks(after=_recorder(rows, state, name, rank, direction))
            for method, direction in (("get_fwd_recv_ops", "forward"), ("get_bwd_recv_ops", "grad"))
        }
        bind(stage, hooks, tag="address-reuse")
        schedule = Schedule1F1B(
            stage,
            n_microbatches=MICROBATCHES,
            loss_fn=lambda o, t: torch.nn.functional.mse_loss(o, t),
        )
        for step in range(STEPS):
            state["step"], state["seen"] = step, {}
            x = torch.randn(ROWS * MICROBATCHES, SEQ, hidden)
            y = torch.randn(ROWS * MICROBATCHES, SEQ, hidden)
            schedule.step(
                *((x,) if rank == 0 else ()), **({"target": y} if rank == world - 1 else {})
            )
        dist.barrier()
    (out / f"rank{rank}.json").write_text(json.dumps(rows))
    dist.destroy_process_group()


def measure(python: str) -> list[dict[str, Any]]:
    import torch.distributed as dist

    from pooltk.parity.procs import run_processes

    store = dist.TCPStore("127.0.0.1", 0, PP + 1, is_master=True, wait_for_workers=False)
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONPATH=str(Path.cwd()))
    with tempfile.TemporaryDirectory(prefix="pooltk-addresses-") as tmp:
        out = Path(tmp)
        argvs = [
            [
                python,
                "-m",
                "tools.address_reuse",
                "--rank",
                str(r),
                str(PP),
                str(store.port),
                str(out),
            ]
            for r in range(PP)
        ]
        launch = run_processes(
            argvs, logs=[out / f"rank{r}.log" for r in range(PP)], env=env, timeout_s=600, grace_s=5
        )
        del store
        missing = [r for r in range(PP) if not (out / f"rank{r}.json").exists()]
        if missing:
            raise RuntimeError(
                f"address_reuse: ranks {missing} wrote nothing ({launch.codes}):\n"
                + (out / f"rank{missing[0]}.log").read_text()[-3000:]
            )
        return [row for r in range(PP) for row in json.loads((out / f"rank{r}.json").read_text())]


def summary(rows: list[dict[str, Any]]):  # noqa: ANN201 - a pandas DataFrame
    """Per model, stage, direction and step: receives, distinct addresses, receives into a reused
    address."""
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[df["step"] >= 1]  # step 0 also runs torch's shape inference
    g = df.groupby(["torch", "model", "stage", "direction", "step"])
    return g.agg(
        receives=("address", "size"),
        distinct_addresses=("address", "nunique"),
        reused_within_step=("address_seen_this_step_for", lambda s: int((s >= 0).sum())),
        new_storages=("new_storage", "sum"),
    ).reset_index()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--rank":
        rank_main(int(argv[1]), int(argv[2]), int(argv[3]), Path(argv[4]))
        return 0
    p = argparse.ArgumentParser(
        prog="python -m tools.address_reuse", description=__doc__.splitlines()[0]
    )
    p.add_argument(
        "--python",
        nargs="+",
        default=[sys.executable],
        help="interpreters whose torch runs the ranks, one launch each (default: this one)",
    )
    p.add_argument("--csv", type=Path, default=None, help="write the per-step summary here")
    args = p.parse_args(argv)
    table = summary([row for py in args.python for row in measure(py)])
    print(table.to_string(index=False))
    if args.csv is not None:
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
