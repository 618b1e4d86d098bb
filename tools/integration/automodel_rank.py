"""One gloo rank of NeMo Automodel's AutoPipeline, training variants in order (run by run_suite.py).

Runs in the Automodel venv (.venvs/automodel). Per variant: a fresh tiny LlamaForCausalLM from a
LlamaConfig (no weights, fixed seed), AutoPipeline.build with the variant's pool, ``--steps`` SGD
steps on fixed random tokens, then one JSON line to ``--out``: losses (float.hex, bitwise), a sha256
of this rank's parameters, receive bytes per stage (pooltk.parity.measure_recv_storage), step times
(``*_input_hook``: every stage but the first hooks its received input's gradient,
``ranks.hook_received_inputs``), the most gradient hooks on one receive buffer per stage and
direction, or the error that stopped it. A variant that raises ends the launch (its peers see the
broken group); that is why such variants run last.

``fresh*`` variants are stock torch with every receive landing in a newly allocated buffer
(``pooltk.parity.fresh.fresh_stage`` on every stage AutoPipeline built, before the first step: the
reference a pool is judged against besides stock); their record says per stage what
``fresh_stage`` found and how many buffers were posted to receives and how many distinct storages
those were (all kept alive until the variant ends, so a reused storage would show).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

VOCAB, HIDDEN, SEQ = 128, 64, 16


def variant_spec(name: str) -> dict:
    """name -> schedule and pool; the one table of variants (see run_suite.VARIANTS)."""
    specs = {
        "stock": dict(schedule="1f1b", pool="stock"),
        # stock with a new buffer per receive (pooltk.parity.fresh): the reference besides stock
        "fresh": dict(schedule="1f1b", pool="fresh"),
        "fresh_interleaved": dict(schedule="Interleaved1F1B", pool="fresh"),
        "fresh_gpipe": dict(schedule="gpipe", pool="fresh"),
        "fresh_alias_eval": dict(schedule="1f1b", pool="fresh", alias_eval=True),
        # a model that hooks its received input's gradient (ranks.hook_received_inputs, pytorch
        # issue #185331)
        "stock_input_hook": dict(schedule="1f1b", pool="stock", input_hook=True),
        "fresh_input_hook": dict(schedule="1f1b", pool="fresh", input_hook=True),
        "pooltk_input_hook": dict(
            schedule="1f1b", pool="pooltk", slack=2, grad_slack=1, input_hook=True
        ),
        "automodel_pool_s2": dict(schedule="1f1b", pool="automodel", slack=2),
        "automodel_pool_s0": dict(schedule="1f1b", pool="automodel", slack=0),
        "pooltk_tight": dict(schedule="1f1b", pool="pooltk", slack=2, grad_slack=1),
        "pooltk_live": dict(schedule="1f1b", pool="pooltk", slack=0, grad_slack=0),
        # Automodel's single ring built by pooltk for A/B: a ring no user chooses (the harness seam,
        # below)
        "pooltk_automodel_policy": dict(
            schedule="1f1b", pool="pooltk", slack=2, rings={"policy": "automodel"}
        ),
        "stock_interleaved": dict(schedule="Interleaved1F1B", pool="stock"),
        "pooltk_auto_interleaved": dict(
            schedule="Interleaved1F1B", pool="pooltk", slack=0, grad_slack=0, gate="auto"
        ),
        "stock_gpipe": dict(schedule="gpipe", pool="stock"),
        "automodel_pool_gpipe_forced": dict(
            schedule="gpipe", pool="automodel", slack=0, forced=True
        ),
        "pooltk_gpipe_forced": dict(
            schedule="gpipe", pool="pooltk", slack=0, grad_slack=0, gate="gpipe", forced=True
        ),
        # a forward-only step whose last stage returns a view of its received input (alias_eval)
        "stock_alias_eval": dict(schedule="1f1b", pool="stock", alias_eval=True),
        "automodel_pool_alias_eval": dict(
            schedule="1f1b", pool="automodel", slack=2, alias_eval=True
        ),
        "pooltk_alias_eval": dict(
            schedule="1f1b", pool="pooltk", slack=0, grad_slack=0, alias_eval=True
        ),
    }
    return specs[name]


def params_hash(parts: list[torch.nn.Module]) -> str:
    h = hashlib.sha256()
    for i, part in enumerate(parts):
        for name, p in sorted(part.named_parameters()):
            h.update(f"{i}.{name}".encode())
            h.update(p.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def alias_eval(info, inputs: torch.Tensor, target: torch.Tensor) -> str | None:
    """One forward-only step whose last stage returns a view of what it received.

    A forward hook on the last stage's module replaces its output by ``x.view(x.shape)`` of its
    first floating-point input (the hidden states it received), so every microbatch's output
    in ``output_chunks`` shares storage with that microbatch's receive buffer until the
    schedule merges them at the end of the step. The schedule's loss runs on each output right
    after its forward (``target`` indexes the hidden size, as the output is the hidden state).
    Returns a sha256 of the merged output's bytes on the last stage (None elsewhere).
    """

    def passthrough(_module, args, kwargs, _output):
        x = next(
            t
            for t in (*args, *kwargs.values())
            if isinstance(t, torch.Tensor) and t.is_floating_point()
        )
        return x.view(x.shape)

    handles = [
        s.submod.register_forward_hook(passthrough, with_kwargs=True)
        for s in info.stages
        if s.is_last
    ]
    try:
        with torch.no_grad():
            if info.has_first_stage:
                out = info.schedule.eval(inputs, target=target)
            else:
                out = info.schedule.eval(target=target)
    finally:
        for h in handles:
            h.remove()
    if not info.has_last_stage:
        return None
    out = out if isinstance(out, torch.Tensor) else out[0]
    return hashlib.sha256(out.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


_OWN_ENABLE: dict = {}
"""pooltk.integrations.automodel.enable as imported, before any variant replaced it."""


def run_variant(name: str, args: argparse.Namespace, mesh) -> dict:
    from transformers import LlamaConfig, LlamaForCausalLM

    import pooltk
    from nemo_automodel.components.distributed.pipelining import AutoPipeline
    from pooltk.integrations import automodel as am_integration
    from pooltk.parity import measure_recv_storage
    from pooltk.parity.worker import max_hooks, measure_rank_recv_storage

    # a variant with harness rings replaces the integration's enable for itself only: every variant
    # starts from the integration's own (one launch runs many variants in one process)
    am_integration.enable = _OWN_ENABLE.setdefault("enable", am_integration.enable)
    spec = variant_spec(name)
    rank = dist.get_rank()
    record: dict = {"variant": name, "rank": rank, "pp": args.pp, **spec}
    interleaved = spec["schedule"].lower().startswith("interleaved")
    layers = args.pp * (2 if interleaved else 1)  # one decoder layer per stage
    pipeline = {
        "pp_schedule": spec["schedule"],
        "pp_microbatch_size": 1,
        "pp_batch_size": args.microbatches,
        "pp_recv_buffer_pool": spec["pool"] in ("automodel", "pooltk"),
        "pp_recv_buffer_pool_slack": spec.get("slack", 2),
    }
    if interleaved:
        pipeline["layers_per_stage"] = layers // (2 * args.pp)
    if spec["pool"] == "pooltk":
        pipeline["pooltk"] = {
            "grad_slack": spec.get("grad_slack", 1),
            "schedule": "auto" if spec.get("gate") == "auto" else "1f1b",
        }
    if spec.get(
        "rings"
    ):  # the plan stays the user's; the install takes the harness's rings instead
        from pooltk.parity import experiments
        from pooltk.parity.experiments import Harness

        am_integration.enable = lambda choice: experiments.install(
            Harness(
                slack=choice.config.slack, grad_slack=choice.config.grad_slack, **spec["rings"]
            ),
            schedule=choice.schedule,
        )
    if spec.get("forced"):
        # Negative control: each pool forced under GPipe, outside its own gate.
        pipeline["pp_recv_buffer_pool"] = False
        pipeline.pop("pooltk", None)
        if spec["pool"] == "automodel":
            from nemo_automodel.components.distributed.pipelining.recv_buffer_pool import (
                install_recv_buffer_pool,
            )

            install_recv_buffer_pool(slack=spec["slack"])
        else:
            pooltk.install(
                pooltk.PoolConfig(slack=spec["slack"], grad_slack=spec["grad_slack"]),
                schedule="gpipe",
                force=True,
            )
        choice = am_integration.plan(pipeline)
    else:
        choice, report = am_integration.apply({"distributed": {"pipeline": pipeline}})
        pipeline = choice.pipeline
        record["plan"] = choice.describe()
        if report is not None:
            record["install"] = f"installed={report.installed} layout={report.layout}"
    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=SEQ,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)

    def loss_fn(logits, target):
        logits = logits if isinstance(logits, torch.Tensor) else logits[0]
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1))

    keys = (
        "pp_schedule",
        "pp_microbatch_size",
        "pp_batch_size",
        "layers_per_stage",
        "pp_recv_buffer_pool",
        "pp_recv_buffer_pool_slack",
    )
    ap = AutoPipeline(
        world_mesh=mesh,
        pp_axis_name="pp",
        dp_axis_names=("dp",),
        device=torch.device("cpu"),
        **{k: pipeline[k] for k in keys if k in pipeline},
    )
    ap.build(model, loss_fn=loss_fn)
    info = ap.info
    if spec.get("input_hook"):
        from ranks import hook_received_inputs

        for s in info.stages:
            if not s.is_first:
                hook_received_inputs(s.submod)
    posted: dict[int, list] = {s.stage_index: [] for s in info.stages}
    fresh: dict[int, object] = {}
    if spec["pool"] == "fresh":
        from pooltk.parity.fresh import fresh_stage

        for s in info.stages:
            fresh[s.stage_index] = fresh_stage(s, posted=posted[s.stage_index])
    parts = info.model_parts
    opt = torch.optim.SGD([p for part in parts for p in part.parameters()], lr=0.05)
    gen = torch.Generator().manual_seed(args.seed + 1)
    losses_all, times = [], []
    for _ in range(args.steps):
        tokens = torch.randint(0, VOCAB, (args.microbatches, SEQ + 1), generator=gen)
        inputs, target = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        losses: list = [] if info.has_last_stage else None
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        if info.has_first_stage:
            info.schedule.step(inputs, target=target, losses=losses)
        else:
            info.schedule.step(target=target, losses=losses)
        opt.step()
        times.append(time.perf_counter() - t0)
        if losses is not None:
            losses_all.append(
                torch.stack([torch.as_tensor(x).float() for x in losses]).sum().item().hex()
            )
    if spec.get("alias_eval"):
        tokens = torch.randint(0, VOCAB, (args.microbatches, SEQ), generator=gen)
        target = torch.randint(0, HIDDEN, (args.microbatches, SEQ), generator=gen)
        record["eval_sha256"] = alias_eval(info, tokens, target)
    record.update(
        losses=losses_all,
        params_sha256=params_hash(parts),
        step_s=times,
        recv={str(s.stage_index): measure_recv_storage(s) for s in info.stages},
        rank_recv=measure_rank_recv_storage(list(info.stages)),
        rings={
            str(s.stage_index): {
                d: {"size": getattr(r, "size", None), "rehomes": getattr(r, "rehomes", None)}
                for d, r in pooltk.stage_rings(s).items()
            }
            for s in info.stages
        },
        hooks={str(s.stage_index): max_hooks(s) for s in info.stages},
        torch=torch.__version__,
        ok=True,
    )
    if fresh:
        record["fresh"] = {str(i): fresh_posts(f, posted[i]) for i, f in fresh.items()}
    return record


def fresh_posts(report, posted: list) -> dict:
    """What fresh_stage did on one stage, and the buffers it handed to receives: count and distinct
    storages."""
    return {
        "layout": report.layout,
        "bound": report.bound,
        "posts": len(posted),
        "post_storages": len({b.untyped_storage().data_ptr() for _, b in posted}),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pp", type=int, required=True)
    p.add_argument("--variants", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (args.pp, 1), mesh_dim_names=("pp", "dp"))
    out = open(args.out, "a")
    for name in args.variants.split(","):
        try:
            record = run_variant(name, args, mesh)
            import pooltk

            pooltk.uninstall()
        except Exception as exc:  # noqa: BLE001 - the error is the variant's outcome
            record = {
                "variant": name,
                "rank": dist.get_rank(),
                "pp": args.pp,
                **variant_spec(name),
                "ok": False,
                "error_type": type(exc).__name__,
                "error": str(exc)[:600],
                "traceback": traceback.format_exc()[-1500:],
            }
            out.write(json.dumps(record) + "\n")
            out.flush()
            os._exit(3)
        out.write(json.dumps(record) + "\n")
        out.flush()
        dist.barrier()
    out.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
