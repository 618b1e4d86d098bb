"""Launch N local gloo ranks of one program as subprocesses, bounded in time (stdlib only).

Each rank gets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR=127.0.0.1 / MASTER_PORT (a free
port), the way torchrun sets them. Ranks still running at the deadline are killed (their own
process ids only). Returns each rank's exit code and the wall time.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv: list[str], *, world: int, timeout_s: float, log_dir: Path,
           env: dict[str, str] | None = None, python: str = sys.executable) -> tuple[list[int | None], float]:
    """Run ``python argv...`` as ``world`` ranks; stdout+stderr of rank r go to ``log_dir/rank{r}.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs, files = [], []
    start = time.monotonic()
    for rank in range(world):
        rank_env = dict(os.environ, **(env or {}))
        rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        f = open(log_dir / f"rank{rank}.log", "w")
        files.append(f)
        procs.append(subprocess.Popen([python, *argv], env=rank_env, stdout=f, stderr=subprocess.STDOUT))
    codes: list[int | None] = [None] * world
    deadline = start + timeout_s
    while time.monotonic() < deadline and any(c is None for c in codes):
        for i, p in enumerate(procs):
            if codes[i] is None:
                codes[i] = p.poll()
        time.sleep(0.2)
    for i, p in enumerate(procs):
        if codes[i] is None:
            p.kill()
            p.wait()
    for f in files:
        f.close()
    return codes, time.monotonic() - start
