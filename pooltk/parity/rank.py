"""Every launched rank starts here: parity variants, composition cases, resident-memory ranks.

[Note: one rank entry]
A launch (:func:`launch_ranks`) writes ``OUT/job.json`` = ``{"kind", "timeout_s", "payload"}``
and starts ``world`` ranks, either forked from one process that imported torch once
([Note: one import, many ranks]) or each a fresh interpreter (``python -m pooltk.parity.rank
RANK WORLD OUT PORT``: a resident-memory rank must not inherit another's pages). Each rank
(:func:`run_rank`) imports the launch's prelude module if any, joins the gloo group through the
launcher's ``TCPStore`` on 127.0.0.1, runs its kind's body (``rank_body(rank, world, payload)``
in the module :data:`KINDS` names) and writes what it returns to ``OUT/rank{r}.json``. On any
error it writes ``OUT/rank{r}.error.json`` instead (:func:`error_record`) and exits 1.

A rank that raises makes its peers fail with gloo connection errors, so the launch's root cause
(:meth:`RankLaunch.cause`) is a pool overrun first, then the earliest error that is not a peer's
echo.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pooltk.parity.procs import Launch, run_processes
from pooltk.pool.errors import PoolOverrunError

__all__ = ["KINDS", "RankLaunch", "digest", "launch_ranks", "rehomes", "run_rank"]

KINDS = {
    "parity": "pooltk.parity.worker",
    "compositions": "pooltk.parity._composition_rank",
    "rss": "pooltk.parity.rss",
}
"""Kind of launch -> the module whose ``rank_body(rank, world, payload)`` a rank runs."""

RUNNING_LINE = "pooltk parity: the rank was running "
"""Prefix of the last line of a failed rank's traceback text: what it was running."""
VARIANT_LINE = RUNNING_LINE + "variant "

_RUNNING: list[str | None] = [None]


def now_running(what: str | None) -> None:
    """Name what this rank runs now (``"variant pooled"``, ``"case ddp-pp2"``) for its errors."""
    _RUNNING[0] = what


def failed_variant(traceback_text: str) -> str | None:
    """The variant a failed rank was running, from its traceback text (None outside one)."""
    for line in reversed(traceback_text.splitlines()):
        if line.startswith(VARIANT_LINE):
            return line[len(VARIANT_LINE) :].strip()
    return None


def digest(obj: Any) -> str:
    """sha1 over dtype, shape and bytes of every tensor in ``obj``, and the repr of anything else.

    ``obj`` is a tensor or nested tuples and lists. A DTensor counts by its local shard; any dtype
    counts by its raw bytes (bf16 and bool too), so equal digests mean bitwise equal tensors.
    """
    h = hashlib.sha1()
    for item in obj if isinstance(obj, (tuple, list)) else (obj,):
        if isinstance(item, torch.Tensor):
            local = item.to_local() if hasattr(item, "to_local") else item
            flat = local.detach().cpu().contiguous().reshape(-1)
            h.update(f"{local.dtype}{tuple(local.shape)}".encode())
            h.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
        elif isinstance(item, (tuple, list)):
            h.update(digest(item).encode())
        else:
            h.update(repr(item).encode())
    return h.hexdigest()


def rehomes(report: Any) -> dict[int, dict[str, dict[str, int]]]:
    """Per stage and direction: the re-homes an install report recorded, and their bytes."""
    out: dict[int, dict[str, dict[str, int]]] = {}
    for event in getattr(report, "events", ()) or ():
        if event.kind != "re-homed" or event.stage is None:
            continue
        tally = out.setdefault(event.stage, {}).setdefault(
            event.fields["direction"], {"rehomes": 0, "rehomed_bytes": 0}
        )
        tally["rehomes"] += 1
        tally["rehomed_bytes"] += int(event.fields["bytes"])
    return out


