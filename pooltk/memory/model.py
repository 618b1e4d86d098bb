"""The receive-buffer memory model: bytes per stage, direction and rank, stock vs pooled.

Given a pipeline shape (pp ranks, stages per rank, microbatches ``M``, schedule), the tensors that
cross each stage boundary (they may differ per boundary), a :class:`~pooltk.config.PoolConfig` and
the ring policy (``tight``, pooltk's; ``automodel``, Automodel's single ring) and sharing to model,
:func:`model_memory` gives for every stage and direction how many receive-buffer sets, and how many
bytes, each variant holds (:data:`~pooltk.memory.results.VARIANTS`: stock torch <= 2.14 and >= 2.15,
2.15 with pooltk's last-stage release, the two ring policies, the live set, the config's policy),
and for every rank the rings it keeps when its stages share them (:mod:`~pooltk.memory.ranks`,
:data:`~pooltk.memory.ranks.RANK_VARIANTS`).

The model is split by job: units and dtypes (:mod:`~pooltk.memory.units`), boundary tensors
(:mod:`~pooltk.memory.tensors`), the pipeline shape (:mod:`~pooltk.memory.shape`), rank-shared
rings (:mod:`~pooltk.memory.ranks`), results (:mod:`~pooltk.memory.results`), sweeps
(:mod:`~pooltk.memory.sweeps`). This module asks for the live sets ([Note: live-set sources]),
builds the model and re-exports the public names of the others, so ``from pooltk.memory.model
import ...`` keeps working.

[Note: where the numbers come from]
Every set count starts from one record per (stage, direction),
:class:`pooltk.analysis.stage_sets.ReceiveSets` ([Note: one source of live sets]): stock, the live
set walked from the schedule's own action order, the smallest safe ring, and what torch >= 2.15
holds. The rings are the one slack rule on the smallest safe ring
(:func:`pooltk.pool.ring.ring_size`), the arithmetic the pool itself runs, so the model
cannot drift from the pool; Automodel's single ring is asked of :func:`automodel_ring` alone.
Nothing here hard-codes an in-flight depth. The whole-stage replay (:mod:`pooltk.memory.replay`)
reads the same records. Bytes are ``sets x set_bytes`` where a set is every tensor crossing one
boundary for one microbatch. Stage ``i`` receives activations over boundary ``i - 1`` (stage
``i - 1`` -> ``i``) and gradients over boundary ``i`` (stage ``i + 1`` -> ``i``): stage 0 has no
forward receives and the last stage no gradient receives.

Multi-stage schedules (Interleaved1F1B, LoopedBFS, zero-bubble, V) are modelled as
``pooltk.install(schedule="auto")`` pools them: per (stage, direction) the smallest safe
``c mod K`` ring of the analysed action order (:func:`pooltk.analysis.lifetimes.min_safe_ring`)
plus the one slack rule (:func:`pooltk.pool.ring.ring_size`), exactly what the pool keeps from
:func:`pooltk.analysis.plans.plan_rings`. A (stage, direction) fed by a same-rank handoff
(the V schedules' turn) receives nothing: 0 pooled sets, while stock torch <= 2.14 still
allocates its ``M``. Automodel's released pool pools 1F1B only, so its column is stock there.

[Note: live-set sources]
``"schedule"`` (the default) walks the schedule's own action order: nothing is assumed about the
schedule; the walk is cached per (schedule, N, M, vpp) and costs about a second cold at N=16,
M=256. ``"formula"`` uses the closed forms the walk reproduces (1F1B: forward ``W = min(M, N - i)``,
grad 1; GPipe: forward ``M``, grad 1; :func:`pooltk.analysis.stage_sets.formula_live`) for sweeps
over thousands of shapes. ``tests/memory`` checks that both sources agree on a grid of shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pooltk._validate import InputError, check_choice, check_int
from pooltk.analysis.catalog import ScheduleAnalysisError
from pooltk.analysis.stage_sets import LiveSource, ReceiveSets, receive_sets
from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError, UnpoolableScheduleError
from pooltk.memory.ranks import rank_rings_for
from pooltk.memory.results import (
    VARIANT_LABELS,
    VARIANTS,
    DirectionMemory,
    ExpectedBytes,
    MemoryModel,
)
from pooltk.memory.shape import PipelineShape, microbatches_from_batch, middle_stage
from pooltk.memory.tensors import Boundary, TensorSpec, harness_boundary
from pooltk.memory.units import DTYPE_BYTES, to_unit
from pooltk.pool.ring import ring_size

__all__ = [
    "DTYPE_BYTES",
    "VARIANTS",
    "VARIANT_LABELS",
    "Boundary",
    "POLICIES",
    "SHARINGS",
    "DirectionMemory",
    "ExpectedBytes",
    "MemoryModel",
    "MemoryModelError",
    "PipelineShape",
    "TensorSpec",
    "UnpoolableScheduleError",
    "automodel_ring",
    "compare_configs",  # noqa: F822 - from memory.sweeps, on first use (__getattr__ below)
    "compare_models",  # noqa: F822 - from memory.sweeps, on first use (__getattr__ below)
    "expected_bytes",
    "harness_boundary",
    "live_sets_for",
    "microbatches_from_batch",
    "receive_rows",
    "middle_stage",
    "model_memory",
    "slack_sweep",  # noqa: F822 - from memory.sweeps, on first use (__getattr__ below)
    "to_unit",
]


def receive_rows(shape: PipelineShape, source: LiveSource = "schedule") -> tuple[ReceiveSets, ...]:
    """The :class:`~pooltk.analysis.stage_sets.ReceiveSets` of every (stage, direction) of
    ``shape``.

    See [Note: live-set sources]. A shape torch's schedule refuses, an unknown source, or the
    closed forms asked of a multi-stage schedule is a :class:`MemoryModelError` naming the reason.
    """
    try:
        return receive_sets(
            shape.schedule_name,
            pp=shape.pp,
            n_microbatches=shape.n_microbatches,
            stages_per_rank=int(shape.stages_per_rank or 1),
            source=source,
        )
    except ScheduleAnalysisError as exc:
        raise MemoryModelError(
            f"shape under {shape.schedule_name}",
            found=shape.describe(),
            required=f"a shape torch's schedule accepts ({exc})",
            fix="change the microbatches or stages per rank as the reason says.",
        ) from exc
    except InputError as exc:
        raise MemoryModelError(
            "live_source", found=exc.found, required=exc.required, fix=exc.fix or ""
        ) from None


def live_sets_for(
    shape: PipelineShape, source: LiveSource = "schedule"
) -> tuple[tuple[int, int], ...]:
    """Per stage ``(forward, grad)`` live sets of ``shape``: a view of :func:`receive_rows`."""
    rows = receive_rows(shape, source)
    return tuple((rows[2 * i].live, rows[2 * i + 1].live) for i in range(len(rows) // 2))


def _boundaries(boundaries: Boundary | Sequence[Boundary], n_stages: int) -> tuple[Boundary, ...]:
    if isinstance(boundaries, Boundary):
        return (boundaries,) * (n_stages - 1)
    found = tuple(boundaries) if isinstance(boundaries, (tuple, list)) else None
    if (
        found is None
        or len(found) != n_stages - 1
        or not all(isinstance(b, Boundary) for b in found)
    ):
        n = "nothing" if found is None else f"{len(found)} item(s)"
        raise MemoryModelError(
            "boundaries",
            found=f"{n} ({type(boundaries).__name__})",
            required=f"one Boundary for every boundary, or a list of stages - 1 = {n_stages - 1} "
            "Boundary objects (boundary b carries stage b -> b + 1)",
            fix="pass a single Boundary when every stage boundary carries the same tensors.",
        )
    return found


POLICIES: tuple[str, ...] = ("tight", "automodel")
"""Ring policies the model's ``pooled`` column can follow: ``tight`` (pooltk's rule, per direction,
:func:`pooltk.pool.ring.ring_size`) or ``automodel`` (Automodel's single ring,
:func:`automodel_ring`; 1F1B only)."""
SHARINGS: tuple[str, ...] = ("rank", "stage")
"""``rank``: a rank's stages with the same boundary tensors share one ring per direction
([Note: rank-shared rings]); ``stage``: one ring per (stage, direction)."""


def automodel_ring(num_stages: int, stage: int, n_microbatches: int, slack: int) -> int:
    """Sets of Automodel's released single ring for one stage (both directions): the ONE place it is
    computed.

    ``max(2, min(M, max(1, N - i) + slack))``. Raises ValueError (an
    :class:`~pooltk._validate.InputError`) unless (N, i, M) describe a real stage and ``slack`` is
    an integer >= 0.
    """
    check_int("num_stages", num_stages, low=1)
    check_int("n_microbatches", n_microbatches, low=1)
    check_int(
        "stage_index",
        stage,
        low=0,
        high=num_stages - 1,
        fix=f"stages of a {num_stages}-stage pipeline are 0..{num_stages - 1}.",
    )
    check_int("slack", slack, low=0, fix="pass slack=0 for the live-set limit, or e.g. 2.")
    return max(2, min(n_microbatches, max(1, num_stages - stage) + slack))


def _row(
    shape: PipelineShape,
    r: ReceiveSets,
    bounds: Sequence[Boundary],
    config: PoolConfig,
    policy: str,
) -> DirectionMemory:
    """The sets per variant of one receive record. See [Note: where the numbers come from].

    ``tight`` is the one slack rule on the smallest safe ring (:func:`pooltk.pool.ring.ring_size`),
    exactly what the pool keeps; ``automodel`` is :func:`automodel_ring` on 1F1B and stock elsewhere
    (Automodel's pool pools 1F1B only); ``pooled`` is the one ``policy`` names. Where the pool
    stands down (GPipe) every ring column is stock.
    """
    n, m, i = shape.num_stages, shape.n_microbatches, r.stage
    if not shape.poolable:
        automodel = tight = r.stock
    else:
        tight = ring_size(r.ring_min, m, r.direction, config)
        if shape.multi_stage:
            automodel = r.stock
        elif r.ring_min == 0:
            automodel = 0
        else:
            automodel = automodel_ring(n, i, m, config.slack)
    if r.direction == "forward":
        set_bytes = bounds[i - 1].forward_bytes if i > 0 else 0
    else:
        set_bytes = bounds[i].grad_bytes if i < n - 1 else 0
    return DirectionMemory(
        stage=i,
        direction=r.direction,
        rank=r.rank,
        handoff=r.handoff,
        set_bytes=set_bytes,
        stock_sets=r.stock,
        automodel_sets=automodel,
        tight_sets=tight,
        live_sets=r.live,
        stock_lazy_sets=r.stock_lazy,
        # pooltk's last-stage release is part of the pool: where the pool stands down, torch keeps
        # what it keeps.
        lazy_released_sets=r.lazy_released if shape.poolable else r.stock_lazy,
        pooled_sets=automodel if policy == "automodel" else tight,
    )


def _lifetimes(shape: PipelineShape) -> tuple[object, tuple[object, ...]]:
    """The analysed program and lifetimes of a multi-stage shape, for the rank-shared rings (cached
    by the analysis)."""
    from pooltk.analysis.lifetimes import ScheduleShape, analyse

    return analyse(
        ScheduleShape(
            schedule=shape.schedule_name,
            pp=shape.pp,
            n_microbatches=shape.n_microbatches,
            stages_per_rank=int(shape.stages_per_rank or 1),
        )
    )


def _checked(
    shape: PipelineShape,
    config: PoolConfig | None,
    policy: str,
    sharing: str,
    unpoolable: str,
) -> PoolConfig:
    """:func:`model_memory`'s arguments checked, each error naming its fix; the config to use."""
    if not isinstance(shape, PipelineShape):
        raise MemoryModelError(
            "shape",
            found=type(shape).__name__,
            required="a PipelineShape",
            fix="build PipelineShape(pp=..., n_microbatches=...).",
        )
    config = PoolConfig() if config is None else config
    if not isinstance(config, PoolConfig):
        raise MemoryModelError(
            "config",
            found=type(config).__name__,
            required="a pooltk.PoolConfig",
            fix="pass PoolConfig(slack=..., grad_slack=...) and the ring policy as policy=...",
        )
    check_choice("policy", policy, POLICIES, fix=f"use one of {POLICIES}.", error=MemoryModelError)
    check_choice(
        "sharing", sharing, SHARINGS, fix=f"use one of {SHARINGS}.", error=MemoryModelError
    )
    if unpoolable not in ("error", "stock"):
        raise MemoryModelError(
            "unpoolable",
            found=repr(unpoolable),
            required="'error' or 'stock'",
            fix="use 'error' (default).",
        )
    if not shape.poolable and unpoolable == "error":
        raise UnpoolableScheduleError(
            f"schedule {shape.schedule!r}",
            found="a schedule whose in-flight depth is not bounded below M (every forward buffer "
            "stays live until the backwards start)",
            required="'1f1b' or a multi-stage schedule for a pooled model",
            fix="use 1f1b, or pass unpoolable='stock' (CLI: --allow-unpoolable) to see stock and "
            "live-set bytes with the pool standing down.",
        )
    return config


def model_memory(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig | None = None,
    *,
    policy: str = "tight",
    sharing: str = "rank",
    unpoolable: Literal["error", "stock"] = "error",
    live_source: LiveSource = "schedule",
) -> MemoryModel:
    """Model every stage, direction and rank of ``shape``. See [Note: where the numbers come from].

    Args:
        shape: pp, stages per rank, microbatches and schedule.
        boundaries: one :class:`Boundary` for all ``stages - 1`` boundaries, or a list of them
            (boundary ``b`` carries stage ``b`` -> ``b + 1``; they may differ per boundary).
        config: slack and grad slack (default ``PoolConfig()``).
        policy: the ring the ``pooled`` column keeps: ``"tight"`` (pooltk's rule) or ``"automodel"``
            (Automodel's single ring, 1F1B only); see :data:`POLICIES`.
        sharing: ``"rank"`` (a rank's stages share rings where their boundaries carry the same
            tensors) or ``"stage"`` (one ring per stage and direction); see :data:`SHARINGS`.
        unpoolable: for a schedule the pool must not touch (GPipe): ``"error"`` raises
            :class:`UnpoolableScheduleError`; ``"stock"`` models the pool standing down
            (every ring column equals stock), as Automodel does when it warns and skips.
        live_source: ``"schedule"`` (walk the action order) or ``"formula"`` (1F1B and GPipe
            only); see [Note: live-set sources].
    """
    config = _checked(shape, config, policy, sharing, unpoolable)
    bounds = _boundaries(boundaries, shape.num_stages)
    records = receive_rows(shape, live_source)
    rows = tuple(_row(shape, r, bounds, config, policy) for r in records)
    rings = rank_rings_for(shape, bounds, config, rows, _lifetimes if shape.multi_stage else None)
    return MemoryModel(
        shape=shape,
        config=config,
        policy=policy,
        sharing=sharing,
        boundaries=bounds,
        rows=rows,
        rings=rings,
        pool_active=shape.poolable,
        live_source=live_source,
    )


def expected_bytes(
    *,
    pp: int,
    n_microbatches: int,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig,
    policy: str = "tight",
    sharing: str = "rank",
    schedule: str = "1f1b",
    stages_per_rank: int | None = None,
) -> dict[tuple[int, str], ExpectedBytes]:
    """``{(stage, direction): ExpectedBytes(stock, pooled)}``: what a measurement should find.

    One call for the gloo parity check: every stage and direction, including the ones with
    no receives (stage 0 forward, last stage grad: 0 sets, 0 bytes).
    """
    shape = PipelineShape(
        pp=pp, n_microbatches=n_microbatches, schedule=schedule, stages_per_rank=stages_per_rank
    )
    return model_memory(shape, boundaries, config, policy=policy, sharing=sharing).expected_bytes()


def __getattr__(name: str):  # the sweeps build on model_memory, so they are imported on first use
    if name in ("slack_sweep", "compare_configs", "compare_models"):
        from pooltk.memory import sweeps

        return getattr(sweeps, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
