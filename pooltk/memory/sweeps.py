"""Sweeps over one shape: pooled bytes per slack, named configs side by side on one stage, models
side by side; the pool's rings beside an analysed live-set table."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError
from pooltk.analysis.stage_sets import LiveSource
from pooltk.memory.model import MemoryModel, model_memory
from pooltk.memory.shape import PipelineShape
from pooltk.memory.tensors import Boundary
from pooltk.memory.units import to_unit, unit_bytes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["compare_configs", "compare_models", "slack_sweep", "tight_rings"]


def slack_sweep(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    slacks: Iterable[int],
    config: PoolConfig | None = None,
    *,
    policy: str = "tight",
    vary: Literal["slack", "grad_slack", "both"] = "slack",
    live_source: LiveSource = "schedule",
) -> pd.DataFrame:
    """Pooled bytes per stage for each slack: columns ``stage``, ``slack``, ``pooled_bytes``,
    ``pooled_gib``, ``stock_gib``, ``saved_gib``. ``vary`` picks which slack moves; ``policy`` as in
    :func:`~pooltk.memory.model.model_memory`."""
    import pandas as pd

    config = PoolConfig() if config is None else config
    if vary not in ("slack", "grad_slack", "both"):
        raise MemoryModelError(
            "vary",
            found=repr(vary),
            required="'slack', 'grad_slack' or 'both'",
            fix="use 'slack' (default).",
        )
    records = []
    for s in slacks:
        changes = dict.fromkeys(_SLACK_FIELDS[vary], s)
        result = model_memory(
            shape,
            boundaries,
            dataclasses.replace(config, **changes),
            policy=policy,
            live_source=live_source,
        )
        records += [_slack_record(result, i, s) for i in range(shape.pp)]
    return pd.DataFrame.from_records(records)


_SLACK_FIELDS: dict[str, tuple[str, ...]] = {
    "slack": ("slack",),
    "grad_slack": ("grad_slack",),
    "both": ("slack", "grad_slack"),
}
"""The :class:`~pooltk.config.PoolConfig` fields each ``vary`` of :func:`slack_sweep` moves."""


def _slack_record(result: MemoryModel, stage: int, slack: int) -> dict[str, object]:
    """:func:`slack_sweep`'s row of one stage at one slack."""
    pooled = result.stage_bytes(stage, "pooled")
    stock = result.stage_bytes(stage, "stock")
    return {
        "stage": stage,
        "slack": slack,
        "pooled_bytes": pooled,
        "pooled_gib": to_unit(pooled, "gib"),
        "stock_gib": to_unit(stock, "gib"),
        "saved_gib": to_unit(stock - pooled, "gib"),
    }


def compare_configs(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    configs: Mapping[str, tuple[PoolConfig, str] | PoolConfig],
    *,
    stage: int,
    baseline: str | None = None,
) -> pd.DataFrame:
    """One row per named config on ``stage``: ``label``, ``policy``, ``slack``, ``grad_slack``,
    ``forward_sets``, ``grad_sets``, ``stock_gib``, ``pooled_gib``, ``saved_gib`` and
    ``saved_beyond_baseline_gib`` (extra saving over the config named ``baseline``, default the
    first).

    Each config is a ``(PoolConfig, policy)`` pair (``policy`` as in
    :func:`~pooltk.memory.model.model_memory`), or a PoolConfig alone for the ``tight`` policy."""
    import pandas as pd

    baseline = _baseline(configs, baseline)
    pairs = {label: _pair(label, spec) for label, spec in configs.items()}
    models = {
        label: model_memory(shape, boundaries, cfg, policy=policy)
        for label, (cfg, policy) in pairs.items()
    }
    base_saved = models[baseline].saved_bytes(stage)
    records = [_config_record(label, m, stage, base_saved) for label, m in models.items()]
    return pd.DataFrame.from_records(records)


def _baseline(configs: Mapping[str, object], baseline: str | None) -> str:
    """The config :func:`compare_configs` measures against: ``baseline``, else the first."""
    if not configs:
        raise MemoryModelError(
            "configs",
            found="none",
            required="at least one named (PoolConfig, policy) pair",
            fix="pass {'label': (PoolConfig(...), 'tight')}.",
        )
    baseline = next(iter(configs)) if baseline is None else baseline
    if baseline not in configs:
        raise MemoryModelError(
            "baseline",
            found=repr(baseline),
            required=f"one of {list(configs)}",
            fix="name one of the configs.",
        )
    return baseline


