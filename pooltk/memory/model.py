"""The receive-buffer memory model: bytes per stage and direction, stock vs pooled.

Given a pipeline shape (pp ``N``, microbatches ``M``, schedule), the tensors that cross
each stage boundary and a :class:`~pooltk.config.PoolConfig`, :func:`model_memory` gives for every
stage and direction how many receive-buffer sets, and how many bytes, each variant holds
(:data:`~pooltk.memory.results.VARIANTS`: stock torch <= 2.14 and >= 2.15, 2.15 with pooltk's
last-stage release, the two ring policies, the live set, the config's policy).

The model is split by job: units and dtypes (:mod:`~pooltk.memory.units`), boundary tensors
(:mod:`~pooltk.memory.tensors`), the pipeline shape (:mod:`~pooltk.memory.shape`), live sets
(:mod:`~pooltk.memory.live`), results (:mod:`~pooltk.memory.results`), sweeps
(:mod:`~pooltk.memory.sweeps`). This module builds the model and re-exports the public names of
the others, so ``from pooltk.memory.model import ...`` keeps working.

[Note: where the numbers come from]
Ring sizes come from :mod:`pooltk.pool.sizing` -- the very functions the pool calls when it
allocates -- so the model cannot drift from the pool. Live sets come from
:mod:`pooltk.analysis.lifetimes`, which walks the schedule; nothing here hard-codes an in-flight
depth. What torch >= 2.15 holds comes from the live sets by :func:`pooltk.analysis.lazy.lazy_holds`.
Bytes are ``sets x set_bytes`` where a set is every tensor crossing one boundary for
one microbatch. Stage ``i`` receives activations over boundary ``i - 1`` (stage ``i - 1``
-> ``i``) and gradients over boundary ``i`` (stage ``i + 1`` -> ``i``): stage 0 has no
forward receives and the last stage no gradient receives.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from pooltk.analysis.lifetimes import DIRECTIONS, Direction
from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError, UnpoolableScheduleError
from pooltk.memory.live import LIVE_SOURCES, LiveSource, _walked_live_sets, lazy_sets_for, live_sets_for
from pooltk.memory.results import VARIANT_LABELS, VARIANTS, DirectionMemory, ExpectedBytes, MemoryModel
from pooltk.memory.shape import PipelineShape, microbatches_from_batch, middle_stage, modelled_schedule
from pooltk.memory.tensors import Boundary, TensorSpec, harness_boundary
from pooltk.memory.units import BYTES_PER_UNIT, DTYPE_BYTES, to_unit
from pooltk.pool.sizing import ring_sizes, stock_sets

__all__ = [
    "BYTES_PER_UNIT",
    "DIRECTIONS",
    "DTYPE_BYTES",
    "VARIANTS",
    "VARIANT_LABELS",
    "Boundary",
    "Direction",
    "LIVE_SOURCES",
    "DirectionMemory",
    "ExpectedBytes",
    "MemoryModel",
    "MemoryModelError",
    "PipelineShape",
    "TensorSpec",
    "UnpoolableScheduleError",
    "compare_configs",
    "expected_bytes",
    "harness_boundary",
    "live_sets_for",
    "microbatches_from_batch",
    "middle_stage",
    "model_memory",
    "modelled_schedule",
    "slack_sweep",
    "to_unit",
]

_ = _walked_live_sets  # re-exported for benchmarks/bench_memory_model.py (it clears the walk's cache)


def _boundaries(boundaries: Boundary | Sequence[Boundary], pp: int) -> tuple[Boundary, ...]:
    if isinstance(boundaries, Boundary):
        return (boundaries,) * (pp - 1)
    found = tuple(boundaries) if isinstance(boundaries, (tuple, list)) else None
    if found is None or len(found) != pp - 1 or not all(isinstance(b, Boundary) for b in found):
        n = "nothing" if found is None else f"{len(found)} item(s)"
        raise MemoryModelError(
            "boundaries",
            found=f"{n} ({type(boundaries).__name__})",
            required=f"one Boundary for every boundary, or a list of pp - 1 = {pp - 1} Boundary objects",
            fix="pass a single Boundary when every stage boundary carries the same tensors.",
        )
    return found


def model_memory(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig | None = None,
    *,
    unpoolable: Literal["error", "stock"] = "error",
    live_source: LiveSource = "schedule",
) -> MemoryModel:
    """Model every stage and direction of ``shape``. See [Note: where the numbers come from].

    Args:
        shape: pp, microbatches and schedule.
        boundaries: one :class:`Boundary` for all ``N - 1`` boundaries, or a list of them.
        config: slack, grad slack and policy (default :class:`PoolConfig()`).
        unpoolable: for a schedule the pool must not touch (GPipe): ``"error"`` raises
            :class:`UnpoolableScheduleError`; ``"stock"`` models the pool standing down
            (every ring column equals stock), as Automodel does when it warns and skips.
        live_source: ``"schedule"`` (walk the action order) or ``"formula"``; see
            [Note: live-set sources].
    """
    if not isinstance(shape, PipelineShape):
        raise MemoryModelError(
            "shape", found=type(shape).__name__, required="a PipelineShape", fix="build PipelineShape(pp=..., n_microbatches=...)."
        )
    config = PoolConfig() if config is None else config
    if unpoolable not in ("error", "stock"):
        raise MemoryModelError("unpoolable", found=repr(unpoolable), required="'error' or 'stock'", fix="use 'error' (default).")
    n, m = shape.pp, shape.n_microbatches
    if not shape.poolable and unpoolable == "error":
        raise UnpoolableScheduleError(
            f"schedule {shape.schedule!r}",
            found="a schedule whose in-flight depth is not bounded below M (every forward buffer stays live until the backwards start)",
            required="'1f1b' for a pooled model",
            fix="use 1f1b, or pass unpoolable='stock' (CLI: --allow-unpoolable) to see stock and live-set bytes with the pool standing down.",
        )
    bounds = _boundaries(boundaries, n)
    live = live_sets_for(shape, live_source)
    lazy = lazy_sets_for(shape, live, released=False)
    # pooltk's last-stage release is part of the pool: where the pool stands down, torch keeps what it keeps.
    released = lazy_sets_for(shape, live, released=True) if shape.poolable else lazy
    am_cfg = dataclasses.replace(config, policy="automodel")
    tight_cfg = dataclasses.replace(config, policy="tight")
    rows: list[DirectionMemory] = []
    for i in range(n):
        stock = stock_sets(n, i, m)
        if shape.poolable:
            am, tight = ring_sizes(n, i, m, am_cfg), ring_sizes(n, i, m, tight_cfg)
        else:
            am = tight = stock
        pooled = am if config.policy == "automodel" else tight
        fwd_bytes = bounds[i - 1].forward_bytes if i > 0 else 0
        grad_bytes = bounds[i].grad_bytes if i < n - 1 else 0
        for j, (d, set_bytes) in enumerate((("forward", fwd_bytes), ("grad", grad_bytes))):
            rows.append(
                DirectionMemory(
                    stage=i,
                    direction=d,
                    set_bytes=set_bytes,
                    stock_sets=getattr(stock, d),
                    automodel_sets=getattr(am, d),
                    tight_sets=getattr(tight, d),
                    live_sets=live[i][j],
                    stock_lazy_sets=lazy[i][j],
                    lazy_released_sets=released[i][j],
                    pooled_sets=getattr(pooled, d),
                )
            )
    return MemoryModel(
        shape=shape, config=config, boundaries=bounds, rows=tuple(rows), pool_active=shape.poolable, live_source=live_source
    )


def expected_bytes(
    *,
    pp: int,
    n_microbatches: int,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig,
    schedule: str = "1f1b",
) -> dict[tuple[int, str], ExpectedBytes]:
    """``{(stage, direction): ExpectedBytes(stock, pooled)}``: what a measurement should find.

    One call for the gloo parity check: every stage and direction, including the ones with
    no receives (stage 0 forward, last stage grad: 0 sets, 0 bytes).
    """
    shape = PipelineShape(pp=pp, n_microbatches=n_microbatches, schedule=schedule)
    return model_memory(shape, boundaries, config).expected_bytes()


def __getattr__(name: str):  # the sweeps build on model_memory, so they are imported on first use
    if name in ("slack_sweep", "compare_configs"):
        from pooltk.memory import sweeps

        return getattr(sweeps, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
