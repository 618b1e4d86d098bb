"""Who took the address of a received tensor: ``Tensor.data_ptr`` watched while the pool is installed.

[Note: taken addresses]
An address outlives every reference: a model that keys a cache by ``x.data_ptr()`` holds nothing
copy on conflict can count, yet a later receive into the same slot has the same address and the
cache answers for the wrong microbatch (measured: silently different numbers, where stock and a
fresh buffer per receive give distinct addresses within a step). So while pooltk is installed,
``torch.Tensor.data_ptr`` is wrapped: when it is called on an alias a ring handed out (looked up by
``id``, confirmed by a weak reference), that ring records the slot's address as taken. At the
slot's next re-post the ring re-homes it and keeps the old storage until the step ends
([Note: copy on conflict], 4 in ring.py), so no two receives of a step share an address. The cost
is one dictionary lookup per ``data_ptr`` call from Python while installed; a kernel launcher that
reads a received input's address (a triton kernel) makes that slot re-home each lap, which the log
says (``re-homed ... its address was taken``). Calls from C++ and on views are not seen.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from pooltk.pool.marks import innermost, is_wrapper, mark

__all__ = ["forget", "unwatch", "watch", "watch_alias", "watching"]

_ALIASES: dict[int, tuple[weakref.ref, Callable[[], None]]] = {}
"""id(alias) -> (weak reference to it, what to call when its address is taken)."""


def watch_alias(alias: torch.Tensor, on_taken: Callable[[], None]) -> None:
    """Call ``on_taken`` when ``alias.data_ptr()`` is called from Python (while watching)."""
    _ALIASES[id(alias)] = (weakref.ref(alias), on_taken)


def forget(alias: torch.Tensor) -> None:
    """Stop watching ``alias`` (it was retired by its ring)."""
    _ALIASES.pop(id(alias), None)


def watching() -> bool:
    """True while ``torch.Tensor.data_ptr`` is pooltk's wrapper."""
    return is_wrapper(torch.Tensor.__dict__.get("data_ptr"))


def watch() -> None:
    """Wrap ``torch.Tensor.data_ptr`` (idempotent)."""
    if watching():
        return
    original = torch.Tensor.data_ptr

    def data_ptr(self: Any) -> int:
        entry = _ALIASES.get(id(self))
        if entry is not None and entry[0]() is self:
            entry[1]()
        return original(self)

    data_ptr.__doc__ = original.__doc__
    torch.Tensor.data_ptr = mark(data_ptr, original)  # type: ignore[method-assign]


def unwatch() -> None:
    """Put torch's own ``data_ptr`` back and forget every alias."""
    current = torch.Tensor.__dict__.get("data_ptr")
    if is_wrapper(current):
        original = innermost(current)
        if "data_ptr" in torch._C.TensorBase.__dict__ and original is torch._C.TensorBase.__dict__["data_ptr"]:
            del torch.Tensor.data_ptr  # it was inherited, not defined on Tensor
        else:
            torch.Tensor.data_ptr = original  # type: ignore[method-assign]
    _ALIASES.clear()
