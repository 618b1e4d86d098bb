"""The mark every pooltk wrapper carries, so any copy of pooltk recognises and removes it.

See [Note: installing twice] in :mod:`pooltk.pool.install`.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["innermost", "is_wrapper", "mark"]

_ATTR = "__pooltk_original__"


def mark(wrapper: Callable, original: Any) -> Callable:
    """Record on ``wrapper`` the object it wraps; returns ``wrapper``."""
    setattr(wrapper, _ATTR, original)
    return wrapper


def is_wrapper(obj: Any) -> bool:
    """True for a function some copy of pooltk made (it carries the mark)."""
    return hasattr(obj, _ATTR)


def innermost(obj: Any) -> Any:
    """The original object under any number of pooltk wrappers."""
    seen = 0
    while is_wrapper(obj) and seen < 64:
        obj, seen = getattr(obj, _ATTR), seen + 1
    return obj
