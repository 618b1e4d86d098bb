"""Replay one rank of a pipeline for one variant: its real stage modules, torch's own schedule,
every storage logged.

[Note: one rank's replay]
In order, inside a fake world ([Note: a fake world]) and a tracking mode
([Note: tracking storages]):

1. **variant**: ``stock`` runs torch as installed; ``stock_lazy`` binds the torch 2.15 emulation
   ([Note: emulating lazy receive buffers]); ``pooled`` runs inside ``pooltk.install(config)``
   (``schedule="auto"`` for multi-stage schedules, so rings come from the action order and, under
   ``sharing="rank"``, a rank's stages share them); ``live_set`` the same at slack 0 and grad
   slack 0 (the smallest safe rings: the live set wherever receives are posted and released in
   order). ``pooltk`` is uninstalled inside the fake mode, after every stage is gone;
2. **build** (phase ``build``: parameters): the builder's module for each of the rank's stages
   ([Note: a stage builder]); the stage's outputs are learnt by one forward without gradients
   (phase ``schedule``: freed at once); ``PipelineStage`` gets static shapes and the schedule's
   vote is skipped ([Note: the replay's seams into torch]);
3. **inputs**: the step's batch on a rank holding stage 0 (``M`` microbatches of its inputs) and
   the targets on a rank holding the last stage;
4. **optimizer warm-up** (before measuring): every parameter gets a zero gradient, the optimizer
   steps once (its states exist from then on, as after any earlier step) and the gradients are
   set to ``None``; what a real first step adds besides is the schedule's setup, which the
   measured step runs itself;
5. **measured steps** (``steps``, default 1): ``schedule.step`` then ``optimizer.step`` and
   ``zero_grad(set_to_none=True)``. Compute calls are wrapped on the stage *objects* to set the
   phase (forward, loss, backward, post, optimizer) and to re-label what the replay learns:
   parameters' ``.grad`` become gradients after each backward, optimizer states after each
   optimizer step, the loss a kept output, the last stage's outputs too when ``return_outputs``
   (and the step's merged copy of them). Allocations between actions are the schedule's (phase
   ``schedule``: transient) once the step's first action has started; before it they are its setup
   (receive buffers).

The garbage collector is off during the replay and runs at each step's end, so when a cycle's
storages are freed does not depend on how many Python objects the tensor mode makes (the real and
fake replays must agree byte for byte).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

# Imported here, never under a tensor mode: torch makes module-level tensors at import.
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import get_schedule_class

import pooltk
from pooltk.analysis.catalog import CATALOG
from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError, positive_int
from pooltk.memory.replay import seams
from pooltk.memory.replay.lazy import emulate_lazy
from pooltk.memory.replay.stages import StageBuilder, StageSpec, checked_spec
from pooltk.memory.replay.tracker import CATEGORIES, FakeTracker, PeakPoint, RealTracker, StorageLog
from pooltk.memory.replay.world import fake_world
from pooltk.memory.shape import PipelineShape
from pooltk.pool.torch_compat.bind import Hooks, bind
from pooltk.pool.torch_compat.stage_api import Call

__all__ = [
    "OPTIMIZERS",
    "POOLED_VARIANTS",
    "REPLAY_VARIANTS",
    "RankReplay",
    "TimelinePoint",
    "Training",
    "pool_config",
    "rank_stages",
    "replay_rank",
]

REPLAY_VARIANTS: tuple[str, ...] = ("stock", "stock_lazy", "pooled", "live_set")
"""What a replay can run: torch <= 2.14 as shipped, torch 2.15's per-receive buffers, pooltk's
rings, the smallest rings."""

POOLED_VARIANTS: tuple[str, ...] = ("pooled", "live_set")
"""The replay variants that install pooltk's pool (:func:`pool_config`), so they need a schedule
pooltk pools."""

OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd", "none")
"""Optimizers a replay steps: AdamW (two states per parameter), SGD without momentum (none), or no
optimizer step."""

_IMPL_KWARGS = {
    "fused": {"fused": True},
    "foreach": {"foreach": True},
    "for-loop": {"foreach": False},
}
"""What each ``Training.optimizer_impl`` passes to the optimizer."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Training:
    """How the replayed step trains."""

    optimizer: str = "adamw"
    """``adamw`` (torchtitan's default optimizer), ``sgd`` or ``none``."""
    optimizer_impl: str = "fused"
    """``fused`` (torchtitan's default ``implementation``), ``foreach`` or ``for-loop``: what
    temporaries the optimizer step makes."""
    steps: int = 1
    """Measured steps after the optimizer warm-up ([Note: one rank's replay], step 4)."""
    return_outputs: bool = False
    """Whether ``schedule.step`` returns the merged outputs (torchtitan's trainer passes False;
    torch's default is True)."""

    def __post_init__(self) -> None:
        positive_int("Training.steps", self.steps, "replay at least one step (1 is the default).")
        if self.optimizer not in OPTIMIZERS:
            raise MemoryModelError(
                "Training.optimizer",
                found=repr(self.optimizer),
                required=f"one of {', '.join(OPTIMIZERS)}",
                fix="use 'adamw' (default).",
            )
        if self.optimizer_impl not in _IMPL_KWARGS:
            names = [repr(name) for name in _IMPL_KWARGS]
            raise MemoryModelError(
                "Training.optimizer_impl",
                found=repr(self.optimizer_impl),
                required=f"{', '.join(names[:-1])} or {names[-1]}",
                fix="use 'fused' (default).",
            )


