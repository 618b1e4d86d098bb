"""Receive buffers made, and not made: shape-only placeholders during a setup, and the one maker.

[Note: placeholders without patching]
Eager layouts make every receive buffer, one per microbatch, through torch's
``_make_tensor_from_meta``. During a setup call the pool pushes a ``TorchFunctionMode`` on this
thread: a tensor factory called from that maker's own frame (known by torch's file and the maker's
name, so a profiler's wrapper around it changes nothing) makes a ``meta`` tensor instead, its
arguments recorded; every other call passes through. The ring then makes its K real sets by calling
the maker again with those arguments, and placeholders it does not take are made real the same way
(stock). Nothing of torch is assigned anywhere. :class:`MakerCount` watches the same frame to count
the buffers a stock setup makes.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_FACTORIES = frozenset({torch.empty, torch.empty_strided, torch.zeros})


def _maker_codes() -> frozenset[tuple[str, str]]:
    """(file, name) of torch's receive-buffer maker, in the modules that may define it."""
    codes = set()
    for name in ("stage", "_utils"):
        try:
            module = importlib.import_module(f"torch.distributed.pipelining.{name}")
        except ImportError:
            continue
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if origin:
            codes.add((origin, "_make_tensor_from_meta"))
    return frozenset(codes)


class _MakerWatch(TorchFunctionMode):
    """Sees each tensor factory called from torch's receive-buffer maker (a context manager)."""

    def __init__(self) -> None:
        super().__init__()
        self._makers = _maker_codes()

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        frame = sys._getframe(1)
        code = frame.f_code
        if func in _FACTORIES and (code.co_filename, code.co_name) in self._makers:
            maker_args = tuple(frame.f_locals[n] for n in code.co_varnames[: code.co_argcount])
            return self.made_by_maker(func, args, kwargs, maker_args, frame)
        return func(*args, **kwargs)

    def made_by_maker(
        self, func: Any, args: tuple, kwargs: dict, maker_args: tuple, maker: Any
    ) -> Any:
        return func(*args, **kwargs)


class PlaceholderFactory(_MakerWatch):
    """While active, the receive-buffer maker's allocations become ``meta`` placeholders."""

    def __init__(self) -> None:
        super().__init__()
        self.made: dict[int, tuple[tuple, torch.device]] = {}
        """id(placeholder) -> (the maker's arguments, the device it asked for)."""

    def made_by_maker(
        self, func: Any, args: tuple, kwargs: dict, maker_args: tuple, maker: Any
    ) -> Any:
        t = func(*args, **{**kwargs, "device": "meta"})
        device = torch.device(kwargs.get("device") or torch.get_default_device())
        self.made[id(t)] = (maker_args, device)
        return t

    def is_placeholder(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_meta and id(t) in self.made

    def device_of(self, placeholder: torch.Tensor) -> torch.device:
        """The device torch asked for."""
        return self.made[id(placeholder)][1]

    def real(self, placeholder: torch.Tensor) -> torch.Tensor:
        """The buffer torch would have made for ``placeholder``: its maker, called again."""
        from torch.distributed.pipelining import stage

        made = stage._make_tensor_from_meta(*self.made[id(placeholder)][0])
        return made.requires_grad_(True) if placeholder.requires_grad else made


class MakerCount(_MakerWatch):
    """Counts the real buffers made with torch's receive-buffer maker while active: torch's stage
    and the pool's rings, not what ``_TensorMeta.to_tensor`` makes beside the maker."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.bytes = 0

    def made_by_maker(
        self, func: Any, args: tuple, kwargs: dict, maker_args: tuple, maker: Any
    ) -> Any:
        t = func(*args, **kwargs)
        caller = maker.f_back
        beside = caller is not None and caller.f_code.co_filename == maker.f_code.co_filename
        if not t.is_meta and not beside:
            self.count += 1
            self.bytes += t.untyped_storage().nbytes()
        return t


def real_buffer(
    like: torch.Tensor,
    *,
    factory: PlaceholderFactory | None = None,
    device: Any = None,
    zero: bool = False,
) -> torch.Tensor:
    """The one way pooltk makes a receive buffer: shaped like ``like`` (a buffer, or a placeholder).

    A placeholder ``factory`` made is made real by torch's own maker; otherwise a new storage of
    ``like``'s shape, dtype and ``requires_grad`` on ``device`` (default: ``like``'s own), zeroed
    if asked.
    """
    if factory is not None and factory.is_placeholder(like):
        return factory.real(like)
    make = torch.zeros_like if zero else torch.empty_like
    made = make(like.detach(), device=device or like.device)
    return made.requires_grad_(True) if like.requires_grad else made


def placeholder(like: torch.Tensor) -> torch.Tensor:
    """A shape-only stand-in (``meta``, no storage) for the buffer ``like``."""
    stand_in = torch.empty_like(like.detach(), device="meta")
    return stand_in.requires_grad_(True) if like.requires_grad else stand_in
