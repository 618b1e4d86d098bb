"""Multi-process gloo tests: every launch is bounded (ParitySpec.timeout_s) and kills its ranks."""

import os
import sys
from pathlib import Path

import pytest


def leftover_rank_processes() -> dict[int, str]:
    """pid -> command line of pooltk parity ranks of *this* interpreter still alive."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "pooltk.parity._zygote" in cmd and cmd.startswith(sys.executable) and int(proc.name) != os.getpid():
            found[int(proc.name)] = cmd
    return found


@pytest.fixture
def no_leftover_ranks():
    """After the test, no rank process it started is still running."""
    before = set(leftover_rank_processes())
    yield
    after = {pid: cmd for pid, cmd in leftover_rank_processes().items() if pid not in before}
    assert after == {}
