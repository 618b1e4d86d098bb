"""Every notebook works in a real JupyterLab in headless Chromium, and the sliders drive the
figures.

For each ``notebooks/*.ipynb`` (one glob): open it, wait for the kernel to be idle, Run All
from the menu, wait for every cell, assert no error outputs (read from the notebook model),
at least one figure rendered and no widget failed to render, and save a screenshot under
``reports/screenshots/``. Where a notebook has an explorer (``SLIDER_CHECKS``), move its
``slack`` slider one step with the keyboard and assert that the figure (its ``img src``)
and the printed line changed, the slack in it went up by one, nothing errored, and the new figure
is shown: decoded, with a size on the page, and not blank on screen (an element screenshot with
ink on it; the JupyterLab screenshots of 00 and 01 once showed an empty first plot here). The
committed notebook file must be byte-identical afterwards (autosave is off; nothing saves).
Screenshots: ``<notebook>.png`` (at the first figure), ``<notebook>_last_figure.png`` and,
after a slider check, ``<notebook>_after_slider.png``.

This run is the suite's one execution of each notebook: its kernels record figures, probes and
errors for ``tests/notebooks`` ([Note: one execution per notebook] in tests/notebooks/nbrun.py).

The browser is Debian's Chromium (``scripts/install_browser``). When it cannot be had the
tests skip, except under ``CI`` or ``POOLTK_REQUIRE_BROWSER=1``, where they fail.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_harness import (
    BrowserUnavailable,
    JupyterLabServer,
    LabNotebook,
    browser_required,
    chromium_page,
    find_chromium,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "notebooks"))
import nbrun  # noqa: E402
from test_notebooks_execute import PROBES  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SCREENSHOTS = ROOT / "reports" / "screenshots"

# notebook stem -> (slider label, regex whose group 1 is the slider's value in the printed line,
#                   regex whose group 1 is a figure of merit that must change)
SLIDER_CHECKS: dict[str, tuple[str, str, str]] = {
    "00_how_the_ring_works": ("slack", r"slack=(\d+)", r"keeps (\d+) of"),
    "01_memory_vs_slack": ("slack", r"\(\w+, slack (\d+)", r"pooled: ([\d.,]+) GiB"),
}


def _unavailable(exc: Exception) -> None:
    if browser_required():
        pytest.fail(
            "the browser is required here (CI or POOLTK_REQUIRE_BROWSER=1) "
            f"but cannot be had: {exc}",
            pytrace=False,
        )
    pytest.skip(f"browser unavailable (set POOLTK_REQUIRE_BROWSER=1 to make this fail): {exc}")


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the kernels record under, with an IPython startup file that records."""
    base = tmp_path_factory.mktemp("lab_records")
    startup = base / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-pooltk-record.py").write_text(nbrun.KERNEL_STARTUP)
    for path in NOTEBOOKS:
        (base / path.stem).mkdir()
        if path.stem in PROBES:
            (base / path.stem / "probe.txt").write_text(PROBES[path.stem][0])
    return base


@pytest.fixture(scope="module")
def lab(records: Path) -> Any:
    try:
        find_chromium()
        import playwright.sync_api  # noqa: F401
    except (BrowserUnavailable, ImportError) as exc:
        _unavailable(exc)
    # The notebooks' quick switch (nb.setup().IN_CI), as under the headless suite: notebook 01's
    # whole-stage replay takes minutes at full size ([Note: the quick whole stage]).
    server = JupyterLabServer(
        ROOT / "notebooks",
        env={
            "POOLTK_CI": "1",
            "IPYTHONDIR": str(records / "ipython"),
            nbrun.RECORD_ENV: str(records),
        },
    )
    try:
        server.start()
    except BrowserUnavailable as exc:
        _unavailable(exc)
    yield server
    server.stop()


@pytest.fixture
def page(lab: JupyterLabServer) -> Any:
    try:
        with chromium_page() as p:
            yield p
    except BrowserUnavailable as exc:
        _unavailable(exc)


def test_the_glob_finds_notebooks_and_every_slider_check_names_one() -> None:
    assert NOTEBOOKS, "no notebooks under notebooks/"
    stale = sorted(set(SLIDER_CHECKS) - {p.stem for p in NOTEBOOKS})
    assert not stale, f"SLIDER_CHECKS name notebooks that do not exist: {stale}"


def _wait_for_change(
    nbk: LabNotebook, text0: str, src0: str | None, timeout_s: float
) -> tuple[str, str | None]:
    """The explorer's text and figure once they changed AND settled (the same on two polls, kernel
    idle).

    A frame caught while the browser re-renders the output (the figure swapped, the text not yet) is
    not judged. Once, with two suites running at once, notebook 01's figure-of-merit check failed
    (its message was lost; it passed in every other run): a transient frame is the likely cause, so
    the check now waits for the output to settle and still times out (and fails) if it never shows
    the asserted change.
    """
    deadline = time.monotonic() + timeout_s
    text, src = text0, src0
    last: tuple[str, str | None] | None = None
    while time.monotonic() < deadline:
        text, src = nbk.widget_text_and_image()
        changed = text != text0 and src and src != src0 and nbk.state().get("kernel") == "idle"
        if changed and last == (text, src):
            return text, src
        last = (text, src) if changed else None
        time.sleep(0.3)
    return text, src


