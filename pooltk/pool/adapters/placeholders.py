"""Shape-only placeholders for receive buffers during one setup call.

[Note: placeholders without patching]
Eager layouts make every receive buffer, one per microbatch, through torch's ``_make_tensor_from_meta``.
During a setup call the pool pushes a ``TorchFunctionMode`` on this thread: a tensor factory called from
that maker's own frame (known by torch's file and its name, so a profiler's wrapper around it changes
nothing) makes a ``meta`` tensor instead, its arguments recorded; every other call passes through. The
ring then makes its K real sets by calling the maker again with those arguments, and the placeholders it
does not take are made real the same way (stock). Nothing is assigned anywhere.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["PlaceholderFactory", "materialize_all"]

_FACTORIES = frozenset({torch.empty, torch.empty_strided, torch.zeros})


class PlaceholderFactory(TorchFunctionMode):
    """Turns the receive-buffer maker's allocations into ``meta`` placeholders while active (a context manager)."""

    def __init__(self) -> None:
        super().__init__()
        self._makers = _maker_codes()
        self.made: dict[int, tuple[tuple, torch.device]] = {}
        """id(placeholder) -> (the maker's arguments, the device it asked for)."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        frame = sys._getframe(1)
        code = frame.f_code
        if func in _FACTORIES and (code.co_filename, code.co_name) in self._makers:
            maker_args = tuple(
                frame.f_locals[name] for name in code.co_varnames[: code.co_argcount]
            )
            t = func(*args, **{**kwargs, "device": "meta"})
            self.made[id(t)] = (
                maker_args,
                torch.device(kwargs.get("device") or torch.get_default_device()),
            )
            return t
        return func(*args, **kwargs)

    def is_placeholder(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_meta and id(t) in self.made

    def device_of(self, placeholder: torch.Tensor) -> torch.device:
        """The device torch asked for."""
        return self.made[id(placeholder)][1]

    def real(self, placeholder: torch.Tensor) -> torch.Tensor:
        """The real buffer torch would have made for ``placeholder``: its maker, called again with its arguments."""
        from torch.distributed.pipelining import stage

        return stage._make_tensor_from_meta(*self.made[id(placeholder)][0])


def _maker_codes() -> frozenset[tuple[str, str]]:
    """(file, name) of torch's receive-buffer maker, in the modules that may define it (stage, _utils)."""
    import importlib

    codes = set()
    for name in ("stage", "_utils"):
        try:
            mod = importlib.import_module(f"torch.distributed.pipelining.{name}")
        except ImportError:
            continue
        origin = getattr(getattr(mod, "__spec__", None), "origin", None)  # the module's source file
        if origin:
            codes.add((origin, "_make_tensor_from_meta"))
    return frozenset(codes)


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
