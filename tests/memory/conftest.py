"""Memory-model tests draw figures off-screen and never inherit a report folder from the caller."""

from __future__ import annotations

import matplotlib
import pytest

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def _no_report_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POOLTK_REPORT_DIR", raising=False)
