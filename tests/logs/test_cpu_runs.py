"""pooltk's own CPU runs (data/cpu_runs, written by ``pooltk cpu-runs``) read through the same code
as real logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pooltk.logs import read_logs
from pooltk.logs.metrics import bubble_table, summarize

CPU_RUNS = Path(__file__).resolve().parents[2] / "data" / "cpu_runs"


@pytest.fixture(scope="module")
def table():
    if not any(CPU_RUNS.glob("*_training.jsonl")):
        pytest.skip(
            f"no *_training.jsonl in {CPU_RUNS} "
            "(regenerate with: pooltk cpu-runs --out data/cpu_runs)"
        )
    return read_logs(CPU_RUNS)


def _sidecars():
    return {
        p.name.removesuffix("_training.meta.json"): json.loads(p.read_text())
        for p in CPU_RUNS.glob("*_training.meta.json")
    }


def test_every_run_reads_as_automodel_jsonl_with_its_sidecar_facts(table):
    sidecars = _sidecars()
    assert set(table.runs) == set(sidecars) and len(sidecars) >= 2
    assert {f.format for f in table.files} == {"automodel_jsonl"} and table.n_skipped == 0
    for run, meta in sidecars.items():
        info = table.runs[run]
        assert (info.pp, info.world_size, info.microbatches, info.seq_len) == (
            meta["pp"],
            meta["world_size"],
            meta["microbatches"],
            meta["seq_len"],
        )
        rows = table.steps[table.steps["run"] == run]
        assert list(rows["step"]) == list(range(meta["steps"]))
        assert set(rows["mem_basis"].dropna()) == {
            meta["mem_basis"]
        }  # the sidecar says what 'mem' is (RSS here)


def test_stock_and_pooled_twins_have_bitwise_equal_losses(table):
    s = table.steps
    runs = set(s["run"])
    twins = [
        (r, r.replace("_stock", "_pooled"))
        for r in runs
        if r.endswith("_stock") and r.replace("_stock", "_pooled") in runs
    ]
    assert twins
    for stock, pooled in twins:
        a = s[s["run"] == stock]["loss"].to_numpy()
        b = s[s["run"] == pooled]["loss"].to_numpy()
        assert a.size == b.size and np.array_equal(a, b), (stock, pooled)


def test_per_gpu_rate_is_tps_over_world_and_the_logs_own_figure_is_flagged(table):
    summary = summarize(table, warn=False)
    for r in summary.runs:
        info = table.runs[r.run]
        rows = summary.steps[(summary.steps["run"] == r.run) & (summary.steps["kind"] == "train")]
        np.testing.assert_allclose(
            rows["tok_per_s_per_gpu"], rows["tok_per_s_logged"] / info.world_size
        )
        if info.pp > 1:
            assert r.warnings and f"is {info.pp}x the rate per physical GPU" in r.warnings[0]
        assert (
            r.step_time.basis == "num_tokens_per_step / tps (the log's own timing)"
            and r.step_time.n > 0
        )


def test_bubble_of_each_run_from_its_shape(table):
    b = bubble_table(table.runs).set_index("run")
    for run, info in table.runs.items():
        assert b.loc[run, "bubble_pct"] == pytest.approx(
            100 * (info.pp - 1) / (info.microbatches + info.pp - 1)
        )


def test_pooled_runs_read_as_pooled_and_stock_runs_as_not_pooled_from_their_sidecars(table):
    # pooltk cpu-runs writes no pool log lines; the sidecar's pooled / pool_config are the run's
    # pool facts
    for run, meta in _sidecars().items():
        rows = table.steps[table.steps["run"] == run]
        assert set(rows["pooled"].astype(object)) == {meta["pooled"]}, run
        if meta["pooled"]:
            assert set(rows["pool_impl"].astype(str)) == {"pooltk"}
            assert set(rows["slack"].astype(int)) == {meta["pool_config"]["slack"]}
