"""Where every notebook figure is made: on pyplot in a cell, off pyplot inside a widget callback.

[Note: widget callbacks draw off pyplot]
JupyterLab 4.6 sends widget messages to ipykernel 7 on subshells: a slider's update runs its
callback on one thread while another widget message is handled on another, and ``comm`` fires
IPython's ``post_execute`` around each message. matplotlib-inline's ``flush_figures`` hangs there:
it displays and closes every figure pyplot knows, so on the other thread it drew the figure the
callback was still building. Two threads drawing one figure paint a torn or blank image (measured:
after one slider move notebook 00's explorer showed an all-white 857x556 PNG, and notebook 01's
too). A figure made while :func:`off_pyplot` is active on this thread is never registered with
pyplot, so no flush on another thread can reach it; the callback shows it itself
(:func:`pooltk.nb.common.show_figure`). In a cell, outside the context, figures stay on pyplot and
JupyterLab shows them at the cell's end as usual. ``tests/notebooks/test_canvas.py`` holds the rule;
the browser test moves the sliders and checks the figure has ink on screen.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = ["figure", "off_pyplot", "subplots"]

_OFF_PYPLOT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pooltk_nb_off_pyplot", default=False
)


@contextlib.contextmanager
def off_pyplot() -> Iterator[None]:
    """Inside, :func:`subplots` and :func:`figure` make figures pyplot never sees (this thread
    only)."""
    token = _OFF_PYPLOT.set(True)
    try:
        yield
    finally:
        _OFF_PYPLOT.reset(token)


def figure(**fig_kw: Any) -> Figure:
    """``plt.figure(**fig_kw)``, or a bare :class:`~matplotlib.figure.Figure` inside
    :func:`off_pyplot`."""
    if _OFF_PYPLOT.get():
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(**fig_kw)
        # matplotlib's own recipe for a figure without pyplot: an Agg canvas to draw on
        FigureCanvasAgg(fig)
        return fig
    import matplotlib.pyplot as plt

    return plt.figure(**fig_kw)


_FIGURE_KEYS = (
    "figsize",
    "dpi",
    "facecolor",
    "edgecolor",
    "frameon",
    "layout",
    "constrained_layout",
    "tight_layout",
)


def subplots(nrows: int = 1, ncols: int = 1, **kw: Any) -> tuple[Figure, Any]:
    """``plt.subplots(nrows, ncols, **kw)``, made off pyplot inside :func:`off_pyplot`."""
    if not _OFF_PYPLOT.get():
        import matplotlib.pyplot as plt

        return plt.subplots(nrows, ncols, **kw)
    fig = figure(**{k: kw.pop(k) for k in _FIGURE_KEYS if k in kw})
    return fig, fig.subplots(nrows, ncols, **kw)
