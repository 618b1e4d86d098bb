"""Launch N local gloo ranks of one program as subprocesses, bounded in time.

Each rank gets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR=127.0.0.1 / MASTER_PORT (a free
port), the way torchrun sets them, and runs under pooltk's one rank launcher
(:func:`pooltk.parity.procs.run_processes`, [Note: one rank launcher]): every rank runs to its
end, ranks still running at the deadline are killed (their own process ids only). Returns each
rank's exit code (``None`` for a rank killed at the deadline) and the wall time.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from pooltk.parity.procs import run_processes


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(argv: list[str], *, world: int, timeout_s: float, log_dir: Path,
           env: dict[str, str] | None = None, python: str = sys.executable) -> tuple[list[int | None], float]:
    """Run ``python argv...`` as ``world`` ranks; stdout+stderr of rank r go to ``log_dir/rank{r}.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    envs = []
    for rank in range(world):
        rank_env = dict(os.environ, **(env or {}))
        rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        envs.append(rank_env)
    done = run_processes([[python, *argv]] * world, logs=[log_dir / f"rank{r}.log" for r in range(world)], env=envs,
                         timeout_s=timeout_s, new_session=False, poll_s=0.2)
    return done.codes, done.wall_s