@dataclass(kw_only=True, slots=True, frozen=True)
class TimelinePoint:
    """Bytes per category just after one action of the replay."""

    step: int
    """Measured step (0-based)."""
    phase: str
    """The action that just ended: ``forward``, ``backward``, ``optimizer``, ``step_end``."""
    stage: int
    """Its stage (-1: none)."""
    microbatch: int
    """Its microbatch (-1: none)."""
    position: int
    """Position in the allocation log."""
    by_category: Mapping[str, int]
    """Bytes live per category (:data:`~pooltk.memory.replay.tracker.CATEGORIES`)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RankReplay:
    """One rank's replay under one variant. See [Note: one rank's replay]."""

    rank: int
    """The rank replayed."""
    stages: tuple[int, ...]
    """Its stages, in the order the schedule holds them."""
    stage_names: tuple[str, ...]
    """What each stage holds (the builder's names)."""
    variant: str
    """One of :data:`REPLAY_VARIANTS`."""
    fake: bool
    """True: fake tensors (no memory); False: real CPU tensors."""
    steps: int
    """Measured steps."""
    peak: PeakPoint
    """The most bytes live at once during the measured steps, and where."""
    at_peak: Mapping[str, int]
    """Bytes per category at that moment."""
    category_max: Mapping[str, int]
    """Each category's own maximum during the measured steps (they need not coincide)."""
    between_steps: Mapping[str, int]
    """Bytes per category live after the last step's optimizer step and ``zero_grad``."""
    timeline: tuple[TimelinePoint, ...]
    """Bytes per category after every action of the measured steps."""
    inputs: tuple[tuple[tuple[tuple[int, ...], str], ...], ...]
    """Per stage, one microbatch's input tensors as (shape, dtype name): the boundaries the analytic
    model needs."""
    wall_s: float
    """Seconds the replay took on this machine."""
    storages: int
    """Storages the replay logged (every allocation, freed or not)."""

    @property
    def peak_bytes(self) -> int:
        """Bytes live at the peak."""
        return self.peak.bytes


@dataclass(slots=True)
class _Run:
    log: StorageLog
    training: Training
    last_stage: int
    marks: list[tuple[int, str, int, int, int]] = field(default_factory=list)
    params: list[torch.nn.Parameter] = field(default_factory=list)
    optimizer: Any = None


def rank_stages(shape: PipelineShape, rank: int) -> tuple[int, ...]:
    """The stages ``rank`` holds: ``rank + k * pp`` (looped schedules) or ``rank`` and
    ``2 pp - 1 - rank`` (V schedules)."""
    vpp = int(shape.stages_per_rank or 1)
    if CATALOG[shape.schedule_name].style == "v":
        return (rank, 2 * shape.pp - 1 - rank)
    return tuple(rank + k * shape.pp for k in range(vpp))


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@contextlib.contextmanager
def _phase(log: StorageLog, phase: str, stage: int = -1, microbatch: int = -1) -> Iterator[None]:
    ctx = log.context
    saved = (ctx.phase, ctx.stage, ctx.microbatch)
    ctx.phase, ctx.stage, ctx.microbatch = phase, stage, microbatch
    try:
        yield
    finally:
        ctx.phase, ctx.stage, ctx.microbatch = saved


def _wrap_compute(stage: Any, run: _Run) -> None:
    """Phase and re-labelling hooks on one stage object. See [Note: one rank's replay], step 5."""
    log, index = run.log, stage.stage_index

    def phase(name: str) -> Any:
        @contextlib.contextmanager
        def around(obj: Any, call: Call) -> Iterator[None]:
            if log.context.phase == "setup":  # the step's setup is over once an action starts
                log.context.phase = "schedule"
            with _phase(log, name, index, call.chunk):
                yield
            if name in ("forward", "backward"):
                run.marks.append((log.context.step, name, index, call.chunk, log.position()))

        return around

    def kept_outputs(obj: Any, call: Call, out: Any) -> Any:
        if stage.is_last and run.training.return_outputs:
            log.label(out, "kept_outputs")
        return out

    def gradients(obj: Any, call: Call, out: Any) -> Any:
        log.label([p.grad for p in stage.submod.parameters() if p.grad is not None], "gradients")
        return out

    hooks = {
        "get_fwd_recv_ops": Hooks(around=phase("post")),
        "get_bwd_recv_ops": Hooks(around=phase("post")),
        "forward_one_chunk": Hooks(around=phase("forward"), after=kept_outputs),
        "backward_one_chunk": Hooks(around=phase("backward"), after=gradients),
        "backward_weight_one_chunk": Hooks(around=phase("backward"), after=gradients),
    }
    bind(stage, hooks, tag="pooltk-replay")


def _loss(spec_loss: Any, run: _Run) -> Any:
    log = run.log

    def loss_fn(output: Any, target: Any) -> torch.Tensor:
        ctx = log.context
        with _phase(log, "loss", run.last_stage, ctx.microbatch):
            value = spec_loss(output, target)
            log.label(value, "kept_outputs")
        return value

    return loss_fn


def _not_this_rank(output: Any, target: Any) -> torch.Tensor:
    raise RuntimeError("the loss was asked of a rank that holds no last stage")


def _optimizer(run: _Run) -> Any:
    t = run.training
    if t.optimizer == "none" or not run.params:
        return None
    impl = _IMPL_KWARGS[t.optimizer_impl]
    if t.optimizer == "adamw":
        return torch.optim.AdamW(run.params, lr=1e-4, **impl)
    return torch.optim.SGD(run.params, lr=1e-4, **impl)


def _optimizer_step(run: _Run) -> None:
    opt, log = run.optimizer, run.log
    with _phase(log, "optimizer"):
        if opt is not None:
            opt.step()
            log.label(
                [
                    v
                    for state in opt.state.values()
                    for v in state.values()
                    if isinstance(v, torch.Tensor)
                ],
                "optimizer",
            )
            opt.zero_grad(set_to_none=True)
        else:
            for p in run.params:
                p.grad = None


def pool_config(variant: str, config: PoolConfig) -> PoolConfig:
    """The pool config a variant of :data:`POOLED_VARIANTS` installs: ``config`` for ``pooled``;
    for ``live_set`` the same at slack 0 and grad slack 0 (the smallest safe rings)."""
    if variant == "live_set":
        return replace(config, slack=0, grad_slack=0)
    return config


def _pool(
    variant: str, config: PoolConfig, shape: PipelineShape
) -> contextlib.AbstractContextManager:
    if variant not in POOLED_VARIANTS:
        return contextlib.nullcontext()
    if pooltk.installed() is not None:
        raise MemoryModelError(
            "pooltk",
            found="installed in this process already",
            required="not installed: the replay installs and uninstalls it for each pooled variant",
            fix="call pooltk.uninstall() first.",
        )
    cfg = pool_config(variant, config)
    return pooltk.pooled(cfg, schedule="auto" if shape.multi_stage else "1f1b")


def _fake_failure(
    exc: BaseException, log: StorageLog, first_stage: int, rank: int
) -> MemoryModelError | None:
    """The error naming the op and the stage when the fake tensors caused ``exc``, else ``None``."""
    from torch._subclasses import fake_tensor as ft

    kinds = (
        ft.UnsupportedOperatorException,
        ft.DynamicOutputShapeException,
        ft.DataDependentOutputException,
        ft.UnsupportedFakeTensorException,
    )
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, kinds):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    where = log.context
    stage = where.stage if where.stage >= 0 else first_stage
    op = getattr(cause, "func", None)
    return MemoryModelError(
        f"replay of stage {stage} (rank {rank})",
        found=f"op {op} has no fake-tensor implementation usable here ({type(cause).__name__}) in "
        f"its {where.phase}",
        required="ops with fake (meta) kernels and outputs whose shapes do not depend on values",
        fix="replace the op in the stage's module (e.g. a static-shape alternative), or register a "
        "fake kernel for it with torch.library.register_fake.",
    )


