"""The readers on real Automodel and torchtitan logs (../shared/reference/logs; skipped where
absent).

Each test pins concrete values (first and last step, a known loss, a rate, a memory figure) and
a cross-check between two fields the log computes from each other, so a reader that shifts a
column, drops a unit or mis-parses a prefix fails here.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pytest

from pooltk.logs import RunInfo, read_log_file, read_logs
from pooltk.logs.metrics import PerGpuBasisWarning, per_gpu_rates, summarize


@pytest.fixture
def logs(shared_dir):
    path = shared_dir / "reference" / "logs"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return path


@pytest.fixture
def table(logs):
    return read_logs(logs)


def _run(table, name):
    s = table.steps
    return s[s["run"] == name].reset_index(drop=True)


def test_the_folder_reads_every_log_with_its_format_and_nothing_skipped(table):
    formats = {f.run: f.format for f in table.files}
    assert formats == {
        **{f"automodel-jsonl-{i}": "automodel_jsonl" for i in (1, 2, 3)},
        **{f"automodel-train-{i}": "automodel_text" for i in (1, 2, 3)},
        **{f"torchtitan-{i}": "torchtitan" for i in (1, 2, 3, 4)},
    }
    assert table.n_skipped == 0 and table.unrecognised == []
    assert {f.run: f.n_rows for f in table.files} == {
        "automodel-jsonl-1": 50,
        "automodel-jsonl-2": 100,
        "automodel-jsonl-3": 100,
        "automodel-train-1": 5,
        "automodel-train-2": 2,
        "automodel-train-3": 6,
        "torchtitan-1": 2,
        "torchtitan-2": 10,
        "torchtitan-3": 10,
        "torchtitan-4": 1,
    }


def test_automodel_docs_log_with_many_loggers_and_raw_warnings(table):
    r = _run(table, "automodel-train-1")
    assert list(r["step"]) == [1, 2, 3, 4, 5] and list(r["line"]) == [196, 197, 198, 199, 200]
    assert r["loss"].iloc[0] == 10.9521 and r["loss"].iloc[-1] == 9.5964
    assert (
        r["tok_per_s_logged"].iloc[0] == 132005.57
        and r["tok_per_s_per_gpu_logged"].iloc[0] == 66002.79
    )
    assert r["mem_gib"].iloc[0] == 38.39 and r["lr"].iloc[4] == 6.39e-05
    assert r["timestamp"].iloc[0] == pd.Timestamp("2025-09-01 07:13:33")
    # dp 2: the logged per-GPU figure is tps / 2 on every line
    np.testing.assert_allclose(
        r["tok_per_s_logged"] / r["tok_per_s_per_gpu_logged"], 2.0, rtol=1e-6
    )
    rep = next(f for f in table.files if f.run == "automodel-train-1")
    assert rep.n_other == 195 and rep.n_lines == 200


def test_automodel_2025_08_sample_has_no_per_gpu_figure_and_states_its_world_size(table):
    r = _run(table, "automodel-train-2")
    assert list(r["step"]) == [1, 2] and list(r["tok_per_s_logged"]) == [14611.54, 20321.85]
    assert r["tok_per_s_per_gpu_logged"].isna().all() and list(r["mem_gib"]) == [30.58, 32.39]
    info = table.runs["automodel-train-2"]
    assert info.world_size == 2 and info.sources["world_size"].endswith("automodel-train-2.log:15")


def test_automodel_2025_07_sample_steps_by_four_with_validation(table):
    r = _run(table, "automodel-train-3")
    train = r[r["kind"] == "train"]
    assert list(train["step"]) == [4, 8, 12, 16, 20]
    assert list(train["mem_gib"]) == [11.66, 14.58, 15.48, 16.47, 12.35]
    assert train["loss"].iloc[0] == 1.5514 and train["grad_norm"].iloc[0] == 102.0
    assert train["lr"].isna().all()
    val = r[r["kind"] == "val"]
    assert list(val["step"]) == [20] and list(val["loss"]) == [0.2469]


@pytest.mark.parametrize(
    ("run", "ratio"),
    [("automodel-jsonl-1", 8.0), ("automodel-jsonl-2", 4.0), ("automodel-jsonl-3", 4.0)],
)
def test_jsonl_tps_per_gpu_is_tps_over_cp_dp_as_the_sources_state(table, run, ratio):
    r = _run(table, run)
    np.testing.assert_allclose(
        r["tok_per_s_logged"] / r["tok_per_s_per_gpu_logged"], ratio, rtol=1e-9
    )


def test_jsonl_values_and_timestamps(table):
    r1 = _run(table, "automodel-jsonl-1")
    assert (r1["step"].iloc[0], r1["step"].iloc[-1]) == (0, 49)
    assert r1["loss"].iloc[0] == 4.704561710357666 and r1["num_label_tokens"].iloc[0] == 112
    assert r1["mfu_pct_logged"].isna().all()  # no mfu key in this file
    assert r1["timestamp"].iloc[0] == pd.Timestamp("2026-02-17 05:19:31.963")
    r2 = _run(table, "automodel-jsonl-2")
    assert r2["mfu_pct_logged"].notna().all() and r2["mfu_pct_logged"].iloc[0] == 0.5780967452709216


def test_jsonl_step_time_agrees_with_the_timestamps_it_was_logged_at(table):
    """num_tokens_per_step / tps is the step's wall time; consecutive timestamps say the same."""
    for run in ("automodel-jsonl-1", "automodel-jsonl-2", "automodel-jsonl-3"):
        r = _run(table, run)
        gap = r["timestamp"].diff().dt.total_seconds()
        ratio = (r["step_time_s"] / gap).iloc[2:]
        assert ratio.median() == pytest.approx(1.0, abs=0.02), run