def _slider_check(nbk: LabNotebook, stem: str) -> None:
    label, value_re, merit_re = SLIDER_CHECKS[stem]
    text0, src0 = nbk.widget_text_and_image()
    m0 = re.search(value_re, text0)
    assert m0 and src0, (
        f"{stem}: before the move the explorer shows no line matching {value_re!r} "
        f"or no figure:\n{text0}"
    )
    nbk.nudge_slider(label)
    text1, src1 = _wait_for_change(nbk, text0, src0, timeout_s=90)
    m1 = re.search(value_re, text1)
    assert m1, f"{stem}: after the move no line matching {value_re!r}:\n{text1}"
    assert int(m1.group(1)) == int(m0.group(1)) + 1, (
        f"{stem}: {label} went {m0.group(1)} -> {m1.group(1)}, not +1"
    )
    assert src1 and src1 != src0, f"{stem}: the figure did not change after moving {label!r}"
    merit0, merit1 = re.search(merit_re, text0), re.search(merit_re, text1)
    assert merit0 and merit1 and merit0.group(0) != merit1.group(0), (
        f"{stem}: the printed figure of merit did not change:\nbefore: {text0}\nafter: {text1}"
    )
    assert not nbk.error_outputs(), nbk.error_outputs()
    shown = nbk.widget_figure_shown()
    assert shown["complete"] and shown["natural_width"] > 0 and shown["height"] > 0, (
        f"{stem}: after the move the explorer's figure is in the page but not shown: {shown}"
    )
    assert shown["ink"] > 0.02, (
        f"{stem}: after the move the explorer's figure is blank on screen: {shown}"
    )


@pytest.mark.browser
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_all_in_jupyterlab_without_errors(
    lab: JupyterLabServer, page: Any, path: Path, records: Path
) -> None:
    before = path.read_bytes()
    nbk = LabNotebook(page, lab, path.name)
    try:
        _run_all_and_check(nbk, page, path, before, records / path.stem)
    finally:
        with contextlib.suppress(
            OSError, ValueError
        ):  # the server's own stop() ends every kernel anyway
            nbk.close()
    assert path.read_bytes() == before, f"{path.name} was modified on disk by the browser session"


def _run_all_and_check(
    nbk: LabNotebook, page: Any, path: Path, before: bytes, record: Path
) -> None:
    nbk.open(timeout_s=180)
    nbk.run_all(timeout_s=420)
    errors = nbk.error_outputs()
    assert not errors, f"{path.name}: error outputs after Run All:\n" + "\n".join(errors)
    assert (record / "record.json").is_file(), (
        f"{path.name}: the kernel wrote no {record / 'record.json'}: the recorder did not start"
    )
    nbrun.LAB_RECORDS[path.resolve()] = record  # tests/notebooks reads this run, not a second one
    images = page.locator(".jp-OutputArea-output img")
    assert images.count() > 0, f"{path.name}: no figure rendered"
    assert page.get_by_text("Error displaying widget").count() == 0, (
        f"{path.name}: a widget failed to render"
    )
    if "ipywidgets" in before.decode():
        assert page.locator(".jupyter-widgets").count() > 0, (
            f"{path.name}: uses ipywidgets but none rendered"
        )
    nbk.screenshot(SCREENSHOTS / f"{path.stem}.png", at=images.first)
    nbk.screenshot(SCREENSHOTS / f"{path.stem}_last_figure.png", at=images.last)
    if path.stem in SLIDER_CHECKS:
        _slider_check(nbk, path.stem)
        nbk.screenshot(SCREENSHOTS / f"{path.stem}_after_slider.png", at=nbk.widget_output())


def test_a_missing_browser_names_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("POOLTK_CHROMIUM", str(tmp_path / "no-such-chromium"))
    with pytest.raises(BrowserUnavailable, match="scripts/install_browser"):
        find_chromium()


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"CI": "1"}, True),
        ({"CI": "false"}, False),
        ({"POOLTK_REQUIRE_BROWSER": "1"}, True),
    ],
)
def test_a_missing_browser_fails_under_ci_or_the_flag_and_skips_otherwise(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], required: bool
) -> None:
    for name in ("CI", "POOLTK_REQUIRE_BROWSER"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert browser_required() is required
    outcome = pytest.fail.Exception if required else pytest.skip.Exception
    with pytest.raises(outcome, match="install"):
        _unavailable(BrowserUnavailable("Chromium not found. Fix: scripts/install_browser"))
