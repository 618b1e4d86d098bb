"""What each rank runs in a composition launch (kind ``compositions`` of [Note: one rank entry]).

Runs every case (see [Note: composition verdicts] in compositions.py) three times, fresh, stock
and pooled, on stages built from the same seeds, and returns its rows.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.config import PoolConfig
from pooltk.parity.compositions import VARIANTS, Composition
from pooltk.parity.rank import digest, now_running, rehomes
from pooltk.parity.recv_counter import RecvCounter

HIDDEN, SEQ, ROWS, RANK_LORA = 16, 8, 2, 4


class _AddressRead(torch.autograd.Function):
    """A kernel launcher's view of its tensors: it reads every argument's address, then runs the
    kernel.

    Triton's launcher calls ``data_ptr()`` on each tensor argument from Python; so do ctypes/cffi
    extensions. Forward and backward both read the received input's address (backward through the
    tensor it saved, as a fused norm's backward does).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _launch(x, out)
        torch.mul(x, 2.0, out=out)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        out = torch.empty_like(grad)
        _launch(x, grad, out)
        torch.mul(grad, 2.0, out=out)
        return out


ADDRESS_READS = [0]
"""Addresses read by :func:`_launch` in this process (the evidence that the launcher case ran)."""


def _launch(*tensors: torch.Tensor) -> tuple[int, ...]:
    ADDRESS_READS[0] += len(tensors)
    return tuple(t.data_ptr() for t in tensors)


def _seeded(shape: tuple[int, ...], seed: int, scale: float) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


class CompositionStage(nn.Module):
    """One stage: ``h + tanh(W h + b)`` over (rows, seq, hidden), with the case's features.

    ``passon``: the first stage makes int64 positions and a bool mask; every stage adds a position
    embedding, masks, and (but the last) hands both on unchanged. ``launcher``: the first op reads
    its input's address (:class:`_AddressRead`). ``frozen``: base weights frozen, a low-rank adapter
    trains. ``autocast``: the linear under bf16 autocast.
    """

    def __init__(self, case: Composition, stage: int, n_stages: int) -> None:
        super().__init__()
        seed = 1_000 * stage
        self.first, self.last = stage == 0, stage == n_stages - 1
        self.passon, self.launcher = "passon" in case.features, "launcher" in case.features
        self.autocast = case.autocast
        self.weight = nn.Parameter(_seeded((HIDDEN, HIDDEN), seed, HIDDEN**-0.5))
        self.bias = nn.Parameter(_seeded((HIDDEN,), seed + 1, 0.01))
        if self.passon:
            self.pos = nn.Parameter(_seeded((SEQ, HIDDEN), seed + 2, 0.1))
        self.seen_dtypes: set[str] = set()
        """dtypes of the linear's output (the evidence that autocast ran)."""
        self.lora = case.frozen
        if self.lora:
            self.weight.requires_grad_(False)
            self.bias.requires_grad_(False)
            self.lora_a = nn.Parameter(_seeded((RANK_LORA, HIDDEN), seed + 3, 0.1))
            self.lora_b = nn.Parameter(_seeded((HIDDEN, RANK_LORA), seed + 4, 0.1))

    def forward(
        self, h: torch.Tensor, pos: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> Any:
        if self.passon and self.first:
            pos = torch.arange(SEQ).repeat(h.shape[0], 1)
            mask = pos % 3 != 0
        if self.launcher:
            h = _AddressRead.apply(h)
        if self.passon:
            h = (h + self.pos[pos.remainder(SEQ)]) * mask.unsqueeze(
                -1
            )  # remainder: shape inference feeds garbage
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            z = torch.nn.functional.linear(h, self.weight, self.bias)
            if self.lora:
                z = z + (h @ self.lora_a.t()) @ self.lora_b.t()
        self.seen_dtypes.add(str(z.dtype).replace("torch.", ""))
        h = h + torch.tanh(z).float()
        if self.passon and not self.last:
            return h, pos, mask
        return h


def _wrap(module: nn.Module, case: Composition, dp_mesh: Any) -> nn.Module:
    if case.wrap is None:
        return module
    if case.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module, process_group=dp_mesh.get_group())
    if case.wrap == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        return fully_shard(module, mesh=dp_mesh)
    if case.wrap.startswith(
        "compile:"
    ):  # dynamo keeps compiled code per code object, whatever the backend
        return torch.compile(module, backend=case.wrap.split(":", 1)[1])
    if case.wrap == "checkpoint":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

        return checkpoint_wrapper(module)
    raise ValueError(f"compositions: wrap found {case.wrap!r}")


