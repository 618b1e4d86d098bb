"""One torchtitan rank for the suite: the user's entry, observed (run by titan_suite.py under
torchrun).

    torchrun --nproc-per-node 2 tools/integration/titan_rank.py --record FILE [--fresh] \
        [--input-hook] <entry arguments>

Runs ``pooltk.integrations.torchtitan.main`` with ``<entry arguments>`` (``--pooltk.*`` and
torchtitan's own), exactly the code path of ``-m pooltk.integrations.torchtitan``, and observes
three things without changing what runs: every ``PipelineStage`` built (a reference kept at
construction), every ``MetricsProcessor.log`` call's step and losses (the float values torchtitan
prints with 5 decimals, kept as ``float.hex``), and after training this rank's receive bytes per
stage (``pooltk.parity.measure_recv_storage``), each pooled ring's size and re-home count
(copy on conflict), the most gradient hooks on one receive buffer per stage and direction, and a
sha256 of its stages' parameter bytes. One JSON line per rank goes to ``FILE``; a rank that
raises writes the error and exits 3.

``--fresh`` (with ``--pooltk.enable=false``): every stage is made fresh right after it is built
(``pooltk.parity.fresh.fresh_stage``: every receive lands in a newly allocated buffer, the
reference a pool is judged against besides stock), the one change to what runs; the record says
per stage what ``fresh_stage`` found, how many buffers were posted to receives and how many
distinct storages those were (all kept alive until the run ends, so a reused storage would show).
``--input-hook``: every stage but the first hooks its received input's gradient
(``ranks.hook_received_inputs``, the pattern of pytorch issue #185331).
``--rings JSON``: the entry installs pooltk with this ``pooltk.parity.experiments.Harness`` (a ring
no user chooses, such as Automodel's single ring) through the harness seam, in place of its own
config.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import traceback


def _observe(
    stages: list, logged: list, fresh: dict | None = None, input_hook: bool = False
) -> None:
    import torch.distributed.pipelining.stage as stage_mod
    from torchtitan.components.metrics import MetricsProcessor

    from pooltk.pool.torch_compat.bind import Hooks, bind

    def init(stage: object, call: object, result: None) -> None:
        stages.append(stage)
        if fresh is not None:  # on the stage object: the subclass's __init__ leaves it
            from pooltk.parity.fresh import fresh_stage

            posted: list = []
            fresh[id(stage)] = (fresh_stage(stage, posted=posted), posted)
        if input_hook and not stage.is_first:
            from ranks import hook_received_inputs  # tools/integration: this script's folder

            hook_received_inputs(stage.submod)

    bind(stage_mod._PipelineStageBase, {"__init__": Hooks(after=init)}, tag="titan-observe")
    base_log = MetricsProcessor.log

    def log(self, step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs):
        logged.append(
            {
                "step": int(step),
                "loss": float(global_avg_loss).hex(),
                "grad_norm": float(grad_norm).hex(),
                "t": time.perf_counter(),
            }
        )
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


def _fresh_posts(report, posted: list) -> dict:
    """What fresh_stage did on one stage, and the buffers it handed to receives: count and distinct
    storages."""
    return {
        "layout": report.layout,
        "bound": report.bound,
        "posts": len(posted),
        "post_storages": len({b.untyped_storage().data_ptr() for _, b in posted}),
    }


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 2 or args[0] != "--record":
        raise SystemExit(
            "usage: titan_rank.py --record FILE [--fresh] [--input-hook] [--rings JSON] "
            "<pooltk.integrations.torchtitan arguments>"
        )
    record_path, entry_args = args[1], args[2:]
    use_fresh = entry_args[:1] == ["--fresh"]
    entry_args = entry_args[1:] if use_fresh else entry_args
    input_hook = entry_args[:1] == ["--input-hook"]
    entry_args = entry_args[1:] if input_hook else entry_args
    rings = json.loads(entry_args[1]) if entry_args[:1] == ["--rings"] else None
    entry_args = entry_args[2:] if rings is not None else entry_args
    from pooltk.integrations import torchtitan as entry

    if rings is not None:  # [Note: the harness seam]: the same entry, the harness's rings
        from pooltk.parity import experiments
        from pooltk.parity.experiments import Harness

        entry.install = lambda options: experiments.install(
            Harness(
                **{"slack": options.config.slack, "grad_slack": options.config.grad_slack, **rings}
            ),
            schedule=options.schedule,
        )
    options, _ = entry.options_from(entry_args)
    entry.force_device(
        options.device
    )  # what main() does first; here so the observers can import torchtitan
    stages: list = []
    logged: list = []
    fresh: dict | None = {} if use_fresh else None
    _observe(stages, logged, fresh, input_hook)
    rank = int(os.environ.get("RANK", "0"))
    record: dict = {"rank": rank}
    try:
        entry.main(entry_args)
    except BaseException as exc:  # noqa: BLE001 - the error is the variant's outcome
        record.update(
            ok=False,
            error_type=type(exc).__name__,
            error=str(exc)[:600],
            traceback=traceback.format_exc()[-1500:],
        )
        with open(record_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        os._exit(3)
    import pooltk
    import torch
    from pooltk.parity import measure_recv_storage
    from pooltk.parity.worker import max_hooks, measure_rank_recv_storage

    report = pooltk.installed()
    record.update(
        ok=True,
        torch=torch.__version__,
        logged=logged,
        installed=bool(report is not None and report.installed),
        recv={str(s.stage_index): measure_recv_storage(s) for s in stages},
        rank_recv=measure_rank_recv_storage(list(stages)),
        rings={
            str(s.stage_index): {
                d: {"size": getattr(r, "size", None), "rehomes": getattr(r, "rehomes", None)}
                for d, r in pooltk.stage_rings(s).items()
            }
            for s in stages
        },
        hooks={str(s.stage_index): max_hooks(s) for s in stages},
        params_sha256=_params_sha256(stages),
    )
    if fresh is not None:
        record["fresh"] = {str(s.stage_index): _fresh_posts(*fresh[id(s)]) for s in stages}
    with open(record_path, "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