def test_torchtitan_colour_log_with_log_freq_10(table):
    r = _run(table, "torchtitan-1")
    assert list(r["step"]) == [1, 10] and list(r["line"]) == [42, 45]
    last = r.iloc[1]
    assert (last["loss"], last["grad_norm"], last["mem_gib"], last["mem_pct"]) == (
        4.98934,
        19.25,
        168.57,
        94.52,
    )
    assert (last["tok_per_s_logged"], last["tflops_per_gpu_logged"], last["mfu_pct_logged"]) == (
        9982.0,
        841.08,
        37.38,
    )
    assert last["timestamp"] == pd.Timestamp("2026-05-19 19:31:48.420")
    assert list(r["rank"]) == [0, 0]


def test_torchtitan_logged_figures_are_consistent_with_the_runs_own_capacity_and_peak(table):
    """mem% = GiB / capacity and mfu = tflops / peak: cross-checks of units and columns."""
    for run in ("torchtitan-1", "torchtitan-2", "torchtitan-3"):
        r = _run(table, run)
        info = table.runs[run]
        assert info.device_capacity_gib == 178.35 and info.peak_flops == 2.25e15
        np.testing.assert_allclose(
            100 * r["mem_gib"] / info.device_capacity_gib, r["mem_pct"], atol=0.01
        )
        np.testing.assert_allclose(
            100 * r["tflops_per_gpu_logged"] * 1e12 / info.peak_flops,
            r["mfu_pct_logged"],
            atol=0.01,
        )


def test_torchtitan_log_freq_1_with_interleaved_warnings(table):
    r = _run(table, "torchtitan-2")
    assert list(r["step"]) == list(range(1, 11))
    assert r["loss"].iloc[-1] == 6.92163 and r["tok_per_s_logged"].iloc[-1] == 10550.0
    assert r["tok_per_s_logged"].iloc[1] == 9891.0


def test_torchtitan_tp2_mesh_gives_dp_tp_and_world(table):
    info = table.runs["torchtitan-3"]
    assert (info.tp, info.dp, info.pp, info.world_size) == (2, 4, 1, 8)
    r = _run(table, "torchtitan-3")
    assert r["loss"].iloc[0] == 3.11665 and r["mem_gib"].iloc[-1] == 100.35


def test_torchtitan_crash_log_keeps_its_one_step_and_reads_mfu_na(table):
    r = _run(table, "torchtitan-4")
    assert len(r) == 1 and r["step"].iloc[0] == 1 and r["mem_pct"].iloc[0] == 96.77
    assert math.isnan(r["mfu_pct_logged"].iloc[0]) and r["tflops_per_gpu_logged"].iloc[0] == 96.88
    rep = next(f for f in table.files if f.run == "torchtitan-4")
    assert rep.n_lines == 200 and rep.n_skipped == 0


def test_per_gpu_basis_warning_for_automodel_pp2_log(table):
    """Llama-3.1-8B golden values: PP2 x DP4 on 8 GPUs; tps_per_gpu = tps/4 is 2x the physical
    rate."""
    with pytest.warns(
        PerGpuBasisWarning, match=r"automodel-jsonl-2: the log's own per-GPU figure is 2x"
    ):
        rates = per_gpu_rates(table.steps, {"automodel-jsonl-2": RunInfo(world_size=8, pp=2, tp=1)})
    r = rates.steps[rates.steps["run"] == "automodel-jsonl-2"]
    np.testing.assert_allclose(r["tok_per_s_per_gpu"], r["tok_per_s_logged"] / 8)


def test_no_warning_where_the_logged_per_gpu_figure_is_physical(table):
    with warnings.catch_warnings():
        warnings.simplefilter("error", PerGpuBasisWarning)
        per_gpu_rates(
            table.steps[table.steps["run"] == "automodel-train-1"],
            {"automodel-train-1": RunInfo(world_size=2)},
        )
        per_gpu_rates(table.steps[table.steps["format"] == "torchtitan"], table.runs)


def test_summary_of_torchtitan_run_uses_timestamps_for_step_time(table):
    s = summarize(table, warn=False)["torchtitan-2"]
    assert s.window.first_step == 2 and s.window.last_step == 10 and s.n_steps == 10
    expected = pd.Series([9891, 9893, 10139, 10280, 10231, 10318, 10332, 10368, 10550]).mean()
    assert s.tok_per_s_per_gpu == pytest.approx(expected)
    assert (
        s.step_time.median_s == pytest.approx(1.993, abs=0.01)
        and "ms resolution" in s.step_time.basis
    )
    assert s.peak_mem_gib == 169.10 and s.final_loss == 6.92163


def test_single_file_read_matches_the_folder_read(logs, table):
    alone = read_log_file(logs / "torchtitan-3.log").steps
    in_folder = _run(table, "torchtitan-3")
    cats = [c for c in alone.columns if isinstance(alone[c].dtype, pd.CategoricalDtype)]
    # a folder's categories are the union over its files; the values are the same
    pd.testing.assert_frame_equal(
        alone.astype(dict.fromkeys(cats, "str")), in_folder.astype(dict.fromkeys(cats, "str"))
    )
