"""Widget callbacks draw off pyplot, so no other thread's figure flush can draw their figures
(pooltk.nb.canvas).

[Note: widget callbacks draw off pyplot] in pooltk/nb/canvas.py: JupyterLab 4.6 handles widget
messages on ipykernel subshells, and matplotlib-inline's flush on one thread drew (and tore) the
figure a slider's callback was building on another. These tests hold the three parts of the fix:
figures made inside ``off_pyplot`` are unknown to pyplot while made, drawn and shown; the switch is
per thread; and every figure pooltk.nb makes goes through ``canvas``.
"""

from __future__ import annotations

import io
import re
import threading
from pathlib import Path
from typing import Any

import pytest

mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pooltk.nb import canvas  # noqa: E402

NB = Path(__file__).resolve().parents[2] / "pooltk" / "nb"


@pytest.fixture(autouse=True)
def _no_open_figures():
    plt.close("all")
    yield
    plt.close("all")


def _shown(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, list[int]]]:
    """Every object the notebooks' display helper shows, with pyplot's figure numbers at that
    moment.

    ``show_figure`` shows a figure as its PNG (an ``IPython.display.Image``), never the figure
    object ([Note: a figure shown off pyplot is sent as a PNG] in pooltk/nb/common.py).
    """
    from pooltk.nb import common

    shown: list[tuple[Any, list[int]]] = []
    monkeypatch.setattr(common, "_display", lambda obj: shown.append((obj, plt.get_fignums())))
    return shown


def test_a_figure_made_off_pyplot_is_unknown_to_pyplot_and_one_made_in_a_cell_is_known():
    with canvas.off_pyplot():
        fig, axes = canvas.subplots(1, 2, figsize=(4, 2), sharey=True)
        bare = canvas.figure(figsize=(3, 2))
        assert plt.get_fignums() == [], "a figure made inside off_pyplot was registered with pyplot"
        assert (
            len(axes) == 2
            and fig.get_size_inches().tolist() == [4.0, 2.0]
            and bare.get_figwidth() == 3.0
        )
        assert (
            fig.canvas.get_renderer() is not None
        )  # an Agg canvas, as the figure checks and users expect
        png = io.BytesIO()
        fig.savefig(png, format="png")  # drawable without pyplot
        assert png.getvalue().startswith(b"\x89PNG")
    cell_fig, _ = canvas.subplots(figsize=(4, 2))
    assert plt.get_fignums() == [cell_fig.number], (
        "outside off_pyplot a figure must stay on pyplot (cells show it)"
    )


def test_off_pyplot_is_per_thread_so_a_flush_elsewhere_keeps_its_own_figures():
    on_pyplot: dict[str, bool] = {}

    def elsewhere() -> None:
        fig, _ = canvas.subplots(figsize=(2, 2))
        on_pyplot["other thread"] = fig.canvas.manager is not None

    with canvas.off_pyplot():
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join(timeout=30)
        fig, _ = canvas.subplots(figsize=(2, 2))
        on_pyplot["this thread"] = fig.canvas.manager is not None
    assert on_pyplot == {"other thread": True, "this thread": False}
    assert len(plt.get_fignums()) == 1


def test_notebook_00s_explorer_shows_a_figure_pyplot_never_held(monkeypatch):
    from pooltk.nb import mechanism as mp

    shown = _shown(monkeypatch)
    state = mp.MechanismState()
    drawn = []
    for slack in (0, 1):
        mp.explore(state, schedule="1F1B", pp=4, microbatches=8, slack=slack, grad_slack=0)
        fig = mp.render_explorer(state)
        assert fig is not None and fig.axes
        drawn.append(fig)
    images = [(obj, nums) for obj, nums in shown if _is_png(obj)]
    assert len(images) == len(drawn) == 2, shown
    for _, nums in images:
        assert nums == [], f"shown while pyplot held figures {nums}"


def test_notebook_01s_explorer_shows_figures_pyplot_never_held(monkeypatch):
    from pooltk.nb import memory as mp

    shown = _shown(monkeypatch)
    state = mp.ExplorerState()
    mp.explore(
        state,
        preset="kimi-k3-gb200-2k-calibrated",
        pp=8,
        microbatches=64,
        slack=2,
        grad_slack=1,
        policy="automodel",
        boundary_mib=416.0,
    )
    assert mp.render_explorer(state, save=False) is not None
    images = [(obj, nums) for obj, nums in shown if _is_png(obj)]
    assert images, shown
    assert all(nums == [] for _, nums in images), images


def _is_png(obj: Any) -> bool:
    from IPython.display import Image

    return isinstance(obj, Image) and bytes(obj.data).startswith(b"\x89PNG")


def test_show_figure_sends_a_png_even_before_pyplot_has_loaded_the_inline_backend(monkeypatch):
    """Notebook 02 drew its first figures off pyplot, so IPython had no image formatter for them and
    the report showed ``<Figure size 950x520 with 2 Axes>``; show_figure sends the PNG itself."""
    from pooltk.nb import common

    shown = _shown(monkeypatch)
    with canvas.off_pyplot():
        fig, ax = canvas.subplots(figsize=(3, 2))
        ax.plot([0, 1], [1, 0])
        common.show_figure(fig)
    assert len(shown) == 1 and _is_png(shown[0][0]), shown


def test_every_figure_pooltk_nb_makes_goes_through_canvas():
    direct = re.compile(r"\bplt\.(subplots|figure|subplot|axes|gcf|gca)\(")
    offenders = [
        f"{p.name}:{i}"
        for p in sorted(NB.glob("*.py"))
        if p.name != "canvas.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if direct.search(line)
    ]
    assert not offenders, f"figures made on pyplot directly (use pooltk.nb.canvas): {offenders}"
