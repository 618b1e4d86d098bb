"""One torchtitan rank for the suite: the user's entry, observed (run by titan_suite.py under torchrun).

    torchrun --nproc-per-node 2 tools/integration/titan_rank.py --record FILE <entry arguments>

Runs ``pooltk.integrations.torchtitan.main`` with ``<entry arguments>`` (``--pooltk.*`` and
torchtitan's own), exactly the code path of ``-m pooltk.integrations.torchtitan``, and observes
three things without changing what runs: every ``PipelineStage`` built (a reference kept at
construction), every ``MetricsProcessor.log`` call's step and losses (the float values torchtitan
prints with 5 decimals, kept as ``float.hex``), and after training this rank's receive bytes per
stage (``pooltk.parity.measure_recv_storage``), each pooled ring's size and re-home count
(copy on conflict), and a sha256 of its stages' parameter bytes. One JSON
line per rank goes to ``FILE``; a rank that raises writes the error and exits 3.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback


def _observe(stages: list, logged: list) -> None:
    import torch.distributed.pipelining.stage as stage_mod
    from torchtitan.components.metrics import MetricsProcessor

    base_init = stage_mod._PipelineStageBase.__init__

    def init(self, *args, **kwargs):
        base_init(self, *args, **kwargs)
        stages.append(self)

    stage_mod._PipelineStageBase.__init__ = init
    base_log = MetricsProcessor.log

    def log(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs):
        logged.append({"step": int(step), "loss": float(global_avg_loss).hex(),
                       "grad_norm": float(grad_norm).hex(), "t": time.perf_counter()})
        return base_log(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs)

    MetricsProcessor.log = log


def _params_sha256(stages: list) -> str:
    import torch

    h = hashlib.sha256()
    for stage in sorted(stages, key=lambda s: s.stage_index):
        for name, p in sorted(stage.submod.named_parameters()):
            h.update(f"{stage.stage_index}.{name}".encode())
            t = p.detach()
            t = t.full_tensor() if hasattr(t, "full_tensor") else t
            h.update(t.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "--record":
        raise SystemExit("usage: titan_rank.py --record FILE <pooltk.integrations.torchtitan arguments>")
    record_path, entry_args = args[1], args[2:]
    from pooltk.integrations import torchtitan as entry

    options, _ = entry.options_from(entry_args)
    entry.force_device(options.device)  # what main() does first; here so the observers can import torchtitan
    stages: list = []
    logged: list = []
    _observe(stages, logged)
    rank = int(os.environ.get("RANK", "0"))
    record: dict = {"rank": rank}
    try:
        entry.main(entry_args)
    except BaseException as exc:  # noqa: BLE001 - the error is the variant's outcome
        record.update(ok=False, error_type=type(exc).__name__, error=str(exc)[:600],
                      traceback=traceback.format_exc()[-1500:])
        with open(record_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        os._exit(3)
    import pooltk
    import torch
    from pooltk.parity import measure_recv_storage

    report = pooltk.installed()
    record.update(ok=True, torch=torch.__version__, logged=logged,
                  installed=bool(report is not None and report.installed),
                  recv={str(s.stage_index): measure_recv_storage(s) for s in stages},
                  rings={str(s.stage_index): {d: {"size": getattr(r, "size", None), "rehomes": getattr(r, "rehomes", None)}
                                              for d, r in pooltk.stage_rings(s).items()} for s in stages},
                  params_sha256=_params_sha256(stages))
    with open(record_path, "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
