"""One pooled stage on one device with the kernels real stacks launch: re-homes and receive-buffer \
memory.

    python -m tools.gpu_check [--device cuda|cpu] [--microbatches 16] [--steps 3] [--json PATH]

Stage 1 of a 4-stage 1F1B pipeline runs alone on a fake process group ([Note: one stage alone] in
pooltk/parity/one_stage.py), twice: stock, then pooled (``pooltk.pool_stage``). Its first op is a
kernel launched on the received input through a Python launcher that reads the input's address: a
real ``@triton.jit`` kernel on CUDA where Triton is installed, else the same launch done by hand
(``data_ptr()`` read, then the op); then a layer compiled with inductor. Reported per variant:
re-homes, receive storages held at once (counted at the P2P layer) and their bytes, and on CUDA the
caching allocator's peak (``torch.cuda.max_memory_allocated``) over the run. The claim: the pooled
stage re-homes nothing and holds the ring (K sets) where stock holds M. Exit status 1 when the claim
fails.

On CPU it runs in the suite (tests/parity/test_gpu_check.py); on a GPU it is the one prepared device
check of issue #26 (docs/safety.md says where it has and has not been run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

HIDDEN, ROWS, SEQ, STAGE, STAGES = 256, 4, 64, 1, 4


def _triton_scale():  # noqa: ANN202 - None where triton cannot run
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # noqa: N803 - triton's spelling
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)

    def launch(x: torch.Tensor, out: torch.Tensor) -> None:
        n = x.numel()
        scale[(triton.cdiv(n, 1024),)](
            x, out, n, BLOCK=1024
        )  # the launcher reads x.data_ptr(), out.data_ptr()

    return launch


class _Scale(torch.autograd.Function):
    """y = 2x through a kernel launched from Python on the received input (and on the gradient in
    backward)."""

    launch: Any = None
    reads = 0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _Scale._run(x.contiguous(), out)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(grad)
        _Scale._run(grad.contiguous(), out)
        return out

    @staticmethod
    def _run(x: torch.Tensor, out: torch.Tensor) -> None:
        if _Scale.launch is not None and x.is_cuda:
            _Scale.launch(x, out)
        else:  # the launcher's part done by hand: read the addresses, then run the op
            x.data_ptr(), out.data_ptr()
            torch.mul(x, 2.0, out=out)
        _Scale.reads += 2


class Stage(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.compile(
            torch.nn.Sequential(torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh()),
            backend="inductor",
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.layer(_Scale.apply(x))


def _variant(pooled: bool, device: torch.device, m: int, steps: int) -> dict[str, Any]:
    import pooltk
    from pooltk.parity.one_stage import run_steps, static_schedule, static_stage
    from pooltk.parity.recv_counter import RecvCounter

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    stage = static_stage(Stage().to(device), STAGE, STAGES, torch.zeros(ROWS, SEQ, HIDDEN), device)
    if pooled:
        pooltk.pool_stage(stage)
    counter = RecvCounter()
    counter.watch(stage)
    schedule = static_schedule(stage, m, lambda o, t: ((o - t) ** 2).mean())
    batch = torch.randn(ROWS * m, SEQ, HIDDEN, device=device)
    t0 = time.perf_counter()
    for _ in range(steps):
        counter.start_step()
        run_steps(schedule, stage, batch)
    if device.type == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    state = pooltk.stage_state(stage)
    use = {u.direction: u.to_dict() for u in state.usage(STAGE)} if state is not None else {}
    counts = counter.as_dict()
    out = {
        "variant": "pooled" if pooled else "stock",
        "device": str(device),
        "microbatches": m,
        "steps": steps,
        "rehomes": sum(u["rehomes"] for u in use.values()),
        "rings": {d: u["ring"] for d, u in use.items()},
        "recv_peak_storages": {d: c["peak"] for d, c in counts.items()},
        "recv_peak_bytes": sum(c["peak_bytes"] for c in counts.values()),
        "wall_s": round(wall, 3),
        "address_reads": _Scale.reads,
    }
    if device.type == "cuda":
        out["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated() - base
    if pooled:
        pooltk.unpool_stage(stage)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    from pooltk.parity.one_stage import fake_group

    device = torch.device(args.device)
    _Scale.launch = _triton_scale() if device.type == "cuda" else None
    with fake_group(STAGE, STAGES):
        rows = [_variant(p, device, args.microbatches, args.steps) for p in (False, True)]
    stock, pooled = rows
    fwd_k = pooled["rings"].get("forward", 0)
    claim = {
        "kernel": "triton"
        if _Scale.launch is not None
        else "launcher by hand (data_ptr read, then the op)",
        "pooled_rehomes": pooled["rehomes"],
        "pooled_forward_storages": pooled["recv_peak_storages"]["forward"],
        "stock_forward_storages": stock["recv_peak_storages"]["forward"],
        "holds_the_ring": pooled["rehomes"] == 0
        and pooled["recv_peak_storages"]["forward"] == fwd_k
        and stock["recv_peak_storages"]["forward"] == args.microbatches,
    }
    result = {"torch": torch.__version__, "rows": rows, "claim": claim}
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text)
    return 0 if claim["holds_the_ring"] else 1


if __name__ == "__main__":
    sys.exit(main())
