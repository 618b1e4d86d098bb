"""Where this torch makes pipeline receive buffers, found by feature, never by version string.

Three families (docs/torch-compat.md): ``prepare-infra`` (<= 2.11), ``setup-recv-info`` (2.12-2.14), ``lazy``
(2.15: a buffer per receive, nothing pre-allocated; pooltk installs only the release). Anything else:
:func:`detect` returns a :class:`Layout` without a name, and the reason per family.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pooltk.analysis.lifetimes import Direction
from pooltk.pool.adapters.stage_api import HOT_METHODS, RECV_INFO_ATTRS

__all__ = ["Layout", "SetupTarget", "detect", "eager_layout", "stage_classes"]


@dataclass(frozen=True, slots=True)
class SetupTarget:
    """One setup method that fills a recv-info map with newly made buffers."""

    owner: type
    """The class whose ``__dict__`` defines the method (wrapped and restored there)."""
    name: str
    direction: Direction
    infos_attr: str
    """The stage attribute holding ``{chunk: tuple[_RecvInfo, ...]}`` after the call."""
    alloc_free: bool
    """True when the buffers can be made shape-only during the call (only K sets ever exist)."""


@dataclass(frozen=True, slots=True)
class Layout:
    """What :func:`detect` found: a known family (``name``), or none (``name`` None) and why."""

    name: str | None
    setup_targets: tuple[SetupTarget, ...] = ()
    per_receive: bool = False
    """True where torch allocates each buffer per receive (the lazy family): no rings, only the release."""
    reason: str = ""
    tried: tuple[str, ...] = field(default=())
    """Why each family that did not fit did not (newest first)."""

    @property
    def layout(self) -> "Layout | None":
        """This layout where one was found, else None (``detect().layout``)."""
        return self if self.name is not None else None


def detect() -> Layout:
    """The layout of the installed torch, or why none fits. Never raises."""
    from pooltk.pool.adapters import lazy, prepare_infra, setup_recv_info

    tried = []
    for module in (lazy, setup_recv_info, prepare_infra):
        try:
            found = module.detect()
        except Exception as exc:  # an unknown torch must never make install raise
            found = f"{module.FAMILY}: probe failed ({type(exc).__name__}: {exc})"
        if isinstance(found, Layout):
            return Layout(
                name=found.name,
                setup_targets=found.setup_targets,
                per_receive=found.per_receive,
                reason=found.reason or f"layout {found.name!r} detected",
                tried=tuple(tried),
            )
        tried.append(found)
    return Layout(
        name=None,
        tried=tuple(tried),
        reason="no known receive-buffer layout in this torch.distributed.pipelining: "
        + "; ".join(tried),
    )


def stage_classes(family: str) -> tuple[object, tuple[type, ...]] | str:
    """``(stage module, (base, manual, traced, _RecvInfo))``, or why this torch lacks them."""
    from torch.distributed.pipelining import stage as stage_mod

    names = ("_PipelineStageBase", "PipelineStage", "_PipelineStage", "_RecvInfo")
    found = tuple(getattr(stage_mod, n, None) for n in names)
    return f"{family}: stage classes not found" if None in found else (stage_mod, found)  # type: ignore[return-value]


def eager_layout(
    family: str, stage_mod: object, *, manual_forward: str, traced_forward: str, grad: str
) -> Layout | str:
    """The layout of a family whose setup methods make every receive buffer eagerly, or why it does not fit."""
    base, manual, traced = (
        getattr(stage_mod, n) for n in ("_PipelineStageBase", "PipelineStage", "_PipelineStage")
    )
    needed = [
        (manual, manual_forward, "forward"),
        (traced, traced_forward, "forward"),
        (base, grad, "grad"),
    ]
    missing = [f"{cls.__name__}.{name}" for cls, name, _ in needed if name not in cls.__dict__]
    if missing:
        return f"{family}: missing {', '.join(missing)}"
    hot = [m for m in HOT_METHODS if not callable(getattr(base, m, None))]
    if hot:
        return f"{family}: stage base lacks {', '.join(hot)}"
    alloc_free = callable(getattr(stage_mod, "_make_tensor_from_meta", None))
    return Layout(
        name=family,
        setup_targets=tuple(
            SetupTarget(
                owner=cls,
                name=name,
                direction=d,
                infos_attr=RECV_INFO_ATTRS[d],
                alloc_free=alloc_free,
            )
            for cls, name, d in needed
        ),
        reason=(
            f"layout {family!r}: PipelineStage.{manual_forward}, _PipelineStage.{traced_forward}, _PipelineStageBase.{grad}"
            + (
                ""
                if alloc_free
                else " (no _make_tensor_from_meta: all M sets are made, then K kept)"
            )
        ),
    )
