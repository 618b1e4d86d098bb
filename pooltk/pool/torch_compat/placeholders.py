"""Receive buffers made, and not made: shape-only placeholders during a setup, and the one maker.

[Note: placeholders without patching]
Eager layouts make every receive buffer, one per microbatch, through torch's
``_make_tensor_from_meta``. During a setup call the pool pushes a ``TorchFunctionMode`` on this
thread: a tensor factory called from that maker's own frame (known by torch's file and the maker's
name, so a profiler's wrapper around it changes nothing) makes a ``meta`` tensor instead, its
arguments recorded; every other call passes through. The ring then makes its K real sets by calling
the maker again with those arguments, and placeholders it does not take are made real the same way
(stock). Nothing of torch is assigned anywhere. The same watch counts the buffers a setup makes.
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


class PlaceholderFactory(TorchFunctionMode):
    """While active (a context manager, this thread only), what torch's receive-buffer maker makes
    becomes a ``meta`` placeholder, its arguments recorded; ``count_only``: it is made as usual and
    counted, if torch's stage made it (``_TensorMeta.to_tensor`` beside the maker is not counted).
    """

    def __init__(self, *, count_only: bool = False) -> None:
        super().__init__()
        self.count_only, self.count, self.bytes = count_only, 0, 0
        self.made: dict[int, tuple[tuple, torch.device, torch.Tensor]] = {}
        """id(placeholder) -> (the maker's arguments, the device it asked for, the placeholder:
        kept, so that no other tensor takes its id while the factory lives)."""
        self._makers = _maker_codes()

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Any = None
    ) -> Any:
        kwargs, frame = kwargs or {}, sys._getframe(1)
        code = frame.f_code
        if func not in _FACTORIES or (code.co_filename, code.co_name) not in self._makers:
            return func(*args, **kwargs)
        if self.count_only:
            made = func(*args, **kwargs)
            caller = frame.f_back  # ``_TensorMeta.to_tensor``, beside the maker, is not counted
            beside = caller is not None and caller.f_code.co_filename == code.co_filename
            if not made.is_meta and not beside:
                self.count += 1
                self.bytes += made.untyped_storage().nbytes()
            return made
        made = func(*args, **{**kwargs, "device": "meta"})
        maker_args = tuple(frame.f_locals[n] for n in code.co_varnames[: code.co_argcount])
        device = torch.device(kwargs.get("device") or torch.get_default_device())
        self.made[id(made)] = (maker_args, device, made)
        return made

    def is_placeholder(self, t: Any) -> bool:
        return id(t) in self.made  # each placeholder is kept: no other object has its id

    def device_of(self, placeholder: torch.Tensor) -> torch.device:
        """The device torch asked for."""
        return self.made[id(placeholder)][1]

    def real(self, placeholder: torch.Tensor) -> torch.Tensor:
        """The buffer torch would have made for ``placeholder``: its maker, called again."""
        from torch.distributed.pipelining import stage

        made = stage._make_tensor_from_meta(*self.made[id(placeholder)][0])
        return made.requires_grad_(True) if placeholder.requires_grad else made


def real_buffer(
    like: torch.Tensor,
    *,
    factory: PlaceholderFactory | None = None,
    device: Any = None,
    zero: bool = False,
) -> torch.Tensor:
    """The one way pooltk makes a receive buffer shaped like ``like`` (a buffer, or a placeholder):
    torch's own maker for a placeholder ``factory`` made, else a new storage of ``like``'s shape,
    dtype and ``requires_grad`` on ``device`` (default: ``like``'s own), zeroed if asked."""
    if factory is not None and factory.is_placeholder(like):
        return factory.real(like)
    make = torch.zeros_like if zero else torch.empty_like
    made = make(like.detach(), device=device or like.device)
    return made.requires_grad_(True) if like.requires_grad else made


def placeholder(like: torch.Tensor) -> torch.Tensor:
    """A shape-only stand-in (``meta``, no storage) for the buffer ``like``."""
    stand_in = torch.empty_like(like.detach(), device="meta")
    return stand_in.requires_grad_(True) if like.requires_grad else stand_in