def known_cause(text: str) -> str:
    """A cause pooltk can name for a rank's failure (its formatted traceback), or ''.

    torch 2.11's multi-stage schedules open their P2P links by sending to both neighbour stages,
    and a V schedule's neighbour can be on the same rank: gloo cannot send to itself ("Pair is not
    connected"), so stock V schedules do not start on gloo there. torch 2.13.0 opens the links with
    a vote instead and runs them (measured, ZBVZeroBubble pp2, both releases).
    """
    if "Pair is not connected" in text and "_initialize_stages" in text:
        return (
            "torch's multi-stage warm-up sent to a neighbour stage on the same rank (a V "
            "schedule), which gloo cannot do; stock fails the same way on this torch. Fix: run V "
            "schedules on torch 2.13 or later, or under NCCL."
        )
    return ""


def find_overrun(exc: BaseException | None) -> PoolOverrunError | None:
    """The :class:`PoolOverrunError` ``exc`` is or was raised from (its cause/context chain)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, PoolOverrunError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


PEER_ECHOES = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "Socket Timeout",
    "Connection refused",
    "connectFullMesh",
)
"""What gloo says on a rank whose peer died: an echo, not a cause."""


def error_record(rank: int, exc: BaseException) -> dict[str, Any]:
    """What ``rank.error.json`` holds: the error, a cause pooltk can name, what the rank ran."""
    text = "".join(traceback.format_exception(exc))
    if _RUNNING[0] is not None:
        text += f"{RUNNING_LINE}{_RUNNING[0]}\n"
    overrun = find_overrun(exc)
    return {
        "rank": rank,
        "type": type(exc).__name__,
        "message": " ".join(filter(None, (str(exc), known_cause(text)))),
        "traceback": text,
        "running": _RUNNING[0],
        "time": time.time(),
        "overrun": overrun.to_dict() if overrun is not None else None,
        "peer_connection": any(s in text for s in PEER_ECHOES),
    }


def run_rank(rank: int, world: int, out_dir: str, port: int, prelude: str | None = None) -> None:
    """One rank of a launch; see [Note: one rank entry]. Exits the process on an error."""
    import torch.distributed as dist

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ["POOLTK_PARITY_RANK"] = str(rank)
    out = Path(out_dir)
    try:
        if prelude:
            importlib.import_module(prelude)
        torch.set_num_threads(1)
        job = json.loads((out / "job.json").read_text())
        body = importlib.import_module(KINDS[job["kind"]]).rank_body
        timeout = datetime.timedelta(seconds=job["timeout_s"])
        store = dist.TCPStore("127.0.0.1", port, world + 1, is_master=False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
        result = body(rank, world, job["payload"])
        (out / f"rank{rank}.json").write_text(json.dumps(result))
        dist.destroy_process_group()
    except BaseException as exc:  # the rank's own error, then exit non-zero
        record = error_record(rank, exc)
        (out / f"rank{rank}.error.json").write_text(json.dumps(record))
        sys.stderr.write(record["traceback"])
        sys.stderr.flush()
        os._exit(1)


def fork_ranks(world: int, out_dir: str, port: int, prelude: str | None = None) -> int:
    """Import torch once, fork every rank; see [Note: one import, many ranks]. 1 if any failed.

    [Note: one import, many ranks]
    Importing torch and ``torch.distributed.pipelining`` costs several CPU-seconds; with one
    fresh interpreter per rank, a 4-rank launch on 2 cores spends most of its time importing.
    This process imports them once (single-threaded: no torch op has run, so no OpenMP pool
    exists yet), then forks one child per rank. Each child sends its output to
    ``rank{r}.log``, sees ``sys.argv = [prog, rank, world, out_dir, port]`` (a prelude reads its
    rank there) and runs :func:`run_rank`. The launcher started this process in a new session,
    so killing that process group ends every rank.
    """
    import torch.distributed.pipelining  # noqa: F401  (the point: imported once, before fork)

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
                run_rank(rank, world, out_dir, port, prelude)
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
        failed += os.waitstatus_to_exitcode(status) != 0
    return 1 if failed else 0


@dataclass(kw_only=True, slots=True)
class RankLaunch:
    """What the ranks of one launch left behind."""

    results: list[Any]
    """Per rank, what its body returned; None where the rank wrote no result."""
    errors: list[dict[str, Any]]
    """The error records ranks wrote (:func:`error_record`), by rank."""
    tails: dict[int, str]
    """The last 4,000 characters of each rank's log, for ranks without a result."""
    launch: Launch
    """Exit codes, and whether the launch ran past its deadline."""

    @property
    def missing(self) -> list[int]:
        """Ranks that wrote no result."""
        return [r for r, result in enumerate(self.results) if result is None]

    def cause(self) -> dict[str, Any] | None:
        """The root cause: an overrun first, then the earliest error that is no peer's echo."""
        if not self.errors:
            return None
        overruns = [e for e in self.errors if e["overrun"]]
        if overruns:
            return min(overruns, key=lambda e: e["time"])
        own = [e for e in self.errors if not e["peer_connection"]]
        return min(own or self.errors, key=lambda e: e["time"])