def _check_replay(shape: PipelineShape, rank: int, variant: str) -> None:
    """:func:`replay_rank`'s variant and rank, each error naming its fix."""
    if variant not in REPLAY_VARIANTS:
        raise MemoryModelError(
            "variant",
            found=repr(variant),
            required=f"one of {', '.join(REPLAY_VARIANTS)}",
            fix="use 'stock', 'stock_lazy', 'pooled' or 'live_set'.",
        )
    if not (isinstance(rank, int) and 0 <= rank < shape.pp):
        raise MemoryModelError(
            "rank",
            found=repr(rank),
            required=f"a rank in 0..{shape.pp - 1}",
            fix="pick an existing rank.",
        )
    if variant in POOLED_VARIANTS and not shape.poolable:
        raise MemoryModelError(
            f"{variant} replay",
            found=f"schedule {shape.schedule_name}",
            required="a schedule pooltk pools (its forward buffers are not all live until the "
            "backwards)",
            fix="replay stock and stock_lazy only for this schedule.",
        )


def replay_rank(
    builder: StageBuilder,
    shape: PipelineShape,
    rank: int,
    *,
    variant: str = "stock",
    config: PoolConfig | None = None,
    training: Training | None = None,
    fake: bool = True,
) -> RankReplay:
    """Replay ``rank`` of ``shape`` under ``variant``. See [Note: one rank's replay].

    Raises :class:`MemoryModelError` for a bad variant or rank, a process that already has a
    process group or pooltk installed, and an op the fake tensors cannot run (naming the op and the
    stage).
    """
    _check_replay(shape, rank, variant)
    config = config or PoolConfig()
    training = training or Training()
    _ = pooltk.pooled  # import the pool now, never under a tensor mode (see the imports above)
    started = time.perf_counter()
    log = StorageLog()
    mode = FakeTracker(log) if fake else RealTracker(log)
    stages_idx = rank_stages(shape, rank)
    n = shape.num_stages
    run = _Run(log=log, training=training, last_stage=n - 1)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with fake_world(rank, shape.pp), mode, _pool(variant, config, shape):
            try:
                result = _replay(builder, shape, rank, stages_idx, variant, run, fake)
            except MemoryModelError:
                raise
            # name the op and the stage when the fake tensors are the cause
            except Exception as exc:  # noqa: BLE001
                error = _fake_failure(exc, log, stages_idx[0], rank)
                if error is None:
                    raise
                raise error from exc
            finally:
                log.measuring = False
                run.params.clear()
                run.optimizer = None
                gc.collect(0)
    finally:
        if was_enabled:
            gc.enable()
    return _result(
        result, log, run, rank, stages_idx, variant, fake, training, time.perf_counter() - started
    )


