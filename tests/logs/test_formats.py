"""Each log family's reader on fixtures written from the format strings
(tests/logs/fixtures/README.md).

The fixtures are not real runs; their numbers are invented. These tests pin what each reader
makes of every line form: the values, the units, the bases, and what is skipped and why.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from pooltk.logs import FORMATS, LogFormatError, detect_format, read_log_file, read_logs, run_name
from pooltk.logs.schema import COLUMNS

FIX = Path(__file__).resolve().parent / "fixtures"


def _train(table):
    s = table.steps
    return s[s["kind"] == "train"].reset_index(drop=True)


def test_every_table_has_the_schema_columns_in_order_with_their_dtypes():
    table = read_logs(FIX)
    assert list(table.steps.columns) == [c.name for c in COLUMNS]
    for spec in COLUMNS:
        assert str(table.steps[spec.name].dtype) == spec.dtype, spec.name


def test_automodel_current_form_reads_values_colour_and_named_validation():
    t = read_log_file(FIX / "automodel_text_current.log")
    rep = t.files[0]
    assert rep.format == "automodel_text"
    train = _train(t)
    assert list(train["step"]) == [1, 2, 3, 4, 5, 6]
    first = train.iloc[0]
    assert first["loss"] == 10.9521 and first["grad_norm"] == 12.9375 and first["lr"] == 1.0e-05
    assert first["mem_gib"] == 38.39 and first["mem_basis"] == "max_allocated"
    assert first["tok_per_s_logged"] == 2000.0 and first["tok_per_s_per_gpu_logged"] == 500.0
    assert first["num_label_tokens"] == 65536
    assert first["timestamp"] == pd.Timestamp("2026-10-01 10:00:10")
    assert first["line"] == 5
    val = t.steps[t.steps["kind"] == "val"].iloc[0]
    assert (val["step"], val["loss"], val["val_name"], val["num_label_tokens"]) == (
        4,
        9.7001,
        "squad",
        4096,
    )
    assert math.isnan(val["mem_gib"]) and pd.isna(val["mem_basis"])
    assert t.runs["automodel_text_current"].world_size == 16


def test_a_line_cut_by_a_crash_is_skipped_and_counted_not_half_kept():
    rep = read_log_file(FIX / "automodel_text_current.log").files[0]
    assert rep.n_skipped == 1
    (reason,) = rep.skipped_by_reason
    assert reason.startswith("truncated: ends after 'tps'")
    assert rep.skipped_examples[0].line == 12
    assert rep.n_lines == 12 and rep.n_rows == 7 and rep.n_meta == 1 and rep.n_other == 3


def test_automodel_2025_08_form_without_per_gpu_figure_and_garbled_line():
    t = read_log_file(FIX / "automodel_text_2025_08.log")
    train = _train(t)
    assert list(train["step"]) == [1, 2, 3]
    assert list(train["tok_per_s_logged"]) == [14611.54, 20321.85, 20400.0]
    assert train["tok_per_s_per_gpu_logged"].isna().all()
    rep = t.files[0]
    # line 6 holds two cut records (two writes garbled into one line): each is found and counted as
    # cut, none is a value
    assert rep.skipped_by_reason == {
        "truncated: ends after 'loss' (the file's lines go on to 'num_label_tokens')": 2
    }
    assert [s.line for s in rep.skipped_examples] == [6, 6]


def test_automodel_2025_07_form_plain_prefix_mem_colon_no_lr_and_nan_loss():
    t = read_log_file(FIX / "automodel_text_2025_07.log")
    train = _train(t)
    assert list(train["step"]) == [4, 8, 12]
    assert list(train["mem_gib"]) == [11.66, 14.58, 15.48]
    assert train["lr"].isna().all() and train["timestamp"].isna().all()
    assert math.isnan(train["loss"].iloc[2]) and math.isnan(train["grad_norm"].iloc[2])
    val = t.steps[t.steps["kind"] == "val"].iloc[0]
    assert (val["step"], val["loss"], val["val_name"]) == (12, 0.2469, "default")
    assert t.files[0].n_nonfinite == 1


def test_jsonl_run_in_a_folder_takes_the_folder_name_and_reads_null_and_missing_mfu():
    t = read_logs(FIX / "automodel_run")
    assert set(t.steps["run"]) == {"automodel_run"}
    train = _train(t)
    assert list(train["step"]) == [0, 1, 2, 3, 4]
    assert math.isnan(train["mfu_pct_logged"].iloc[0]) and math.isnan(
        train["mfu_pct_logged"].iloc[2]
    )
    assert train["mfu_pct_logged"].iloc[1] == 1.5
    assert train["step_time_s"].iloc[1] == pytest.approx(2.0)
    assert train["timestamp"].iloc[1] == pd.Timestamp("2026-10-01 10:00:12")
    val = t.steps[t.steps["kind"] == "val"]
    assert list(val["loss"]) == [3.9] and list(val["val_name"]) == ["default"]
    (rep,) = [f for f in t.files if f.path.endswith("training.jsonl")]
    assert rep.n_skipped == 1 and rep.skipped_examples[0].line == 6
    assert next(iter(rep.skipped_by_reason)).startswith("truncated JSON record")


def test_a_benchmark_figure_line_with_spaces_after_its_unit_reads_like_one_without(tmp_path):
    # 'MFU: 9.0%  ' was read while 'Max iter time: 100.0 seconds  ' was skipped as not a number
    log = (FIX / "bench_run" / "k3_like.log").read_text(encoding="utf-8")
    spaced = tmp_path / "k3_like.log"
    spaced.write_text(
        log.replace(" seconds\n", " seconds  \n").replace("%\n", "%  \n"), encoding="utf-8"
    )
    plain = read_log_file(FIX / "bench_run" / "k3_like.log")
    got = read_log_file(spaced)
    for column in ("step_time_s", "step_time_basis", "mfu_pct_logged"):
        assert list(got.steps[column].fillna(-1)) == list(plain.steps[column].fillna(-1)), column
    assert got.files[0].n_skipped == plain.files[0].n_skipped == 0


def test_benchmark_log_and_summary_make_one_run_with_gib_memory_and_seconds_timers():
    t = read_logs(FIX / "bench_run")
    assert {f.format for f in t.files} == {"automodel_bench", "automodel_bench_summary"}
    assert set(t.steps["run"]) == {"k3_like"}
    s = t.steps
    assert list(s["step"]) == [0, 1, 2, 3, 4, 5]
    assert list(s["mem_gib"]) == [
        139.6,
        139.6,
        139.8,
        139.8,
        139.9,
        139.9,
    ]  # printed "GB", computed / 1024**3
    # iteration 3 has no 'Max iter time' line: its time comes from the timer block (seconds despite
    # "(ms)")
    assert list(s["step_time_s"]) == [100.0, 60.0, 50.0, 50.0, 50.0, 50.0]
    assert s["step_time_basis"].iloc[3].startswith("benchmark timer block")
    assert list(s["mfu_pct_logged"].fillna(-1)) == [9.0, 15.0, 18.0, -1, 18.0, 18.0]
    assert list(s["rank"]) == [0] * 6
    info = t.runs["k3_like"]
    assert (info.world_size, info.global_batch_size, info.seq_len, info.warmup_steps, info.dp) == (
        256,
        4096,
        2048,
        2,
        32,
    )
    assert info.extra["setup_time_s"] == 300.5 and info.extra["tflops_per_global_step"] == 5253000.0


def test_torchtitan_all_ranks_pp_minus_one_progress_form_and_validation():
    t = read_log_file(FIX / "torchtitan_pp_allranks.log")
    s = t.steps
    train = s[s["kind"] == "train"]
    assert len(train) == 8 and sorted(set(train["rank"])) == [0, 1]
    r0 = train[train["rank"] == 0]
    assert r0["loss"].isna().all()  # loss -1 on the non-last stage is not a loss
    r1 = train[train["rank"] == 1]
    assert list(r1["loss"]) == [4.09409, 3.07209, 2.47806, 2.42329]
    assert list(r1["step"]) == [1, 2, 3, 4]  # 'step: 4/4 = 100.00%' -> 4
    assert list(r1["tok_per_s_logged"]) == [1010.0, 20200.0, 21200.0, 21400.0]  # thousands commas
    assert (
        math.isnan(r1["mfu_pct_logged"].iloc[0]) and r1["mfu_pct_logged"].iloc[1] == 8.08
    )  # 'mfu: N/A'
    assert (
        r1["mem_gib"].iloc[0] == 70.0
        and r1["mem_pct"].iloc[0] == 37.38
        and r1["mem_basis"].iloc[0] == "max_reserved"
    )
    assert r1["tflops_per_gpu_logged"].iloc[1] == 202.0
    val = s[s["kind"] == "val"].iloc[0]
    assert (val["step"], val["loss"], val["tok_per_s_logged"], val["rank"]) == (3, 2.5, 50000.0, 1)
    assert (
        train[(train["rank"] == 0) & (train["step"] == 3)]["line"].item() == 11
    )  # doubled [rank0]: prefix
    rep = t.files[0]
    assert rep.n_skipped == 0 and rep.n_nonfinite == 0
    assert any("loss -1" in n for n in rep.notes)
    info = t.runs["torchtitan_pp_allranks"]
    assert (info.pp, info.dp, info.world_size, info.peak_flops, info.device_capacity_gib) == (
        2,
        1,
        2,
        2.5e15,
        187.28,
    )


def test_torchtitan_2024_wps_form_without_titan_tag():
    t = read_log_file(FIX / "torchtitan_wps_2024.log")
    s = t.steps
    assert list(s["step"]) == [1, 10, 20, 30]
    assert list(s["tok_per_s_logged"]) == [1234.0, 45678.0, 45900.0, 46100.0]
    assert list(s["loss"]) == [10.8234, 8.1234, 6.5, 5.25]
    assert s["grad_norm"].isna().all() and s["tflops_per_gpu_logged"].isna().all()
    assert s["timestamp"].iloc[1] == pd.Timestamp("2024-06-01 12:00:20")
    info = t.runs["torchtitan_wps_2024"]
    assert (info.local_batch_size, info.global_batch_size, info.seq_len) == (8, 64, 2048)
    assert info.warmup_steps is None  # '(warmup 2)' is LR warmup, not a throughput warmup


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("automodel_text_current.log", "automodel_text"),
        ("automodel_text_2025_07.log", "automodel_text"),
        ("automodel_run/training.jsonl", "automodel_jsonl"),
        ("bench_run/k3_like.log", "automodel_bench"),
        ("torchtitan_wps_2024.log", "torchtitan"),
    ],
)
def test_detection_names_the_family(name, fmt):
    path = FIX / name
    text = path.read_text()
    assert detect_format(text.split("\n"), path=str(path), text=text) == fmt


def test_gz_reads_like_the_plain_file(tmp_path):
    import gzip

    src = FIX / "torchtitan_pp_allranks.log"
    gz = tmp_path / "torchtitan_pp_allranks.log.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    plain = read_log_file(src).steps.drop(columns=["source_file"])
    packed = read_log_file(gz).steps.drop(columns=["source_file"])
    pd.testing.assert_frame_equal(plain, packed)


def test_a_damaged_gz_is_an_error_naming_the_file(tmp_path):
    import gzip

    bad = tmp_path / "x.log.gz"
    bad.write_bytes(gzip.compress(b"step 1 | epoch 0 | loss 1.0\n" * 50)[:-12])
    with pytest.raises(LogFormatError, match=r"x\.log\.gz: found a damaged gzip file"):
        read_log_file(bad)


def test_strict_mode_turns_the_first_skipped_line_into_an_error_with_its_line():
    with pytest.raises(
        LogFormatError,
        match=r"automodel_text_current\.log:12: found a step line that does not parse",
    ):
        read_log_file(FIX / "automodel_text_current.log", strict=True)


def test_a_folder_lists_files_of_no_format_instead_of_failing(tmp_path):
    (tmp_path / "notes.txt").write_text("just notes\n")
    (tmp_path / "run.log").write_text((FIX / "torchtitan_wps_2024.log").read_text())
    t = read_logs(tmp_path)
    assert len(t.steps) == 4 and len(t.unrecognised) == 1 and "notes.txt" in t.unrecognised[0]
    with pytest.raises(LogFormatError, match="notes.txt: found no record of a supported format"):
        read_logs(tmp_path / "notes.txt")


def test_a_folder_with_no_readable_log_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("just notes\n")
    with pytest.raises(LogFormatError, match="no readable log among the files"):
        read_logs(tmp_path)


def test_forced_format_that_does_not_fit_says_so():
    with pytest.raises(LogFormatError, match="no complete step record"):
        read_log_file(FIX / "torchtitan_wps_2024.log", format="automodel_text")
    with pytest.raises(ValueError, match="required 'auto' or one of"):
        read_log_file(FIX / "torchtitan_wps_2024.log", format="megatron")


@pytest.mark.parametrize(
    ("path", "run"),
    [
        ("a/cpu_seq512_stock_training.jsonl", "cpu_seq512_stock"),
        ("a/cpu_seq512_pooled_validation_squad.jsonl", "cpu_seq512_pooled"),
        ("runs/k3/training.jsonl", "k3"),
        ("runs/k3/validation.jsonl", "k3"),
        ("runs/w53/run.log.gz", "w53"),
        ("torchtitan-1.log", "torchtitan-1"),
        ("b/k3_like_summary.json", "k3_like"),
    ],
)
def test_run_names_group_a_runs_files(path, run):
    assert run_name(Path(path)) == run


def test_formats_constant_lists_every_family_once():
    assert len(FORMATS) == len(set(FORMATS)) == 6 and "torchtitan_jsonl" in FORMATS
