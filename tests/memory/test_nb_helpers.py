"""pooltk.nb.common: figures are saved only when a report folder is set; setup reports where it
runs."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from pooltk.nb import common as nb


def test_save_figure_writes_a_png_only_under_a_report_dir(tmp_path, monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    assert nb.save_figure(fig, "01_test") is None
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("POOLTK_REPORT_DIR", str(tmp_path / "reports"))
    path = nb.save_figure(fig, "01 test/figure")
    assert path == tmp_path / "reports" / "01_test_figure.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="save_figure name"):
        nb.save_figure(fig, "///")
    plt.close(fig)


def test_setup_returns_in_ci_and_report_dir(tmp_path, monkeypatch):
    for var in ("CI", "GITHUB_ACTIONS", "POOLTK_CI"):
        monkeypatch.delenv(var, raising=False)
    env = nb.setup()
    assert env.IN_CI is False and env.REPORT_DIR is None
    monkeypatch.setenv("POOLTK_REPORT_DIR", str(tmp_path))
    env = nb.setup()
    assert env.IN_CI is True and env.REPORT_DIR == tmp_path
