"""A killed kernel (or a killed ``pooltk estimate``) leaves no replay worker running: each worker
ends the moment the process that started it is gone (``estimate.end_with_parent``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

PARENT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from blocking_builder import build
    from pooltk.memory.replay.estimate import estimate_memory
    from pooltk.memory.shape import PipelineShape

    print("started", flush=True)
    estimate_memory(build, PipelineShape(pp=2, n_microbatches=2), variants=("stock",), jobs=2)
""")

BUILDER = textwrap.dedent("""
    import os, time

    def build(stage, n_stages):  # a replay that is still running when its parent is killed
        with open(os.path.join(os.environ["POOLTK_TEST_MARKS"], str(os.getpid())), "w"):
            pass
        time.sleep(120)
        raise RuntimeError("the test should have ended this worker long before")
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (the workers and multiprocessing's resource tracker)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def test_replay_workers_end_when_their_parent_is_killed_mid_replay(tmp_path: Path) -> None:
    (tmp_path / "blocking_builder.py").write_text(BUILDER)
    marks = tmp_path / "marks"
    marks.mkdir()
    env = dict(os.environ, POOLTK_TEST_MARKS=str(marks), PYTHONPATH=str(tmp_path))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], env=env)
    try:
        deadline = time.monotonic() + 120
        while len(list(marks.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = [int(p.name) for p in marks.iterdir()]
        assert len(workers) == 2 and all(_alive(w) for w in workers), workers
        children = _children(parent.pid)
        assert set(workers) <= set(children), (workers, children)
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        deadline = time.monotonic() + 15
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [c for c in children if _alive(c)], "processes outlived the killed parent"
    finally:
        parent.kill()
        for p in marks.iterdir():
            try:
                os.kill(int(p.name), signal.SIGKILL)
            except ProcessLookupError:
                pass
