"""``pooltk schedules`` prints the per-schedule table, JSON and CSV, and names unknown schedules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pooltk.cli import main


def test_table_shows_stock_live_and_tight_per_stage(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "schedules",
            "--schedule",
            "interleaved1f1b",
            "--pp",
            "4",
            "--vpp",
            "2",
            "--microbatches",
            "8",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "== Interleaved1F1B  pp=4 vpp=2 M=8" in out
    assert "stock  stock-lazy  live  tight" in out
    # torch >= 2.15 (measured, tests/memory/test_stock_lazy.py): the live set, all 8 forward on the
    # last stage 7
    assert "sets: stock 112, stock-lazy (torch >= 2.15) 52," in out
    last = next(
        line.split() for line in out.splitlines() if line.split()[:3] == ["7", "3", "forward"]
    )
    assert last[3:6] == ["8", "8", "2"]  # stock, stock-lazy, live


def test_unknown_schedule_exits_2_and_lists_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc = main(["schedules", "--schedule", "nosuch"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "found 'nosuch'" in err and "1F1B" in err and "DualPipeV" in err


def test_json_carries_rows_totals_and_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["schedules", "--schedule", "1f1b", "--pp", "4", "--microbatches", "2", "8", "--json"]
    )
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    live = {
        (r["stage"], r["direction"]): r["live_peak"]
        for r in doc["rows"]
        if r["n_microbatches"] == 8
    }
    assert [live[(i, "forward")] for i in range(4)] == [0, 3, 2, 1]
    assert doc["totals"][0]["stock"] == 48
    assert [r["n_microbatches"] for r in doc["refused"]] == [2]


def test_csv_writes_the_tidy_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd

    path = tmp_path / "t.csv"
    rc = main(
        ["schedules", "--schedule", "gpipe", "--pp", "3", "--microbatches", "4", "--csv", str(path)]
    )
    capsys.readouterr()
    assert rc == 0
    frame = pd.read_csv(path)
    assert len(frame) == 6
    assert frame[frame.direction == "forward"].live_peak.tolist() == [0, 4, 4]


def test_negative_slack_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["schedules", "--schedule", "1f1b", "--slack", "-1"])
    assert rc == 2
    assert "--slack: found -1" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--factors", "1"], "--factors"),
        (["--no-guard-checks"], "--no-guard-checks"),
        (["--validate", "--microbatches", "8"], "--microbatches"),
        (["--validate", "--vpp", "2"], "--vpp"),
        (["--validate", "--slack", "0", "--grad-slack", "0"], "--slack, --grad-slack"),
        (["--validate", "--set-mib", "416"], "--set-mib"),
        (["--validate", "--forward-only"], "--forward-only"),
        (["--validate", "--defer-pp-recv", "on"], "--defer-pp-recv"),
    ],
)
def test_a_flag_the_chosen_mode_would_ignore_is_refused(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    from pooltk.cli import schedules

    monkeypatch.setattr(schedules, "_validate", lambda args: pytest.fail("it ran the grid"))
    assert main(["schedules", "--schedule", "1F1B", "--pp", "2", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"pooltk schedules: error: found {named} ") and "fix:" in err.lower()
