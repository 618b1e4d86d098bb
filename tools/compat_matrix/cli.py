"""Command line of ``python -m tools.compat_matrix``: flags and environment into :class:`Options`,
then run."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from tools.compat_matrix.options import CACHE_ENV, FIND_LINKS_ENV, Options
from tools.compat_matrix.spec import COMMAND, DEFAULT_RELEASES, REPO


class UsageError(ValueError):
    """A flag or environment value that cannot be used (the message says found / required / fix)."""


def parser() -> argparse.ArgumentParser:
    import tools.compat_matrix as pkg

    p = argparse.ArgumentParser(
        prog=COMMAND,
        description=(pkg.__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--releases",
        nargs="+",
        default=list(DEFAULT_RELEASES),
        metavar="X.Y.Z",
        help=f"torch releases, run one at a time (default: {' '.join(DEFAULT_RELEASES)})",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"wheel cache and env folder, outside the repo (default ${CACHE_ENV}, else "
        "$XDG_CACHE_HOME/pooltk-compat, else ~/.cache/pooltk-compat)",
    )
    p.add_argument(
        "--keep-envs",
        action="store_true",
        help="keep each venv under CACHE/envs (default: delete after use)",
    )
    p.add_argument(
        "--find-links",
        action="append",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"a local wheel folder for pip, repeatable (default: ${FIND_LINKS_ENV}, "
        f"'{os.pathsep}'-separated; else none)",
    )
    p.add_argument(
        "--python", default=None, help="interpreter for the venvs (default: the one running this)"
    )
    p.add_argument(
        "--check-timeout",
        type=float,
        default=2400,
        help="seconds for one release's checks (default 2400)",
    )
    p.add_argument(
        "--no-publish",
        dest="publish",
        action="store_false",
        help="print the matrix only; do not write docs/compat/ or docs/torch-compat.md",
    )
    p.add_argument(
        "--record-shape",
        type=Path,
        metavar="WHEEL",
        help="record a torch wheel's pipelining shape into tests/compat/layouts/ and exit",
    )
    return p


def default_cache_dir(environ: Mapping[str, str]) -> Path:
    """$POOLTK_COMPAT_CACHE, else $XDG_CACHE_HOME/pooltk-compat (when absolute), else
    ~/.cache/pooltk-compat."""
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    xdg = environ.get("XDG_CACHE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "pooltk-compat"
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    return home / ".cache" / "pooltk-compat"


def find_links(flags: list[Path] | None, environ: Mapping[str, str]) -> tuple[Path, ...]:
    """The --find-links folders, else those of $POOLTK_COMPAT_FIND_LINKS; each must be a folder."""
    if flags is not None:
        dirs, source = list(flags), "--find-links"
    else:
        dirs = [Path(d) for d in environ.get(FIND_LINKS_ENV, "").split(os.pathsep) if d]
        source = f"${FIND_LINKS_ENV}"
    missing = [str(d) for d in dirs if not d.is_dir()]
    if missing:
        raise UsageError(
            f"{source}: found {missing}, which are not folders; required folders of wheels. "
            "Fix: pass only folders that exist."
        )
    return tuple(d.resolve() for d in dirs)


def options(args: argparse.Namespace, argv: list[str], environ: Mapping[str, str]) -> Options:
    """Resolve parsed flags and the environment into :class:`Options`; raises UsageError."""
    bad = [
        r
        for r in args.releases
        if len(r.split(".")) != 3 or not all(x.isdigit() for x in r.split("."))
    ]
    if bad:
        raise UsageError(f"--releases: found {bad}; required exact releases like 2.14.1")
    cache = (args.cache_dir or default_cache_dir(environ)).expanduser().resolve()
    if cache == REPO or REPO in cache.parents:
        raise UsageError(
            f"--cache-dir: found {cache}, inside the repository; required a folder outside it "
            f"(wheels are never committed). Fix: --cache-dir elsewhere or unset ${CACHE_ENV}."
        )
    return Options(
        releases=tuple(args.releases),
        cache_dir=cache,
        find_links=find_links(args.find_links, environ),
        keep_envs=args.keep_envs,
        python=args.python or getattr(sys, "_base_executable", sys.executable),
        check_timeout=args.check_timeout,
        publish=args.publish,
        argv=tuple(argv),
    )


def main(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    environ = os.environ if environ is None else environ
    p = parser()
    args = p.parse_args(argv)
    if args.record_shape:
        from tools.compat_matrix.shapes import record_shape

        return record_shape(args.record_shape)
    try:
        opts = options(args, argv, environ)
    except UsageError as exc:
        p.error(str(exc))
    from tools.compat_matrix.matrix import run_matrix

    return run_matrix(opts)
