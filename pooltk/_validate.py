"""The one wording for bad input: ``<what>: found <value>; required <rule>. Fix: <how>``.

Every integer, number, range and choice check in pooltk goes through :func:`check_int`,
:func:`check_number` or :func:`check_choice`, and every output path a user names through
:func:`check_output`, so a user sees the same three parts everywhere (found / required / fix) and
a test can read them from the exception's fields instead of parsing its text.
Standard library only: :mod:`pooltk.pool` imports this.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "InputError",
    "check_choice",
    "check_int",
    "check_number",
    "check_output",
    "problem",
    "write_output",
]


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


def check_number(
    what: str,
    value: Any,
    *,
    zero: bool = False,
    required: str | None = None,
    fix: str | None = None,
    error: type[Exception] = InputError,
) -> float:
    """``value`` as a float if it is a finite real number > 0 (``zero``: >= 0), else ``error``:
    infinity and NaN are never a size or a time."""
    real = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (real and math.isfinite(value) and (value >= 0 if zero else value > 0)):
        rule = required or f"a finite number {'>=' if zero else '>'} 0"
        _fail(error, what, repr(value), rule, fix)
    return float(value)


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


def check_output(flag: str, path: str | Path, *, folder: bool = False) -> Path:
    """``path`` if the command can write its output there (a file; with ``folder``, a folder,
    made here), else :class:`InputError` naming ``flag``. Checked before the work, so a long run
    never ends on a path it cannot write."""
    path = Path(path)
    if path.exists() and folder and not path.is_dir():
        fix = "name a folder (made if missing)."
        raise InputError(flag, found=f"{str(path)!r}, a file", required="a folder", fix=fix)
    if path.is_dir() and not folder:
        fix = f"name a file in it, e.g. {path / 'out.csv'}."
        raise InputError(flag, found=f"{str(path)!r}, a folder", required="a file", fix=fix)
    base = path if folder else path.parent
    while not base.exists():  # missing folders are made under the nearest one that exists
        base = base.parent
    if not base.is_dir():
        found = f"{str(path)!r} under {str(base)!r}, which is a file"
        raise InputError(
            flag, found=found, required="a path under a folder", fix="pick another path."
        )
    if not os.access(base, os.W_OK | os.X_OK) or (path.is_file() and not os.access(path, os.W_OK)):
        found = f"{str(path)!r}, which this user cannot write"
        raise InputError(flag, found=found, required="a writable path", fix="pick another path.")
    if folder:
        write_output(flag, path, lambda made: made.mkdir(parents=True, exist_ok=True))
    return path


def write_output(flag: str, path: Path, write: Callable[[Path], object]) -> None:
    """``write(path)`` after making its folder; an OSError there (a full disk, a file system that
    refuses) is a :class:`InputError` naming ``flag``, never a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as exc:
        raise InputError(
            flag,
            found=f"{str(path)!r} not written: {exc.strerror or exc}",
            required="a path this user can write, on a disk with room",
            fix="pick another path (or free space) and run again.",
        ) from None
