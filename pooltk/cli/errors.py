"""One wording for a bad command line: ``pooltk CMD: error: --flag: found V; required R. Fix: F``.

[Note: command-line errors]
The library names its own fields (``ParitySpec.pp: found 0; ...``, through :mod:`pooltk._validate`);
a user typed flags. So a subcommand checks the flags it passes on with :func:`check_flag_int` /
:func:`check_flag_positive` before it builds library objects (the message names ``--pp``, the value
and a fix in flag terms), and prints every error through :func:`fail` (``pooltk CMD: error:``, as
argparse prints its own), which also re-words a
library :class:`~pooltk._validate.InputError` that names a field the command maps to a flag
(``fields``: ``{"PoolConfig.slack": "--slack"}``), from the error's own fields, never its text.
A path a flag names for output (``--csv``, ``--out``) is checked with the flags, before any work
(:func:`pooltk._validate.check_output`), and written through :func:`pooltk._validate.write_output`
(missing folders made; a write that fails names the flag and exits 1).

[Note: core and lab]
``pip install pooltk`` (torch, PyYAML, numpy) holds the core: the pool, ``PoolConfig``, the
receive-buffer model, the schedule analysis and the ``probe``, ``memory`` and ``schedules``
commands. The rest (logs, notebook helpers, the replay, parity, the studies, the integrations and
their commands) is the lab, whose stack comes with the ``lab`` extra. No core module imports a lab
module (tests/unit/test_architecture.py marks every module). Where a core command's flag does lab
work (``memory --preset`` reads the Kimi-K3 study, ``memory --measure`` launches ranks,
``schedules --validate`` runs gloo proofs), it imports that module by name through
:func:`from_lab`, which names the extra when the stack is missing; the test lists each crossing.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from pooltk._validate import InputError, check_int, check_number, problem

__all__ = [
    "LAB_EXTRA",
    "FlagError",
    "check_flag_int",
    "check_flag_positive",
    "fail",
    "flag_of",
    "from_lab",
    "message",
]

LAB_EXTRA = "pip install 'pooltk[lab]'"


class FlagError(InputError):
    """A command-line value outside what the command accepts; ``what`` is the flag (``--pp``)."""


def check_flag_int(
    flag: str,
    value: Any,
    *,
    low: int | None = None,
    high: int | None = None,
    fix: str | None = None,
) -> int:
    """``value`` if it is an integer in ``[low, high]``, else :class:`FlagError` naming ``flag``."""
    return check_int(flag, value, low=low, high=high, fix=fix, error=FlagError)


def check_flag_positive(flag: str, value: float, *, fix: str | None = None) -> float:
    """``value`` if it is a finite number > 0 (seconds, sizes), else :class:`FlagError` naming
    ``flag``."""
    return check_number(flag, value, fix=fix, error=FlagError)


def message(exc: BaseException, fields: Mapping[str, str] | None = None) -> str:
    """The user's text for ``exc``: a library field in ``fields`` becomes its flag; other errors as
    they are."""
    if (
        isinstance(exc, InputError)
        and not isinstance(exc, FlagError)
        and fields
        and exc.what in fields
    ):
        return problem(fields[exc.what], found=exc.found, required=exc.required, fix=exc.fix)
    return str(exc)


def fail(
    command: str,
    error: BaseException | str,
    *,
    fields: Mapping[str, str] | None = None,
    code: int = 2,
) -> int:
    """Print ``pooltk <command>: error: <message>`` on stderr and return ``code`` (2: bad input,
    1: the run failed). ``error`` is an exception (see :func:`message`) or the text itself."""
    text = error if isinstance(error, str) else message(error, fields)
    print(f"pooltk {command}: error: {text}", file=sys.stderr)
    return code


def from_lab(module: str, *, flag: str, needs: Iterable[str] = ()) -> ModuleType:
    """The lab module ``module``, imported for ``flag`` of a core command ([Note: core and lab]).

    ``needs`` names the third-party packages the flag's work uses; any that is not installed, or
    one the import itself misses, is a :class:`FlagError` naming the flag and the extra, never a
    traceback."""
    missing = [name for name in needs if importlib.util.find_spec(name) is None]
    if not missing:
        try:
            return importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if not exc.name or exc.name.partition(".")[0] == "pooltk":
                raise
            missing = [exc.name]
    raise FlagError(
        flag,
        found=f"{', '.join(missing)} not installed",
        required=f"the lab stack ({module} does this flag's work)",
        fix=f"{LAB_EXTRA}.",
    )


def flag_of(field: str) -> str:
    """The flag of a library field or an argparse name: ``micro_batch`` ->
    ``--micro-batch``."""
    return "--" + field.replace("_", "-")
