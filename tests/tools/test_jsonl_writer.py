"""write_training_jsonl writes Automodel's training.jsonl schema exactly, and refuses bad records
clearly."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from pooltk.logs import read_log_file
from tools.jsonl_writer import (
    TRAINING_KEYS,
    format_timestamp,
    validate_record,
    write_training_jsonl,
)


def _record(step: int = 0, **over):
    base = {
        "step": step,
        "epoch": 0,
        "timestamp": "2026-04-01T16:04:59.626Z",
        "loss": 2.506679058074951,
        "grad_norm": 12.939839363098145,
        "lr": 1e-05,
        "mem": 23.14392375946045,
        "tps": 1028.1208917097622,
        "tps_per_gpu": 257.03022292744055,
        "mfu": 0.5780967452709216,
        "num_tokens_per_step": 20776,
        "num_label_tokens": 8209,
    }
    base.update(over)
    return base


def test_a_record_is_written_byte_for_byte_like_automodels(tmp_path):
    """The first record of Automodel's Llama-3.1-8B golden values file, re-serialised, is
    identical."""
    line = (
        '{"step": 0, "epoch": 0, "timestamp": "2026-04-01T16:04:59.626Z", '
        '"loss": 2.506679058074951, "grad_norm": 12.939839363098145, "lr": 1e-05, '
        '"mem": 23.14392375946045, "tps": 1028.1208917097622, "tps_per_gpu": 257.03022292744055, '
        '"mfu": 0.5780967452709216, "num_tokens_per_step": 20776, "num_label_tokens": 8209}'
    )
    path = write_training_jsonl(tmp_path / "training.jsonl", [json.loads(line)])
    assert path.read_text() == line + "\n"


def test_key_order_and_null_mfu(tmp_path):
    rec = _record()
    del rec["mfu"]
    path = write_training_jsonl(tmp_path / "run_training.jsonl", [rec, _record(1, mfu=None)])
    for text in path.read_text().splitlines():
        obj = json.loads(text)
        assert tuple(obj) == TRAINING_KEYS and obj["mfu"] is None


def test_aware_datetime_becomes_iso_utc_milliseconds_z():
    when = datetime(2026, 4, 1, 18, 4, 59, 626_999, tzinfo=timezone(timedelta(hours=2)))
    assert format_timestamp(when) == "2026-04-01T16:04:59.626Z"
    with pytest.raises(ValueError, match="naive datetime"):
        format_timestamp(datetime(2026, 4, 1))


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"step": 1.0}, r"record 0: step: found 1.0 \(float\); required an integer >= 0"),
        ({"step": True}, r"step: found True \(bool\)"),
        (
            {"timestamp": "2026-04-01 16:04:59"},
            r"'timestamp' found .*required ISO 8601 UTC with milliseconds and Z",
        ),
        ({"mem": -1.0}, r"'mem' found -1.0; required a finite number >= 0"),
        ({"tps": float("inf")}, r"'tps' found inf"),
        ({"loss": "2.5"}, r"'loss' found '2.5'; required a number"),
        ({"mfu": float("nan")}, r"'mfu' found nan; required None or a finite percentage"),
        ({"extra": 1}, r"unknown key\(s\) \['extra'\]"),
    ],
)
def test_bad_records_are_refused_with_key_value_and_fix(over, message):
    with pytest.raises(ValueError, match=message):
        validate_record(_record(**over))


def test_missing_keys_and_unordered_steps_are_refused_and_nothing_is_written(tmp_path):
    rec = _record()
    del rec["num_label_tokens"]
    with pytest.raises(ValueError, match=r"missing key\(s\) \['num_label_tokens'\]"):
        validate_record(rec)
    path = tmp_path / "x_training.jsonl"
    with pytest.raises(
        ValueError, match=r"record 1: 'step' found 0 after 0; required strictly increasing"
    ):
        write_training_jsonl(path, [_record(0), _record(0)])
    assert not path.exists()
    with pytest.raises(ValueError, match="found no records"):
        write_training_jsonl(path, [])


def test_a_nan_loss_is_written_as_automodel_would_and_read_back(tmp_path):
    path = write_training_jsonl(
        tmp_path / "d_training.jsonl", [_record(0), _record(1, loss=float("nan"))]
    )
    assert '"loss": NaN' in path.read_text()
    t = read_log_file(path)
    assert t.files[0].n_nonfinite == 1 and t.steps["loss"].isna().tolist() == [False, True]
    assert t.steps["format"].iloc[0] == "automodel_jsonl" and t.steps["run"].iloc[0] == "d"


def test_written_files_read_back_through_the_same_reader(tmp_path):
    recs = [_record(i, loss=3.0 - 0.1 * i) for i in range(5)]
    path = write_training_jsonl(Path(tmp_path) / "cpu_seq64_pooled_training.jsonl", recs)
    s = read_log_file(path).steps
    assert list(s["step"]) == list(range(5)) and s["run"].iloc[0] == "cpu_seq64_pooled"
    assert list(s["loss"]) == [r["loss"] for r in recs]