def _evidence(case: Composition, stages: list, reads: int) -> str:
    """What shows this case ran as described (a composition silently not applied would read
    differently).

    Compiled graphs and inductor kernels are counted over the process: variants after the first
    reuse dynamo's cache for the same stage code.
    """
    inner = [st.submod for st in stages]
    parts = [f"submod={'+'.join(sorted({type(m).__name__ for m in inner}))}"]
    modules = [m for top in inner for m in top.modules() if isinstance(m, CompositionStage)]
    if case.wrap and case.wrap.startswith("compile:"):
        from torch._dynamo.utils import counters

        parts.append(f"graphs={counters['stats']['unique_graphs']}")
        if case.wrap.endswith("inductor"):  # compiled or loaded from inductor's caches
            ind, aot = counters["inductor"], counters["aot_autograd"]
            parts.append(
                f"inductor_graphs={ind['fxgraph_cache_miss'] + ind['fxgraph_cache_hit']}"
                f"+{aot['autograd_cache_hit']}"
            )
    if "launcher" in case.features:
        parts.append(f"address_reads={reads}")
    if case.autocast:
        parts.append("dtypes=" + "+".join(sorted({d for m in modules for d in m.seen_dtypes})))
    if case.frozen:
        parts.append(f"frozen={sum(not p.requires_grad for m in modules for p in m.parameters())}")
    return "; ".join(parts)


def _bounds(case: Composition, rank_stages: list[int], pp_rank: int) -> dict[str, int]:
    """Per direction: the sets the analysis says the rank's rings hold (live set + slack); for an
    eval-only case that ``schedule="auto"`` pools, those of the forward-only action order its rings
    are planned from."""
    from pooltk.analysis.lifetimes import ScheduleShape, analyse
    from pooltk.analysis.sharing import rank_rings
    from pooltk.pool.ring import ring_size

    forward_only = case.eval_only and case.install_schedule == "auto"
    prog, spans = analyse(
        ScheduleShape(
            schedule=case.schedule,
            pp=case.pp,
            n_microbatches=case.microbatches,
            stages_per_rank=case.stages_per_rank,
            forward_only=forward_only,
        )
    )
    out = dict.fromkeys(DIRECTIONS, 0)
    for ring in rank_rings(prog, spans, partial(ring_size, config=PoolConfig())):
        if ring.rank == pp_rank:
            out[ring.direction] += ring.size
    return out


def _forward_only(
    case: Composition, schedule: Any, x: Any, y: Any, first: bool, last: bool
) -> list[str]:
    """One ``schedule.eval`` step the way ``case.eval_mode`` says (autograd on, or under
    inference_mode); the last stage's digests of the merged output and the losses."""
    mode = {"grad": contextlib.nullcontext, "inference": torch.inference_mode}
    losses: list[torch.Tensor] = []
    with mode[case.eval_mode]():
        out = schedule.eval(
            *((x,) if first else ()), **({"target": y, "losses": losses} if last else {})
        )
    return [digest([out, *losses])] if last else []


def run_case(case: Composition, rank: int, mesh: Any) -> list[dict[str, Any]]:
    import pooltk
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import get_schedule_class

    from pooltk.parity.worker import stage_indices

    pp_rank, dp_rank = mesh.get_coordinate()
    pp_group = mesh.get_group("pp")
    dp_mesh = mesh["dp"]
    n_stages = case.pp * case.stages_per_rank
    mine = stage_indices(case.pp, case.stages_per_rank, case.schedule, pp_rank)
    results: dict[str, dict[str, Any]] = {}
    if case.wrap and case.wrap.startswith("compile:"):
        # another case's backend must not answer for this one's (same stage code)
        torch._dynamo.reset()
    for variant in VARIANTS:
        report = pooltk.install(schedule=case.install_schedule) if variant == "pooled" else None
        try:
            torch.manual_seed(0)
            stages = []
            for s in mine:
                module = _wrap(CompositionStage(case, s, n_stages), case, dp_mesh)
                stages.append(
                    PipelineStage(module, s, n_stages, torch.device("cpu"), group=pp_group)
                )
            if variant == "fresh":
                from pooltk.parity.fresh import fresh_stage

                for st in stages:
                    fresh_stage(st)
            per_stage = {st.stage_index: RecvCounter() for st in stages}
            whole = RecvCounter()
            for st in stages:
                per_stage[st.stage_index].watch(st)
                whole.watch(st)
            counters = [*per_stage.values(), whole]
            cls = get_schedule_class(case.schedule)
            schedule = cls(
                stages if case.stages_per_rank > 1 else stages[0],
                n_microbatches=case.microbatches,
                loss_fn=torch.nn.functional.mse_loss,
            )
            params = [p for st in stages for p in st.submod.parameters() if p.requires_grad]
            opt = torch.optim.SGD(params, lr=0.05)
            first, last = any(st.is_first for st in stages), any(st.is_last for st in stages)
            digests: list[str] = []
            reads0 = ADDRESS_READS[0]
            for step in range(case.steps):
                gen = torch.Generator().manual_seed(7919 * step + 31 * dp_rank)
                x = torch.randn(ROWS * case.microbatches, SEQ, HIDDEN, generator=gen)
                y = torch.randn(ROWS * case.microbatches, SEQ, HIDDEN, generator=gen)
                for c in counters:
                    c.start_step()
                if case.eval_only:
                    digests.extend(_forward_only(case, schedule, x, y, first, last))
                    continue
                # [Note: what a case keeps alive] The counters record peaks of storages alive, so
                # the records depend on what this loop holds: ``out`` and ``losses`` stay bound
                # through an ``eval_between`` step and until the next step replaces them. Moving
                # them into a helper changed stock_peak and fresh_peak (eval-passon-pp4, rank 3
                # forward: 32 -> 24); a change here must be re-recorded, never assumed neutral.
                losses: list[torch.Tensor] = []
                out = schedule.step(
                    *((x,) if first else ()), **({"target": y, "losses": losses} if last else {})
                )
                if last:
                    digests.append(digest([out, *losses]))
                if (step + 1) % case.accumulate == 0:
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                if case.eval_between:
                    for c in counters:
                        c.start_step()
                    digests.extend(_forward_only(case, schedule, x, y, first, last))
            digests.append(digest([p for st in stages for p in st.submod.parameters()]))
            results[variant] = {
                "digests": digests,
                "stages": {s: c.as_dict() for s, c in per_stage.items()},
                "rank": whole.as_dict(),
                "rehomes": rehomes(report),
                "evidence": _evidence(case, stages, ADDRESS_READS[0] - reads0),
            }
            for c in counters:
                c.close()
        finally:
            if variant == "pooled":
                pooltk.uninstall()
        dist.barrier()
    return _rows(case, rank, pp_rank, mine, results)


