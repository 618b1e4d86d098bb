"""The whole-stage estimate: every rank replayed under every variant, beside the analytic
receive-buffer model.

[Note: the whole-stage estimate]
:func:`estimate_memory` replays each rank ([Note: one rank's replay]) under each variant and keeps,
per (rank, variant), the peak (bytes live at once and where in the step), the bytes per category at
that peak, each category's own maximum and the timeline. Beside it sits the analytic receive-buffer
model (:func:`pooltk.memory.model.model_memory`) fed with the boundaries the stages really have (the
inputs each stage's builder declares), so the two share one record per stage and direction
(:class:`pooltk.analysis.stage_sets.ReceiveSets`, [Note: one source of live sets]) and
:meth:`MemoryEstimate.receive_frame` checks the replayed receive buffers against it on every rank.

What the estimate measures: every storage the stage's program allocates through torch's
operators, with what holds it. What it does not: memory outside those storages (the CUDA context,
NCCL's buffers, the caching allocator's rounding and fragmentation, kernels' internal
workspaces: see :mod:`pooltk.memory.fits`, whose verdict adds them as a stated overhead); data
parallelism (gradient all-reduce buckets, FSDP or ZeRO sharding of parameters, gradients and
optimizer states: every rank here holds its stages' whole parameters); tensor and context
parallelism; and mixed precision with float32 master weights (parameters, gradients and optimizer
states have the model's one dtype).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_int
from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.model import MemoryModel, model_memory
from pooltk.memory.replay.run import (
    POOLED_VARIANTS,
    REPLAY_VARIANTS,
    RankReplay,
    Training,
    pool_config,
    replay_rank,
)
from pooltk.memory.replay.stages import StageBuilder
from pooltk.memory.replay.tracker import CATEGORIES, CATEGORY_LABELS
from pooltk.memory.shape import PipelineShape
from pooltk.memory.tensors import Boundary, TensorSpec
from pooltk.memory.units import unit_bytes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["NOT_MODELLED", "VARIANT_TITLES", "MemoryEstimate", "estimate_memory"]

NOT_MODELLED: tuple[str, ...] = (
    "memory outside torch's tensors: CUDA context, NCCL buffers, allocator rounding and "
    "fragmentation, kernel workspaces (added as a stated overhead by the verdict)",
    "data parallelism: all-reduce buckets, FSDP / ZeRO sharding (each rank holds its stages' whole "
    "parameters, gradients and optimizer states)",
    "tensor, context and sequence parallelism",
    "float32 master weights under mixed precision (one dtype for parameters, gradients, optimizer "
    "states and activations)",
)
"""What the whole-stage estimate leaves out, in one line each
(see [Note: the whole-stage estimate])."""

VARIANT_TITLES: dict[str, str] = {
    "stock": "stock torch <= 2.14",
    "stock_lazy": "torch 2.15 (lazy receive buffers)",
    "pooled": "pooltk rings",
    "live_set": "pooltk rings at slack 0 (live set)",
}
"""One label per replayed variant, for tables and legends."""

_MODEL_VARIANT = {
    "stock": "stock",
    "stock_lazy": "stock_lazy",
    "pooled": "pooled",
    "live_set": "pooled",
}


@dataclass(kw_only=True, slots=True, frozen=True)
class MemoryEstimate:
    """Every rank under every variant, and the analytic receive model beside them.
    See [Note: the whole-stage estimate]."""

    shape: PipelineShape
    """The pipeline replayed."""
    config: PoolConfig
    """The pool config of the ``pooled`` variant (``live_set`` is it at slack 0 and grad
    slack 0)."""
    training: Training
    """Optimizer, steps, outputs returned."""
    model: str
    """What was replayed (the decoder's description, or the builder's name)."""
    stage_names: tuple[str, ...]
    """What each stage holds, by stage index ("" where not replayed)."""
    replays: tuple[RankReplay, ...]
    """One per (rank, variant), rank-major, variants in :data:`REPLAY_VARIANTS` order."""
    receive: MemoryModel
    """The analytic receive-buffer model of the same stages (the ``pooled`` config)."""
    receive_live: MemoryModel
    """The same at slack 0 and grad slack 0 (what the ``live_set`` replay pools)."""
    fake: bool
    """True: fake tensors; False: real CPU tensors."""
    notes: tuple[str, ...] = ()
    """What was left out of this estimate and why (e.g. no pooled variant under GPipe)."""
    not_modelled: tuple[str, ...] = NOT_MODELLED
    """What the estimate never measures."""

    # ------------------------------------------------------------------ access

    @property
    def variants(self) -> tuple[str, ...]:
        """The variants replayed, in order."""
        return tuple(dict.fromkeys(r.variant for r in self.replays))

    @property
    def ranks(self) -> tuple[int, ...]:
        """The ranks replayed, in order."""
        return tuple(dict.fromkeys(r.rank for r in self.replays))

    def replay(self, rank: int, variant: str) -> RankReplay:
        """The replay of ``rank`` under ``variant``."""
        for r in self.replays:
            if r.rank == rank and r.variant == variant:
                return r
        raise MemoryModelError(
            "replay",
            found=f"rank {rank!r}, variant {variant!r}",
            required=f"a replayed rank ({self.ranks}) and variant ({', '.join(self.variants)})",
            fix="ask for a rank and variant the estimate ran.",
        )

    def worst(self, variant: str) -> RankReplay:
        """The rank with the highest peak under ``variant``."""
        self.replay(self.ranks[0], variant)
        return max((r for r in self.replays if r.variant == variant), key=lambda r: r.peak.bytes)

    def modelled_receive_bytes(self, rank: int, variant: str) -> int:
        """What the analytic model gives for ``rank``'s receive buffers under a replayed
        ``variant``."""
        model = self.receive_live if variant == "live_set" else self.receive
        return model.rank_bytes(rank, _MODEL_VARIANT[variant])

    # ------------------------------------------------------------------ frames (one per figure)

    def peak_frame(self, unit: str = "gib") -> pd.DataFrame:
        """One row per (rank, variant): ``rank``, ``stages``, ``variant``, ``peak_<unit>``,
        ``where`` (step, phase, microbatch, stage, op), ``wall_s``, and ``<category>_<unit>`` at the
        peak."""
        import pandas as pd

        scale = unit_bytes(unit)
        rows = []
        for r in self.replays:
            row: dict[str, Any] = {
                "rank": r.rank,
                "stages": ",".join(map(str, r.stages)),
                "variant": r.variant,
                f"peak_{unit}": r.peak.bytes / scale,
                "peak_bytes": r.peak.bytes,
                "where": r.peak.describe(),
                "phase": r.peak.phase,
                "microbatch": r.peak.microbatch,
                "wall_s": r.wall_s,
            }
            row.update({f"{c}_{unit}": r.at_peak[c] / scale for c in CATEGORIES})
            rows.append(row)
        return pd.DataFrame.from_records(rows)

    def stacked_frame(self, unit: str = "gib") -> pd.DataFrame:
        """Tidy, for the per-stage stacked figure: ``rank``, ``stages``, ``variant``, ``category``,
        ``bytes``, ``<unit>`` at each (rank, variant)'s peak; categories in :data:`CATEGORIES`
        order."""
        import pandas as pd

        scale = unit_bytes(unit)
        return pd.DataFrame.from_records(
            [
                {
                    "rank": r.rank,
                    "stages": ",".join(map(str, r.stages)),
                    "variant": r.variant,
                    "category": c,
                    "bytes": r.at_peak[c],
                    unit: r.at_peak[c] / scale,
                }
                for r in self.replays
                for c in CATEGORIES
            ]
        )

    def timeline_frame(self, unit: str = "gib") -> pd.DataFrame:
        """Tidy: ``rank``, ``variant``, ``step``, ``action``
        (``forward``/``backward``/``optimizer``/``step_end``), ``stage``, ``microbatch``,
        ``position``, ``category``, ``<unit>``: bytes live after every action."""
        import pandas as pd

        scale = unit_bytes(unit)
        return pd.DataFrame.from_records(
            [
                {
                    "rank": r.rank,
                    "variant": r.variant,
                    "step": p.step,
                    "action": p.phase,
                    "stage": p.stage,
                    "microbatch": p.microbatch,
                    "position": p.position,
                    "category": c,
                    unit: p.by_category[c] / scale,
                }
                for r in self.replays
                for p in r.timeline
                for c in CATEGORIES
            ]
        )

    def receive_frame(self) -> pd.DataFrame:
        """One row per (rank, variant): the replay's receive-buffer maximum beside the analytic
        model's bytes.

        ``difference_bytes`` = replayed - modelled. Stock, pooled and live set allocate their sets
        at setup, so the maximum is what they hold; the pool adds one 0-d anchor per slot (a few
        bytes); torch 2.15's per-receive buffers may hold one set more than the live set
        ([Note: lazy receive buffers]).
        """
        import pandas as pd

        return pd.DataFrame.from_records(
            [
                {
                    "rank": r.rank,
                    "variant": r.variant,
                    "replayed_bytes": r.category_max["recv_buffers"],
                    "modelled_bytes": self.modelled_receive_bytes(r.rank, r.variant),
                    "difference_bytes": r.category_max["recv_buffers"]
                    - self.modelled_receive_bytes(r.rank, r.variant),
                }
                for r in self.replays
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict: inputs, every replay's peak and categories, the receive check."""
        return {
            "shape": dataclasses.asdict(self.shape),
            "config": self.config.to_dict(),
            "training": dataclasses.asdict(self.training),
            "model": self.model,
            "fake": self.fake,
            "stage_names": list(self.stage_names),
            "notes": list(self.notes),
            "not_modelled": list(self.not_modelled),
            "categories": {c: CATEGORY_LABELS[c] for c in CATEGORIES},
            "replays": [
                {
                    "rank": r.rank,
                    "stages": list(r.stages),
                    "variant": r.variant,
                    "peak_bytes": r.peak.bytes,
                    "peak": {
                        "step": r.peak.step,
                        "phase": r.peak.phase,
                        "stage": r.peak.stage,
                        "microbatch": r.peak.microbatch,
                        "op": r.peak.op,
                        "where": r.peak.describe(),
                    },
                    "at_peak_bytes": dict(r.at_peak),
                    "category_max_bytes": dict(r.category_max),
                    "between_steps_bytes": dict(r.between_steps),
                    "wall_s": r.wall_s,
                    "storages": r.storages,
                    "modelled_receive_bytes": self.modelled_receive_bytes(r.rank, r.variant),
                }
                for r in self.replays
            ],
        }