def _stage(
    builder: StageBuilder,
    s: int,
    n: int,
    device: torch.device,
    variant: str,
    run: _Run,
    fake: bool,
) -> tuple[PipelineStage, StageSpec]:
    """Stage ``s`` built, its outputs learnt, wrapped for the replay ([Note: one rank's replay],
    step 2)."""
    log = run.log
    with _phase(log, "build", s):
        spec = checked_spec(builder(s, n), s, n, fake=fake)
    with _phase(log, "schedule", s), torch.no_grad():
        example = tuple(torch.zeros(t.shape, dtype=t.dtype, device=device) for t in spec.inputs)
        out = spec.module(*example)
        del example
    outs = out if isinstance(out, tuple) else (out,)
    out_meta = tuple(
        torch.empty(o.shape, dtype=o.dtype, device="meta").requires_grad_(o.is_floating_point())
        for o in outs
    )
    del out, outs
    in_meta = tuple(
        torch.empty(t.shape, dtype=t.dtype, device="meta").requires_grad_(
            s > 0 and t.is_floating_point()
        )
        for t in spec.inputs
    )
    with _phase(log, "build", s):
        stage = PipelineStage(spec.module, s, n, device, input_args=in_meta, output_args=out_meta)
    seams.set_static(stage)
    if variant == "stock_lazy":
        emulate_lazy(stage, log)
    _wrap_compute(stage, run)
    return stage, spec


