"""The memory model's error type and its integer check: every message says found / required /
fix."""

from __future__ import annotations

from typing import Any

from pooltk._validate import InputError, check_int

__all__ = ["MemoryModelError", "UnpoolableScheduleError"]


class MemoryModelError(InputError):
    """Bad input to the memory model. The message says what was found, what is required, and the
    fix.

    An :class:`pooltk._validate.InputError` (so a ``ValueError``) with the fields ``what``,
    ``found``, ``required`` and ``fix``; here the fix is never left out.
    """

    def __init__(self, what: str, *, found: str, required: str, fix: str) -> None:
        super().__init__(what, found=found, required=required, fix=fix)


class UnpoolableScheduleError(MemoryModelError):
    """The schedule has no bounded in-flight depth, so no ring may replace stock allocation."""


def positive_int(what: str, value: Any, fix: str) -> int:
    """``value`` if it is an integer >= 1, else a :class:`MemoryModelError` on ``what``."""
    return check_int(what, value, low=1, fix=fix, error=MemoryModelError)


def is_positive_int(value: Any) -> bool:
    """Whether ``value`` is an integer >= 1 (never a ``bool``), as :func:`positive_int` requires."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1
