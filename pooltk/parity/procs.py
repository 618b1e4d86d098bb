"""Start rank processes, bound them in time, end them: the one launcher under parity, resident
memory and trainers.

[Note: one rank launcher]
:func:`run_processes` starts one process per command (stdout and stderr into its log file, no
stdin), polls until every one has exited, and then ends whatever still runs: all at the
deadline, and, when ``grace_s`` is given, the others ``grace_s`` after the first failure (a
non-zero exit, or ``failed()`` turning true: a rank's error file). With ``new_session`` each
process leads its own session and the whole process group is killed (a zygote's forked ranks,
a trainer's workers); without it, only the process itself. :class:`Launch` gives each exit
status, ``None`` for a process the launcher ended, so callers tell "failed" from "cut short".
Users: :func:`pooltk.parity.rank.launch_ranks` (parity, composition and resident-memory ranks:
one process that forks every rank, or one fresh interpreter per rank) and
``tools/integration/ranks.py`` (trainer ranks with torchrun's environment). Standard library only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Launch", "run_processes"]


@dataclass(kw_only=True, slots=True)
class Launch:
    """What became of the processes of one launch."""

    codes: list[int | None]
    """Exit status per process, in order (negative: the signal); ``None`` where the launcher ended
    it."""
    timed_out: bool
    """Some process was still running at the deadline."""
    failed: bool
    """A failure (a non-zero exit, or ``failed()``) was seen before the end."""
    wall_s: float
    """Seconds from the first start to the last process ended."""


def _end(proc: subprocess.Popen, new_session: bool) -> None:
    try:
        if new_session:
            os.killpg(proc.pid, signal.SIGKILL)
        elif proc.poll() is None:
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def run_processes(
    argvs: Sequence[Sequence[str]],
    *,
    logs: Sequence[Path],
    env: Mapping[str, str] | Sequence[Mapping[str, str]],
    timeout_s: float,
    grace_s: float | None = None,
    failed: Callable[[], bool] | None = None,
    new_session: bool = True,
    poll_s: float = 0.05,
) -> Launch:
    """Run ``argvs`` at once, bounded by ``timeout_s``; see [Note: one rank launcher].

    ``env`` is one environment for all, or one per process. ``logs[i]`` receives process ``i``'s
    output (truncated first). Every process is ended and reaped before this returns.
    """
    envs = [env] * len(argvs) if isinstance(env, Mapping) else list(env)
    if len(envs) != len(argvs) or len(logs) != len(argvs):
        raise ValueError(
            f"run_processes: found {len(argvs)} commands, {len(envs)} environments and {len(logs)} "
            "logs; required one of each per process."
        )
    start = time.monotonic()
    procs: list[subprocess.Popen] = []
    try:
        for argv, log, environ in zip(argvs, logs, envs):
            procs.append(_start(argv, log, environ, new_session))
        timed_out, seen_failure = _wait(procs, start + timeout_s, grace_s, failed, poll_s)
    finally:
        ended = _end_all(procs, new_session)
    codes = [None if i in ended else p.returncode for i, p in enumerate(procs)]
    return Launch(
        codes=codes,
        timed_out=timed_out,
        failed=seen_failure or any(c not in (0, None) for c in codes),
        wall_s=time.monotonic() - start,
    )


def _start(
    argv: Sequence[str], log: Path, environ: Mapping[str, str], new_session: bool
) -> subprocess.Popen:
    """One process, its output into ``log`` (truncated first)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(environ),
            start_new_session=new_session,
        )


def _wait(
    procs: list[subprocess.Popen],
    deadline: float,
    grace_s: float | None,
    failed: Callable[[], bool] | None,
    poll_s: float,
) -> tuple[bool, bool]:
    """Wait until every process has ended, the deadline passes, or ``grace_s`` after the first
    failure (a non-zero exit, or ``failed()``); (timed out, a failure seen)."""
    failed_at, timed_out = None, False
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and (
            any(p.poll() not in (None, 0) for p in procs) or (failed and failed())
        ):
            failed_at = now
        if grace_s is not None and failed_at is not None and now - failed_at > grace_s:
            break
        if now > deadline:
            timed_out = True
            break
        time.sleep(poll_s)
    return timed_out, failed_at is not None or (failed is not None and failed())


def _end_all(procs: list[subprocess.Popen], new_session: bool) -> set[int]:
    """End and reap every process; the indices of those still running when asked to end."""
    ended = set()
    for i, p in enumerate(procs):
        if p.poll() is None:
            ended.add(i)
        _end(p, new_session)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - the kernel did not reap in time
            p.kill()
            p.wait()
    return ended
