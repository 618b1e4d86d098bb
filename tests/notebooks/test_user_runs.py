"""Notebook 03 on a folder of two users' runs draws them beside the published bars and judges their
table.

``data/two_users`` holds real logs made with pooltk's own tooling (``python -m tools.cpu_runs``,
then ``pooltk cpu-runs``; its README says how): alice's pooled run, bob's stock run, and bob's log
again as ``kubectl logs --timestamps --prefix`` prints it, plus their expected figures
(``expected.csv``). The notebook runs as ``pooltk report --logs DIR --expected FILE`` runs it (the
same parameter injection).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("nbclient")

from nbrun import error_outputs, execute_notebook  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FOLDER = Path(__file__).resolve().parent / "data" / "two_users"
NOTEBOOK = ROOT / "notebooks" / "03_kimi_k3_gb200_1k_vs_2k.ipynb"
RUNS = {"cpu_seq8192_pooled", "cpu_seq8192_stock", "cpu_seq8192_stock_kubectl"}

PROBE = (
    "{'runs': [str(r.run) for r in summary.runs], 'beside': list(beside.runs), "
    "'judged': [(c.claim, c.agrees) for c in expected.judge(EXPECTED, summary).claims], "
    "'speed': logviews.speed_pairs(summary, summary.steps, {**logs.runs}).to_dict('records'), "
    "'steps': {r: logs.steps[logs.steps.run.astype(str) == r]"
    "[['step', 'loss', 'mem_gib']].values.tolist() "
    "for r in ('cpu_seq8192_stock', 'cpu_seq8192_stock_kubectl')}, "
    "'expected_figures_inline': len(EXPECTED_FIGURES)}"
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from pooltk.nb.report import ReportConfig, logs_parameters

    config = ReportConfig(logs=(FOLDER,), expected=FOLDER / "expected.csv")
    return execute_notebook(
        NOTEBOOK, tmp_path_factory.mktemp("two_users"), PROBE, parameters=logs_parameters(config)
    )


@pytest.mark.notebook
@pytest.mark.timeout(600)
def test_notebook_03_reads_both_users_runs_and_draws_them_beside_the_published_bars(run) -> None:
    assert run.error is None and not error_outputs(run.nb), run.error or error_outputs(run.nb)
    assert set(run.probe["runs"]) == RUNS, run.probe["runs"]
    assert set(run.probe["beside"]) == RUNS
    drawn = [rec for rec in run.figures if "03_runs_beside_published" in rec.saved_as]
    assert drawn and not drawn[0].problems, [rec.problems for rec in drawn]
    assert {"your runs (logs read)", "published (PR #3780 / Automodel configs)"} <= set(
        drawn[0].series
    )


@pytest.mark.notebook
def test_the_decorated_copy_reads_to_the_undecorated_runs_steps(run) -> None:
    steps = run.probe["steps"]
    assert (
        steps["cpu_seq8192_stock_kubectl"] == steps["cpu_seq8192_stock"]
        and len(steps["cpu_seq8192_stock"]) == 5
    )


@pytest.mark.notebook
def test_the_users_table_is_judged_row_by_row_and_only_their_rows(run) -> None:
    judged = dict(run.probe["judged"])
    assert (
        run.probe["expected_figures_inline"] == 0
    )  # --logs leaves the notebook's own example rows out
    assert len(judged) == 5 and all(judged.values()), judged


@pytest.mark.notebook
def test_the_pooled_run_is_paired_with_a_stock_twin_and_its_speed_is_explained(run) -> None:
    pairs = run.probe["speed"]
    assert [p["pooled"] for p in pairs] == ["cpu_seq8192_pooled"]
    pair = pairs[0]
    assert pair["stock"] in {"cpu_seq8192_stock", "cpu_seq8192_stock_kubectl"}
    assert pair["release"] == "True" and pair["why"], pair
    assert (pair["step_time_ratio"] <= 1.02) == pair["why"].startswith("not slower"), pair


def test_an_expected_figure_for_a_run_not_read_is_refused_naming_the_runs() -> None:
    from pooltk._validate import InputError
    from pooltk.logs import read_logs
    from pooltk.logs.metrics import summarize
    from pooltk.nb import expected

    summary = summarize(read_logs([FOLDER]), warn=False)
    rows = expected.load_expected(FOLDER / "expected.csv")
    assert all(expected.judge(rows, summary).to_frame().agrees == "yes")
    bad = [
        dict(
            name="typo",
            run="cpu_seq8192_pooled_",
            quantity="final_loss",
            value="5.8",
            unit="loss",
            source="x",
        )
    ]
    with pytest.raises(InputError, match="cpu_seq8192_pooled_.*required one of"):
        expected.judge(expected.load_expected(bad), summary)
    with pytest.raises(InputError, match="unit"):
        expected.load_expected(
            [{**bad[0], "run": "cpu_seq8192_pooled", "quantity": "peak_mem_gib", "unit": "GB"}]
        )
    with pytest.raises(InputError, match="quantity"):
        expected.load_expected([{**bad[0], "quantity": "speed"}])


@pytest.mark.parametrize("source", [3, ["name,run"], [{"name": "a"}, 5]])
def test_expected_figures_that_are_neither_a_file_nor_rows_are_refused_naming_the_fix(
    source,
) -> None:
    from pooltk._validate import InputError
    from pooltk.nb import expected

    with pytest.raises(InputError, match="expected figures.*Fix"):
        expected.load_expected(source)


def test_an_expected_figure_agrees_at_its_precision_approximately_or_within_its_tolerance() -> None:
    from pooltk.nb.expected import ExpectedFigure

    def allowed(value: str, tolerance: str = "") -> float:
        return ExpectedFigure(
            name="n",
            run="r",
            quantity="peak_mem_gib",
            value=value,
            unit="GiB",
            source="s",
            tolerance=tolerance,
        ).rule()[1]

    assert abs(0.6454 - 0.645) <= allowed("0.645") < abs(0.6456 - 0.645)
    assert allowed("~135") == pytest.approx(135 * 0.05) and allowed("135") == pytest.approx(0.5)
    assert allowed("8.76", "10%") == pytest.approx(0.876) and allowed(
        "8.76", "0.1"
    ) == pytest.approx(0.1)


@pytest.mark.notebook
@pytest.mark.timeout(600)
def test_notebook_03_with_only_log_paths_changed_lists_the_example_figures_as_not_applicable(
    tmp_path,
) -> None:
    probe = (
        "[(c.claim, c.agrees, c.pooltk) "
        "for c in expected.judge(EXPECTED, summary, absent_runs=absent).claims]"
    )
    run = execute_notebook(NOTEBOOK, tmp_path, probe, parameters={"LOG_PATHS": [str(FOLDER)]})
    assert run.error is None and not error_outputs(run.nb), run.error or error_outputs(run.nb)
    assert len(run.probe) == 3, (
        run.probe
    )  # the notebook's three example rows, about pooltk's own CPU runs
    for claim, agrees, said in run.probe:
        assert agrees is None and said.startswith("not applicable: the logs read have no run"), (
            claim,
            said,
        )
        assert "cpu_seq8192_pooled" in said  # it names the runs that were read


def test_an_absent_run_is_refused_or_not_applicable_as_asked_and_nothing_else_is_accepted() -> None:
    from pooltk._validate import InputError
    from pooltk.logs import read_logs
    from pooltk.logs.metrics import summarize
    from pooltk.nb import expected

    summary = summarize(read_logs([FOLDER]), warn=False)
    rows = expected.load_expected(
        [
            dict(
                name="elsewhere",
                run="cpu_seq32768_pooled",
                quantity="final_loss",
                value="5.6",
                unit="loss",
                source="x",
            )
        ]
    )
    with pytest.raises(InputError, match="cpu_seq32768_pooled"):
        expected.judge(rows, summary)
    (claim,) = expected.judge(rows, summary, absent_runs="not applicable").claims
    assert claim.agrees is None and "no run 'cpu_seq32768_pooled'" in claim.pooltk
    with pytest.raises(InputError, match="absent_runs"):
        expected.judge(rows, summary, absent_runs="skip")
