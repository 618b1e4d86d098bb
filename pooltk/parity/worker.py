"""What each rank runs in a parity launch (kind ``parity`` of [Note: one rank entry]).

One process group; the variants of a spec run one after another on fresh stages built
from the same seeds. Each rank compares its own final parameters of every variant with
the stock variant of the same frontend and schedule (bitwise), and records losses (last
stage), per-step parameter sums, step times, and the receive-buffer bytes its stage holds.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch
import torch.distributed as dist

from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.parity import experiments
from pooltk.parity.models import FuzzStage, ToyModel, fuzz_loss, make_batch, make_stage_module
from pooltk.parity.rank import digest, now_running, rehomes
from pooltk.parity.spec import ParitySpec, Variant
from pooltk.pool.torch_compat.placeholders import PlaceholderFactory
from pooltk.pool.torch_compat.stage_api import RECV_INFO_ATTRS

__all__ = ["max_hooks", "measure_recv_storage", "rank_body", "run_in_group"]


def measure_recv_storage(stage: Any) -> dict[str, dict[str, int]]:
    """Distinct storages behind a stage's receive buffers, per direction: sets and bytes.

    Counts every non-root recv-info buffer over all microbatches, deduplicated by
    storage, so a ring of K sets counts K and stock torch counts M.
    """
    return measure_rank_recv_storage([stage])


def measure_rank_recv_storage(stages: list[Any]) -> dict[str, dict[str, int]]:
    """:func:`measure_recv_storage` over every stage a rank holds, storages deduplicated across
    them.

    A rank-shared ring ([Note: rank-shared rings]) is counted once here, where each stage's own
    count sees the slots its microbatches map to.
    """
    out: dict[str, dict[str, int]] = {}
    for direction, attr in RECV_INFO_ATTRS.items():
        seen: dict[int, int] = {}
        per_chunk = 0
        for infos in (i for stage in stages for _, i in sorted(getattr(stage, attr, {}).items())):
            n = 0
            for info in infos:
                if getattr(info, "is_root_arg", False):
                    continue
                buf = getattr(info, "buffer", None)
                if isinstance(buf, torch.Tensor) and not buf.is_meta:
                    storage = buf.untyped_storage()
                    seen[storage.data_ptr()] = storage.nbytes()
                    n += 1
            per_chunk = max(per_chunk, n)
        out[direction] = {
            "bytes": sum(seen.values()),
            "storages": len(seen),
            "sets": len(seen) // per_chunk if per_chunk else 0,
        }
    return out


def stage_indices(pp: int, stages_per_rank: int, schedule: str, rank: int) -> list[int]:
    """Stages rank ``rank`` runs, placed the way the schedule places them (loop, or v for V
    schedules)."""
    if stages_per_rank == 1:
        return [rank]
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    style = "v" if schedule.lower() in ("zbvzerobubble", "dualpipev") else "loop"
    mapping = generate_stage_to_rank_mapping(pp, pp * stages_per_rank, style=style)
    return sorted(s for s, r in mapping.items() if r == rank)


def _build_stages(
    spec: ParitySpec, variant: Variant, rank: int, world: int, device: torch.device
) -> list[Any]:
    from torch.distributed.pipelining import PipelineStage

    if variant.frontend == "manual":
        n_stages = world * variant.stages_per_rank
        out = []
        for s in stage_indices(world, variant.stages_per_rank, variant.schedule, rank):
            if variant.bodies:
                module = FuzzStage(
                    variant.bodies[s],
                    hidden=spec.hidden,
                    seed=spec.seed * 1009 + s,
                    first=s == 0,
                    aux=variant.aux,
                )
            else:
                module = make_stage_module(
                    hidden=spec.hidden,
                    layers_per_stage=spec.layers_per_stage,
                    stage_index=s,
                    seed=spec.seed,
                )
            out.append(PipelineStage(module.to(device), s, n_stages, device))
        return out
    if variant.stages_per_rank != 1:
        raise ValueError(
            f"Variant {variant.name}: the tracing frontend here builds one stage per rank; "
            "use frontend='manual' for multi-stage schedules."
        )
    from torch.distributed.pipelining import SplitPoint, pipeline

    model = ToyModel(spec.hidden, spec.layers_per_stage * world, seed=spec.seed).to(device)
    example = torch.zeros(spec.rows_per_microbatch, spec.seq_len, spec.hidden, device=device)
    split = {f"layers.{k * spec.layers_per_stage}": SplitPoint.BEGINNING for k in range(1, world)}
    pipe = pipeline(model, mb_args=(example,), split_spec=split)
    return [pipe.build_stage(rank, device)]


def _run_variant(
    spec: ParitySpec, variant: Variant, rank: int, world: int, device: torch.device
) -> dict[str, Any]:
    import pooltk

    report = None
    sched_name = variant.install_schedule or variant.schedule
    if variant.pooled and variant.scope == "process":
        report = experiments.install(variant.config, schedule=sched_name, force=variant.force)
    try:
        stages = _build_stages(spec, variant, rank, world, device)
        if variant.pooled and variant.scope == "stage":
            for st in stages:
                report = experiments.pool_stage(
                    st, variant.config, schedule=sched_name, force=variant.force
                )
        posted: dict[int, list] | None = None  # fresh variants: every buffer handed to a receive
        if variant.buffers == "fresh":
            from pooltk.parity.fresh import fresh_stage

            posted = {st.stage_index: [] for st in stages}
            for st in stages:
                fresh_stage(st, posted=posted[st.stage_index])
        peak_owned: dict[int, dict[str, int]] = {st.stage_index: {} for st in stages}
        record = _train(spec, variant, stages, device, peak_owned)
        rehomed = rehomes(report)
        record.update(
            variant=variant.name,
            rank=rank,
            stages={
                st.stage_index: _stage_record(st, rehomed, posted, peak_owned) for st in stages
            },
            rank_recv=measure_rank_recv_storage(stages),
            rank_rings={
                d: [{"stages": sorted(r.members), "size": r.size} for r in rings]
                for d, rings in _distinct_rings(stages).items()
            },
        )
        return record
    finally:
        if variant.pooled and variant.scope == "process":
            pooltk.uninstall()


def _train(
    spec: ParitySpec,
    variant: Variant,
    stages: list[Any],
    device: torch.device,
    peak_owned: dict[int, dict[str, int]],
) -> dict[str, Any]:
    """Run the variant's steps on ``stages``: the record's per-step series, final parameters,
    digests."""
    from torch.distributed.pipelining.schedules import get_schedule_class

    params = [p for st in stages for p in st.submod.parameters()]
    opt = torch.optim.SGD(params, lr=spec.lr) if params else None
    n_mb = variant.microbatches or spec.microbatches
    schedule = get_schedule_class(variant.schedule)(
        stages if variant.stages_per_rank > 1 else stages[0],
        n_microbatches=n_mb,
        loss_fn=fuzz_loss if variant.bodies else torch.nn.functional.mse_loss,
    )
    has_first = any(st.is_first for st in stages)
    has_last = any(st.is_last for st in stages)
    counter = PlaceholderFactory(count_only=True)  # what torch makes from metadata at setup
    names = ("losses", "eval_sums", "param_sums", "grad_sq", "step_times_s", "_digests")
    rec: dict[str, Any] = {name: [] for name in names}
    rec.update(has_last=has_last, rank_peak_live={})
    for step in range(spec.steps):
        x, y = make_batch(
            rows=spec.rows_per_microbatch * n_mb,
            seq_len=spec.seq_len,
            hidden=spec.hidden,
            step=step,
            seed=spec.seed,
        )
        x, y = x.to(device), y.to(device)
        if opt is not None:
            opt.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        args = (x,) if has_first else ()
        kwargs: dict[str, Any] = {"target": y, "losses": losses} if has_last else {}
        t0 = time.perf_counter()
        with counter if step == 0 else contextlib.nullcontext():
            out = (schedule.eval if variant.eval_only else schedule.step)(*args, **kwargs)
        if has_last:
            rec["_digests"] += [digest(out), digest(losses)]
        _digest_kept(stages, rec["_digests"], step)
        _step_end(stages)
        rec["step_times_s"].append(time.perf_counter() - t0)
        _record_peaks(stages, peak_owned, rec["rank_peak_live"])  # after the step's time
        if step == 0:
            rec["setup_alloc_bytes"] = counter.bytes
        grad_sq = sum((p.grad.double() ** 2).sum() for p in params if p.grad is not None)
        rec["grad_sq"].append(float(grad_sq))
        if opt is not None:
            opt.step()
        rec["param_sums"].append(float(sum(p.detach().double().sum() for p in params)))
        if has_last:
            rec["losses"].append([float(v.detach()) for v in losses])
        if variant.eval_between_steps:
            out = schedule.eval(*args, **({"target": y, "losses": []} if has_last else {}))
            _step_end(stages)
            _record_peaks(stages, peak_owned, rec["rank_peak_live"])
            if has_last:
                outs = out if isinstance(out, tuple) else (out,)
                rec["eval_sums"].append(float(sum(t.double().sum() for t in outs)))
                rec["_digests"].append(digest(out))
    rec["_final"] = [p.detach().clone() for p in params]
    return rec


def _digest_kept(stages: list[Any], digests: list[str], step: int) -> None:
    """Digest and clear what each stage's hook kept this step (fuzz ``hook`` bodies).

    Step 0 also runs torch's shape inference, whose forward reads uninitialised example inputs:
    what a hook kept then differs run to run, stock included. Only later steps are digested.
    """
    for st in stages:
        kept = getattr(st.submod, "kept", None)
        if kept:
            if step > 0:
                digests.append(digest(kept))
            kept.clear()


def _stage_record(
    stage: Any,
    rehomed: dict[int, dict[str, dict[str, int]]],
    posted: dict[int, list] | None,
    peak_owned: dict[int, dict[str, int]],
) -> dict[str, Any]:
    """One stage's part of the record: receive storages, re-homes, hooks, fresh posts, rings,
    gate."""
    import pooltk

    index = stage.stage_index
    state = pooltk.stage_state(stage)
    recv = measure_recv_storage(stage)
    for d, counts in rehomed.get(index, {}).items():
        recv[d].update(counts)  # rehomes, rehomed_bytes (copy on conflict)
        # what the tables report counts every storage a re-home allocated, on top of the ring's
        recv[d]["ring_bytes"] = recv[d]["bytes"]
        recv[d]["bytes"] += counts["rehomed_bytes"]
    for d, n in max_hooks(stage).items():
        recv[d]["max_hooks"] = n
    if posted is not None:  # every buffer handed to a receive, all kept alive until here
        for d in DIRECTIONS:
            bufs = [b for direction, b in posted[index] if direction == d]
            recv[d]["posts"] = len(bufs)
            recv[d]["post_storages"] = len({b.untyped_storage().data_ptr() for b in bufs})
    gate = state.reason if state is not None and state.phase != "new" else None
    return {
        "recv": recv,
        "usage": [u.to_dict() for u in state.usage(index)] if state is not None else [],
        "rings": {d: r.size for d, r in pooltk.stage_rings(stage).items()},
        "peak_live": peak_owned[index],
        "gate": gate or None,
    }


def _step_end(stages: list[Any]) -> None:
    """Tell each fuzz stage module a step ended (its window moves on, its address cache clears)."""
    for st in stages:
        end = getattr(st.submod, "step_end", None)
        if callable(end):
            end()


def _record_peaks(
    stages: list[Any], peaks: dict[int, dict[str, int]], by_direction: dict[str, int]
) -> None:
    """Keep the largest ``peak_owned`` each ring reached (rings are rebuilt on an eval/train
    switch), per stage and over the rank's distinct rings."""
    import pooltk

    for st in stages:
        for d, ring in pooltk.stage_rings(st).items():
            peaks[st.stage_index][d] = max(peaks[st.stage_index].get(d, 0), ring.peak_owned)
    for d, rings in _distinct_rings(stages).items():
        by_direction[d] = max(by_direction.get(d, 0), sum(r.peak_owned for r in rings))


