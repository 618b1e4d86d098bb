"""Real training logs of pooltk's own CPU runs, in NeMo Automodel's ``training.jsonl`` schema.

    python -m tools.cpu_runs [--out data/cpu_runs] [--seq-lens 16384 32768] [--pp 4]
        [--microbatches 16] [--steps 6] [--hidden 64]

Regenerates the shipped logs of ``data/cpu_runs/`` (about 10 minutes on 2 cores).

A 1F1B pipeline of residual blocks trains on 4 gloo ranks at two row lengths, stock and
pooled, each variant in its own fresh processes (:func:`pooltk.parity.rss.launch_rss`), the
launches interleaved stock, pooled, stock, pooled. Rows are long (16k and 32k tokens of a
64-wide hidden state) so that the receive buffers are a large part of each rank's memory and
the ``mem`` column shows what the pool changes. Every optimizer step becomes one Automodel
training record.

[Note: CPU log fields]
- ``loss``: mean of the last stage's per-microbatch MSE losses of the step.
- ``grad_norm``: global L2 norm of all stages' gradients before the optimizer step.
- ``lr``: the SGD learning rate (constant).
- ``mem``: the peak resident set size so far of the middle stage's rank (stage ``(pp - 1) // 2``,
  where stock holds ``2 M`` receive-buffer sets): ``VmHWM`` after the step, reset once after
  torch was imported and the process group was up, GiB (2**30). Not the largest rank: the last
  stage's peak is set by its target and merged outputs, which the pool does not change. It is
  NOT a GPU allocator figure (there is no GPU): the sidecar says so, and gives each rank's figure.
- ``tps``: tokens of the step (rows x seq_len) / the slowest rank's step time.
- ``tps_per_gpu``: ``tps / cp / dp`` as Automodel computes it (cp = dp = 1 here), which
  ignores PP: with pp ranks it is pp times the rate per process.
- ``mfu``: null (no meaningful peak FLOP/s for these CPU runs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pooltk.config import PoolConfig
from pooltk.parity.rss import RssLaunch, RssSpec, launch_rss

__all__ = ["main", "write_cpu_runs"]


def _records(launch: RssLaunch) -> list[dict[str, Any]]:
    spec = launch.spec
    tokens = spec.rows * spec.seq_len
    last = launch.ranks[-1]
    recs = []
    for step, mb_losses in enumerate(last.losses):
        step_time = max(r.step_times_s[step] for r in launch.ranks)
        hwm = launch.ranks[(spec.pp - 1) // 2].hwm_by_step[
            step
        ]  # a middle stage: see [Note: CPU log fields]
        tps = tokens / step_time
        recs.append(
            {
                "step": step,
                "epoch": 0,
                "timestamp": datetime.fromtimestamp(last.step_end_unix[step], tz=timezone.utc),
                "loss": sum(mb_losses) / len(mb_losses),
                "grad_norm": sum(r.grad_sq[step] for r in launch.ranks) ** 0.5,
                "lr": spec.lr,
                "mem": hwm / 2**30,
                "tps": tps,
                # tps / cp / dp with cp = dp = 1: Automodel's convention, ignores PP
                "tps_per_gpu": tps,
                "mfu": None,
                "num_tokens_per_step": tokens,
                "num_label_tokens": tokens,
            }
        )
    return recs


def write_cpu_runs(
    out_dir: str | os.PathLike[str],
    *,
    seq_lens: tuple[int, ...] = (16384, 32768),
    pp: int = 4,
    microbatches: int = 16,
    steps: int = 6,
    hidden: int = 64,
    rows_per_microbatch: int = 2,
    config: PoolConfig | None = None,
    progress: Any = None,
) -> list[Path]:
    """Run stock then pooled (fresh processes each) at each row length; write
    ``cpu_seq{L}_{stock|pooled}_training.jsonl``.

    Each log gets a ``*.meta.json`` sidecar with the run's shape, the pool config, the
    receive-buffer bytes and peak memory per stage, the torch version, this host, the command and
    [Note: CPU log fields]. Refuses to write a pair whose losses differ. Returns the paths written.
    """
    import torch

    from tools.jsonl_writer import write_training_jsonl

    config = config or PoolConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for seq_len in seq_lens:
        spec = RssSpec(
            pp=pp,
            microbatches=microbatches,
            steps=steps,
            hidden=hidden,
            seq_len=seq_len,
            rows_per_microbatch=rows_per_microbatch,
            layers_per_stage=2,
            timeout_s=900,
        )
        launches = {}
        for name, cfg in (("stock", None), ("pooled", config)):
            if progress:
                progress(
                    f"seq_len {seq_len}: "
                    f"pp{pp} x {microbatches} microbatches x {steps} steps, {name}"
                )
            launches[name] = launch_rss(spec, cfg)
        equal = launches["stock"].ranks[-1].losses == launches["pooled"].ranks[-1].losses
        if not equal:
            raise RuntimeError(
                f"seq_len {seq_len}: pooled losses differ from stock; refusing to write its logs"
            )
        for name, launch in launches.items():
            stem = f"cpu_seq{seq_len}_{name}_training"
            path = write_training_jsonl(out / f"{stem}.jsonl", _records(launch))
            meta = {
                "what": "pooltk's CPU pipeline on gloo ranks of one machine, "
                "each variant in fresh processes: a real run, not a GPU measurement",
                "run": f"cpu_seq{seq_len}_{name}",
                "pp": pp,
                "tp": 1,
                "cp": 1,
                "dp": 1,
                "world_size": pp,
                "microbatches": microbatches,
                "micro_batch_size": rows_per_microbatch,
                "global_batch_size": spec.rows,
                "seq_len": seq_len,
                "hidden": hidden,
                "layers_per_stage": spec.layers_per_stage,
                "steps": steps,
                "pooled": name == "pooled",
                "pool_config": config.to_dict() if name == "pooled" else None,
                "recv_buffer_bytes_per_stage": {
                    str(r.rank): r.recv["forward"]["bytes"] + r.recv["grad"]["bytes"]
                    for r in launch.ranks
                },
                "peak_rss_bytes_per_stage": {str(r.rank): r.hwm_by_step[-1] for r in launch.ranks},
                "peak_rss_growth_bytes_per_stage": {
                    str(r.rank): r.peak_delta for r in launch.ranks
                },
                "bitwise_equal_to_stock": equal,
                "mem_basis": "peak resident set size (VmHWM, reset after import) "
                "of the middle stage's rank process, GiB (not a GPU allocator figure)",
                "tps_per_gpu_basis": "tps / cp / dp as Automodel computes it; "
                "ignores PP (pp x the per-process rate)",
                "torch": torch.__version__,
                "python": platform.python_version(),
                "host": {
                    "machine": platform.machine(),
                    "cpus": os.cpu_count(),
                    "system": platform.system(),
                },
                "command": " ".join(shlex.quote(a) for a in sys.argv) or "python -m tools.cpu_runs",
                "written": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            (out / f"{stem}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
            written += [path, out / f"{stem}.meta.json"]
    return written


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cpu_runs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", default="data/cpu_runs", help="output folder (data/cpu_runs)")
    parser.add_argument(
        "--seq-lens", nargs="+", type=int, default=[16384, 32768], help="row lengths"
    )
    parser.add_argument("--pp", type=int, default=4, help="stages, one gloo rank each")
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=64)
    return parser


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit 2 naming the flag, what it found, what it needs and a fix, before any rank starts."""
    lows = {"--pp": 2, "--microbatches": max(args.pp, 2), "--steps": 1, "--hidden": 1}
    found = {"--pp": args.pp, "--microbatches": args.microbatches, "--steps": args.steps}
    found["--hidden"] = args.hidden
    for flag, value in [*found.items(), *(("--seq-lens", n) for n in args.seq_lens)]:
        low = lows.get(flag, 1)
        if value < low:
            parser.error(
                f"{flag}: found {value}; required {low} or more"
                + (" (1F1B needs one microbatch per stage)" if flag == "--microbatches" else "")
                + f". Fix: {flag} {low} or more, or leave it out for the default."
            )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
    paths = write_cpu_runs(
        args.out,
        seq_lens=tuple(args.seq_lens),
        pp=args.pp,
        microbatches=args.microbatches,
        steps=args.steps,
        hidden=args.hidden,
        progress=lambda m: print(f"[cpu-runs] {m}", file=sys.stderr, flush=True),
    )
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