def _config_record(label: str, m: MemoryModel, stage: int, base_saved: int) -> dict[str, object]:
    """:func:`compare_configs`'s row of one named config on ``stage``."""
    cfg = m.config
    return {
        "label": label,
        "policy": m.policy,
        "slack": cfg.slack,
        "grad_slack": cfg.grad_slack if m.policy == "tight" else None,
        "forward_sets": m.row(stage, "forward").pooled_sets,
        "grad_sets": m.row(stage, "grad").pooled_sets,
        "stock_gib": m.stage_gib(stage, "stock"),
        "pooled_gib": m.stage_gib(stage, "pooled"),
        "saved_gib": m.saved_gib(stage),
        "saved_beyond_baseline_gib": to_unit(m.saved_bytes(stage) - base_saved, "gib"),
    }


def _pair(label: str, spec: object) -> tuple[PoolConfig, str]:
    """A named config of :func:`compare_configs` as ``(PoolConfig, policy)``."""
    if isinstance(spec, PoolConfig):
        return spec, "tight"
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], PoolConfig):
        return spec[0], spec[1]
    raise MemoryModelError(
        f"configs[{label!r}]",
        found=type(spec).__name__,
        required="a (PoolConfig, policy) pair, or a PoolConfig (the tight policy)",
        fix="e.g. (PoolConfig(slack=2), 'automodel').",
    )


def tight_rings(table: pd.DataFrame, *, slack: int, grad_slack: int) -> pd.DataFrame:
    """Add ``tight`` to a live-set table (:func:`pooltk.analysis.lifetimes.live_table`): the ring a
    pool would keep, ``min(M, ring_min + slack)`` (grad: ``grad_slack``), by
    :func:`pooltk.pool.ring.ring_size`.

    Rows with no receives (ring_min 0) keep 0. ``slack`` / ``grad_slack`` mean what they
    mean in :class:`pooltk.config.PoolConfig`.
    """
    import pandas as pd

    from pooltk.pool.ring import ring_size

    config = PoolConfig(
        slack=slack, grad_slack=grad_slack
    )  # validates both: found / required / fix
    tight = [
        ring_size(int(k0), int(m), d, config)
        for k0, m, d in zip(table["ring_min"], table["n_microbatches"], table["direction"])
    ]
    return table.assign(tight=pd.Series(tight, index=table.index, dtype=int))


def compare_models(
    models: Mapping[str, MemoryModel],
    *,
    variants: Sequence[str] = ("stock", "pooled"),
    unit: str = "gib",
) -> pd.DataFrame:
    """Models of one pipeline side by side (e.g. two presets' boundaries), per stage, or per rank
    under a multi-stage schedule, with the difference from the first.

    Columns: ``stage`` (or ``rank``), then per model ``<label> forward set MiB`` (per-stage rows
    only) and ``<label> <variant> <unit>``, and per other model ``<variant> difference <unit>``
    (that model minus the first).
    """
    import pandas as pd

    if not models:
        raise MemoryModelError(
            "models",
            found="none",
            required="at least one named MemoryModel",
            fix="pass {'label': model}.",
        )
    scale = unit_bytes(unit)
    _check_one_pipeline(models)
    first = next(iter(models.values()))
    per_rank = first.shape.multi_stage
    n = first.shape.pp if per_rank else first.shape.num_stages
    records = [_side_by_side(models, i, per_rank, variants, unit, scale) for i in range(n)]
    return pd.DataFrame.from_records(records)


def _check_one_pipeline(models: Mapping[str, MemoryModel]) -> None:
    """:func:`compare_models` compares models of one pipeline (ranks and stages) only."""
    shapes = {(m.shape.pp, m.shape.num_stages) for m in models.values()}
    if len(shapes) > 1:
        raise MemoryModelError(
            "models",
            found=f"pipelines of (ranks, stages) {sorted(shapes)}",
            required="one pipeline shape",
            fix="compare models of the same pipeline.",
        )


def _side_by_side(
    models: Mapping[str, MemoryModel],
    i: int,
    per_rank: bool,
    variants: Sequence[str],
    unit: str,
    scale: int,
) -> dict[str, object]:
    """:func:`compare_models`'s row of stage (or rank) ``i``: each model's bytes, then each other
    model's difference from the first."""
    labels = list(models)
    rec: dict[str, object] = {"rank" if per_rank else "stage": i}
    for label, m in models.items():
        if not per_rank:
            rec[f"{label} forward set MiB"] = to_unit(m.row(i, "forward").set_bytes, "mib")
        for v in variants:
            b = m.rank_bytes(i, v) if per_rank else m.stage_bytes(i, v)
            rec[f"{label} {v} {unit}"] = b / scale
    for label in labels[1:]:
        for v in variants:
            rec[f"{v} difference {unit} ({label} - {labels[0]})"] = (
                rec[f"{label} {v} {unit}"] - rec[f"{labels[0]} {v} {unit}"]
            )  # type: ignore[operator]
    return rec
