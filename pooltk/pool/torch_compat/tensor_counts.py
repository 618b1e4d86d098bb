"""What the holders' check reads from torch's tensors ([Note: copy on conflict]): private C++
counts, each behind one function so that a torch that renames them breaks here alone."""

from __future__ import annotations

import torch


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
