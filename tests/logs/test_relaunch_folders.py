"""Two launches into one output folder are two runs, in every file the folder holds (issue #19).

Synthetic folders written here from the formats: NeMo Automodel's ``training.jsonl`` /
``validation.jsonl`` (one JSON object per step, ``step`` and an ISO ``timestamp``), torchtitan's
structured logs (``{source}.global_rank_{r}.{YYYYmmdd-HHMMSS}-{6}.jsonl``, one per rank per launch).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pooltk.logs import read_logs

T0 = datetime(2026, 3, 4, 10, 0, 0, tzinfo=timezone.utc)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def _automodel_folder(
    root: Path, *, train: list[tuple[int, list[int]]], val: list[tuple[int, list[int]]]
) -> Path:
    """(launch start in s, steps) per launch, for training.jsonl and validation.jsonl of one
    folder."""
    run = root / "out_relaunch"
    run.mkdir()
    with open(run / "training.jsonl", "w") as f:
        for start, steps in train:
            for s in steps:
                f.write(
                    json.dumps(
                        {
                            "step": s,
                            "epoch": 0,
                            "timestamp": _iso(T0 + timedelta(seconds=start + s)),
                            "loss": 5.0 - 0.1 * s,
                            "grad_norm": 1.0,
                            "lr": 0.1,
                            "mem": 1.5,
                            "tps": 400.0,
                            "tps_per_gpu": 200.0,
                            "num_tokens_per_step": 128,
                            "num_label_tokens": 48,
                        }
                    )
                    + "\n"
                )
    with open(run / "validation.jsonl", "w") as f:
        for start, steps in val:
            for s in steps:
                f.write(
                    json.dumps(
                        {
                            "step": s,
                            "epoch": 0,
                            "timestamp": _iso(T0 + timedelta(seconds=start + s + 0.5)),
                            "val_loss": 5.2 - 0.01 * s,
                            "lr": 0.1,
                            "num_label_tokens": 96,
                            "mem": 1.5,
                        }
                    )
                    + "\n"
                )
    return run


def test_a_relaunch_folders_validation_file_splits_into_the_same_two_runs_as_its_training_file(
    tmp_path,
):
    run = _automodel_folder(
        tmp_path, train=[(0, [0, 1, 2]), (300, [0, 1, 2])], val=[(0, [1, 2]), (300, [1, 2])]
    )
    s = read_logs(run).steps
    assert sorted(s["run"].astype(str).unique()) == ["out_relaunch#1", "out_relaunch#2"]
    for name, start in (("out_relaunch#1", 0), ("out_relaunch#2", 300)):
        mine = s[s["run"] == name]
        assert list(mine[mine["kind"] == "train"]["step"]) == [0, 1, 2]
        val = mine[mine["kind"] == "val"]
        assert list(val["step"]) == [1, 2]
        assert (val["timestamp"] >= (T0 + timedelta(seconds=start)).replace(tzinfo=None)).all()


def test_validation_rows_join_the_launch_that_was_training_at_their_time_when_only_one_launch_validated(  # noqa: E501
    tmp_path,
):
    run = _automodel_folder(tmp_path, train=[(0, [0, 1, 2]), (300, [0, 1, 2])], val=[(300, [1, 2])])
    table = read_logs(run)
    s = table.steps
    assert sorted(s["run"].astype(str).unique()) == [
        "out_relaunch#1",
        "out_relaunch#2",
    ]  # no third, train-less run
    assert list(s[s["kind"] == "val"]["run"].astype(str)) == ["out_relaunch#2", "out_relaunch#2"]
    assert any("joined by time" in n for f in table.files for n in f.notes)


def test_pooltk_logs_json_gives_a_relaunch_folders_first_and_last_step_as_integers(tmp_path):
    run = _automodel_folder(
        tmp_path, train=[(0, [0, 1, 2]), (300, [0, 1, 2])], val=[(0, [1, 2]), (300, [1, 2])]
    )
    out = subprocess.run(
        [sys.executable, "-m", "pooltk", "logs", str(run), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    runs = json.loads(out)["runs"]
    assert [(r["run"], r["first_step"], r["last_step"]) for r in runs] == [
        ("out_relaunch#1", 0, 2),
        ("out_relaunch#2", 0, 2),
    ]
    assert all(type(r["first_step"]) is int and type(r["last_step"]) is int for r in runs)


def _titan_file(folder: Path, rank: int, start: datetime, steps: int, tag: str) -> None:
    name = f"training.global_rank_{rank}.{start:%Y%m%d-%H%M%S}-{tag}.jsonl"
    with open(folder / name, "w") as f:
        base = int(start.timestamp() * 1e6)
        f.write(
            json.dumps(
                {
                    "rank": rank,
                    "global_rank": rank,
                    "local_rank": rank,
                    "source": "training",
                    "time_us": base,
                    "log_type": "instant",
                    "log_type_name": "structured_logger_started",
                    "event_name": None,
                }
            )
            + "\n"
        )
        for s in range(1, steps + 1):
            t = base + s * 2_000_000
            f.write(
                json.dumps(
                    {
                        "rank": rank,
                        "global_rank": rank,
                        "local_rank": rank,
                        "source": "training",
                        "step": s,
                        "time_us": t - 1000,
                        "log_type": "instant",
                        "log_type_name": "metric_value",
                        "event_name": "loss_metrics/global_avg_loss",
                        "value": 4.0 - 0.1 * s,
                    }
                )
                + "\n"
            )
            f.write(
                json.dumps(
                    {
                        "rank": rank,
                        "global_rank": rank,
                        "local_rank": rank,
                        "source": "training",
                        "step": s,
                        "time_us": t,
                        "log_type": "event",
                        "log_type_name": "step_end",
                        "event_name": None,
                        "value": 2000.0,
                    }
                )
                + "\n"
            )


def _titan_runs(folder: Path) -> dict[str, list[tuple[int, int]]]:
    s = read_logs(folder).steps
    return {
        str(name): sorted(zip(g["rank"].astype(int), g["step"].astype(int)))
        for name, g in s.groupby(s["run"].astype(str))
    }


def test_two_torchtitan_launches_into_one_structured_logs_folder_are_two_runs_with_both_ranks_each(
    tmp_path,
):
    logs = tmp_path / "dump" / "structured_logs"
    logs.mkdir(parents=True)
    later = T0 + timedelta(minutes=15)
    for rank, skew in ((0, 0), (1, 3)):  # ranks' start stamps ~3 s apart
        _titan_file(logs, rank, T0 + timedelta(seconds=skew), 3, f"A{rank}BCDE")
        _titan_file(logs, rank, later - timedelta(seconds=skew), 2, f"F{rank}GHIJ")
    runs = _titan_runs(logs)
    assert runs == {
        "dump#1": [(r, s) for r in (0, 1) for s in (1, 2, 3)],
        "dump#2": [(r, s) for r in (0, 1) for s in (1, 2)],
    }


def test_one_torchtitan_launch_with_rank_stamps_seconds_apart_stays_one_run(tmp_path):
    logs = tmp_path / "job" / "structured_logs"
    logs.mkdir(parents=True)
    for rank in range(4):
        _titan_file(logs, rank, T0 + timedelta(seconds=rank), 3, f"K{rank}LMNO")
    assert list(_titan_runs(logs)) == ["job"]


def test_a_torchtitan_relaunch_within_seconds_splits_where_a_rank_starts_again(tmp_path):
    logs = tmp_path / "job" / "structured_logs"
    logs.mkdir(parents=True)
    for rank in range(2):
        _titan_file(logs, rank, T0 + timedelta(seconds=rank), 1, f"P{rank}QRST")
        _titan_file(logs, rank, T0 + timedelta(seconds=10 + rank), 2, f"U{rank}VWXY")
    runs = _titan_runs(logs)
    assert runs == {"job#1": [(0, 1), (1, 1)], "job#2": [(0, 1), (0, 2), (1, 1), (1, 2)]}


def _titan_text_launch(prefixes: list[str], start_h: int, steps: int) -> list[str]:
    """torchtitan's text log of one launch: the start-up banner, then one step line per step per
    prefix."""
    out = [
        f"{p}[titan] 2026-10-02 {start_h:02d}:00:00,000 - root - INFO - Starting job: llama3 debug"
        for p in prefixes
    ]
    for s in range(1, steps + 1):
        out += [
            f"{p}[titan] 2026-10-02 {start_h:02d}:00:{10 + s:02d},000 - root - INFO - "
            f"step: {s:2}  loss: {4 - 0.1 * s:8.5f}  "
            f"grad_norm:  1.0000  memory: 61.00GiB(32.57%)  tps: 20,000  tflops: 200.00  mfu: 8.00%"
            for p in prefixes
        ]
    return out


def test_a_plain_launch_then_a_rank_prefixed_launch_appended_to_one_log_are_two_runs(tmp_path):
    (tmp_path / "train").mkdir()
    path = tmp_path / "train" / "train.log"
    path.write_text(
        "\n".join(
            _titan_text_launch([""], 8, 3) + _titan_text_launch(["[rank0]:", "[rank1]:"], 9, 2)
        )
        + "\n"
    )
    table = read_logs(path)
    s = table.steps[table.steps["kind"] == "train"]
    assert table.files[0].runs == ["train#1", "train#2"]
    assert (
        list(s[s["run"] == "train#1"]["step"]) == [1, 2, 3]
        and s[s["run"] == "train#1"]["rank"].isna().all()
    )
    second = s[s["run"] == "train#2"]
    assert sorted(zip(second["rank"].astype(int), second["step"])) == [
        (0, 1),
        (0, 2),
        (1, 1),
        (1, 2),
    ]
