"""What can be checked mechanically about a drawn matplotlib figure, and a recorder for a notebook
kernel.

:func:`figure_problems` draws a figure and lists what is wrong with it, one line per problem:

- every data axes has a title, and an x and y label naming a unit in parentheses (an axis whose
  tick labels are hidden, a shared axis of an inner panel, needs none; a twin axes shares its
  host's title); every colour bar has a label with a unit;
- no text is clipped: every title, axis label, tick label, legend and in-axes text lies inside the
  figure, in-axes texts inside their axes, and no two of them overlap (the tick labels of one axis
  included; titles and axis labels also stay off other panels' data area);
- no legend covers data: a legend's box overlaps no bar, no point or segment of a line, no marker,
  no filled area and no in-axes text of any panel;
- one colour per series: a label (a legend entry, a labelled bar group, line or collection) has one
  colour across every panel of the figure, and one legend never shows two entries that look alike;
- bars start at zero: an axes with bars is linear and its value axis includes 0;
- axes are linear, or say why not: an axis on a log, symlog or other non-linear scale names that
  scale in its label with the reason (``(log scale: spans five decades)``, :data:`JUSTIFIED_SCALE`),
  and the figure's headline (its suptitle or first title) states the takeaway in at least
  :data:`MIN_HEADLINE_WORDS` words;
- the figure with its legends fits :data:`MAX_WIDTH_IN` inches (JupyterLab shows it uncropped).

:func:`install` records every figure a kernel prints (an inline display or a ``savefig``), with its
problems, its series colours and how often it was shown as an image (a print to a file-like object:
an inline display or :func:`pooltk.nb.common.show_figure`) or saved (a print to a path), in
:data:`RECORDED`; :func:`dump` prints them as JSON after a mark.
``tests/notebooks/conftest.py`` runs each notebook once with this recorder prepended.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_WIDTH_IN = 10.0
"""The widest a figure may be with its legends, inches (pooltk.nb.style.FIGURE_WIDTH_IN plus
slack)."""
UNIT = re.compile(r"\([^()]*[^\s()][^()]*\)|\[[^\[\]]+\]")
"""A unit in parentheses (or brackets) somewhere in an axis label."""
JUSTIFIED_SCALE = re.compile(r"\b(sym)?log(it)? scale\b\s*[:;,-]\s*\S+", re.I)
"""How a non-linear axis says what it is and why: ``(log scale: spans five decades)`` in its
label."""
MIN_HEADLINE_WORDS = 5
"""A figure's headline is a statement (what the figure shows), not a bare name like
``throughput``."""
DUMP_MARK = "__POOLTK_FIGURES__"
TOL_PX = 1.5
"""Pixels two boxes may share before they count as overlapping (anti-aliasing, rounding)."""


@dataclass(kw_only=True, slots=True)
class FigureRecord:
    """One figure a notebook drew."""

    key: int
    """``id`` of the figure object in the kernel."""
    cell: int | None
    """The IPython execution count of the cell that drew it."""
    saved_as: list[str] = field(default_factory=list)
    """File stems it was saved under (``save_figure``), in order."""
    title: str = ""
    """Its suptitle, or the first axes' title: to name it in a failure."""
    problems: list[str] = field(default_factory=list)
    """What :func:`figure_problems` found."""
    series: dict[str, str] = field(default_factory=dict)
    """Label -> colour (hex) of every labelled series it drew."""
    shown: int = 0
    """How many times it was printed as an image to show (inline display, ``show_figure``), not
    saved."""

    def name(self) -> str:
        return (
            self.saved_as[-1] if self.saved_as else f"figure of cell {self.cell}"
        ) + f" ({self.title[:70]!r})"


# --------------------------------------------------------------------------- the checks


def _hex(rgba: Any) -> str:
    from matplotlib.colors import to_hex

    return to_hex(rgba, keep_alpha=False)


def _is_colorbar(ax: Any) -> bool:
    return getattr(ax, "_colorbar", None) is not None


def _visible_ticklabels(axis: Any) -> list[Any]:
    """The tick labels matplotlib draws: shown, not empty, at a tick inside the view interval."""
    low, high = sorted(axis.get_view_interval())
    span = (high - low) or 1.0
    out = []
    for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
        loc = tick.get_loc()
        if loc is None or not (low - 1e-9 * span <= loc <= high + 1e-9 * span):
            continue
        for lab in (tick.label1, tick.label2):
            if lab.get_visible() and lab.get_text().strip():
                out.append(lab)
    return out