def _replay_task(args: tuple[Any, ...]) -> RankReplay:
    builder, shape, rank, variant, config, training, fake = args
    return replay_rank(
        builder, shape, rank, variant=variant, config=config, training=training, fake=fake
    )


def end_with_parent(parent: int) -> None:
    """In a replay worker: end the moment the process that started it is gone, so a killed
    kernel or a killed ``pooltk estimate`` leaves no worker (each holds hundreds of MB, and the
    workers' resource trackers stay while they run). A thread checks the parent once a second."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="pooltk-end-with-parent", daemon=True).start()


def _in_processes(
    builder: StageBuilder,
    shape: PipelineShape,
    tasks: list[tuple[int, str]],
    config: PoolConfig,
    training: Training,
    fake: bool,
    jobs: int,
    progress: Callable[[RankReplay], None] | None,
) -> list[RankReplay]:
    """Each (rank, variant) replayed in a fresh ``spawn`` process, ``jobs`` at once; results in
    ``tasks`` order."""
    import multiprocessing
    import pickle
    from concurrent.futures import ProcessPoolExecutor, as_completed

    try:
        pickle.dumps(builder)
    # any pickling failure means: it cannot cross to a worker
    except Exception as exc:  # noqa: BLE001
        raise MemoryModelError(
            "jobs",
            found=f"a builder that does not pickle ({type(exc).__name__}: {exc})",
            required="a module-level function or a DecoderBuilder for jobs > 1",
            fix="define the builder at module level, or use jobs=1.",
        ) from None
    out: dict[tuple[int, str], RankReplay] = {}
    with ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=end_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        futures = {
            pool.submit(_replay_task, (builder, shape, r, v, config, training, fake)): (r, v)
            for r, v in tasks
        }
        for fut in as_completed(futures):
            done = fut.result()
            out[futures[fut]] = done
            if progress is not None:
                progress(done)
    return [out[t] for t in tasks]


def _boundaries(
    builder: StageBuilder, shape: PipelineShape, known: Mapping[int, tuple[Any, ...]]
) -> list[Boundary]:
    """Boundary ``b`` carries what stage ``b + 1`` takes as input: from the replays, or asked of the
    builder."""
    n = shape.num_stages
    inputs = dict(known)
    missing = [s for s in range(1, n) if s not in inputs]
    if missing:
        inputs.update(_declared_inputs(builder, missing, n))
    out = []
    for s in range(1, n):
        specs = tuple(
            TensorSpec(shape=sh, dtype=dt, name=f"stage {s} input {j}")
            for j, (sh, dt) in enumerate(inputs[s])
        )
        grads = tuple(t for t in specs if t.dtype.startswith(("float", "bfloat")))
        out.append(
            Boundary(activations=specs, grads=grads if grads and len(grads) != len(specs) else None)
        )
    return out


def _declared_inputs(
    builder: StageBuilder, stages: Sequence[int], n: int
) -> dict[int, tuple[Any, ...]]:
    declared = getattr(builder, "stage_inputs", None)
    if callable(declared):
        return {
            s: tuple((tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in declared(s, n))
            for s in stages
        }
    from torch._subclasses.fake_tensor import FakeTensorMode

    out = {}
    with FakeTensorMode(allow_non_fake_inputs=True):
        for s in stages:
            spec = builder(s, n)
            out[s] = tuple(
                (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for t in spec.inputs
            )
            del spec
    return out


def _variants(variants: Sequence[str], shape: PipelineShape) -> tuple[list[str], list[str]]:
    """The variants to replay, and a note for each left out (no pooled replay where pooltk leaves
    the schedule stock). One name is a list of one (not of its letters)."""
    wanted = list(dict.fromkeys([variants] if isinstance(variants, str) else variants))
    bad = [v for v in wanted if v not in REPLAY_VARIANTS]
    if bad or not wanted:
        raise MemoryModelError(
            "variants",
            found=repr(bad or wanted),
            required=f"some of {', '.join(REPLAY_VARIANTS)}",
            fix="e.g. variants=('stock', 'pooled').",
        )
    if shape.poolable or not any(v in POOLED_VARIANTS for v in wanted):
        return wanted, []
    wanted = [v for v in wanted if v not in POOLED_VARIANTS]
    if not wanted:
        raise MemoryModelError(
            "variants",
            found="only pooled variants",
            required=f"stock or stock_lazy under {shape.schedule_name}",
            fix="add 'stock' to the variants.",
        )
    note = (
        f"no pooled or live-set replay: {shape.schedule_name} keeps every forward buffer live "
        "until the backwards start, so pooltk leaves it stock"
    )
    return wanted, [note]


def estimate_memory(
    builder: StageBuilder,
    shape: PipelineShape,
    *,
    config: PoolConfig | None = None,
    training: Training | None = None,
    variants: Sequence[str] = REPLAY_VARIANTS,
    ranks: Sequence[int] | None = None,
    fake: bool = True,
    model: str = "",
    progress: Callable[[RankReplay], None] | None = None,
    jobs: int = 1,
) -> MemoryEstimate:
    """Replay every rank (or ``ranks``) of ``shape`` under each of ``variants``.
    See [Note: the whole-stage estimate].

    ``builder`` builds each stage ([Note: a stage builder]); ``config`` is the ``pooled`` variant's
    pool config; ``progress`` is called after each replay (the CLI prints a line per rank and
    variant). ``jobs`` > 1 replays that many (rank, variant) pairs at once in fresh processes (each
    its own fake world; the builder must pickle: a module-level function or
    :class:`~pooltk.memory.decoder.builder.DecoderBuilder`); the result is the same, in the same
    order.
    """
    if not isinstance(shape, PipelineShape):
        raise MemoryModelError(
            "shape",
            found=type(shape).__name__,
            required="a PipelineShape",
            fix="build PipelineShape(pp=..., n_microbatches=..., schedule=...).",
        )
    config = config or PoolConfig()
    training = training or Training()
    wanted, notes = _variants(variants, shape)
    tasks = [(r, v) for r in _ranks(ranks, shape) for v in wanted]
    replays = _replays(builder, shape, tasks, config, training, fake, jobs, progress)
    names, bounds = _stages_seen(builder, shape, replays)
    live_cfg = pool_config("live_set", config)
    return MemoryEstimate(
        shape=shape,
        config=config,
        training=training,
        model=model or _label(builder),
        stage_names=names,
        replays=tuple(replays),
        receive=model_memory(shape, bounds, config, unpoolable="stock"),
        receive_live=model_memory(shape, bounds, live_cfg, unpoolable="stock"),
        fake=fake,
        notes=tuple(notes),
    )


def _ranks(ranks: Sequence[int] | None, shape: PipelineShape) -> list[int]:
    """The ranks to replay, in the order given (every rank when ``None``), each checked."""
    chosen = list(range(shape.pp)) if ranks is None else list(dict.fromkeys(ranks))
    if not chosen:
        raise MemoryModelError(
            "ranks",
            found=repr(list(ranks)),
            required="at least one rank",
            fix=f"pick ranks in 0..{shape.pp - 1}, or ranks=None for every rank.",
        )
    for r in chosen:
        if not (isinstance(r, int) and 0 <= r < shape.pp):
            raise MemoryModelError(
                "ranks",
                found=repr(r),
                required=f"ranks in 0..{shape.pp - 1}",
                fix="pick existing ranks.",
            )
    return chosen


def _replays(
    builder: StageBuilder,
    shape: PipelineShape,
    tasks: list[tuple[int, str]],
    config: PoolConfig,
    training: Training,
    fake: bool,
    jobs: int,
    progress: Callable[[RankReplay], None] | None,
) -> list[RankReplay]:
    """Each (rank, variant) of ``tasks`` replayed, in this process or ``jobs`` at once in others."""
    jobs_n = check_int(
        "jobs",
        jobs,
        low=1,
        fix="give how many processes replay at once, e.g. 4 (1: this process).",
        error=MemoryModelError,
    )
    if jobs_n > 1 and len(tasks) != 1:  # one task: no process to start
        return _in_processes(
            builder, shape, tasks, config, training, fake, min(jobs_n, len(tasks)), progress
        )
    replays = []
    for r, v in tasks:
        done = replay_rank(
            builder, shape, r, variant=v, config=config, training=training, fake=fake
        )
        replays.append(done)
        if progress is not None:
            progress(done)
    return replays


def _stages_seen(
    builder: StageBuilder, shape: PipelineShape, replays: list[RankReplay]
) -> tuple[tuple[str, ...], list[Boundary]]:
    """Every stage's name (``""`` where no replay built it) and the boundaries between stages."""
    known: dict[int, tuple[Any, ...]] = {}
    names = [""] * shape.num_stages
    for rep in replays:
        for s, name, ins in zip(rep.stages, rep.stage_names, rep.inputs):
            known[s], names[s] = ins, name
    return tuple(names), _boundaries(builder, shape, known)


def _label(builder: StageBuilder) -> str:
    """What the builder says it builds, else its name."""
    described = getattr(builder, "describe", None)
    if callable(described):
        return described()
    return getattr(builder, "__name__", type(builder).__name__)
