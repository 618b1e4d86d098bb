"""Launch N local gloo ranks of one program as subprocesses, bounded in time.

Each rank gets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR=127.0.0.1 / MASTER_PORT (a free
port), the way torchrun sets them, and runs under pooltk's one rank launcher
(:func:`pooltk.parity.procs.run_processes`, [Note: one rank launcher]): every rank runs to its
end, ranks still running at the deadline are killed (their own process ids only). Returns each
rank's exit code (``None`` for a rank killed at the deadline) and the wall time.

Also the one model pattern both rank programs add for their ``*_input_hook`` variants
(:func:`hook_received_inputs`).
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


def launch(
    argv: list[str],
    *,
    world: int,
    timeout_s: float,
    log_dir: Path,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
) -> tuple[list[int | None], float]:
    """Run ``python argv...`` as ``world`` ranks; stdout+stderr of rank r go to
    ``log_dir/rank{r}.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    envs = []
    for rank in range(world):
        rank_env = dict(os.environ, **(env or {}))
        rank_env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            PYTHONHASHSEED="0",
        )
        envs.append(rank_env)
    done = run_processes(
        [[python, *argv]] * world,
        logs=[log_dir / f"rank{r}.log" for r in range(world)],
        env=envs,
        timeout_s=timeout_s,
        new_session=False,
        poll_s=0.2,
    )
    return done.codes, done.wall_s


def hook_received_inputs(
    module,  # noqa: ANN001 - an nn.Module (torch is imported by the caller)
) -> object:
    """Every forward of ``module`` registers a gradient hook (``g * 0.5``) on each received input
    that needs grad.

    The pattern of pytorch issue #185331: stock torch hands microbatch c the same receive buffer
    every step, so the hooks pile up there (step k's input gradient is scaled k + 1 times); with a
    fresh buffer per receive each receive carries one. Register it on a stage's module that is not
    the first (the first stage's input is the batch, not a receive). Returns the hook's handle.
    """

    def pre_hook(_module, args, kwargs):
        for t in (*args, *kwargs.values()):
            if getattr(t, "requires_grad", False) and t.is_floating_point():
                t.register_hook(lambda g: g * 0.5)

    return module.register_forward_pre_hook(pre_hook, with_kwargs=True)
