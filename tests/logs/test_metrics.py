"""Metrics on a stated basis: per-physical-GPU rates, steady windows, step times, MFU, headroom,
bubble.

Worked numbers are the Kimi-K3 report's (tests/logs/fixtures/bench_run is shaped like it) and
hand arithmetic; each test states the formula it checks.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from pooltk.logs import RunInfo, read_log_file, read_logs
from pooltk.logs.metrics import (
    DeviceCapacity,
    FlopsBasis,
    PeakBasis,
    PerGpuBasisWarning,
    bubble_1f1b,
    collapse_ranks,
    headroom,
    mfu,
    mfu_table,
    per_gpu_rates,
    steady_window,
    summarize,
)
from pooltk.studies.kimi_k3 import (
    GB200_NOMINAL,
    K3_ACTIVE_6N,
    PEAK_GB200_2250,
    PEAK_GB200_2500,
)

FIX = Path(__file__).resolve().parent / "fixtures"


def test_mfu_is_rate_times_flops_per_token_over_peak_as_in_the_k3_report():
    fig = mfu(615.9, K3_ACTIVE_6N, PEAK_GB200_2250)
    assert fig.mfu_pct == pytest.approx(100 * 615.9 * 6 * 104e9 / 2.25e15)
    assert round(fig.mfu_pct, 1) == 17.1
    assert (
        fig.basis == "615.9 tok/s/GPU x 6 x 104e9 active params / GB200 2250 TFLOP/s (K3 configs)"
    )


def test_mfu_table_shows_both_gb200_peaks():
    t = mfu_table(627.3, K3_ACTIVE_6N, (PEAK_GB200_2250, PEAK_GB200_2500)).to_frame()
    assert list(t["peak_tflops"]) == [2250.0, 2500.0]
    assert [round(x, 1) for x in t["mfu_pct"]] == [17.4, 15.7]
    assert PEAK_GB200_2500.flops_per_s / PEAK_GB200_2250.flops_per_s == pytest.approx(2500 / 2250)


def test_bubble_is_n_minus_1_over_m_plus_n_minus_1():
    b = bubble_1f1b(8, 64)
    assert b.fraction == 7 / 71 and round(100 * b.fraction, 1) == 9.9
    assert b.formula == "(8 - 1) / (64 + 8 - 1) = 7/71"
    assert bubble_1f1b(1, 16).fraction == 0.0
    with pytest.raises(ValueError, match="microbatches: found 0"):
        bubble_1f1b(8, 0)


def test_logs_hold_no_study_constants():
    import pooltk.logs.metrics as metrics

    assert not [n for n in dir(metrics) if n.startswith(("GB200", "PEAK_GB200", "K3_"))]


def test_headroom_states_gib_and_gb_explicitly():
    cap = DeviceCapacity.from_gb(186)
    assert cap.gib == pytest.approx(186e9 / 2**30) and cap.gb == pytest.approx(186.0)
    h = headroom(139.6, cap)
    assert h.headroom_gib == pytest.approx(186e9 / 2**30 - 139.6)
    assert h.headroom_gb == pytest.approx(186.0 - 139.6 * 2**30 / 1e9)
    assert round(GB200_NOMINAL.gib, 1) == 173.2
    assert list(h.to_frame().columns) == [
        "peak_gib",
        "capacity_gib",
        "capacity_gb",
        "headroom_gib",
        "headroom_gb",
        "capacity_source",
    ]
    with pytest.raises(ValueError, match="required a positive capacity"):
        DeviceCapacity.from_gib(0)


def test_flops_and_peak_bases_refuse_nonsense():
    with pytest.raises(ValueError, match="required a positive number of parameters"):
        FlopsBasis.six_n(-1)
    with pytest.raises(ValueError, match="required a positive TFLOP/s"):
        PeakBasis.tflops(float("nan"))


def test_benchmark_rate_is_gbs_times_seq_over_iteration_time_times_world():
    t = read_logs(FIX / "bench_run")
    rates = per_gpu_rates(t.steps, t.runs)
    got = rates.steps["tok_per_s_per_gpu"].tolist()
    assert got == pytest.approx([4096 * 2048 / (s * 256) for s in (100, 60, 50, 50, 50, 50)])
    assert "4096 x 2048 / (t x 256)" in rates.bases["k3_like"]


def test_benchmark_rate_without_world_size_says_what_is_missing():
    t = read_log_file(
        FIX / "bench_run" / "k3_like.log"
    )  # no JSON summary: no world size, no seq_len
    rates = per_gpu_rates(t.steps, t.runs)
    assert rates.steps["tok_per_s_per_gpu"].isna().all()
    assert (
        rates.bases["k3_like"]
        == "unknown: needs seq_len, world_size (GBS x seq_len / (iteration time x world size))"
    )


def test_automodel_pp8_per_gpu_figure_is_flagged_as_eight_times_physical():
    """A K3-shaped Automodel log: 256 GPUs, pp8 x dp32, so tps_per_gpu = tps/32 = 8 x tps/256."""
    t = read_log_file(FIX / "automodel_text_current.log")
    steps = t.steps.copy()
    steps["tok_per_s_per_gpu_logged"] = steps["tok_per_s_logged"] / 32
    with pytest.warns(PerGpuBasisWarning, match=r"8x the rate per physical GPU .*pp x tp = 8"):
        rates = per_gpu_rates(
            steps, {"automodel_text_current": RunInfo(world_size=256, pp=8, tp=1)}
        )
    assert rates.steps["tok_per_s_per_gpu"].dropna().tolist() == pytest.approx(
        (steps["tok_per_s_logged"] / 256).dropna().tolist()
    )


def test_per_gpu_rate_from_logged_figure_when_only_pp_and_tp_are_known():
    t = read_log_file(FIX / "automodel_text_current.log")
    steps = t.steps.assign(run="x")
    rates = per_gpu_rates(steps, {"x": RunInfo(pp=4, tp=1)}, warn=False)
    assert rates.bases["x"] == "log's tps_per_gpu / (pp x tp) = / (4 x 1)"
    assert rates.steps["tok_per_s_per_gpu"].iloc[0] == pytest.approx(500.0 / 4)


@pytest.mark.parametrize("facts", [{"world_size": 0}, {"dp": 0, "pp": 4}])
def test_a_run_of_0_gpus_has_no_per_gpu_rate_never_infinity(facts):
    t = read_log_file(FIX / "automodel_text_current.log")  # a sidecar stating 0 made every rate inf
    steps = t.steps.assign(run="x")
    rates = per_gpu_rates(steps, {"x": RunInfo.from_facts(facts, source="sidecar")}, warn=False)
    assert rates.steps["tok_per_s_per_gpu"].isna().all()
    assert "is 0 GPUs" in rates.bases["x"]


def test_steady_window_rules():
    frame = pd.DataFrame({"run": "r", "kind": "train", "step": range(12)})
    assert steady_window(frame, declared=3).first_step == 3
    w = steady_window(frame)
    assert (w.first_step, w.n_excluded, w.n_steps) == (2, 2, 10)  # ceil(10% of 12) = 2
    assert steady_window(frame, warmup_steps=5).first_step == 5
    one = steady_window(frame.iloc[:1])
    assert (one.first_step, one.n_steps) == (0, 1) and "no warmup cut" in one.rule


def test_summary_of_benchmark_run_uses_declared_warmup_and_reports_bases():
    t = read_logs(FIX / "bench_run")
    s = summarize(
        t, flops=K3_ACTIVE_6N, peaks=(PEAK_GB200_2250, PEAK_GB200_2500), capacity=GB200_NOMINAL
    )["k3_like"]
    assert (s.window.first_step, s.window.last_step) == (
        2,
        5,
    ) and "declared warmup" in s.window.rule
    assert s.tok_per_s_per_gpu == pytest.approx(4096 * 2048 / (50 * 256))
    assert s.step_time.median_s == 50.0 and s.step_time.n == 4
    assert s.mfu.mfu_pct == pytest.approx(100 * s.tok_per_s_per_gpu * 6 * 104e9 / 2.25e15)
    assert s.mfu_logged_pct == 18.0 and s.peak_mem_gib == 139.9 and s.mem_basis == "max_allocated"
    assert s.headroom.headroom_gib == pytest.approx(GB200_NOMINAL.gib - 139.9)
    row = summarize(t).to_frame().iloc[0]
    assert math.isnan(row["mfu_pct"]) and row["mfu_basis"] == ""


def test_collapse_ranks_keeps_the_last_stage_loss_max_memory_mean_rate():
    t = read_log_file(FIX / "torchtitan_pp_allranks.log")
    c = collapse_ranks(t.steps)
    train = c[c["kind"] == "train"]
    assert list(train["step"]) == [1, 2, 3, 4]
    assert list(train["loss"]) == [4.09409, 3.07209, 2.47806, 2.42329]
    assert list(train["mem_gib"]) == [70.0, 71.0, 71.5, 71.5]
    assert list(train["tok_per_s_logged"]) == [1005.0, 20100.0, 21100.0, 21200.0]
    assert train["rank"].isna().all()


def test_step_time_from_one_second_timestamps_says_so():
    s = summarize(read_logs(FIX / "automodel_text_current.log"), warn=False)[
        "automodel_text_current"
    ]
    assert s.step_time.median_s == 4.0 and "1 s resolution" in s.step_time.basis
