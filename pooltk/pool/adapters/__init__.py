"""Find where this torch makes pipeline receive buffers, by feature, never by version string.

Three layout families are known (see docs/torch-compat.md for the measured facts):

- ``prepare-infra`` (torch <= 2.11): buffers made inside ``_prepare_forward_infra`` of both
  frontends and ``_PipelineStageBase._prepare_backward_infra``;
- ``setup-recv-info`` (torch 2.12-2.14): ``PipelineStage._setup_forward_recv_info``, the
  tracing frontend's ``_PipelineStage._prepare_forward_infra`` and
  ``_PipelineStageBase._setup_backward_recv_info``;
- ``lazy`` (torch 2.15): buffers are allocated per receive and dropped when consumed, so there
  is nothing pre-allocated for a ring to replace; pooltk installs only the last-stage release.

Anything else: ``detect()`` returns no layout and a reason; install stays stock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["HOT_METHODS", "OPTIONAL_HOT_METHODS", "STAGE_CLASSES", "Detection", "Layout", "SetupTarget", "detect",
           "eager_layout", "stage_classes"]

from pooltk.analysis.lifetimes import Direction
from pooltk.pool.adapters.stage_api import HOT_METHODS, OPTIONAL_HOT_METHODS

@dataclass(frozen=True, slots=True)
class SetupTarget:
    """One setup method that fills a recv-info map with freshly made buffers."""

    owner: type
    """Class whose ``__dict__`` defines the method (wrapped and restored there)."""
    name: str
    direction: Direction
    infos_attr: str
    """Stage attribute holding ``{chunk: tuple[_RecvInfo, ...]}`` after the call."""
    alloc_free: bool
    """True when the buffers can be made lazily during the call (only K sets ever exist);
    False when all M are made by torch and the ring keeps K of them (a transient)."""


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    setup_targets: tuple[SetupTarget, ...]
    per_receive: bool = False
    """True where torch allocates each receive buffer just before its receive and drops it when consumed
    (the lazy family): nothing is pre-allocated, so there are no rings; pooltk installs only the release."""
    note: str = ""


@dataclass(frozen=True, slots=True)
class Detection:
    layout: Layout | None
    reason: str
    tried: tuple[str, ...] = field(default=())


def detect() -> Detection:
    """Pick the layout adapter for the installed torch, or say why none fits. Never raises."""
    from pooltk.pool.adapters import lazy, prepare_infra, setup_recv_info

    reasons = []
    for module in (lazy, setup_recv_info, prepare_infra):
        try:
            found = module.detect()
        except Exception as exc:  # an unknown torch must never make install raise
            found = f"{module.FAMILY}: probe failed ({type(exc).__name__}: {exc})"
        if isinstance(found, Layout):
            return Detection(layout=found, reason=found.note or f"layout {found.name!r} detected", tried=tuple(reasons))
        reasons.append(found)
    return Detection(
        layout=None,
        reason="no known receive-buffer layout in this torch.distributed.pipelining: " + "; ".join(reasons),
        tried=tuple(reasons),
    )


STAGE_CLASSES = ("_PipelineStageBase", "PipelineStage", "_PipelineStage", "_RecvInfo")
"""The classes of ``torch.distributed.pipelining.stage`` every eager family builds on."""


def stage_classes(family: str) -> tuple[object, tuple[type, ...]] | str:
    """``(stage module, (base, manual, traced, _RecvInfo))``, or why this torch lacks them."""
    from torch.distributed.pipelining import stage as stage_mod

    found = tuple(getattr(stage_mod, name, None) for name in STAGE_CLASSES)
    if None in found:
        return f"{family}: stage classes not found"
    return stage_mod, found  # type: ignore[return-value]


def eager_layout(family: str, stage_mod: object, *, manual_forward: str, traced_forward: str, grad: str) -> Layout | str:
    """The layout of a family whose setup methods make every receive buffer eagerly.

    Checks that the three setup methods are defined on their classes (manual frontend
    forward, tracing frontend forward, stage base grad) and that the runtime methods exist;
    returns the :class:`Layout` or the reason it does not fit. Buffers can be made lazily
    (only K sets) when torch makes them through the module-level ``_make_tensor_from_meta``.
    """
    base, manual, traced = (getattr(stage_mod, n) for n in ("_PipelineStageBase", "PipelineStage", "_PipelineStage"))
    needed = [(manual, manual_forward), (traced, traced_forward), (base, grad)]
    missing = [f"{cls.__name__}.{name}" for cls, name in needed if name not in cls.__dict__]
    if missing:
        return f"{family}: missing {', '.join(missing)}"
    hot = missing_hot_methods(base)
    if hot:
        return f"{family}: stage base lacks {', '.join(hot)}"
    lazy_ok = callable(getattr(stage_mod, "_make_tensor_from_meta", None))
    targets = tuple(
        SetupTarget(owner=owner, name=name, direction=direction, infos_attr=attr, alloc_free=lazy_ok)
        for owner, name, direction, attr in (
            (manual, manual_forward, "forward", "args_recv_info"),
            (traced, traced_forward, "forward", "args_recv_info"),
            (base, grad, "grad", "grad_recv_info"),
        )
    )
    return Layout(
        name=family,
        setup_targets=targets,
        note=f"layout {family!r}: PipelineStage.{manual_forward}, _PipelineStage.{traced_forward}, "
        f"_PipelineStageBase.{grad}"
        + ("" if lazy_ok else " (no _make_tensor_from_meta: all M sets are made, then K kept)"),
    )


def missing_hot_methods(base: type) -> list[str]:
    """Names from HOT_METHODS not defined on ``base`` (the stage base class)."""
    return [m for m in HOT_METHODS if not callable(getattr(base, m, None))]
