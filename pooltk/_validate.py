"""The one wording for bad input: ``<what>: found <value>; required <rule>. Fix: <how>``.

Every integer, range and choice check in pooltk goes through :func:`check_int` or
:func:`check_choice`, so a user sees the same three parts everywhere (found / required / fix)
and a test can read them from the exception's fields instead of parsing its text.
Standard library only: :mod:`pooltk.pool` imports this.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["InputError", "check_choice", "check_int", "problem"]


def problem(what: str, *, found: str, required: str, fix: str | None = None) -> str:
    """The message for one bad value; ``fix`` is left out when there is nothing to add."""
    text = f"{what}: found {found}; required {required}."
    return f"{text} Fix: {fix}" if fix else text


class InputError(ValueError):
    """A value outside what pooltk accepts. Fields: ``what``, ``found``, ``required``, ``fix``."""

    def __init__(self, what: str, *, found: str, required: str, fix: str | None = None) -> None:
        self.what = what
        self.found = found
        self.required = required
        self.fix = fix
        super().__init__(problem(what, found=found, required=required, fix=fix))

    # keyword-only fields survive pickling (process boundaries)
    def __reduce__(self):  # noqa: ANN204
        return _rebuild, (type(self), self.what, self.found, self.required, self.fix)


def _rebuild(cls: type, what: str, found: str, required: str, fix: str | None) -> InputError:
    return cls(what, found=found, required=required, fix=fix)


def _fail(error: type[Exception], what: str, found: str, required: str, fix: str | None) -> None:
    if isinstance(error, type) and issubclass(error, InputError):
        raise error(what, found=found, required=required, fix=fix)
    raise error(problem(what, found=found, required=required, fix=fix))


def _found(value: Any) -> str:
    return (
        f"{value!r} ({type(value).__name__})"
        if not isinstance(value, int) or isinstance(value, bool)
        else repr(value)
    )


def check_int(
    what: str,
    value: Any,
    *,
    low: int | None = None,
    high: int | None = None,
    fix: str | None = None,
    error: type[Exception] = InputError,
) -> int:
    """Return ``value`` if it is an ``int`` (never a ``bool``) within ``[low, high]``, else raise
    ``error``.

    ``error`` is an :class:`InputError` subclass (gets the fields) or any exception class taking
    one message.
    """
    if low is not None and high is not None:
        required = f"an integer in [{low}, {high}]"
    elif low is not None:
        required = f"an integer >= {low}"
    elif high is not None:
        required = f"an integer <= {high}"
    else:
        required = "an integer"
    # bool is an int subclass; True as a count is almost certainly a mistake.
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        _fail(error, what, _found(value), required, fix)
    return value


def check_choice(
    what: str,
    value: Any,
    choices: Iterable[str],
    *,
    fix: str | None = None,
    error: type[Exception] = InputError,
) -> str:
    """Return ``value`` if it is one of ``choices`` (exact match), else raise ``error``."""
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        _fail(error, what, repr(value), "one of " + ", ".join(repr(c) for c in options), fix)
    return value
