"""Where this torch makes receive buffers: three families, found by feature, never by version.

[Note: layout families]
- ``prepare-infra`` (torch <= 2.11): ``_RecvInfo(input_name, source, buffer)`` wraps a buffer made
  eagerly in ``_prepare_forward_infra`` (both frontends, after shape inference) and
  ``_PipelineStageBase._prepare_backward_infra``; stage-0 inputs are ``_RootArgPlaceholder``.
- ``setup-recv-info`` (2.12-2.14): ``_RecvInfo`` also takes ``tensor_meta``; the manual frontend
  fills it in ``_setup_forward_recv_info``, the traced one in ``_prepare_forward_infra``, the grads
  in ``_setup_backward_recv_info``; stage-0 inputs are infos with ``is_root_arg``.
- ``lazy`` (2.15): ``_RecvInfo`` has ``allocate_buffer`` / ``take_buffer``: a buffer per receive,
  nothing made at setup ([Note: per-receive buffers]), so pooltk installs only the last stage's
  release ([Note: releasing what the schedule keeps]).
In both eager families buffers come from ``_make_tensor_from_meta``; where it exists only K sets are
ever made ([Note: placeholders without patching]). Anything else: no layout, a reason per family,
and pooltk stands down ([Note: fail-open only for unknown layouts]).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from pooltk.pool.torch_compat.stage_api import HOT_METHODS, INFRA_METHODS, RECV_INFO_ATTRS


@dataclass(frozen=True, slots=True)
class SetupTarget:
    """One setup method that fills a recv-info map (``infos_attr``) with newly made buffers."""

    owner: type  # the class whose ``__dict__`` defines the method (wrapped and restored there)
    name: str
    direction: str
    infos_attr: str
    alloc_free: bool  # the buffers can be made shape-only during the call: only K sets exist


@dataclass(frozen=True, slots=True)
class Layout:
    """A known family: its name, the setup methods that make buffers, what it says of itself."""

    name: str
    setup_targets: tuple[SetupTarget, ...] = ()
    per_receive: bool = False  # torch allocates each buffer per receive (lazy): the release only
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Found:
    """What :func:`detect` found: ``layout`` None where no family fits, and why each did not."""

    layout: Layout | None
    reason: str
    tried: tuple[str, ...] = ()


_FORWARD_INFRA, _GRAD_INFRA = INFRA_METHODS
EAGER_SETUP = {
    "setup-recv-info": ("_setup_forward_recv_info", _FORWARD_INFRA, "_setup_backward_recv_info"),
    "prepare-infra": (_FORWARD_INFRA, _FORWARD_INFRA, _GRAD_INFRA),
}
"""Eager family -> the methods that make its buffers, one per class of :data:`EAGER_OWNERS`."""
EAGER_OWNERS = ("PipelineStage", "_PipelineStage", "_PipelineStageBase")
"""The classes defining them: the manual frontend's forward, the tracing one's, the grads'."""


def detect() -> Found:
    """The layout of the installed torch, or why none fits. Never raises."""
    tried = []
    for family, probe in (("lazy", _lazy), *((f, _eager) for f in EAGER_SETUP)):
        try:
            found = probe(family)
        except Exception as exc:  # an unknown torch must never make install raise
            found = f"probe failed ({type(exc).__name__}: {exc})"
        if isinstance(found, Layout):
            return Found(layout=found, reason=found.reason, tried=tuple(tried))
        tried.append(f"{family}: {found}")
    reason = "no known receive-buffer layout in this torch.distributed.pipelining: "
    return Found(layout=None, reason=reason + "; ".join(tried), tried=tuple(tried))


def _lazy(family: str) -> Layout | str:
    for name in ("stage", "_recv_buffers"):
        try:
            module = importlib.import_module(f"torch.distributed.pipelining.{name}")
        except ImportError:
            continue
        info = getattr(module, "_RecvInfo", None)
        if isinstance(info, type) and all(
            callable(getattr(info, m, None)) for m in ("allocate_buffer", "take_buffer")
        ):
            reason = (
                f"layout {family!r}: torch allocates each receive buffer right before its receive "
                f"({info.__module__}._RecvInfo.allocate_buffer) and hands it over when consumed "
                "(take_buffer)"
            )
            return Layout(name=family, per_receive=True, reason=reason)
    return "no _RecvInfo with allocate_buffer/take_buffer (receive buffers are made at setup)"


def _eager(family: str) -> Layout | str:
    from torch.distributed.pipelining import stage as stage_mod

    manual, traced, base = (getattr(stage_mod, name, None) for name in EAGER_OWNERS)
    info = getattr(stage_mod, "_RecvInfo", None)
    if None in (base, manual, traced, info):
        return "stage classes not found"
    wrong = _wrong_recv_info(family, stage_mod, base, info)
    if wrong:
        return wrong
    owners = ((manual, "forward"), (traced, "forward"), (base, "grad"))
    needed = [(cls, name, d) for (cls, d), name in zip(owners, EAGER_SETUP[family])]
    missing = [f"{cls.__name__}.{name}" for cls, name, _ in needed if name not in vars(cls)]
    if missing:
        return f"missing {', '.join(missing)}"
    lacking = [m for m in HOT_METHODS if not callable(getattr(base, m, None))]
    if lacking:
        return f"stage base lacks {', '.join(lacking)}"
    free = callable(getattr(stage_mod, "_make_tensor_from_meta", None))
    targets = tuple(
        SetupTarget(owner=c, name=n, direction=d, infos_attr=RECV_INFO_ATTRS[d], alloc_free=free)
        for c, n, d in needed
    )
    reason = f"layout {family!r}: " + ", ".join(f"{c.__name__}.{n}" for c, n, _ in needed)
    if not free:
        reason += " (no _make_tensor_from_meta: all M sets are made, then K kept)"
    return Layout(name=family, setup_targets=targets, reason=reason)


def _wrong_recv_info(family: str, stage_mod: Any, base: type, info: type) -> str:
    """Why ``_RecvInfo`` (and its neighbours) are not ``family``'s, or "" where they are."""
    try:
        params = inspect.signature(info.__init__).parameters
    except (TypeError, ValueError):
        params = {}
    if family == "setup-recv-info":
        if hasattr(info, "allocate_buffer"):
            return "_RecvInfo allocates lazily (that is the lazy layout)"
        if "tensor_meta" not in params:
            return "_RecvInfo has no tensor_meta (older layout)"
        if "buffer" not in params:
            return "_RecvInfo takes no buffer (buffers are not made at setup)"
        return ""
    if "_setup_backward_recv_info" in vars(base):
        return "_setup_backward_recv_info present (newer layout)"
    if not hasattr(stage_mod, "_RootArgPlaceholder"):
        return "no _RootArgPlaceholder (root args are not the <= 2.11 form)"
    if "buffer" not in params or "tensor_meta" in params:
        return "_RecvInfo is not built around an eager buffer argument"
    return ""
