"""Every notebook's rendered HTML holds what the notebook shows, and nothing a reader need not read.

``pooltk report`` writes each executed notebook as HTML with nbconvert's ``HTMLExporter``; this
renders the suite's own run of each notebook (conftest.py's ``executed``, without the cells the
suite adds) the same way and checks the page:

- no figure reached it as text: ``<Figure size 950x520 with 2 Axes>`` is what IPython sends when it
  has no image for a figure (notebook 02's parity figures once; [Note: a figure shown off pyplot is
  sent as a PNG] in ``pooltk.nb.common``);
- no bare ``PosixPath('...')``: a cell printing the path a figure was saved to (every figure cell of
  notebook 00 once);
- no missing image: every figure the notebook drew was shown as an image (the figure recorder counts
  each print to a file-like object, :data:`figure_checks.FigureRecord.shown`), and the page holds at
  least as many PNG images as the notebook showed figures (a widget's output is part of the page's
  saved widget state).

The checker itself is tested on small pages below, so a check that cannot fail would show.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nbclient")
pytest.importorskip("nbconvert")

from nbrun import execute_notebook, without_added_cells  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

FIGURE_AS_TEXT = re.compile(r"Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes")
"""IPython's text for a matplotlib figure (what a page shows when it has no image for it)."""
BARE_PATH = re.compile(r"\b(?:Posix|Windows|Pure\w*)?Path\((?:'|&#39;|&quot;|\")")
"""A path object printed as a cell's value."""
WIDGET_STATE = re.compile(
    r'<script type="application/vnd\.jupyter\.widget-state\+json">(.*?)</script>', re.S
)
"""The saved widget state a page carries (a widget ``Output``'s outputs among it)."""


def _widget_outputs(html: str) -> list[dict]:
    """Every output saved in the page's widget state (what an ``Output`` widget shows)."""
    import json

    found: list[dict] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("outputs"), list):
                found.extend(o for o in node["outputs"] if isinstance(o, dict))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for block in WIDGET_STATE.findall(html):
        walk(json.loads(block))
    return found


def render_html(nb: Any) -> str:
    """The page ``pooltk report`` writes for an executed notebook (pooltk.nb.report's exporter)."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter().from_notebook_node(nb, resources={"metadata": {"name": "notebook"}})
    return body


def html_problems(html: str, figures: list[Any]) -> list[str]:
    """What the page lacks or carries by mistake; ``figures`` are the notebook's FigureRecords.

    The page's own text is checked as it reads (HTML-escaped); a widget output, saved as JSON in
    the page, is a figure as text when it has IPython's figure text and no image to show instead.
    """
    body = WIDGET_STATE.sub("", html)
    problems = [
        f"a figure reached the page as text, not an image: {m.group(0)!r}"
        for m in re.finditer(r"&lt;" + FIGURE_AS_TEXT.pattern + "&gt;", body)
    ]
    widget = _widget_outputs(html)
    problems += [
        f"a widget output shows a figure as text, not an image: {o['data']['text/plain']!r}"
        for o in widget
        if FIGURE_AS_TEXT.search(str(o.get("data", {}).get("text/plain", "")))
        and "image/png" not in o.get("data", {})
    ]
    problems += [
        f"a cell printed a path object: {body[m.start() : m.start() + 80]!r}"
        for m in BARE_PATH.finditer(body)
    ]
    problems += [
        f"a widget output printed a path object: {o['data']['text/plain']!r}"
        for o in widget
        if BARE_PATH.search(str(o.get("data", {}).get("text/plain", "")))
    ]
    never = [rec.name() for rec in figures if not rec.shown]
    problems += [f"missing image: {name} was drawn but never shown as an image" for name in never]
    shown = sum(1 for rec in figures if rec.shown)
    images = body.count("data:image/png;base64,") + sum(
        "image/png" in o.get("data", {}) for o in widget
    )
    if images < shown:
        problems.append(
            f"missing image: the notebook showed {shown} figure(s), the page holds {images} PNG(s)"
        )
    return problems


@pytest.mark.notebook
@pytest.mark.timeout(900)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_rendered_html_shows_every_figure_as_an_image_and_prints_no_stray_values(
    executed, path: Path, tmp_path: Path
) -> None:
    run = executed(path)
    if run.nb is None:  # a JupyterLab run keeps no notebook to render: render a headless one
        run = execute_notebook(path, tmp_path, None)
    assert run.error is None, f"{path.name} failed before its page could be checked:\n{run.error}"
    html = render_html(without_added_cells(run.nb))
    problems = html_problems(html, run.figures)
    assert not problems, f"{path.name}'s rendered HTML:\n  " + "\n  ".join(problems)


# --------------------------------------------------------------------------- the checker itself


def _record(shown: int = 1, saved: str = "00_x") -> Any:
    import figure_checks

    return figure_checks.FigureRecord(key=1, cell=3, saved_as=[saved], title="t", shown=shown)


def test_a_good_page_has_no_problems() -> None:
    page = '<img src="data:image/png;base64,iVBOR">'
    assert html_problems(page, [_record()]) == []


def test_a_figure_as_text_a_bare_path_and_a_missing_image_are_each_caught() -> None:
    page = (
        "<pre>&lt;Figure size 950x520 with 2 Axes&gt;</pre>"
        "<pre>PosixPath(&#39;/tmp/r/figures/00_slots.png&#39;)</pre>"
    )
    problems = "\n".join(html_problems(page, [_record(shown=0, saved="02_parity_losses")]))
    assert "as text, not an image" in problems
    assert "printed a path object" in problems
    assert "02_parity_losses" in problems and "never shown" in problems
    problems = "\n".join(html_problems("<p>no image here</p>", [_record()]))
    assert "showed 1 figure(s), the page holds 0 PNG(s)" in problems


def _widget_page(data: dict) -> str:
    import json

    state = {
        "state": {"m1": {"state": {"outputs": [{"output_type": "display_data", "data": data}]}}}
    }
    return (
        '<script type="application/vnd.jupyter.widget-state+json">'
        + json.dumps(state).replace("/", "\\/")
        + "</script>"
    )


def test_a_widget_outputs_png_in_the_saved_widget_state_counts_as_on_the_page() -> None:
    with_png = {"image/png": "iVBOR", "text/plain": "<Figure size 950x479 with 1 Axes>"}
    assert html_problems(_widget_page(with_png), [_record()]) == []
    as_text = {"text/plain": "<Figure size 950x479 with 1 Axes>"}
    problems = "\n".join(html_problems(_widget_page(as_text), [_record()]))
    assert "widget output shows a figure as text" in problems and "0 PNG(s)" in problems
