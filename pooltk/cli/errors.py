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
(:func:`check_output`), and written through :func:`write_output` (missing folders made; a write
that fails names the flag and exits 1).

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
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from pooltk._validate import InputError, check_int, problem

__all__ = [
    "LAB_EXTRA",
    "FlagError",
    "check_flag_int",
    "check_flag_positive",
    "check_output",
    "fail",
    "from_lab",
    "message",
    "write_output",
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
    """``value`` if it is a number > 0 (seconds, sizes), else :class:`FlagError` naming ``flag``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise FlagError(flag, found=repr(value), required="a number > 0", fix=fix)
    return value


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


def check_output(flag: str, path: str | Path, *, folder: bool = False) -> Path:
    """``path`` if the command can write its output there (a file; with ``folder``, a folder,
    made here), else :class:`FlagError` naming ``flag``. Checked before the work, so a long run
    never ends on a path it cannot write."""
    path = Path(path)
    if path.exists() and folder and not path.is_dir():
        fix = "name a folder (made if missing)."
        raise FlagError(flag, found=f"{str(path)!r}, a file", required="a folder", fix=fix)
    if path.is_dir() and not folder:
        fix = f"name a file in it, e.g. {path / 'out.csv'}."
        raise FlagError(flag, found=f"{str(path)!r}, a folder", required="a file", fix=fix)
    base = path if folder else path.parent
    while not base.exists():  # missing folders are made under the nearest one that exists
        base = base.parent
    if not base.is_dir():
        found = f"{str(path)!r} under {str(base)!r}, which is a file"
        raise FlagError(
            flag, found=found, required="a path under a folder", fix="pick another path."
        )
    if not os.access(base, os.W_OK | os.X_OK) or (path.is_file() and not os.access(path, os.W_OK)):
        found = f"{str(path)!r}, which this user cannot write"
        raise FlagError(flag, found=found, required="a writable path", fix="pick another path.")
    if folder:
        write_output(flag, path, lambda made: made.mkdir(parents=True, exist_ok=True))
    return path


def write_output(flag: str, path: Path, write: Callable[[Path], object]) -> None:
    """``write(path)`` after making its folder; an OSError there (a full disk, a file system that
    refuses) is a :class:`FlagError` naming ``flag``, never a traceback."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path)
    except OSError as exc:
        raise FlagError(
            flag,
            found=f"{str(path)!r} not written: {exc.strerror or exc}",
            required="a path this user can write, on a disk with room",
            fix="pick another path (or free space) and run again.",
        ) from None
