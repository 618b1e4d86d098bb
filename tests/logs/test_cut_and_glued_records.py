"""Issue 27: a record cut by a kill, with the restart's first record appended on the same line, is
counted as cut and the restart's first record is read: no step of the restart is lost and no cut
value is read.

Variants are built here from the real Automodel JSONL logs under ../shared/reference/logs (the
training.jsonl fixture when it is absent) and from the real torchtitan text logs: record k cut at
many points, the restart's records appended from that point (a restart from scratch, or a resume
from the checkpoint at step k). Each run must read to the undecorated original's steps.
"""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from pooltk.logs import read_log_file

from _real_logs import VALUES  # noqa: E402  (tests/logs/_real_logs.py)

_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)([ T])(\d\d:\d\d:\d\d)")


@functools.cache
def _read(src: Path) -> pd.DataFrame:
    return read_log_file(src).steps


def _lines(src: Path) -> list[str]:
    text = src.read_text(encoding="utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def _later(line: str, seconds: int) -> str:
    def move(m: re.Match[str]) -> str:
        t = datetime.strptime(f"{m.group(1)} {m.group(3)}", "%Y-%m-%d %H:%M:%S") + timedelta(
            seconds=seconds
        )
        return t.strftime(f"%Y-%m-%d{m.group(2)}%H:%M:%S")

    return _STAMP.sub(move, line)


def _same(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert len(got) == len(want), (what, list(got["step"]), list(want["step"]))
    pd.testing.assert_frame_equal(
        got[VALUES].reset_index(drop=True),
        want[VALUES].reset_index(drop=True),
        check_categorical=False,
        obj=what,
    )


def _jsonl_bases(base_logs: list[Path]) -> list[Path]:
    out = [p for p in base_logs if p.suffix == ".jsonl"]
    assert out, "no JSONL base"
    return out


def _cuts(record: str) -> list[int]:
    """Where a kill may cut a record: just after its brace, inside a key, after a colon, inside a
    number, inside the timestamp string, before the closing brace, and evenly between."""
    points = {1, 3, record.index(":") + 1, record.index(":") + 2, len(record) - 1, len(record) - 2}
    points |= {m.start() + 2 for m in re.finditer(r'"timestamp": "', record)} | {
        m.end() + 5 for m in re.finditer(r'"timestamp": "', record)
    }
    points |= {m.start() + 1 for m in re.finditer(r"\d\.\d", record)}
    points |= {len(record) * k // 16 for k in range(1, 16)}
    return sorted(p for p in points if 0 < p < len(record))


RESTART_S = 600
"""The restart's clock: 10 minutes after the killed run's record (a relaunch's start-up)."""


@pytest.mark.parametrize("resume", ["from_scratch", "from_checkpoint"])
def test_a_jsonl_record_cut_by_a_kill_with_the_restarts_first_record_glued_loses_no_restart_step(
    base_logs, tmp_path, resume
):
    base_cut = {src: read_log_file(src).files[0].n_truncated for src in _jsonl_bases(base_logs)}
    for src in _jsonl_bases(base_logs):
        plain, lines = _read(src), _lines(src)
        k = min(
            len(plain) // 2, 9
        )  # the killed run wrote records 0..k-1 whole and record k in part
        start = 0 if resume == "from_scratch" else k  # a resume re-does the step that was cut
        restart = [_later(ln, RESTART_S) for ln in lines[start:]]
        want_restart = plain.iloc[start:].assign(
            timestamp=plain["timestamp"].iloc[start:] + pd.Timedelta(seconds=RESTART_S)
        )
        for cut in _cuts(lines[k]):
            path = tmp_path / f"{resume}_{cut}_training.jsonl"
            path.write_text(
                "\n".join(lines[:k] + [lines[k][:cut] + restart[0]] + restart[1:]) + "\n",
                encoding="utf-8",
            )
            table = read_log_file(path)
            f, s = table.files[0], table.steps
            what = (
                f"{src.name}: record {k} cut at {cut} ({lines[k][max(0, cut - 12) : cut]!r}), "
                f"restart {resume}"
            )
            signed = cut >= len(
                '{"step":'
            )  # shorter, the piece holds no record's signature: text before a record
            # the base's own cut records (a killed run's last line) come again in the restart
            assert f.n_truncated == f.n_skipped == base_cut[src] + int(signed), (
                what,
                f.skipped_by_reason,
            )
            if resume == "from_scratch":  # the step goes back: two runs, the restart whole
                assert len(f.runs) == 2, (what, f.runs)
                _same(s[s["run"] == f.runs[0]], plain.iloc[:k], what + ": the killed run")
                _same(s[s["run"] == f.runs[1]], want_restart, what + ": the restart")
            else:  # the steps go on from the checkpoint: one run, the cut step read once, from the
                # restart
                assert len(f.runs) == 1, (what, f.runs)
                _same(s, pd.concat([plain.iloc[:k], want_restart]), what)


def test_a_cut_record_followed_by_a_record_on_its_line_is_never_read_as_a_value(
    base_logs, tmp_path
):
    """The cut one is counted as cut wherever the cut fell, including inside a value that still
    parses."""
    for src in _jsonl_bases(base_logs):
        lines = _lines(src)
        record = json.loads(lines[1])
        text = json.dumps(record)
        for key in ("loss", "num_label_tokens", "mem"):
            if key not in record or not isinstance(record[key], (int, float)):
                continue
            at = text.index(f'"{key}": ') + len(f'"{key}": ') + 2  # two characters into the value
            path = tmp_path / f"value_{key}_training.jsonl"
            path.write_text("\n".join([lines[0], text[:at] + lines[2]]) + "\n", encoding="utf-8")
            s = read_log_file(path).steps
            assert list(s["step"]) == [
                json.loads(lines[0])["step"],
                json.loads(lines[2])["step"],
            ], (src.name, key)


def test_a_validation_jsonl_record_cut_with_the_restarts_record_glued_keeps_the_restarts_record(
    tmp_path,
):
    val = [
        json.dumps(
            {
                "step": s,
                "epoch": 0,
                "timestamp": f"2026-03-04T10:{s:02d}:00.000Z",
                "val_loss": 2.0 - s / 100,
                "lr": 1e-05,
                "num_label_tokens": 4096,
            }
        )
        for s in (10, 20, 30)
    ]
    restart = [
        _later(v, RESTART_S) for v in val
    ]  # the same values 10 minutes later: a relaunch's, never a copy
    path = tmp_path / "validation.jsonl"
    path.write_text(
        "\n".join([val[0], val[1], val[2][:40] + restart[0], *restart[1:]]) + "\n", encoding="utf-8"
    )
    table = read_log_file(path)
    f, s = table.files[0], table.steps
    assert list(s["step"]) == [10, 20, 10, 20, 30] and f.n_truncated == 1 and f.n_folded == 0
    assert (
        (s["kind"] == "val").all()
        and len(f.runs) == 2
        and "step went back from 20 to 10" in f.run_boundaries[0]
    )
    assert list(s[s["run"] == f.runs[1]]["step"]) == [10, 20, 30]


def test_a_jsonl_run_killed_in_its_second_record_and_restarted_from_scratch_is_two_runs(
    base_logs, tmp_path
):
    # one process writes the file: a step one below the last is a restart, never another rank's late
    # print
    for src in _jsonl_bases(base_logs):
        plain, lines = _read(src), _lines(src)
        restart = [_later(ln, RESTART_S) for ln in lines]
        path = tmp_path / "early_training.jsonl"
        path.write_text(
            "\n".join([lines[0], lines[1][:50] + restart[0], *restart[1:]]) + "\n", encoding="utf-8"
        )
        table = read_log_file(path)
        f, s = table.files[0], table.steps
        assert f.runs == ["early#1", "early#2"], (src.name, f.runs)
        _same(s[s["run"] == "early#1"], plain.iloc[:1], src.name)
        _same(
            s[s["run"] == "early#2"],
            plain.assign(timestamp=plain["timestamp"] + pd.Timedelta(seconds=RESTART_S)),
            src.name,
        )


def _titan_bases(base_logs: list[Path]) -> list[Path]:
    return [p for p in base_logs if "titan" in p.name and p.suffix == ".log"]


def test_a_torchtitan_step_line_cut_by_a_kill_with_the_restarts_first_step_line_glued_is_counted_cut(  # noqa: E501
    base_logs, tmp_path
):
    titan = _titan_bases(base_logs)
    assert titan, "no torchtitan base"
    for src in titan:
        plain, lines = _read(src), _lines(src)
        last = (
            int(plain["line"].iloc[-1]) - 1
        )  # the killed run's last step line, cut; the restart's first step line after it
        first = _later(lines[int(plain["line"].iloc[0]) - 1], RESTART_S)
        record = lines[last]
        begin = record.index("step:")
        for cut in range(begin + 6, len(record) - 1, 3):
            if record[cut - 1] == "%" or record[cut:].lstrip("\x1b[0123456789;m") == "":
                continue  # the cut fell after the record's last character (only a colour reset
                # lost): whole
            path = tmp_path / f"titan_{cut}.log"
            path.write_text(
                "\n".join(lines[:last] + [record[:cut] + first]) + "\n", encoding="utf-8"
            )
            table = read_log_file(path)
            what = f"{src.name}: last step line cut at {cut} ({record[max(0, cut - 14) : cut]!r})"
            want = pd.concat(
                [
                    plain.iloc[:-1],
                    plain.iloc[:1].assign(
                        timestamp=plain["timestamp"].iloc[:1] + pd.Timedelta(seconds=RESTART_S)
                    ),
                ]
            )
            _same(table.steps, want, what)
            assert table.files[0].n_skipped == 1, (what, table.files[0].skipped_by_reason)
