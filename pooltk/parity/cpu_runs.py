"""Real training logs of pooltk's own CPU runs, in NeMo Automodel's ``training.jsonl`` schema.

The parity harness trains its small model on gloo ranks at two row lengths, stock and
pooled, and every optimizer step becomes one Automodel training record. These are real
measurements of this machine, regenerable with ``pooltk cpu-runs``, so the log readers
and the 1k-vs-2k notebook can be exercised on logs whose provenance is known end to end.

[Note: CPU log fields]
- ``loss``: mean of the last stage's per-microbatch MSE losses of the step.
- ``grad_norm``: global L2 norm of all stages' gradients before the optimizer step.
- ``lr``: the SGD learning rate (constant).
- ``mem``: peak resident set size of the largest rank process so far, GiB (2**30). It is
  NOT a GPU allocator figure (there is no GPU): the sidecar says so.
- ``tps``: tokens of the step (rows x seq_len) / the slowest rank's step time.
- ``tps_per_gpu``: ``tps / cp / dp`` as Automodel computes it (cp = dp = 1 here), which
  ignores PP: with pp ranks it is pp times the rate per process.
- ``mfu``: null (no meaningful peak FLOP/s for these CPU runs).
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pooltk.config import PoolConfig
from pooltk.parity.launch import run_parity
from pooltk.parity.spec import ParitySpec, Variant

__all__ = ["write_cpu_runs"]


def _records(report: Any, variant_name: str, spec: ParitySpec) -> list[dict[str, Any]]:
    v = report.variant(variant_name)
    tokens = spec.rows * spec.seq_len
    recs = []
    for step, mb_losses in enumerate(v.losses):
        step_time = max(times[step] for times in v.step_times_s.values())
        rss = max(r[step] for r in v.peak_rss_by_step.values())
        tps = tokens / step_time
        recs.append({
            "step": step,
            "epoch": 0,
            "timestamp": datetime.fromtimestamp(v.step_end_unix[step], tz=timezone.utc),
            "loss": sum(mb_losses) / len(mb_losses),
            "grad_norm": v.grad_norm[step],
            "lr": spec.lr,
            "mem": rss / 2**30,
            "tps": tps,
            "tps_per_gpu": tps,  # tps / cp / dp with cp = dp = 1: Automodel's convention, ignores PP
            "mfu": None,
            "num_tokens_per_step": tokens,
            "num_label_tokens": tokens,
        })
    return recs


def write_cpu_runs(
    out_dir: str | os.PathLike[str],
    *,
    seq_lens: tuple[int, ...] = (32, 64),
    pp: int = 4,
    microbatches: int = 16,
    steps: int = 20,
    hidden: int = 128,
    rows_per_microbatch: int = 2,
    config: PoolConfig | None = None,
    progress: Any = None,
) -> list[Path]:
    """Run stock and pooled training at each row length and write ``cpu_seq{L}_{stock|pooled}_training.jsonl``.

    Each log gets a ``*.meta.json`` sidecar with the run's shape, the pool config, the
    torch version, this host, the command and [Note: CPU log fields]. Returns the paths written.
    """
    import torch

    from pooltk.logs.jsonl_writer import write_training_jsonl

    config = config or PoolConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for seq_len in seq_lens:
        spec = ParitySpec(pp=pp, microbatches=microbatches, steps=steps, hidden=hidden, seq_len=seq_len,
                          rows_per_microbatch=rows_per_microbatch, timeout_s=900, variants=(
                              Variant(name="stock"), Variant(name="pooled", pooled=True, config=config)))
        if progress:
            progress(f"seq_len {seq_len}: pp{pp} x {microbatches} microbatches x {steps} steps, stock and pooled")
        report = run_parity(spec)
        if not report.bitwise_equal:
            raise RuntimeError(f"seq_len {seq_len}: pooled run diverged from stock; refusing to write its logs")
        for name in ("stock", "pooled"):
            stem = f"cpu_seq{seq_len}_{name}_training"
            path = write_training_jsonl(out / f"{stem}.jsonl", _records(report, name, spec))
            v = report.variant(name)
            meta = {
                "what": "pooltk parity harness on CPU (gloo ranks on one machine): a real run, not a GPU measurement",
                "run": f"cpu_seq{seq_len}_{name}",
                "pp": pp, "tp": 1, "cp": 1, "dp": 1, "world_size": pp,
                "microbatches": microbatches, "micro_batch_size": rows_per_microbatch,
                "global_batch_size": spec.rows, "seq_len": seq_len, "hidden": hidden,
                "layers_per_stage": spec.layers_per_stage, "steps": steps,
                "pooled": name == "pooled", "pool_config": config.to_dict() if name == "pooled" else None,
                "recv_buffer_bytes_per_stage": {str(s): v.recv[s]["forward"]["bytes"] + v.recv[s]["grad"]["bytes"]
                                                for s in sorted(v.recv)},
                "bitwise_equal_to_stock": report.bitwise_equal,
                "mem_basis": "peak resident set size of the largest rank process, GiB (not a GPU allocator figure)",
                "tps_per_gpu_basis": "tps / cp / dp as Automodel computes it; ignores PP (pp x the per-process rate)",
                "torch": torch.__version__,
                "python": platform.python_version(),
                "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "system": platform.system()},
                "command": " ".join(shlex.quote(a) for a in sys.argv) or "pooltk cpu-runs",
                "written": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            (out / f"{stem}.meta.json").write_text(json.dumps(meta, indent=2) + "\n")
            written += [path, out / f"{stem}.meta.json"]
    return written
