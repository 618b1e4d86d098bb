"""``torchrun --nproc-per-node N -m pooltk.parity [pooltk parity flags]``.

The launcher multi-node users already have: torchrun sets RANK / WORLD_SIZE / MASTER_*;
this joins with ``env://`` (NCCL when CUDA is available, else gloo), runs the same
variants as ``pooltk parity`` on this rank's stage, gathers on rank 0, and rank 0 prints
the report (``--json`` for machine-readable). Exit status 1 on every rank unless bitwise equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    from pooltk.cli.parity import print_report, register, spec_from_args
    from pooltk.parity.launch import _gather
    from pooltk.parity.worker import run_in_group

    if "RANK" not in os.environ:
        print("pooltk.parity: RANK is not set; run under torchrun (torchrun --nproc-per-node N -m pooltk.parity), "
              "or use `pooltk parity`, which spawns its own gloo ranks.", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="python -m pooltk.parity")
    register(parser)
    args = parser.parse_args(argv)
    if "--pp" not in (argv if argv is not None else sys.argv[1:]):
        args.pp = int(os.environ["WORLD_SIZE"])
    spec = spec_from_args(args)
    import time

    t0 = time.perf_counter()
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}") if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    records = run_in_group(spec, rank, world, device)
    gathered: list = [None] * world if rank == 0 else None  # type: ignore[assignment]
    dist.gather_object(records, gathered, dst=0)
    ok = torch.tensor([1], device=device)
    if rank == 0:
        report = _gather(spec, gathered, wall_s=time.perf_counter() - t0)
        if args.json:
            print(json.dumps(report.to_dict(), indent=2))
        else:
            print_report(report)
        ok[0] = int(report.bitwise_equal)
    dist.broadcast(ok, src=0)
    dist.destroy_process_group()
    return 0 if int(ok[0]) else 1


if __name__ == "__main__":
    sys.exit(main())
