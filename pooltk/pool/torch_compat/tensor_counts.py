"""What the pool reads from torch's tensors ([Note: copy on conflict]): private C++ counts, and a
tensor's version counter with autograd's error about it ([Note: version bump]); each behind one
function so that a torch that renames them breaks here alone."""

from __future__ import annotations

import re

import torch

_STALE = "modified by an inplace operation"  # autograd's version error
_QUOTED = re.compile(r"is at version (\d+); expected version (\d+)")


def storage_key(t: torch.Tensor) -> int:
    """The identity of ``t``'s storage (its C++ object; equal for every view of one storage)."""
    return t.untyped_storage()._cdata


def storage_users(t: torch.Tensor) -> int:
    """The use count of ``t``'s storage (its tensors, and the storage object asked)."""
    return torch._C._storage_Use_Count(storage_key(t))


def cpp_users(t: torch.Tensor) -> int:
    """C++ references to ``t``'s tensor implementation (a saved tensor of a graph, a DLPack)."""
    return t._use_count()


def is_view(t: torch.Tensor) -> bool:
    return t._is_view()


def version(t: torch.Tensor) -> int:
    """``t``'s version counter (what autograd compares for a saved tensor)."""
    return t._version


def bump_version(tensors: list[torch.Tensor]) -> None:
    """Bump each tensor's version counter: a graph that saved it refuses to read it again."""
    for t in tensors:
        torch.autograd.graph.increment_version(t)


def is_version_error(exc: BaseException) -> bool:
    """True for autograd's "modified by an inplace operation" error."""
    return isinstance(exc, RuntimeError) and _STALE in str(exc)


def quoted_version(exc: BaseException) -> int | None:
    """The version a version error says the tensor is at now, where it says one."""
    quoted = _QUOTED.search(str(exc))
    return int(quoted.group(1)) if quoted else None
