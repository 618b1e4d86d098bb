"""``python -m pooltk.parity._zygote WORLD OUT_DIR STORE_PORT [PRELUDE]``: import once, fork every rank.

[Note: one import, many ranks]
Importing torch and ``torch.distributed.pipelining`` costs several CPU-seconds; with one
fresh interpreter per rank, a 4-rank launch on 2 cores spends most of its time importing.
This process imports them once (single-threaded: no torch op has run, so no OpenMP pool
exists yet), then ``fork``s one child per rank. Each child redirects its output to
``rank{r}.log``, imports the optional prelude module (which sees its rank as ``sys.argv[1]``
and ``POOLTK_PARITY_RANK``), and runs :func:`pooltk.parity.worker.spawn_entry`. The launcher
started this process in a new session, so killing that process group ends every rank.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> int:
    world, out_dir, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    prelude = sys.argv[4] if len(sys.argv) > 4 else None
    import torch  # noqa: F401  (the point: imported once, before fork)
    import torch.distributed.pipelining  # noqa: F401

    from pooltk.parity.worker import spawn_entry

    spec_json = (Path(out_dir) / "spec.json").read_text()
    children: dict[int, int] = {}
    for rank in range(world):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                log = os.open(
                    os.path.join(out_dir, f"rank{rank}.log"),
                    os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                    0o644,
                )
                os.dup2(log, 1)
                os.dup2(log, 2)
                sys.argv = [sys.argv[0], str(rank), str(world), out_dir, str(port)]
                os.environ["POOLTK_PARITY_RANK"] = str(rank)
                spawn_entry(rank, world, spec_json, out_dir, port, prelude)
                code = 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = rank
    failed = 0
    while children:
        pid, status = os.wait()
        children.pop(pid, None)
        if os.waitstatus_to_exitcode(status) != 0:
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
