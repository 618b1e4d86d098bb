"""Multi-process gloo tests: every launch is bounded (ParitySpec.timeout_s) and kills its ranks."""

import os
from pathlib import Path

import pytest


def leftover_rank_processes() -> list[str]:
    """Command lines of pooltk parity ranks still alive on this machine."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "pooltk.parity._rank" in cmd and int(proc.name) != os.getpid():
            found.append(cmd)
    return found


@pytest.fixture
def no_leftover_ranks():
    yield
    assert leftover_rank_processes() == []
