"""One colour per series, everywhere: the series every notebook figure draws, small drawing helpers.

Every figure in :mod:`pooltk.nb` takes its colours from :data:`SERIES` (a series -> colour map)
or from :func:`microbatch_colour` / :func:`run_colours`, never from matplotlib's colour cycle, so a
series keeps its colour across the panels of one figure and across figures and notebooks.

[Note: one colour per series]
A panel that draws a subset of the series (a trainer without Automodel's pool, a stage that
receives nothing) still colours each series from the map; the figure's one legend is built from
the series drawn in any panel (:func:`legend_handles`), never from one panel's handles. A colour
never stands for two series in one figure. Labels come from the map too, so "stock torch" means
the same thing in every notebook. ``tests/notebooks/test_figures.py`` checks every figure the
notebooks draw against these rules.

Reference lines (a device's capacity, a published peak, an OOM) are drawn with
:func:`reference_line`, which writes the figure, what it is and its source on the line itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

__all__ = [
    "FIGURE_WIDTH_IN",
    "SERIES",
    "Series",
    "bar_value_labels",
    "colour",
    "label",
    "legend_below",
    "legend_handles",
    "microbatch_colour",
    "reference_line",
    "run_colours",
]

FIGURE_WIDTH_IN = 9.5
"""The widest figure, inches, legend included: at the notebooks' 100 dpi it fits JupyterLab's output
area unscaled and uncropped (a wider one lost its legend's right side in the browser
screenshots)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """One series the notebooks draw."""

    key: str
    """The name code uses (``"stock"``, ``"tight"``, ...)."""
    label: str
    """What a legend says."""
    colour: str
    """Its one colour (hex)."""


def _series(*rows: tuple[str, str, str]) -> dict[str, Series]:
    out = {key: Series(key=key, label=lab, colour=col) for key, lab, col in rows}
    if len(out) != len(rows):
        raise ValueError("pooltk.nb.style.SERIES: a key is listed twice")
    return out


SERIES: dict[str, Series] = _series(
    # receive buffers: stock torch and its lazy successor
    ("stock", "stock torch (<= 2.14)", "#4C72B0"),
    ("stock_lazy", "stock torch >= 2.15 (lazy buffers)", "#8172B3"),
    ("lazy_released", "torch >= 2.15 + pooltk release", "#64B5CD"),
    # the original pool (Automodel PR #3780) and pooltk
    ("automodel", "Automodel's ring size (PR #3780)", "#DD8452"),
    ("automodel_s0", "Automodel's pool, slack 0", "#F2B880"),
    ("pooltk_automodel", "pooltk, Automodel's ring size", "#937860"),
    ("tight", "pooltk tight", "#55A868"),
    ("shared", "pooltk rank-shared rings", "#1B7837"),
    ("live_set", "live set (slack 0 floor)", "#8C8C8C"),
    ("rank_live", "rank live set (floor)", "#BDBDBD"),
    ("fresh", "fresh (a new buffer per receive)", "#DA8BC3"),
    # measurement vs model
    ("modelled", "modelled", "#A0A0A0"),
    ("measured", "measured", "#55A868"),
    # negative controls
    ("ring_one_short", "ring one short", "#C44E52"),
    ("gpipe_forced", "GPipe forced", "#8172B3"),
    # published figures vs the user's runs
    ("published", "published (PR #3780 / Automodel configs)", "#4C72B0"),
    ("your_runs", "your runs (logs read)", "#DD8452"),
    # schedule phases (background bands)
    ("warmup", "warmup", "#FDE9C9"),
    ("steady", "steady (1F1B)", "#DCEFDC"),
    ("cooldown", "cooldown", "#DDE6F5"),
    # the PR's lifetime facts (notebook 00)
    ("reuse_after", "slot reused after the backward (the ring's rule)", "#55A868"),
    ("reuse_before", "slot reused between forward and backward", "#DD8452"),
    (
        "reuse_before_ac",
        "slot reused between forward and backward, activation checkpointing on",
        "#C44E52",
    ),
    (
        "reuse_bumped",
        "reused between forward and backward, version bumped (pooltk's guard)",
        "#8172B3",
    ),
    (
        "leaf_stage_backward",
        "torch's stage_backward (.grad set to None after each microbatch)",
        "#55A868",
    ),
    ("leaf_plain", "plain backward reading .grad (no reset)", "#C44E52"),
    # in-flight depth
    ("in_flight", "microbatches in flight (forward started, backward not finished)", "#4C72B0"),
    ("held_buffers", "receive buffers posted or held", "#DD8452"),
    ("peak_overlap", "a stage's peak overlap (most buffers live at once)", "#F3E3A3"),
    # what a stage holds (the whole-stage replay's categories: pooltk.memory.replay.tracker)
    ("parameters", "parameters (and module buffers)", "#2F4B7C"),
    ("gradients", "gradients (.grad)", "#7EA6E0"),
    ("optimizer", "optimizer states", "#A0522D"),
    ("activations", "activations saved for backward", "#F0A150"),
    ("recv_buffers", "receive buffers", "#D62728"),
    ("kept_outputs", "the schedule's kept losses and outputs", "#9467BD"),
    ("transient", "transient (backward, recompute, optimizer step)", "#BCBD22"),
    ("inputs", "the step's batch (inputs, targets)", "#17BECF"),
    # reference lines of the fits views
    ("capacity", "device capacity", "#000000"),
    ("capacity_less_overhead", "capacity less the stated overhead", "#6F6F6F"),
    ("measured_peak", "measured peak (published)", "#1B7837"),
)
"""Every series a notebook figure draws: key -> label and colour ([Note: one colour per series])."""