def launch_ranks(
    kind: str,
    payload: Any,
    *,
    world: int,
    timeout_s: float,
    grace_s: float,
    fork: bool,
    prelude: str | None = None,
    env: dict[str, str] | None = None,
) -> RankLaunch:
    """Run ``world`` ranks of ``kind`` on ``payload`` within ``timeout_s``; [Note: one rank entry].

    A rank that fails gives the others ``grace_s`` before every rank is ended; ``env`` adds to the
    ranks' environment.
    """
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, world + 1, is_master=True, wait_for_workers=False)
    environ = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    environ.update(env or {})
    with tempfile.TemporaryDirectory(prefix=f"pooltk-{kind}-") as tmp:
        out = Path(tmp)
        job = {"kind": kind, "timeout_s": timeout_s, "payload": payload}
        (out / "job.json").write_text(json.dumps(job))
        entry = [sys.executable, "-m", "pooltk.parity.rank"]
        tail = [str(world), tmp, str(store.port), *([prelude] if prelude else [])]
        if fork:
            argvs, logs = [[*entry, "fork", *tail]], [out / "fork.log"]
        else:
            argvs = [[*entry, str(r), *tail] for r in range(world)]
            logs = [out / f"rank{r}.log" for r in range(world)]
        try:
            launch = run_processes(
                argvs,
                logs=logs,
                env=environ,
                timeout_s=timeout_s,
                grace_s=grace_s,
                failed=lambda: any(out.glob("rank*.error.json")),
            )
        finally:
            del store
        return _gather(out, world, launch)


def _gather(out: Path, world: int, launch: Launch) -> RankLaunch:
    results, tails = [], {}
    for r in range(world):
        path = out / f"rank{r}.json"
        results.append(json.loads(path.read_text()) if path.exists() else None)
        log = out / f"rank{r}.log"
        if not path.exists():
            text = (log if log.exists() else out / "fork.log").read_text(errors="replace")
            tails[r] = text[-4000:]
    errors = [json.loads(p.read_text()) for p in sorted(out.glob("rank*.error.json"))]
    return RankLaunch(results=results, errors=errors, tails=tails, launch=launch)


def main(argv: list[str]) -> int:
    """``RANK WORLD OUT PORT [PRELUDE]``: one rank; ``fork WORLD OUT PORT [PRELUDE]``: all."""
    prelude = argv[4] if len(argv) > 4 else None
    if argv[0] == "fork":
        return fork_ranks(int(argv[1]), argv[2], int(argv[3]), prelude)
    run_rank(int(argv[0]), int(argv[1]), argv[2], int(argv[3]), prelude)
    return 0


if __name__ == "__main__":  # run the imported module's copy: the bodies name what runs there
    from pooltk.parity.rank import main as _main

    sys.exit(_main(sys.argv[1:]))
