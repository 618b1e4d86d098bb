"""torchtitan's current forms: module logger names in text logs, and the structured per-rank JSONL.

The text lines keep the metric format of the real 2026 logs (../shared/reference/logs) with the
logger name torchtitan uses since its logging reorganisation (``torchtitan.trainer``); the JSONL
records are written field by field as ``TraceJsonlFormatter`` writes them (its source, read in
the search corpus: rank, global_rank, local_rank, source, step, time_us, log_type_name,
event_name, value; ``step_end`` carries the step's milliseconds). Their numbers are invented.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pooltk.logs import detect_format, read_logs

FIX = Path(__file__).resolve().parent / "fixtures"


def test_module_logger_names_read_like_root(tmp_path, shared_dir):
    src = shared_dir / "reference" / "logs" / "torchtitan-2.log"
    text = src.read_text() if src.is_file() else (FIX / "torchtitan_wps_2024.log").read_text()
    renamed = text.replace(" - root - INFO - ", " - torchtitan.trainer - INFO - ")
    assert renamed != text
    (tmp_path / "old.log").write_text(text)
    (tmp_path / "new.log").write_text(renamed)
    t = read_logs(tmp_path)
    old, new = (t.steps[t.steps["run"] == r].reset_index(drop=True) for r in ("old", "new"))
    assert len(new) == len(old) > 0
    pd.testing.assert_series_equal(new["loss"], old["loss"])
    assert {f.format for f in t.files} == {"torchtitan"}


def _record(rank, step, kind, t_us, **extra):
    rec = {
        "delta_ms": 0.5,
        "tid": 11,
        "rank": rank,
        "global_rank": rank,
        "local_rank": rank % 8,
        "source": "training",
        "host_name": "node0",
        "pid": 100 + rank,
        "step": step,
        "relative_step": step,
        "time": t_us // 10**6,
        "time_ms": t_us // 1000,
        "time_us": t_us,
        "log_type": "instant",
        "log_type_name": kind,
        "event_name": None,
        "caller": "torchtitan/trainer.py:700:train_step",
        "log_file": "trainer.py",
        "log_function": "train_step",
        "log_level": "INFO",
        "logger_name": "torchtitan.structured_logger",
        "seq_id": 0,
        "message": f"[step {step}] {kind}",
    }
    rec.update(extra)
    return json.dumps(rec)


def _structured_run(folder: Path, ranks=(0, 1), steps=range(1, 6)):
    folder.mkdir(parents=True)
    for r in ranks:
        t0 = 1_790_000_000_000_000
        lines = [_record(r, None, "training_start", t0)]
        for s in steps:
            t = t0 + s * 2_000_000
            lines.append(_record(r, s, "step_start", t - 2_000_000))
            lines.append(
                _record(
                    r, s, "metric_value", t - 10, event_name="global_valid_tokens", value=4096.0
                )
            )
            lines.append(_record(r, s, "step_end", t, value=2000.0 + r + s))
        (folder / f"training.global_rank_{r}.20260920-101500-AB12CD.jsonl").write_text(
            "\n".join(lines) + "\n"
        )


def test_structured_jsonl_per_rank_files_join_into_one_run_with_step_times(tmp_path):
    _structured_run(tmp_path / "job7" / "structured_logs")
    t = read_logs(tmp_path / "job7")
    s = t.steps
    assert {f.format for f in t.files} == {"torchtitan_jsonl"} and set(s["run"]) == {"job7"}
    assert sorted(set(s["rank"])) == [0, 1] and len(s) == 10
    r1 = s[s["rank"] == 1].sort_values("step")
    assert list(r1["step"]) == [1, 2, 3, 4, 5]
    assert list(r1["step_time_s"]) == pytest.approx([(2000 + 1 + k) / 1000 for k in range(1, 6)])
    assert list(r1["num_label_tokens"]) == [4096] * 5
    assert r1["timestamp"].iloc[0] == pd.Timestamp(1_790_000_002_000_000, unit="us")
    for f in t.files:
        assert f.n_row_lines + f.n_skipped_lines + f.n_meta + f.n_other == f.n_lines


def test_structured_jsonl_is_detected_before_automodel_jsonl():
    line = _record(0, 3, "step_end", 1_790_000_000_000_000, value=10.0)
    assert detect_format([line]) == "torchtitan_jsonl"