_MICROBATCH = (
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#C44E52",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#8C8C8C",
    "#CCB974",
    "#64B5CD",
    "#1B7837",
    "#B07AA1",
)
"""Microbatch colours, in order (``microbatch mod 12``): one palette for every schedule figure."""

_RUNS = (*(c for c in _MICROBATCH if c != "#8C8C8C"), "#8C8C8C")
"""Run colours, in order: the microbatch palette, its grey last (only a 12th run is grey)."""


def _get(key: str) -> Series:
    try:
        return SERIES[key]
    except KeyError:
        raise KeyError(
            f"series {key!r}: found no such series; required one of {', '.join(SERIES)}. "
            "Fix: add it to pooltk.nb.style.SERIES with its own colour."
        ) from None


def colour(key: str) -> str:
    """The one colour of series ``key`` (KeyError naming the known series for an unknown key)."""
    return _get(key).colour


def label(key: str) -> str:
    """The legend label of series ``key``."""
    return _get(key).label


def microbatch_colour(microbatch: int) -> str:
    """The colour of microbatch ``microbatch`` in every schedule figure (12 colours, repeating)."""
    return _MICROBATCH[int(microbatch) % len(_MICROBATCH)]


def run_colours(runs: Iterable[str]) -> dict[str, str]:
    """One colour per run name, in order (distinct for up to 12 runs): build it once per figure."""
    names = list(dict.fromkeys(str(r) for r in runs))
    return {name: _RUNS[i % len(_RUNS)] for i, name in enumerate(names)}


def legend_handles(keys: Sequence[str]) -> list[Any]:
    """Legend patches for ``keys``, in the map's colours and labels."""
    from matplotlib.patches import Patch

    return [Patch(facecolor=colour(key), label=label(key)) for key in keys]


def legend_below(
    fig: Any,
    handles: Sequence[Any],
    *,
    ncol: int,
    fontsize: str = "small",
    top: float = 1.0,
) -> Any:
    """One legend for the whole figure, under the panels (never over data), before ``tight_layout``.

    Returns the legend; ``fig.tight_layout`` is then asked to leave room for it, and above ``top``
    (a fraction of the figure's height) for a headline of more than one line.
    """
    rows = -(-len(handles) // ncol)
    legend = fig.legend(
        handles=handles,
        loc="lower center",
        ncol=ncol,
        fontsize=fontsize,
        frameon=False,
        bbox_to_anchor=(0.5, 0.0),
    )
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, min(0.45, (0.28 * rows + 0.1) / height), 1, top))
    return legend


def reference_line(
    ax: Axes,
    value: float,
    *,
    text: str,
    source: str,
    colour_: str = "black",
    above: bool = True,
) -> None:
    """A labelled horizontal reference line: ``text`` and ``(source)`` written on the line, at the
    right inside the axes."""
    from matplotlib.patheffects import withStroke

    ax.axhline(value, color=colour_, ls="--", lw=1.2, zorder=4)
    ax.annotate(
        f"{text} ({source})" if source else text,
        xy=(0.99, value),
        xycoords=("axes fraction", "data"),
        xytext=(0, 3 if above else -3),
        textcoords="offset points",
        ha="right",
        va="bottom" if above else "top",
        fontsize="x-small",
        color=colour_,
        zorder=5,
        path_effects=[withStroke(linewidth=3, foreground="white")],
    )


def bar_value_labels(
    ax: Axes,
    container: Any,
    fmt: str = "{:,.1f}",
    *,
    labels: Sequence[str] | None = None,
) -> None:
    """Dark value labels just past each bar's end (readable on any bar colour, never white)."""
    texts = labels if labels is not None else [fmt.format(v) for v in container.datavalues]
    ax.bar_label(container, labels=list(texts), padding=2, fontsize="x-small", color="#222222")
