"""What every pooltk notebook shares: setup, figure saving, small display helpers.

Stable names: other notebooks call them; keep their signatures. Imports matplotlib, seaborn and
pandas: notebooks only, never the core package.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_choice, check_number
from pooltk.nb.style import FIGURE_WIDTH_IN

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "REPORT_DIR_ENV",
    "NotebookEnv",
    "SavedFigure",
    "control",
    "report_dir",
    "save_figure",
    "setup",
    "show_figure",
    "show_frame",
    "show_inputs",
]

REPORT_DIR_ENV = "POOLTK_REPORT_DIR"
"""Environment variable naming the folder figures are saved to (set by ``pooltk report``)."""

_CI_ENVS = ("CI", "GITHUB_ACTIONS", "POOLTK_CI")


@dataclass(kw_only=True, slots=True, frozen=True)
class NotebookEnv:
    """Where a notebook is running, as :func:`setup` found it."""

    IN_CI: bool
    """True under CI (``CI``, ``GITHUB_ACTIONS`` or ``POOLTK_CI`` set to a true value) or when
    writing a report: notebooks may pick smaller sweeps, never different claims."""
    REPORT_DIR: Path | None
    """Folder :func:`save_figure` writes PNGs to (``POOLTK_REPORT_DIR``); ``None`` when unset."""


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def report_dir() -> Path | None:
    """The report folder from ``POOLTK_REPORT_DIR``, or ``None`` when it is unset or empty."""
    value = os.environ.get(REPORT_DIR_ENV, "").strip()
    return Path(value) if value else None


def setup(*, context: str = "notebook", font_scale: float = 1.0) -> NotebookEnv:
    """Set the shared figure style (seaborn whitegrid, readable sizes) and pandas display options.

    Returns a :class:`NotebookEnv` with ``IN_CI`` and ``REPORT_DIR``.
    """
    import matplotlib as mpl
    import pandas as pd
    import seaborn as sns

    check_choice("context", context, ("paper", "notebook", "talk", "poster"))  # seaborn's
    check_number("font_scale", font_scale, fix="e.g. 1.0 (1.2 for a talk).")
    sns.set_theme(style="whitegrid", context=context, font_scale=font_scale)
    mpl.rcParams.update(
        {
            "figure.figsize": (FIGURE_WIDTH_IN, 4.0),
            "figure.dpi": 100,
            "savefig.dpi": 120,
            "savefig.bbox": "tight",
        }
    )
    pd.set_option("display.width", 160)
    pd.set_option("display.max_columns", 30)
    pd.set_option("display.max_rows", 80)
    pd.set_option("display.precision", 3)
    out = report_dir()
    in_ci = any(_truthy(os.environ.get(k)) for k in _CI_ENVS) or out is not None
    return NotebookEnv(IN_CI=in_ci, REPORT_DIR=out)


class SavedFigure(type(Path())):  # type: ignore[misc]
    """The path :func:`save_figure` wrote: a :class:`~pathlib.Path` that IPython does not print.

    A cell ending with ``nb.save_figure(...)`` shows the figure and nothing else: the report's HTML
    once carried a ``PosixPath('...png')`` under every figure of notebook 00.
    """

    def _ipython_display_(self) -> None:
        """Display nothing: the figure is the cell's output, not where it was saved."""


def save_figure(fig: Figure, name: str) -> SavedFigure | None:
    """Write ``fig`` as ``<POOLTK_REPORT_DIR>/<name>.png`` when the variable is set, else nothing.

    ``name`` should start with the notebook's number (``01_stage_bars``) so reports from
    several notebooks do not collide; characters other than letters, digits, ``-``, ``_``
    and ``.`` become ``_``. The figure itself is shown by the notebook as usual; the path
    returned is not printed (:class:`SavedFigure`).
    """
    out = report_dir()
    if out is None:
        return None
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._")
    if not safe:
        raise ValueError(
            f"save_figure name: found {name!r}; required letters or digits. "
            "Fix: name it like '01_stage_bars'."
        )
    out.mkdir(parents=True, exist_ok=True)
    path = SavedFigure(out / f"{safe.removesuffix('.png')}.png")
    fig.savefig(path)
    return path


def _display(obj: Any) -> None:
    try:
        from IPython.display import display
    except ImportError:  # pragma: no cover - outside IPython
        print(obj)
        return
    display(obj)


def show_frame(
    frame: pd.DataFrame, caption: str | None = None, *, float_format: str = "{:,.2f}"
) -> None:
    """Display ``frame`` without its index, floats formatted, with an optional caption.

    A named index (the labels of a ``groupby`` result, such as each row's schedule) becomes
    columns first, so a table never loses its row labels.
    """
    if any(name is not None for name in frame.index.names):
        frame = frame.reset_index()
    styler = frame.style.hide(axis="index").format(
        float_format, subset=frame.select_dtypes("float").columns
    )
    if caption:
        styler = styler.set_caption(caption)
    _display(styler)


def show_inputs(inputs: Mapping[str, Any], caption: str = "inputs") -> None:
    """Display the inputs a result was computed from, a two-column table (``input``, ``value``)."""
    import pandas as pd

    frame = pd.DataFrame({"input": list(inputs), "value": [str(v) for v in inputs.values()]})
    show_frame(frame, caption)


# [Note: a figure shown off pyplot is sent as a PNG]
# A figure made off pyplot ([Note: widget callbacks draw off pyplot] in pooltk/nb/canvas.py) is a
# bare matplotlib Figure. IPython turns a Figure into an image only once matplotlib-inline has
# registered its PNG formatter, which happens when pyplot first loads the inline backend (its
# first figure on pyplot). Notebook 02 draws its first figures inside the parity panel, off pyplot,
# so IPython had only the Figure's text to send: the report's HTML read
# ``<Figure size 950x520 with 2 Axes>`` where the parity figures belong. show_figure renders the
# PNG itself (at the figure's own dpi, cropped as the inline backend crops) and displays that, so
# a figure shows as an image in JupyterLab, under nbconvert and in the report, whatever pyplot
# has loaded. tests/notebooks/test_rendered_html.py checks every notebook's HTML for it.


def show_figure(fig: Figure) -> None:
    """Display ``fig`` now, as one PNG image, and close it.

    A widget callback draws into its ``Output`` area with this: the image is sent once, complete,
    and the figure is closed, so no later ``plt.show()`` or cell end sends it a second time. It is
    sent as a PNG, never as the figure object ([Note: a figure shown off pyplot is sent as a PNG]).
    """
    import io

    import matplotlib.pyplot as plt

    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=fig.dpi, bbox_inches="tight")
    try:
        from IPython.display import Image
    except ImportError:  # pragma: no cover - outside IPython
        _display(fig)
    else:
        _display(Image(data=png.getvalue(), format="png"))
    plt.close(fig)


def control(kind: str, description: str, *, label_px: int, width_px: int, **kwargs: Any) -> Any:
    """``ipywidgets.<kind>(**kwargs)`` with its ``description``, the label ``label_px`` wide and the
    whole control ``width_px`` (one panel's controls share both)."""
    import ipywidgets as w

    style, layout = {"description_width": f"{label_px}px"}, w.Layout(width=f"{width_px}px")
    return getattr(w, kind)(description=description, style=style, layout=layout, **kwargs)
