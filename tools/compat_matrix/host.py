"""Running commands and measuring folders on this host (progress lines, bounded subprocesses,
sizes)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def log(msg: str) -> None:
    """One progress line with the wall-clock time."""
    print(f"[compat {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def dir_bytes(path: Path) -> int:
    """Bytes of every file under ``path`` (links counted as links; unreadable files skipped)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def run(
    cmd: list[str], *, timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``cmd`` to completion; a non-zero exit raises RuntimeError with the command and its
    output tails."""
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(
            f"command failed ({out.returncode}): "
            f"{' '.join(cmd)}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
        )
    return out
