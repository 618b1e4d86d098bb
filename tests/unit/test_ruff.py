"""The formatter and the linter hold the code: `ruff format --check` and `ruff check` pass on every
folder of Python the project ships or runs (settings in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("pooltk", "tests", "tools", "benchmarks")


def _ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_ruff_format_leaves_every_file_as_it_is():
    out = _ruff("format", "--check", *FOLDERS)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_ruff_check_finds_nothing():
    out = _ruff("check", "--output-format", "concise", *FOLDERS)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


def test_the_lint_rules_in_force_catch_an_unused_import_a_loop_closure_and_a_long_line(tmp_path):
    bad = tmp_path / "pooltk" / "bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "import os\n\n\n"
        "def f(xs):\n"
        "    return [lambda: x for x in xs]\n\n\n"
        f"LONG = {'1 + ' * 40}1\n"
    )
    config = str(ROOT / "pyproject.toml")
    out = _ruff("check", "--config", config, "--output-format", "concise", str(bad), cwd=tmp_path)
    assert out.returncode == 1
    assert {"F401", "B023", "E501"} <= {
        line.split()[1] for line in out.stdout.splitlines() if ": " in line
    }


def test_every_python_file_of_those_folders_is_one_ruff_reads():
    """A folder ruff skips is a folder nothing holds: its default exclude names ``dist`` anywhere
    (it skipped tests/dist) and a bare ``notebooks`` pattern skipped tests/notebooks."""
    out = _ruff("check", "--show-files", *FOLDERS)
    read = {Path(line.strip()).resolve() for line in out.stdout.splitlines() if line.strip()}
    on_disk = {
        p.resolve()
        for folder in FOLDERS
        for p in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sorted(str(p.relative_to(ROOT)) for p in on_disk - read) == []
