"""Shape-only placeholders for receive buffers during one setup call (the alloc-free setup).

Eager layouts make every receive buffer through the module-level ``_make_tensor_from_meta`` of
``torch.distributed.pipelining.stage`` (see [Note: prepare-infra layout]). During a setup call the
pool swaps that maker for one that makes ``meta`` tensors (no storage); afterwards the ring makes
real tensors for its K sets with torch's own maker, and every placeholder the ring does not take
is made real (stock). The swap happens under the install lock (:mod:`pooltk.pool.state`); the
maker is marked, so a maker left by another copy of pooltk is seen through to torch's own.
"""

from __future__ import annotations

from typing import Any

import torch

from pooltk.pool.adapters.stage_api import stage_module
from pooltk.pool.marks import innermost, is_wrapper, mark

__all__ = ["PlaceholderFactory", "has_meta_factory", "materialize_all", "restore_meta_factory"]

_MAKER = "_make_tensor_from_meta"


def has_meta_factory() -> bool:
    """True when this torch makes receive buffers through a module-level maker the pool can swap."""
    return callable(getattr(stage_module(), _MAKER, None))


def restore_meta_factory() -> bool:
    """Put torch's own maker back if a pooltk maker was left in place; True if one was."""
    mod = stage_module()
    maker = getattr(mod, _MAKER, None)
    if is_wrapper(maker):
        setattr(mod, _MAKER, innermost(maker))
        return True
    return False


class PlaceholderFactory:
    """Swaps torch's buffer maker during one setup call for a shape-only maker (a context manager)."""

    def __init__(self) -> None:
        self._mod = stage_module()
        self._orig = innermost(getattr(self._mod, _MAKER))
        self._saved: Any = None
        self.made: dict[int, tuple[Any, Any]] = {}  # id(placeholder) -> (meta, device)

    def __enter__(self) -> "PlaceholderFactory":
        orig, made = self._orig, self.made

        def make_placeholder(meta: Any, device: Any) -> torch.Tensor:
            t = orig(meta, torch.device("meta"))
            made[id(t)] = (meta, device)
            return t

        self._saved = getattr(self._mod, _MAKER)
        setattr(self._mod, _MAKER, mark(make_placeholder, orig))
        return self

    def __exit__(self, *exc: object) -> None:
        setattr(self._mod, _MAKER, self._saved)

    def is_placeholder(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_meta and id(t) in self.made

    def real(self, placeholder: torch.Tensor) -> torch.Tensor:
        """A real buffer for ``placeholder``, made by torch's own maker."""
        meta, device = self.made[id(placeholder)]
        return self._orig(meta, device)


def materialize_all(infos_by_chunk: dict[int, tuple], factory: PlaceholderFactory | None) -> None:
    """Give every placeholder left in a recv-info map a real buffer (stock behaviour for it)."""
    if factory is None:
        return
    for infos in infos_by_chunk.values():
        for info in infos:
            buf = getattr(info, "buffer", None)
            if factory.is_placeholder(buf):
                real = factory.real(buf)
                if buf.requires_grad:
                    real.requires_grad_(True)
                info.buffer = real
