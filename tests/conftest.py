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
        pytest.skip(f"{SHARED} is absent (a user's clone has no ../shared); reference-data tests skipped")
    return SHARED


@pytest.fixture
def clean_install():
    """No process-wide pooltk install before or after the test."""
    import pooltk

    pooltk.uninstall()
    yield
    pooltk.uninstall()