def _twin_host(ax: Any, axes: list[Any]) -> Any:
    """The axes ``ax`` is a twin of (same position, an axis shared), or None."""
    pos = ax.get_position().bounds
    for other in axes:
        if other is ax or other.get_position().bounds != pos:
            continue
        if ax in other.get_shared_x_axes().get_siblings(
            other
        ) or ax in other.get_shared_y_axes().get_siblings(other):
            return other if axes.index(other) < axes.index(ax) else None
    return None


def _overlap(a: Any, b: Any) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > TOL_PX) and (
        min(a.y1, b.y1) - max(a.y0, b.y0) > TOL_PX
    )


def _inside(inner: Any, outer: Any) -> bool:
    return (
        inner.x0 >= outer.x0 - TOL_PX
        and inner.x1 <= outer.x1 + TOL_PX
        and inner.y0 >= outer.y0 - TOL_PX
        and inner.y1 <= outer.y1 + TOL_PX
    )


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 50 else text[:47] + "..."


def _data_boxes(ax: Any, renderer: Any) -> list[tuple[str, Any]]:
    """(what, display bbox) of every drawn datum in ``ax``: bars, line points, markers, areas,
    texts."""
    import numpy as np
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection, QuadMesh
    from matplotlib.transforms import Bbox

    boxes: list[tuple[str, Any]] = []
    for container in ax.containers:
        for patch in getattr(container, "patches", []) or []:
            if patch.get_visible() and (patch.get_width() != 0 and patch.get_height() != 0):
                boxes.append(
                    (f"bar of {container.get_label()!r}", patch.get_window_extent(renderer))
                )
    for line in ax.get_lines():
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) == 0:
            continue
        pts = [xy[:1]]
        if line.get_linestyle() not in ("None", "none", "", " ") and len(xy) > 1:
            for a, b in zip(xy[:-1], xy[1:]):
                n = max(2, int(np.hypot(*(b - a)) / 3))
                pts.append(a + (b - a) * np.linspace(0, 1, n)[:, None])
        else:
            pts.append(xy)
        for p in np.concatenate(pts):
            boxes.append((f"line {line.get_label()!r}", Bbox.from_bounds(p[0] - 1, p[1] - 1, 2, 2)))
    for coll in ax.collections:
        if not coll.get_visible():
            continue
        if isinstance(coll, PathCollection):
            offsets = coll.get_offset_transform().transform(coll.get_offsets())
            for p in offsets:
                if np.isfinite(p).all():
                    boxes.append(
                        (
                            f"marker of {coll.get_label()!r}",
                            Bbox.from_bounds(p[0] - 3, p[1] - 3, 6, 6),
                        )
                    )
        elif isinstance(coll, (PolyCollection, QuadMesh, LineCollection)):
            for path in coll.get_paths():
                verts = coll.get_transform().transform(path.vertices)
                verts = verts[np.isfinite(verts).all(axis=1)]
                if len(verts):
                    boxes.append(
                        (
                            f"area of {coll.get_label()!r}",
                            Bbox.from_extents(*verts.min(0), *verts.max(0)),
                        )
                    )
    for patch in ax.patches:  # e.g. barh drawn outside containers, fill spans
        if patch.get_visible() and patch.get_label().startswith("_") is False:
            boxes.append((f"patch {patch.get_label()!r}", patch.get_window_extent(renderer)))
    for text in ax.texts:
        if text.get_visible() and text.get_text().strip():
            boxes.append((f"text {_short(text.get_text())!r}", text.get_window_extent(renderer)))
    for img in ax.images:
        boxes.append(("image", img.get_window_extent(renderer)))
    return boxes


def _handle_colour(handle: Any) -> str | None:
    from matplotlib.collections import Collection
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    if isinstance(handle, Line2D):
        if handle.get_linestyle() in ("None", "none", "", " ") and handle.get_marker() not in (
            None,
            "None",
            "",
            " ",
        ):
            face = handle.get_markerfacecolor()
            return _hex(handle.get_markeredgecolor() if str(face).lower() in ("none", "") else face)
        return _hex(handle.get_color())
    if isinstance(handle, Patch):
        face = handle.get_facecolor()
        return _hex(handle.get_edgecolor() if face[3] == 0 else face)
    if isinstance(handle, Collection):
        faces = handle.get_facecolor()
        if len(faces) and faces[0][3] > 0:
            return _hex(faces[0])
        edges = handle.get_edgecolor()
        return _hex(edges[0]) if len(edges) else None
    if hasattr(handle, "patches") and handle.patches:  # a BarContainer as a handle
        return _handle_colour(handle.patches[0])
    return None


