"""Every notebook under notebooks/ runs headless top to bottom, and the committed files follow the
policy.

The notebooks are found by one glob (``notebooks/*.ipynb``); there is no second list. Each runs once
per session (conftest.py: nbclient, working directory ``notebooks/``, ``POOLTK_REPORT_DIR`` a
temporary folder, as ``pooltk report`` runs them), so the figures each notebook saves are checked
too. A probe added to the in-memory copy reads values the notebook computed from its kernel
(``PROBES``): nothing the tests need lives in the notebooks themselves.

Policy (checked on the files as they are in the working tree, i.e. as they get committed):
no outputs, no execution counts, no saved widget state; a markdown opening cell with a
title, the question it answers and how long it takes; thin code cells; one import form for
``pooltk.nb``; no cell that only gathers values for tests; no machine timings in the prose.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
MAX_MEAN_CODE_LINES = 25
"""Thin notebooks: the average code cell stays under this many lines (logic lives in pooltk)."""
NB_IMPORT = "from pooltk.nb import common as nb"
"""The one way a notebook imports the shared helpers (topic modules: ``from pooltk.nb import
<topic> as <alias>``)."""
TIMING = re.compile(
    r"\b\d+(?:\.\d+)?(?:\s*[-–]\s*\d+(?:\.\d+)?)?\s*"
    r"(?:s|secs?|seconds?|CPU-seconds|min|mins|minutes?)\b"
)
"""A machine timing in prose (``25-60 s``, ``12 minutes``): the notebooks point to
docs/notebooks.md instead."""


def _markdown(stem: str) -> str:
    """The notebook's markdown, as committed: the prose its numbers are checked against."""
    nb = nbformat.read(NOTEBOOK_DIR / f"{stem}.ipynb", as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _check_00(v: dict[str, Any]) -> None:
    assert v["live_forward_1f1b"] == [0, 3, 2, 1], v  # W = min(M, N - i), none on stage 0
    assert v["overwrites_1f1b"] == 0
    assert v["overwrites_gpipe_forced"] == 18  # one per receive into a held slot: 5 + 6 + 7
    assert v["guard"] == {
        "1F1B, ring = live set": True,
        "1F1B, ring one short": False,
        "GPipe, ring forced": False,
    }
    assert v["explorer"].startswith(
        "1F1B pp=4 M=8 slack=0 grad_slack=0: rings act [- 3 2 1] grad [1 1 1 -], "
        "the pool keeps 9 of 48 stock buffer sets; 0 receive(s)"
    ), v["explorer"]
    assert v["leaf_stage_backward"] == [0.0, 0.0]
    # the prose says what the cells computed: the saving, where the guard stops, what slack buys
    prose = " ".join(_markdown("00_how_the_ring_works").split())
    assert (v["stock"], v["kept"]) == (48, 9), v
    assert f"stock keeps {v['stock']} sets and the pool {v['kept']}" in prose
    stage, post, tick, makespan = v["guard_stop"]
    nth = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth"}[post]
    assert f"tick {tick:g} of {makespan:g}: stage {stage}'s {nth} activation receive" in prose, v
    sweep = v["sweep"]
    assert not any(sweep["exact"]), sweep  # under 1F1B slack 0 is already safe
    short_ok = next(s for s, n in zip(sweep["slack"], sweep["one_short"]) if n == 0)
    gpipe_ok = next(s for s, n in zip(sweep["slack"], sweep["gpipe_forced"]) if n == 0)
    assert sweep["all_at_m"][sweep["slack"].index(gpipe_ok)], sweep  # GPipe: only once K = M
    assert f"safe again at slack {short_ok}" in prose and f"needs slack {gpipe_ok}" in prose


def _check_01(v: dict[str, Any]) -> None:
    from pooltk.memory.fits import GB200

    # The 2k calibrated preset as the notebook's explorer starts: 64 microbatches,
    # ~52 GiB stock on the middle stage, ~45 GiB saved with slack 2 (published; 5%).
    assert v["microbatches"] == 64, v
    assert abs(v["stock_gib"] - 52) <= 0.05 * 52, v
    assert abs(v["saved_gib"] - 45) <= 0.05 * 45, v
    # One capacity everywhere: the K3 story, the whole stage's verdict and the explorer's fits view.
    assert v["story_gib"] == v["whole_gib"] == v["explorer_gib"] == GB200.gib, v
    assert v["story_agrees"] == [True, True, True] and v["story_sentence"].startswith(
        "They agree"
    ), v
    # The PR's OOM beside the verdict: the explorer's stock verdict on the K3 preset is an OOM too.
    assert v["explorer_stock_fits"] is False, v
    # The whole stage ran quick under the suite, every replayed rank and variant judged, stock
    # receive exact.
    assert (
        v["whole_quick"] is True
        and v["whole_rows"] == 12
        and v["whole_stock_recv_diff"] == [0, 0, 0]
    ), v


def _check_02(v: dict[str, Any]) -> None:
    assert v["bitwise_equal"] is True, v
    assert v["saved_bytes"] > 0, v
    assert v["unguarded_diverged"] == {"ring one short": True, "GPipe forced": True}, v
    assert v["guarded_caught"] == {"ring one short": True, "GPipe forced": True}, v


def _check_03(v: dict[str, Any]) -> None:
    from pooltk.memory.fits import GB200

    assert v["runs"] and all(r.startswith("cpu_seq") for r in v["runs"]), v
    assert set(v["runs"]) <= set(v["drawn_beside_published"]), v
    assert v["ledger_agrees"] >= 8, v
    # notebook 01's one GB200 capacity, and the PR's OOM beside the model's verdict
    assert v["capacity_gib"] == v["story_gib"] == GB200.gib, v
    assert "OOM in step 1" in v["story_published"] and v["story_agrees"][:3] == [
        True,
        True,
        True,
    ], v


def _check_04(v: dict[str, Any]) -> None:
    assert v["all_bitwise_equal"] and v["all_peaks_match"], v
    shared, per_stage = v["interleaved_rank_shared_vs_per_stage"]
    assert shared < per_stage, v
    # the slack section's prose names what the heatmap shows
    prose = " ".join(_markdown("04_beyond_1f1b").split())
    short = v["pr_default_short"]
    assert short == ["GPipe", "LoopedBFS", "InterleavedZeroBubble"], v
    assert f"not {short[0]}, {short[1]} or {short[2]}" in prose
    assert v["first_read_forward_one"] == ["Interleaved1F1B", "ZBVZeroBubble", "DualPipeV"], v
    assert v["first_read_grad_most"] == ["LoopedBFS", 7], v
    assert "up to 7 gradient sets (LoopedBFS)" in prose
    assert "weight step `W`" not in prose  # W is notebook 00's in-flight depth, nothing else


def _check_05(v: dict[str, Any]) -> None:
    assert v["claims_ok"] == v["variants"] > 0 and v["logs_ok"] == v["logs"] > 0, v


def _check_06(v: dict[str, Any]) -> None:
    assert v["outside_goal"] == 0 and v["stages"] > 0, v


# notebook stem -> (expression evaluated in the executed kernel, check on its JSON value)
PROBES: dict[str, tuple[str, Callable[[dict[str, Any]], None]]] = {
    "00_how_the_ring_works": (
        "{'live_forward_1f1b': [int(x) for x in live[live.direction == 'forward'].live_peak], "
        "'overwrites_1f1b': len(mp.overwritten_receives(rp, rings)), "
        "'overwrites_gpipe_forced': len(mp.overwritten_receives(gp, rings)), "
        "'guard': {name: g.ok for name, g in guard.items()}, 'explorer': state.line(), "
        "'stock': int(live.stock_buffers.sum()), 'kept': int(live.ring.sum()), "
        "'guard_stop': [(g := guard['1F1B, ring one short']).stop.stage, g.stop.ring_post, "
        "g.stop.time, g.makespan], "
        "'sweep': sweep[['slack', 'exact', 'one_short', 'gpipe_forced', 'all_at_m']]"
        ".astype(object).to_dict('list'), "
        "'leaf_stage_backward': list(leaf.diff_stage_backward)}",
        _check_00,
    ),
    "01_memory_vs_slack": (
        "{'microbatches': state.last_inputs['microbatches'], "
        "'stock_gib': state.figure_of_merit.stock_gib, "
        "'saved_gib': state.figure_of_merit.saved_gib, 'story_gib': story.device.gib, "
        "'story_agrees': [r.agrees for r in story.rows], 'story_sentence': story.sentence, "
        "'whole_gib': whole.verdict.device.gib, 'explorer_gib': state.fits.device.gib, "
        "'explorer_stock_fits': state.fits.worst('stock').fits, 'whole_quick': whole.quick, "
        "'whole_rows': len(whole.verdict.rows), 'whole_stock_recv_diff': "
        "[int(d) for d in whole.estimate.receive_frame()"
        ".query(\"variant == 'stock'\").difference_bytes]}",
        _check_01,
    ),
    "02_gloo_parity": (
        "{'bitwise_equal': bool(report is not None and report.bitwise_equal), "
        "'saved_bytes': panel.state.summary.saved_bytes if panel.state.summary else None, "
        "'unguarded_diverged': {c: bool(d.param_sum_abs_diff.max() > 0) "
        "for c, d in div.groupby('control')}, "
        "'guarded_caught': {o.control: o.caught for o in controls.guarded}}",
        _check_02,
    ),
    "03_kimi_k3_gb200_1k_vs_2k": (
        "{'runs': [str(r.run) for r in summary.runs], 'drawn_beside_published': list(beside.runs), "
        "'ledger_agrees': int((ledger.to_frame().agrees == 'yes').sum()), "
        "'capacity_gib': DEVICE_CAPACITY.gib, "
        "'story_gib': story.device.gib, "
        "'story_published': ' '.join(r.published for r in story.rows), "
        "'story_agrees': [r.agrees for r in story.rows]}",
        _check_03,
    ),
    "04_beyond_1f1b": (
        "{'all_bitwise_equal': bool(recorded.parity.all()), "
        "'all_peaks_match': bool(recorded.peaks_match.all()), "
        "'interleaved_rank_shared_vs_per_stage': "
        "(int(rank_totals.loc['Interleaved1F1B', 'rank_shared']), "
        "int(rank_totals.loc['Interleaved1F1B', 'per_stage_rings'])), "
        "'pr_default_short': list(needs[(needs.rule == 'PR #3780 ring') "
        "& ~needs.covered_by_pr_default].schedule), "
        "'first_read_forward_one': list(needs[(needs.rule == 'first read to release') & "
        "(needs.direction == 'forward') & (needs.slack_needed == 1)].schedule), "
        "'first_read_grad_most': (lambda g: [g.loc[g.slack_needed.idxmax(), 'schedule'], "
        "int(g.slack_needed.max())])(needs[(needs.rule == 'first read to release') & "
        "(needs.direction == 'grad')])}",
        _check_04,
    ),
    "05_trainers_side_by_side": (
        "{'variants': len(verdicts), 'claims_ok': int(verdicts['claim_ok'].sum()), "
        "'logs_ok': int(logs['claim_ok'].sum()), 'logs': len(logs)}",
        _check_05,
    ),
    "06_measured_memory": ("{'outside_goal': len(outside), 'stages': len(table)}", _check_06),
}


def _ids(p: Path) -> str:
    return p.stem


def test_the_glob_finds_the_notebooks_and_every_notebook_has_a_probe() -> None:
    assert NOTEBOOKS, f"no notebooks found under {NOTEBOOK_DIR}"
    stems = {p.stem for p in NOTEBOOKS}
    assert set(PROBES) == stems, f"PROBES and notebooks/ differ: {sorted(set(PROBES) ^ stems)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    dirty = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} carry outputs or execution counts; "
        "required none (the no-outputs policy). "
        "Fix: jupyter nbconvert --clear-output --inplace " + str(path.relative_to(ROOT))
    )
    assert "widgets" not in nb.metadata, (
        f"{path.name}: saved widget state in metadata; clear it (no-outputs policy)."
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_opens_with_markdown_saying_question_and_time(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0] if nb.cells else None
    assert first is not None and first.cell_type == "markdown", (
        f"{path.name}: the first cell must be markdown"
    )
    text = first.source
    assert re.match(r"\s*# \S", text), f"{path.name}: the opening cell must start with a '# ' title"
    assert re.search(r"question", text, re.I), (
        f"{path.name}: the opening must say what question it answers"
    )
    assert re.search(r"\*\*Time:\*\*", text), (
        f"{path.name}: the opening must say how long it takes (**Time:** ...)"
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_imports_nb_one_way_and_gathers_nothing_only_tests_read(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert NB_IMPORT in code and "nb.setup()" in code, (
        f"{path.name}: required `{NB_IMPORT}` and `nb.setup()`"
    )
    other = re.findall(
        r"^\s*(from pooltk import .*\bnb\b.*|from pooltk\.nb\.\w+ import .*|import pooltk\.nb.*)$",
        code,
        re.M,
    )
    assert not other, (
        f"{path.name}: another import form of pooltk.nb: {other}; required `{NB_IMPORT}` and "
        "`from pooltk.nb import <topic> as <alias>`"
    )
    gathered = re.findall(r"^(summary|results)\s*=\s*\{", code, re.M)
    assert not gathered, (
        f"{path.name}: a `{gathered[0]} = {{...}}` cell gathers values for tests; the tests read "
        "the kernel (PROBES) instead"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_prose_quotes_no_machine_timing(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    found = [
        (i, m.group(0))
        for i, c in enumerate(nb.cells)
        if c.cell_type == "markdown"
        for m in TIMING.finditer(c.source)
    ]
    assert not found, (
        f"{path.name}: machine timings in markdown {found}; say what the cost is made of and point "
        "to docs/notebooks.md's measured table"
    )


@pytest.mark.notebook
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids)
def test_notebook_runs_headless_top_to_bottom(executed, path: Path) -> None:
    run = executed(path)
    assert run.error is None, f"{path.name} failed headless:\n{run.error}"
    errors = run.errors
    assert not errors, f"{path.name}: error outputs:\n" + "\n".join(errors)
    pngs = sorted(run.figures_dir.glob("*.png"))
    if "save_figure(" in path.read_text():
        assert pngs, (
            f"{path.name} saves figures, but none landed in POOLTK_REPORT_DIR={run.figures_dir}"
        )
    assert all(p.stat().st_size > 1000 for p in pngs), [(p.name, p.stat().st_size) for p in pngs]
    number = path.stem.split("_", 1)[0]
    strays = [p.name for p in pngs if not p.name.startswith(number + "_")]
    assert not strays, (
        f"{path.name}: figures not named after the notebook's number {number!r}: {strays}"
    )
    assert run.probe is not None, f"{path.name}: the probe printed nothing readable"
    PROBES[path.stem][1](run.probe)
