"""Multi-process gloo tests: every launch is bounded (ParitySpec.timeout_s) and kills its ranks.

[Note: whose ranks]
The machine is shared: other test runs start parity ranks of the same interpreter at the same
time. So a test marks the processes it starts: ``no_leftover_ranks`` puts a token unique to the
test in ``os.environ`` (``POOLTK_TEST_OWNER``), every launcher hands the environment down
(``subprocess`` children, forked zygote ranks, torchrun workers), and only processes whose own
environment (``/proc/PID/environ``) carries the token count as this test's. A rank orphaned to
init still carries it, so a leak is found even after its parent has gone.
"""

import os
import uuid
from pathlib import Path

import pytest

OWNER_VAR = "POOLTK_TEST_OWNER"
RANK_MARKERS = ("pooltk.parity", "pooltk/parity")
"""Command-line fragments of rank processes: the zygote, resident-memory ranks, torchrun workers."""


def processes_marked(token: str, markers: tuple[str, ...] = RANK_MARKERS) -> dict[int, str]:
    """pid -> command line of live processes whose environment carries ``OWNER_VAR=token`` and that
    run a marker."""
    needle = f"{OWNER_VAR}={token}".encode()
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # ended while we looked, or not ours to read
            continue
        if state == "Z":  # exited, only not yet reaped: it runs nothing
            continue
        if needle in env and any(m in cmd for m in markers):
            found[int(proc.name)] = cmd
    return found


@pytest.fixture
def owner_token(monkeypatch) -> str:
    """A token every process this test starts inherits (see [Note: whose ranks])."""
    token = uuid.uuid4().hex
    monkeypatch.setenv(OWNER_VAR, token)
    return token


@pytest.fixture(name="processes_marked")
def processes_marked_fixture():
    """:func:`processes_marked`, for tests of the check itself."""
    return processes_marked


@pytest.fixture
def no_leftover_ranks(owner_token):
    """After the test, no rank process it started is still running."""
    yield
    assert processes_marked(owner_token) == {}