def max_hooks(stage: Any) -> dict[str, int]:
    """Per direction: the most gradient hooks registered on any one receive buffer the stage holds
    now.

    Stock torch hands microbatch c the same buffer every step, so hooks a model registers on its
    received input pile up there (pytorch issue #185331); a fresh buffer or a pooled alias starts at
    0.
    """
    out = {}
    for direction, attr in RECV_INFO_ATTRS.items():
        n = 0
        for infos in getattr(stage, attr, {}).values():
            for info in infos:
                buf = getattr(info, "buffer", None)
                if isinstance(buf, torch.Tensor):
                    n = max(n, len(buf._backward_hooks or {}))
        out[direction] = n
    return out


def _distinct_rings(stages: list[Any]) -> dict[str, list[Any]]:
    """Per direction, the rings a rank's stages hold now, each once (a rank-shared ring is one)."""
    import pooltk

    out: dict[str, dict[int, Any]] = {}
    for st in stages:
        for d, ring in pooltk.stage_rings(st).items():
            out.setdefault(d, {})[id(ring)] = ring
    return {d: list(rings.values()) for d, rings in out.items()}


def _compare(records: list[dict[str, Any]], variants: tuple[Variant, ...]) -> None:
    """Attach bitwise / max-abs-diff of final params vs the stock variant of the same
    frontend+schedule."""
    by_name = {r["variant"]: r for r in records}
    for v in variants:
        rec = by_name[v.name]
        want = v.compare_to if v.pooled else "stock"  # a fresh variant is compared with stock
        ref = next(
            (
                by_name[s.name]
                for s in variants
                if not s.pooled and s.buffers == want and s.run_key == v.run_key
            ),
            None,
        )
        if ref is None or ref is rec:
            rec.update(
                reference=None,
                params_bitwise_equal=None,
                params_max_abs_diff=None,
                outputs_bitwise_equal=None,
            )
            continue
        pairs = list(zip(rec["_final"], ref["_final"]))
        rec.update(
            reference=ref["variant"],
            outputs_bitwise_equal=rec["_digests"] == ref["_digests"],
            params_bitwise_equal=all(torch.equal(a, b) for a, b in pairs),
            params_max_abs_diff=max(
                (float((a - b).abs().max()) if a.numel() else 0.0 for a, b in pairs), default=0.0
            ),
        )
    for rec in records:
        del rec["_final"], rec["_digests"]


def run_in_group(
    spec: ParitySpec, rank: int, world: int, device: torch.device | None = None
) -> list[dict[str, Any]]:
    """Run every variant of ``spec`` on this rank (process group already initialised)."""
    if world != spec.pp:
        raise ValueError(
            f"parity: world size {world} but spec.pp={spec.pp}; required one rank per stage. "
            f"Fix: launch {spec.pp} ranks (torchrun --nproc-per-node {spec.pp}) or pass --pp "
            f"{world}."
        )
    device = device or torch.device("cpu")
    torch.manual_seed(spec.seed)
    records = []
    for variant in spec.variants:
        now_running(f"variant {variant.name}")
        records.append(_run_variant(spec, variant, rank, world, device))
        dist.barrier()
    now_running(None)
    _compare(records, spec.variants)
    return records


def rank_body(rank: int, world: int, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """A parity rank's job ([Note: one rank entry]): every variant of the spec in ``payload``."""
    return run_in_group(ParitySpec.from_dict(payload), rank, world)
