"""[Note: slow tests] in tests/conftest.py: the fast loop leaves out exactly what starts processes,
by stated rules."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# tests/conftest.py, by path: in a whole-suite run the module name "conftest" may be another
# folder's.
_spec = importlib.util.spec_from_file_location("pooltk_tests_root_conftest", TESTS / "conftest.py")
root_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root_conftest)


def test_the_slow_marker_is_registered_and_the_suite_shows_each_test_as_it_starts():
    opts = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"
    ]
    assert any(m.startswith("slow:") for m in opts["markers"])
    assert "--durations=25" in opts["addopts"].split()


def test_a_run_names_each_test_as_it_starts_and_collect_only_stays_as_asked(tmp_path):
    import subprocess
    import sys

    (tmp_path / "test_probe.py").write_text("def test_one():\n    pass\n")
    base = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(TESTS.parent),
        "-c",
        str(TESTS.parent / "pyproject.toml"),
        "--confcutdir",
        str(TESTS),
        "-p",
        "conftest",
    ]
    run = subprocess.run(
        base + [str(tmp_path / "test_probe.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS,
    )
    assert "::test_one PASSED" in run.stdout, run.stdout[-2000:]
    listed = subprocess.run(
        base + ["--collect-only", "-q", str(tmp_path / "test_probe.py")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=TESTS,
    )
    assert any(ln.endswith("::test_one") for ln in listed.stdout.splitlines()), listed.stdout[
        -2000:
    ]
    assert "PASSED" not in listed.stdout


def test_every_slow_folder_and_named_test_exists_so_no_rule_silently_stops_applying():
    for folder in root_conftest.SLOW_FOLDERS:
        assert (TESTS / folder).is_dir(), folder
    for target in root_conftest.SLOW_TESTS:
        path, _, name = target.partition("::")
        assert (TESTS / path).is_file(), target
        if name:
            assert f"def {name}(" in (TESTS / path).read_text(), (
                f"{target}: no such test (renamed?)"
            )


class _Item:
    def __init__(self, rel: str, name: str, markers: tuple[str, ...] = ()) -> None:
        self.fspath, self.name, self._markers = TESTS / rel, name, markers

    def get_closest_marker(self, name: str):
        return object() if name in self._markers else None


def test_slow_reason_by_folder_by_marker_by_name_and_fast_otherwise():
    reason = root_conftest.slow_reason
    assert reason(_Item("dist/test_parity_1f1b.py", "test_x")) == root_conftest.SLOW_FOLDERS["dist"]
    assert (
        reason(_Item("notebooks/test_notebooks_execute.py", "test_run[00]", ("notebook",)))
        is not None
    )
    assert reason(_Item("docs/test_documented_commands.py", "test_command[README:1]")) is not None
    named = next(t for t in root_conftest.SLOW_TESTS if "::" in t)
    path, _, name = named.partition("::")
    assert reason(_Item(path, name)) is not None and reason(_Item(path, name + "_other")) is None
    assert reason(_Item("unit/test_ring.py", "test_ring_sizes")) is None
    assert (
        reason(
            _Item(
                "notebooks/test_notebooks_execute.py", "test_committed_notebook_has_no_outputs[00]"
            )
        )
        is None
    )