def _look(handle: Any) -> tuple:
    """What tells two legend entries apart: colour, marker, line style, hatch."""
    return (
        _handle_colour(handle),
        str(getattr(handle, "get_marker", lambda: "")()),
        str(getattr(handle, "get_linestyle", lambda: "")()),
        str(getattr(handle, "get_hatch", lambda: "")()),
    )


def _drawn_colours(fig: Any) -> set[str]:
    """Every colour an artist of the figure's axes is drawn in (faces and edges; patches, lines,
    collections)."""
    import numpy as np

    out: set[str] = set()

    def add(rgba: Any) -> None:
        arr = np.atleast_2d(np.asarray(rgba, dtype=float)) if not isinstance(rgba, str) else None
        if arr is None:
            if rgba.lower() not in ("none", ""):
                out.add(_hex(rgba))
            return
        for row in arr:
            if row.shape[-1] == 4 and row[3] > 0:
                out.add(_hex(row))

    for ax in fig.axes:
        for patch in ax.patches:
            add(patch.get_facecolor())
            add(patch.get_edgecolor())
        for line in ax.get_lines():
            add(line.get_color())
            for c in (line.get_markerfacecolor(), line.get_markeredgecolor()):
                if not isinstance(c, str) or c.lower() != "none":
                    add(c)
        for coll in ax.collections:
            add(coll.get_facecolor())
            add(coll.get_edgecolor())
    return out


def series_colours(fig: Any) -> tuple[dict[str, set[str]], list[str]]:
    """Label -> the colours it is drawn in over the whole figure; and legend entries that look
    alike."""
    seen: dict[str, set[str]] = {}
    alike: list[str] = []

    def add(lab: str, col: str | None) -> None:
        lab = lab.strip()
        if lab and not lab.startswith("_") and col is not None:
            seen.setdefault(lab, set()).add(col)

    for ax in fig.axes:
        for container in ax.containers:
            patches = getattr(container, "patches", None)
            if patches:
                add(container.get_label(), _handle_colour(patches[0]))
        for line in ax.get_lines():
            add(line.get_label(), _handle_colour(line))
        for coll in ax.collections:
            add(coll.get_label(), _handle_colour(coll))
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(
        fig.legends
    )
    for legend in legends:
        handles = getattr(legend, "legend_handles", None) or getattr(legend, "legendHandles", [])
        looks: dict[tuple, str] = {}
        for handle, text in zip(handles, legend.get_texts()):
            add(text.get_text(), _handle_colour(handle))
            look = _look(handle)
            if look in looks and look[0] is not None:
                alike.append(
                    f"legend entries {looks[look]!r} and {text.get_text()!r} look alike ({look[0]})"
                )
            looks[look] = text.get_text()
    return seen, alike


