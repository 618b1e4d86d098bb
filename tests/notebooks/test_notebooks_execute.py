"""Every notebook under notebooks/ runs headless top to bottom, and the committed files follow the policy.

The notebooks are found by one glob (``notebooks/*.ipynb``); there is no second list.
Execution uses nbclient with the repository's ``notebooks/`` as working directory and
``POOLTK_REPORT_DIR`` pointing at a temporary folder (as ``pooltk report`` does), so the
figures each notebook saves are checked too. Where it is cheap, a probe cell appended to
the in-memory copy reads values the notebook computed (``PROBES``) and checks them.

Policy (checked on the files as they are in the working tree, i.e. as they get committed):
no outputs, no execution counts, no saved widget state; a markdown opening cell with a
title, the question it answers and how long it takes; thin code cells.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
MAX_MEAN_CODE_LINES = 25
"""Thin notebooks: the average code cell stays under this many lines (logic lives in pooltk)."""

_PROBE_MARK = "__POOLTK_PROBE__"


def _check_00(v: dict[str, Any]) -> None:
    assert v["live_forward_1f1b"] == [0, 3, 2, 1], v  # W = min(M, N - i), none on stage 0
    assert v["overwrites_1f1b"] == 0
    assert v["overwrites_gpipe_forced"] > 0
    assert v["guard"] == {"1F1B, ring = live set": True, "1F1B, ring one short": False, "GPipe, ring forced": False}
    assert v["explorer"].startswith("1F1B pp=4 M=8 slack=0 grad_slack=0: rings act [- 3 2 1] grad [1 1 1 -], "
                                    "the pool keeps 9 of 48 stock buffer sets; 0 overwrite(s)"), v["explorer"]


def _check_01(v: dict[str, Any]) -> None:
    # The 2k calibrated preset as the notebook's explorer starts: 64 microbatches,
    # ~52 GiB stock on the middle stage, ~45 GiB saved with slack 2 (published; 5%).
    assert v["microbatches"] == 64, v
    assert abs(v["stock_gib"] - 52) <= 0.05 * 52, v
    assert abs(v["saved_gib"] - 45) <= 0.05 * 45, v


def _check_02(v: dict[str, Any]) -> None:
    assert v["bitwise_equal"] is True, v["parity"]
    assert v["saved_bytes"] > 0, v
    assert v["unguarded_diverged"] == {"ring one short": True, "GPipe forced": True}, v
    assert v["guarded_caught"] == {"ring one short": True, "GPipe forced": True}, v


# notebook stem -> (expression evaluated in the executed kernel, check on its JSON value)
PROBES: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "00_how_the_ring_works": ("summary", _check_00),
    "01_memory_vs_slack": (
        "{'microbatches': state.last_inputs['microbatches'], 'stock_gib': state.figure_of_merit.stock_gib, "
        "'saved_gib': state.figure_of_merit.saved_gib}",
        _check_01,
    ),
    "02_gloo_parity": ("summary", _check_02),
}


def _ids(p: Path) -> str:
    return p.stem


def test_the_glob_finds_the_notebooks_and_every_probe_names_one() -> None:
    assert NOTEBOOKS, f"no notebooks found under {NOTEBOOK_DIR}"
    stems = {p.stem for p in NOTEBOOKS}
    stale = sorted(set(PROBES) - stems)
    assert not stale, f"PROBES name notebooks that do not exist: {stale}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))]
    assert not dirty, (
        f"{path.name}: code cells {dirty} carry outputs or execution counts; required none (the no-outputs policy). "
        "Fix: jupyter nbconvert --clear-output --inplace " + str(path.relative_to(ROOT))
    )
    assert "widgets" not in nb.metadata, f"{path.name}: saved widget state in metadata; clear it (no-outputs policy)."


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_opens_with_markdown_saying_question_and_time(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0] if nb.cells else None
    assert first is not None and first.cell_type == "markdown", f"{path.name}: the first cell must be markdown"
    text = first.source
    assert re.match(r"\s*# \S", text), f"{path.name}: the opening cell must start with a '# ' title"
    assert re.search(r"question", text, re.I), f"{path.name}: the opening must say what question it answers"
    assert re.search(r"\btime\b|\btakes?\b|\bhow long\b|\b\d+\s*(s|secs?|seconds?|min|minutes?)\b", text, re.I), (
        f"{path.name}: the opening must say how long the notebook takes"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_code_cells_are_thin(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    lengths = [len(c.source.strip().splitlines()) for c in nb.cells if c.cell_type == "code"]
    assert lengths, f"{path.name}: no code cells"
    mean = sum(lengths) / len(lengths)
    assert mean < MAX_MEAN_CODE_LINES, (
        f"{path.name}: code cells average {mean:.1f} lines; required < {MAX_MEAN_CODE_LINES}. "
        "Fix: move the logic into a pooltk module and call it."
    )


def _error_outputs(nb: Any) -> list[str]:
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                tb = "\n".join(out.get("traceback", []))
                tb = re.sub(r"\x1b\[[0-9;]*m", "", tb)
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}\n{tb[-2500:]}")
    return found


def _probe_value(nb: Any) -> Any:
    for out in nb.cells[-1].get("outputs", []):
        if out.get("output_type") == "stream" and _PROBE_MARK in out.get("text", ""):
            return json.loads(out["text"].split(_PROBE_MARK, 1)[1])
    raise AssertionError(f"the probe cell printed nothing readable: {nb.cells[-1].get('outputs')}")


@pytest.mark.notebook
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_runs_headless_top_to_bottom(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = nbformat.read(path, as_version=4)
    probe = PROBES.get(path.stem)
    if probe is not None:
        nb.cells.append(nbformat.v4.new_code_cell(
            f"import json as _json\nprint({_PROBE_MARK!r} + _json.dumps({probe[0]}, default=str))"
        ))
    monkeypatch.setenv("POOLTK_REPORT_DIR", str(tmp_path))
    from pooltk.nb.report import notebook_client  # sliced kernel polls: no silent 540 s stall on a missed wakeup

    client = notebook_client(nb, cwd=NOTEBOOK_DIR, timeout_s=540)
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        pytest.fail(f"{path.name} failed headless:\n{exc}", pytrace=False)
    errors = _error_outputs(nb)
    assert not errors, f"{path.name}: error outputs:\n" + "\n".join(errors)
    pngs = sorted(tmp_path.glob("*.png"))
    if "save_figure(" in "".join(c.source for c in nb.cells):
        assert pngs, f"{path.name} saves figures, but none landed in POOLTK_REPORT_DIR={tmp_path}"
    assert all(p.stat().st_size > 1000 for p in pngs), [(p.name, p.stat().st_size) for p in pngs]
    number = path.stem.split("_", 1)[0]
    strays = [p.name for p in pngs if not p.name.startswith(number + "_")]
    assert not strays, f"{path.name}: figures not named after the notebook's number {number!r}: {strays}"
    if probe is not None:
        probe[1](_probe_value(nb))
