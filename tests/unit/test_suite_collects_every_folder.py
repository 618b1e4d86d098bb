"""`pytest tests` collects every test folder, and the same tests with or without ../shared.

pytest's default ``norecursedirs`` contains ``dist``, which once silently left tests/dist (the gloo
multi-process tests) out of every run; pyproject.toml now lists its own.

A user's clone has no ../shared, CI always has it: a test whose cases came from ../shared where it
exists ran other cases in CI than a user runs (17 log tests failed only for users). The suite is
collected twice, beside ../shared and with ``POOLTK_SHARED`` at a folder that does not exist, and
must list the same test ids ([Note: cases never change with ../shared] in tests/logs/conftest.py).
Within the suite's own run (``pytest tests``, nothing deselected) the first collection is that
run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_with_tests_is_collected_by_the_suite_command(request) -> None:
    # Collecting the whole suite imports what its folders need; a slimmer environment (the torch
    # compatibility matrix runs tests/unit with test tools only) cannot collect it.
    for module in ("pandas", "yaml", "hypothesis", "nbformat"):
        pytest.importorskip(
            module, reason=f"the whole suite's dependencies are not installed here ({module})"
        )
    folders = sorted(
        {p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    )
    ids = _this_session(request.config, request.session) or _collected({})
    collected = {line.split("::", 1)[0].rsplit("/", 1)[0] for line in ids}
    missing = [f for f in folders if f not in collected]
    assert "tests/dist" in folders and not missing, (
        f"folders with tests that `pytest tests` does not collect: {missing}"
    )
    without = _collected({"POOLTK_SHARED": str(ROOT / "no-such-shared-folder")})
    assert ids == without, (
        f"tests that exist only beside ../shared: {sorted(set(ids) - set(without))[:20]}; "
        f"only without it: {sorted(set(without) - set(ids))[:20]}"
    )


def _this_session(config, session) -> list[str] | None:
    """The ids this run collected, where it is ``pytest tests`` with nothing deselected (the suite's
    own run: a second collection would list the same), else None."""
    whole = [Path(a).resolve() for a in config.args] == [ROOT / "tests"] and config.rootpath == ROOT
    selected = (
        config.option.keyword
        or config.option.markexpr
        or config.getoption("deselect", None)
        or getattr(config.option, "lf", False)
    )
    return [item.nodeid for item in session.items] if whole and not selected else None


def _collected(env: dict[str, str]) -> list[str]:
    """The test ids ``pytest --collect-only tests`` lists under ``env``."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [line for line in out.stdout.splitlines() if "::" in line]