def _verdict(results: dict[str, dict[str, Any]]) -> tuple[str, str]:
    pooled, stock, fresh = (results[v]["digests"] for v in ("pooled", "stock", "fresh"))
    if pooled == stock:
        return "equal", ""
    if pooled == fresh and stock != fresh:
        return "explained", "pooled equals fresh; stock's own numbers depend on its buffer reuse"
    which = [i for i, (a, b) in enumerate(zip(pooled, stock)) if a != b]
    return (
        "different",
        f"digests differ from stock at {which} (of {len(stock)}: steps' outputs, then parameters)",
    )


def _rows(
    case: Composition, rank: int, pp_rank: int, mine: list[int], results: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    verdict, detail = _verdict(results)
    bounds = _bounds(case, mine, pp_rank)
    evidence = results["pooled"]["evidence"]
    rows = []
    # the rank's own row (stage None) where it holds several stages
    for stage in [*mine, None] if case.stages_per_rank > 1 else mine:
        for direction in DIRECTIONS:
            pooled, stock, fresh = (
                (results[v]["rank"] if stage is None else results[v]["stages"][stage])[direction]
                for v in ("pooled", "stock", "fresh")
            )
            tensors = max(pooled["tensors"], stock["tensors"])
            if not stock["receives"]:
                continue
            rehomed = sum(
                results["pooled"]["rehomes"].get(s, {}).get(direction, {}).get("rehomes", 0)
                for s in (mine if stage is None else [stage])
            )
            ring_bound = tensors * bounds[direction]
            judged, bound, within, row_detail = _judged(
                case, pooled, fresh["peak"], ring_bound, rehomed, detail
            )
            rows.append(
                {
                    "case": case.name,
                    "rank": rank,
                    "stage": stage,
                    "direction": direction,
                    "verdict": verdict,
                    "tensors": tensors,
                    "judged": judged,
                    "bound": bound,
                    "stock_peak": stock["peak"],
                    "stock_distinct": stock["max_step_distinct"],
                    "fresh_peak": fresh["peak"],
                    "pooled_peak": pooled["peak"],
                    "pooled_distinct": pooled["max_step_distinct"],
                    "rehomes": rehomed,
                    "within_bound": within,
                    "evidence": evidence,
                    "detail": row_detail,
                }
            )
    return rows


def _judged(
    case: Composition, pooled: dict, fresh_peak: int, ring_bound: int, rehomed: int, detail: str
) -> tuple[str, int, bool, str]:
    """(judged against, bound, within it, detail) of one row: a case with a real holder against
    torch's own fresh semantics, any other against its ring with no re-home."""
    if case.expect_rehomes:
        return "fresh", fresh_peak, pooled["peak"] <= fresh_peak, detail
    within = pooled["peak"] <= ring_bound and pooled["max_step_distinct"] <= ring_bound
    if not rehomed:
        return "ring", ring_bound, within, detail
    unexpected = f"{rehomed} re-homes where none were expected"
    return "ring", ring_bound, False, "; ".join(filter(None, (detail, unexpected)))


def rank_body(rank: int, world: int, payload: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A composition rank's job ([Note: one rank entry]): every case in ``payload``, in order."""
    from torch.distributed.device_mesh import init_device_mesh

    rows: list[dict[str, Any]] = []
    meshes: dict[tuple[int, int], Any] = {}
    for case in (Composition(**{**c, "features": tuple(c["features"])}) for c in payload):
        key = (case.pp, case.dp)
        if key not in meshes:
            meshes[key] = init_device_mesh("cpu", key, mesh_dim_names=("pp", "dp"))
        now_running(f"case {case.name}")
        rows.extend(run_case(case, rank, meshes[key]))
    now_running(None)
    return rows
