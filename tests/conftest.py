"""Shared fixtures: the repo root, ../shared (skips cleanly where absent), a clean install state."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POOLTK_SHARED", REPO.parent / "shared"))


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(
            f"{SHARED} is absent (a user's clone has no ../shared); reference-data tests skipped"
        )
    return SHARED


@pytest.fixture
def clean_install():
    """No process-wide pooltk install before or after the test."""
    import pooltk

    pooltk.uninstall()
    yield
    pooltk.uninstall()


# --------------------------------------------------------------------------- the fast inner loop
#
# [Note: slow tests]
# `pytest -m "not slow"` is the inner loop (a few minutes on 2 cores); `pytest` (what
# `bash scripts/test` runs) still runs everything. A test is slow when it starts processes that
# import torch, kernels, browsers, venvs or real training launches. Whole folders are slow by
# what they are for; elsewhere a test is slow by its marker (a notebook it executes) or because
# it is named in SLOW_TESTS with the reason. tests/unit/test_slow_marker.py holds the rules.

SLOW_FOLDERS: dict[str, str] = {
    "dist": "multi-process gloo launches",
    "integration": "trainer entries and real trainer launches",
    "browser": "JupyterLab in headless Chromium",
    "packaging": "builds a wheel and installs it into a fresh venv",
}
"""tests/<folder> -> why every test in it is slow."""

SLOW_MARKERS: dict[str, str] = {
    "notebook": "executes a notebook in a kernel",
    "dist": "spawns gloo ranks",
}
"""Marker -> why a test carrying it is slow, wherever it lives."""

SLOW_TESTS: dict[str, str] = {
    "docs/test_documented_commands.py": (
        "runs every documented pooltk command (parity launches included)"
    ),
    "compat/test_real_torch.py": "runs against real torch releases",
    (
        "memory/test_measured.py::"
        "test_a_fresh_two_stage_measurement_matches_the_model_within_the_goal"
    ): "trains stock and pooled pipelines in fresh processes",
    (
        "unit/test_architecture.py::"
        "test_import_pooltk_and_plan_auto_rings_in_an_environment_with_torch_alone"
    ): "builds a venv holding torch alone",
    "unit/test_suite_collects_every_folder.py": "collects the whole suite in a second pytest",
    (
        "unit/test_slow_marker.py::"
        "test_a_run_names_each_test_as_it_starts_and_collect_only_stays_as_asked"
    ): "runs pytest twice in subprocesses",
    "memory/test_cli_memory.py::test_installed_entry_point_runs_the_command": (
        "runs the installed pooltk in a subprocess"
    ),
    "parity/test_gpu_check.py": "compiles a stage with inductor in a subprocess",
    "memory/test_replay_real_equals_fake.py": (
        "replays torch's schedule on real and fake tensors, stage by stage"
    ),
    "memory/test_replay_workers_end_with_their_parent.py": (
        "starts a replay's worker processes, kills their parent"
    ),
    "memory/test_replay_estimate.py::test_each_category_holds_what_it_says_on_every_rank": (
        "replays every rank of a pipeline on fake tensors"
    ),
}
"""Path under tests/ (a file, or file::test-name, parametrized cases included) -> why it is slow."""


def slow_reason(item) -> str | None:
    """Why ``item`` is slow (see [Note: slow tests]), or None."""
    path = Path(str(item.fspath)).resolve()
    if not path.is_relative_to(REPO / "tests"):
        return None
    rel = path.relative_to(REPO / "tests").as_posix()
    folder = rel.split("/", 1)[0]
    if folder in SLOW_FOLDERS:
        return SLOW_FOLDERS[folder]
    for name, why in SLOW_MARKERS.items():
        if item.get_closest_marker(name) is not None:
            return why
    nodeid = f"{rel}::{item.name}"
    for prefix, why in SLOW_TESTS.items():
        if nodeid == prefix or nodeid.startswith(prefix + ("[" if "::" in prefix else "::")):
            return why
    return None


# [Note: progress]
# A suite that runs for many minutes must show where it is: a test run at the default verbosity is
# run as with -v, so each test's name is printed when it starts (a ten-minute test shows its name
# the whole time). --collect-only output, -q and an explicit -v are left as asked.


def pytest_configure(config) -> None:
    if not config.option.collectonly and config.option.verbose == 0:
        config.option.verbose = 1


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if slow_reason(item) is not None:
            item.add_marker(pytest.mark.slow)
