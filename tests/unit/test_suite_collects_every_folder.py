"""`pytest tests` collects every test folder: nothing is skipped by a name pytest ignores by default.

pytest's default ``norecursedirs`` contains ``dist``, which once silently left tests/dist (the gloo
multi-process tests) out of every run; pyproject.toml now lists its own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_folder_with_tests_is_collected_by_the_suite_command() -> None:
    # Collecting the whole suite imports what its folders need; a slimmer environment (the torch
    # compatibility matrix runs tests/unit with test tools only) cannot collect it.
    for module in ("pandas", "yaml", "hypothesis", "nbformat"):
        pytest.importorskip(module, reason=f"the whole suite's dependencies are not installed here ({module})")
    folders = sorted({p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")})
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    collected = {line.split("::", 1)[0].rsplit("/", 1)[0] for line in out.stdout.splitlines() if "::" in line}
    missing = [f for f in folders if f not in collected]
    assert "tests/dist" in folders and not missing, f"folders with tests that `pytest tests` does not collect: {missing}"