def figure_problems(fig: Any) -> list[str]:
    """Everything mechanically wrong with ``fig`` (see the module docstring); empty when it is
    fine."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems: list[str] = []
    fig_box = fig.bbox
    all_axes = [ax for ax in fig.axes if ax.get_visible()]
    data_axes = [ax for ax in all_axes if not _is_colorbar(ax)]
    if not data_axes:
        return ["the figure has no axes"]

    # a headline that states something
    headline = fig._suptitle.get_text() if fig._suptitle is not None else ""
    headline = headline or next((ax.get_title() for ax in data_axes if ax.get_title()), "")
    if headline.strip() and len(headline.split()) < MIN_HEADLINE_WORDS:
        problems.append(
            f"the headline {_short(headline)!r} has {len(headline.split())} words; required a "
            f"statement of what the figure shows (>= {MIN_HEADLINE_WORDS} words)"
        )

    # titles, labels, units, scales
    for i, ax in enumerate(data_axes):
        where = f"axes {i}"
        twin = _twin_host(ax, data_axes)
        title = " ".join(filter(None, (ax.get_title(loc) for loc in ("left", "center", "right"))))
        if not title.strip() and twin is None:
            problems.append(f"{where}: no title")
        where = f"axes {i} ({_short(title) if title else 'untitled'})"
        for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            if not axis.get_visible() or not _visible_ticklabels(axis):
                continue
            if twin is not None and name == "x":
                continue  # a twin shows its host's x axis
            text = axis.get_label_text().strip()
            if not text:
                problems.append(f"{where}: no {name} label")
            elif not UNIT.search(text):
                problems.append(
                    f"{where}: {name} label {_short(text)!r} names no unit in parentheses"
                )
            scale = axis.get_scale()
            if scale != "linear" and not JUSTIFIED_SCALE.search(text):
                problems.append(
                    f"{where}: the {name} axis is on a {scale} scale and its label does not say so "
                    f"and why; required a linear axis, or '({scale} scale: <why>)' in its label"
                )
    for ax in all_axes:
        if _is_colorbar(ax):
            cb_axis = ax.yaxis if ax.get_position().height >= ax.get_position().width else ax.xaxis
            text = cb_axis.get_label_text().strip()
            if not text or not UNIT.search(text):
                problems.append(f"colour bar: label {text!r} names no unit in parentheses")

    # bars start at zero, on a linear axis
    for i, ax in enumerate(data_axes):
        containers = [c for c in ax.containers if getattr(c, "patches", None)]
        if not containers:
            continue
        horizontal = all(getattr(c, "orientation", "vertical") == "horizontal" for c in containers)
        scale = ax.get_xscale() if horizontal else ax.get_yscale()
        low, high = ax.get_xlim() if horizontal else ax.get_ylim()
        if scale != "linear":
            problems.append(
                f"axes {i}: bars on a {scale} value axis (bars need a linear axis from zero)"
            )
        elif min(low, high) > 0 or max(low, high) < 0:
            problems.append(
                f"axes {i}: bars on a value axis from {min(low, high):.3g} to "
                f"{max(low, high):.3g}, "
                "which leaves out zero"
            )

    # texts: inside the figure, in-axes texts inside their axes, none overlapping
    owned: list[tuple[str, Any, Any]] = []  # (what, bbox, owner key)
    if fig._suptitle is not None and fig._suptitle.get_text().strip():
        owned.append(("suptitle", fig._suptitle.get_window_extent(renderer), "suptitle"))
    for i, ax in enumerate(all_axes):
        for loc in ("left", "center", "right"):
            t = (
                ax._left_title
                if loc == "left"
                else ax.title
                if loc == "center"
                else ax._right_title
            )
            if t.get_visible() and t.get_text().strip():
                owned.append(
                    (f"title {_short(t.get_text())!r}", t.get_window_extent(renderer), ("title", i))
                )
        for axis, name in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            if not axis.get_visible():
                continue
            lab = axis.label
            if lab.get_visible() and lab.get_text().strip():
                owned.append(
                    (
                        f"{name} label {_short(lab.get_text())!r}",
                        lab.get_window_extent(renderer),
                        ("label", i, name),
                    )
                )
            ticks = _visible_ticklabels(axis)
            for t in ticks:
                owned.append(
                    (
                        f"{name} tick label {_short(t.get_text())!r} of axes {i}",
                        t.get_window_extent(renderer),
                        ("ticks", i, name, id(t)),
                    )
                )
            boxes = [t.get_window_extent(renderer) for t in ticks]
            for a in range(len(boxes)):
                for b in range(a + 1, len(boxes)):
                    if _overlap(boxes[a], boxes[b]):
                        problems.append(
                            f"axes {i}: {name} tick labels {_short(ticks[a].get_text())!r} and "
                            f"{_short(ticks[b].get_text())!r} overlap"
                        )
        for t in ax.texts:
            if t.get_visible() and t.get_text().strip():
                box = t.get_window_extent(renderer)
                if not _is_colorbar(ax) and not _inside(box, ax.bbox):
                    problems.append(
                        f"axes {i}: text {_short(t.get_text())!r} spills out of its axes"
                    )
    legends = [
        (f"legend of axes {i}", ax.get_legend()) for i, ax in enumerate(all_axes) if ax.get_legend()
    ]
    legends += [(f"figure legend {j}", lg) for j, lg in enumerate(fig.legends)]
    for what, lg in legends:
        if lg.get_visible():
            owned.append((what, lg.get_window_extent(renderer), ("legend", id(lg))))
    for what, box, _ in owned:
        if not _inside(box, fig_box):
            problems.append(f"{what} is clipped: it extends beyond the figure")
    for a in range(len(owned)):
        for b in range(a + 1, len(owned)):
            wa, ba, ka = owned[a]
            wb, bb, kb = owned[b]
            same_axis_ticks = (
                isinstance(ka, tuple)
                and isinstance(kb, tuple)
                and ka[0] == kb[0] == "ticks"
                and ka[1:3] == kb[1:3]
            )
            if same_axis_ticks:
                continue  # checked above, with the tick texts named
            if _overlap(ba, bb):
                problems.append(f"{wa} and {wb} overlap")
    for what, box, key in owned:
        if not (isinstance(key, tuple) and key[0] in ("title", "label")):
            continue
        for j, ax in enumerate(data_axes):
            if (
                ax is all_axes[key[1]]
                or _twin_host(ax, data_axes) is all_axes[key[1]]
                or _twin_host(all_axes[key[1]], data_axes) is ax
            ):
                continue
            if _overlap(box, ax.bbox):
                problems.append(f"{what} of axes {key[1]} runs into axes {j}")

    # legends cover no data
    for what, lg in legends:
        if not lg.get_visible():
            continue
        lbox = lg.get_window_extent(renderer)
        for j, ax in enumerate(data_axes):
            hits = [w for w, box in _data_boxes(ax, renderer) if _overlap(lbox, box)]
            if hits:
                problems.append(
                    f"{what} covers data of axes {j}: {hits[0]}"
                    + (f" (+{len(hits) - 1} more)" if len(hits) > 1 else "")
                )

    # one colour per series; distinguishable legend entries
    seen, alike = series_colours(fig)
    for lab, cols in sorted(seen.items()):
        if len(cols) > 1:
            problems.append(f"series {lab!r} is drawn in {len(cols)} colours: {sorted(cols)}")
    problems += alike
    drawn = _drawn_colours(fig)
    for what, lg in legends:
        handles = getattr(lg, "legend_handles", None) or []
        for handle, text in zip(handles, lg.get_texts()):
            col = _handle_colour(handle)
            if col is not None and col not in drawn and text.get_text().strip():
                problems.append(
                    f"{what}: entry {_short(text.get_text())!r} ({col}) matches nothing drawn"
                )

    width = fig.get_tightbbox(renderer).width
    if width > MAX_WIDTH_IN:
        problems.append(
            f"the figure is {width:.1f} in wide with its legends; required <= {MAX_WIDTH_IN:g} in "
            "(JupyterLab crops wider figures)"
        )
    return problems


# --------------------------------------------------------------------------- the kernel recorder

RECORDED: dict[int, FigureRecord] = {}


def _record(fig: Any, target: Any) -> None:
    try:
        from IPython import get_ipython

        ip = get_ipython()
        cell = ip.execution_count if ip is not None else None
    except ImportError:  # pragma: no cover
        cell = None
    rec = RECORDED.get(id(fig))
    if rec is None:
        suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
        title = suptitle or next((ax.get_title() for ax in fig.axes if ax.get_title()), "")
        rec = RECORDED[id(fig)] = FigureRecord(key=id(fig), cell=cell, title=title)
    if isinstance(target, (str, Path)):
        rec.saved_as.append(Path(target).stem)
    else:  # a file-like object: IPython's inline display, or show_figure's PNG
        rec.shown += 1
    try:
        rec.problems = figure_problems(fig)
    except (
        Exception
    ) as exc:  # a check that cannot run is a problem to report, not a crash of the notebook
        rec.problems = [f"the figure check failed: {type(exc).__name__}: {exc}"]
    seen, _ = series_colours(fig)
    rec.series = {lab: sorted(cols)[0] for lab, cols in seen.items()}


def install() -> None:
    """Record every figure printed from now on (inline display and savefig both go through
    print_figure)."""
    from matplotlib.backend_bases import FigureCanvasBase

    if getattr(FigureCanvasBase.print_figure, "_pooltk_recorder", False):
        return
    original = FigureCanvasBase.print_figure

    def print_figure(self: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, filename, *args, **kwargs)
        _record(self.figure, filename)
        return out

    print_figure._pooltk_recorder = True  # type: ignore[attr-defined]
    FigureCanvasBase.print_figure = print_figure  # type: ignore[method-assign]


def records_as_json() -> list[dict[str, Any]]:
    """Every recorded figure, as plain dicts (what :func:`dump` prints)."""
    return [asdict(r) for r in RECORDED.values()]


def dump() -> None:
    """Print every recorded figure as JSON after :data:`DUMP_MARK`."""
    print(DUMP_MARK + json.dumps(records_as_json()))


def read_dump(text: str) -> list[FigureRecord]:
    """The records :func:`dump` printed (in a stream output's text)."""
    return [FigureRecord(**d) for d in json.loads(text.split(DUMP_MARK, 1)[1])]