def _replay(
    builder: StageBuilder,
    shape: PipelineShape,
    rank: int,
    stages_idx: tuple[int, ...],
    variant: str,
    run: _Run,
    fake: bool,
) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    log, n, m = run.log, shape.num_stages, shape.n_microbatches
    device = torch.device("cpu")
    stages, names, inputs_meta, specs = [], [], [], []
    for s in stages_idx:
        stage, spec = _stage(builder, s, n, device, variant, run, fake)
        stages.append(stage)
        specs.append(spec)
        names.append(spec.name)
        inputs_meta.append(tuple((tuple(t.shape), _dtype_name(t.dtype)) for t in spec.inputs))
        run.params.extend(p for p in spec.module.parameters() if p.requires_grad)
    last = next((sp for st, sp in zip(stages, specs) if st.is_last), None)
    first = next((sp for st, sp in zip(stages, specs) if st.is_first), None)
    cls = get_schedule_class(shape.schedule_name)
    # Every rank's schedule gets a loss function: torch decides from it whether the step has a
    # backward.
    loss = _loss(last.loss_fn, run) if last is not None else _not_this_rank
    schedule = cls(stages if shape.multi_stage else stages[0], n_microbatches=m, loss_fn=loss)
    seams.skip_vote(schedule)
    with _phase(log, "inputs"):
        args = tuple(_batch(t, m, device) for t in first.inputs) if first else ()
        target = _batch(last.target, m, device) if last is not None else None
    run.optimizer = _optimizer(run)
    with _phase(log, "optimizer"):
        for p in run.params:
            p.grad = torch.zeros_like(p)
    _optimizer_step(run)  # the warm-up: the optimizer's states exist from here on
    gc.collect(0)
    log.start_measuring()
    for step in range(run.training.steps):
        log.context.step = step
        with _phase(log, "setup"):
            kwargs = {"target": target} if target is not None else {}
            merged = schedule.step(*args, return_outputs=run.training.return_outputs, **kwargs)
            # The last stage's outputs merged for the caller (return_outputs).
            log.label(merged, "kept_outputs")
            del merged  # a trainer that asks for them uses them and lets them go
        _optimizer_step(run)
        run.marks.append((step, "optimizer", -1, -1, log.position()))
        gc.collect(0)
        run.marks.append((step, "step_end", -1, -1, log.position()))
    del schedule, stages, args, target, loss
    return tuple(names), tuple(inputs_meta)


def _batch(one: torch.Tensor, m: int, device: torch.device) -> torch.Tensor:
    """The step's ``m`` microbatches of ``one`` (one microbatch's tensor), stacked along rows."""
    return torch.zeros((m * one.shape[0], *one.shape[1:]), dtype=one.dtype, device=device)


def _result(
    result: tuple[tuple[str, ...], tuple[Any, ...]],
    log: StorageLog,
    run: _Run,
    rank: int,
    stages: tuple[int, ...],
    variant: str,
    fake: bool,
    training: Training,
    wall: float,
) -> RankReplay:
    names, inputs = result
    if log.peak is None:  # nothing was allocated while measuring
        raise MemoryModelError(
            "replay",
            found="no allocation during the measured steps",
            required="a step that computes",
            fix="check the stage builder returns modules with parameters.",
        )
    marks = sorted(run.marks, key=lambda mk: mk[4])
    points = log.sweep([mk[4] for mk in marks])
    at_peak = log.at(log.peak.position)
    timeline = tuple(
        TimelinePoint(step=st, phase=ph, stage=sg, microbatch=mb, position=pos, by_category=tot)
        for (st, ph, sg, mb, pos), tot in zip(marks, points)
    )
    return RankReplay(
        rank=rank,
        stages=stages,
        stage_names=names,
        variant=variant,
        fake=fake,
        steps=training.steps,
        peak=log.peak,
        at_peak=at_peak,
        category_max=_category_max(log),
        between_steps=timeline[-1].by_category if timeline else dict.fromkeys(CATEGORIES, 0),
        timeline=timeline,
        inputs=inputs,
        wall_s=wall,
        storages=len(log.records),
    )


def _category_max(log: StorageLog) -> dict[str, int]:
    """Each category's own maximum over the measured part of the log (from where measuring
    started)."""
    totals = dict.fromkeys(CATEGORIES, 0)
    best = dict.fromkeys(CATEGORIES, 0)
    records, start = log.records, log.measure_start
    for i, e in enumerate(log.events):
        r = records[e if e >= 0 else ~e]
        totals[r.category] += r.nbytes if e >= 0 else -r.nbytes
        if i >= start and totals[r.category] > best[r.category]:
            best[r.category] = totals[r.category]
    if start <= len(log.events):
        at_start = log.at(start)
        for c in CATEGORIES:
            best[c] = max(best[c], at_start[c])
    return best
