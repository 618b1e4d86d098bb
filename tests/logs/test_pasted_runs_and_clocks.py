"""Issue 27: two runs pasted into one file are two runs when the clock goes back further than a real
run's clock can (a DST fall-back plus two nodes' skew); the DST and skew cases stay one run; copies
of one line printed by ranks on nodes whose clocks differ fold into one row.

Variants are built here from the real logs under ../shared/reference/logs (the format fixtures when
it is absent): an excerpt of a log ending at a step, then another run's records (the same log's, its
steps moved on, its clock moved back by a chosen amount, under another prefix or indentation). Each
run must read to the undecorated original's steps.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from pooltk.logs import read_log_file
from pooltk.logs.runs import CLOCK_BACK_MAX_S, DST_SHIFT_MAX_S, NODE_SKEW_MAX_S

from _real_logs import FIX, VALUES, run_of  # noqa: E402  (tests/logs/_real_logs.py)

_STAMP = re.compile(r"(\d{4}-\d\d-\d\d)([ T])(\d\d:\d\d:\d\d)")
_STEP = re.compile(
    r'("step": |step:\s*|\bstep )(\d+)'
)  # torchtitan's colour code stands right before step:
_RANKS = re.compile(r"^(?:\[[A-Za-z_]*\d+\]:)+")


def _shift(line: str, seconds: float) -> str:
    """Every timestamp of ``line`` moved by ``seconds`` (the fraction written after it is kept)."""

    def move(m: re.Match[str]) -> str:
        t = datetime.strptime(f"{m.group(1)} {m.group(3)}", "%Y-%m-%d %H:%M:%S") + timedelta(
            seconds=seconds
        )
        return t.strftime(f"%Y-%m-%d{m.group(2)}%H:%M:%S")

    return _STAMP.sub(move, line)


def _bump(line: str, by: int) -> str:
    """The record's step moved on by ``by``."""
    return _STEP.sub(lambda m: m.group(1) + str(int(m.group(2)) + by), line, count=1)


def _expect(plain: pd.DataFrame, *, step_by: int = 0, seconds: float = 0.0) -> pd.DataFrame:
    out = plain[VALUES].copy()
    out["step"] = out["step"] + step_by
    out["timestamp"] = out["timestamp"] + pd.Timedelta(seconds=seconds)
    return out.reset_index(drop=True)


def _same(got: pd.DataFrame, want: pd.DataFrame, what: str) -> None:
    assert len(got) == len(want), what
    pd.testing.assert_frame_equal(
        got[VALUES].reset_index(drop=True), want, check_categorical=False, obj=what
    )


@functools.cache
def _read(src: Path) -> pd.DataFrame:
    """The undecorated original's steps (read once per session)."""
    return read_log_file(src).steps


def _timed_bases(base_logs: list[Path]) -> list[Path]:
    """Bases whose records carry a timestamp (a clock to go back); at least one of them, always."""
    out = [p for p in base_logs if _read(p)["timestamp"].notna().all()]
    assert out, "no base log with timestamps"
    return out


def _pasted(
    src: Path, folder: Path, *, back_s: float, prefix: str | None, n_first: int = 4
) -> tuple[Path, dict]:
    """An excerpt of ``src`` ending at its ``n_first``-th record, then another run: every record of
    ``src``, its steps moved on past the excerpt's (4 -> 640 as in the issue), its first record
    ``back_s`` before the excerpt's last, each line behind ``prefix`` (None: the original's own
    prefix)."""
    text = src.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")
    plain = _read(src)
    first = plain.iloc[: min(n_first, len(plain))]
    cut = int(first["line"].iloc[-1])
    step_by = int(first["step"].iloc[-1]) + 636 - int(plain["step"].iloc[0])
    seconds = math.floor(
        (first["timestamp"].iloc[-1] - plain["timestamp"].iloc[0]).total_seconds() - back_s
    )  # whole s
    second = []
    for ln in plain["line"].drop_duplicates():
        line = _shift(_bump(lines[int(ln) - 1], step_by), seconds)
        second.append(line if prefix is None else prefix + _RANKS.sub("", line))
    path = folder / f"pasted_{src.stem}{src.suffix}"
    path.write_text("\n".join(lines[:cut] + second) + "\n", encoding="utf-8")
    return path, {"first": first, "plain": plain, "step_by": step_by, "seconds": seconds}


PREFIXES = {
    "indented": "    ",
    "tab_and_spaces": "\t  ",
    "another_rank": "[rank1]:",
    "pdsh_host": "gpu-node-9: ",
    "same_prefix": None,
}
"""How the pasted run's lines are decorated (the issue's case: another prefix and indentation)."""


def test_the_issues_case_a_torchtitan_excerpt_then_another_runs_step_640_86_days_earlier_is_two_runs(  # noqa: E501
    base_logs, tmp_path
):
    titan = [p for p in _timed_bases(base_logs) if "titan" in p.name and p.suffix == ".log"]
    src = titan[1] if len(titan) > 1 else (FIX / "torchtitan_wps_2024.log")
    path, ref = _pasted(src, tmp_path, back_s=86 * 86400, prefix="    ")
    table = read_log_file(path)
    f = table.files[0]
    assert f.runs == [f"{run_of(path)}#1", f"{run_of(path)}#2"]
    assert "the clock went back 86 days" in f.run_boundaries[0]
    s = table.steps
    _same(s[s["run"] == f.runs[0]], _expect(ref["first"]), "the excerpt")
    _same(
        s[s["run"] == f.runs[1]],
        _expect(ref["plain"], step_by=ref["step_by"], seconds=ref["seconds"]),
        "the pasted run",
    )
    assert int(s[s["run"] == f.runs[1]]["step"].iloc[0]) == int(ref["first"]["step"].iloc[-1]) + 636


@pytest.mark.parametrize(
    ("back_s", "prefix"),
    [
        (CLOCK_BACK_MAX_S + 60, "same_prefix"),
        (CLOCK_BACK_MAX_S + 60, "indented"),
        (86400.0, "another_rank"),
        (86 * 86400.0, "tab_and_spaces"),
        (86 * 86400.0, "same_prefix"),
        (3 * 365 * 86400.0, "pdsh_host"),
    ],
    ids=[
        "bound+1min-same",
        "bound+1min-indented",
        "1day-rank1",
        "86days-tab",
        "86days-same",
        "3years-pdsh",
    ],
)
def test_a_run_pasted_below_another_whose_clock_is_further_back_than_dst_plus_skew_is_another_run(
    base_logs, tmp_path, back_s, prefix
):
    for src in _timed_bases(base_logs):
        path, ref = _pasted(src, tmp_path, back_s=back_s, prefix=PREFIXES[prefix])
        table = read_log_file(path)
        f = table.files[0]
        what = f"{src.name} pasted {back_s:.0f} s back, {prefix}"
        assert f.runs == [f"{run_of(path)}#1", f"{run_of(path)}#2"], what
        assert "the clock went back" in f.run_boundaries[0], (what, f.run_boundaries)
        s = table.steps
        _same(s[s["run"] == f.runs[0]], _expect(ref["first"]), what + ": the excerpt")
        _same(
            s[s["run"] == f.runs[1]],
            _expect(ref["plain"], step_by=ref["step_by"], seconds=ref["seconds"]),
            what + ": the pasted run",
        )


@pytest.mark.parametrize(
    ("back_s", "prefix"),
    [
        (8.0, "same_prefix"),
        (8.0, "indented"),
        (8.0, "another_rank"),
        (3600.0, "same_prefix"),
        (3600.0, "pdsh_host"),
        (DST_SHIFT_MAX_S, "same_prefix"),
        (CLOCK_BACK_MAX_S - 1, "same_prefix"),
        (CLOCK_BACK_MAX_S - 1, "tab_and_spaces"),
    ],
    ids=[
        "skew8s-same",
        "skew8s-indented",
        "skew8s-rank1",
        "dst1h-same",
        "dst1h-pdsh",
        "troll2h-same",
        "bound-same",
        "bound-tab",
    ],
)
def test_a_clock_going_back_by_a_dst_shift_or_node_skew_while_the_steps_go_on_stays_one_run(
    base_logs, tmp_path, back_s, prefix
):
    for src in _timed_bases(base_logs):
        path, ref = _pasted(src, tmp_path, back_s=back_s, prefix=PREFIXES[prefix])
        table = read_log_file(path)
        f = table.files[0]
        what = f"{src.name} {back_s:.0f} s back, {prefix}"
        assert f.runs == [run_of(path)] and f.run_boundaries == [], (what, f.run_boundaries)
        want = pd.concat(
            [
                _expect(ref["first"]),
                _expect(ref["plain"], step_by=ref["step_by"], seconds=ref["seconds"]),
            ]
        )
        _same(table.steps, want.reset_index(drop=True), what)
        if (
            prefix == "same_prefix" and back_s > 5
        ):  # the stream's own clock went back: said, not split
            assert any("timestamps went back" in n and "not a restart" in n for n in f.notes), (
                what,
                f.notes,
            )


def test_a_clock_going_forward_by_86_days_is_time_passing_not_another_run(base_logs, tmp_path):
    # a suspended job (scontrol suspend) resumes the same processes days later: only a clock going
    # back is impossible
    for src in _timed_bases(base_logs):
        path, ref = _pasted(src, tmp_path, back_s=-86 * 86400, prefix=None)
        table = read_log_file(path)
        assert table.files[0].runs == [run_of(path)], src.name
        assert len(table.steps) == len(ref["first"]) + len(ref["plain"]), src.name


def test_the_bound_is_a_dst_fall_back_plus_two_nodes_each_within_ntpds_panic_threshold():
    assert (
        DST_SHIFT_MAX_S == 2 * 3600
    )  # Antarctica/Troll: +02 -> +00, the largest shift in the tz database
    assert (
        NODE_SKEW_MAX_S == 2 * 1000
    )  # ntpd's default panic threshold, 1000 s, on each of two nodes
    assert CLOCK_BACK_MAX_S == DST_SHIFT_MAX_S + NODE_SKEW_MAX_S


def test_a_later_stream_pasted_after_a_restart_starts_a_third_run_not_the_second(tmp_path):
    # run 1 (rank 0), its restart (steps back: run 2), then another run 86 days earlier under no
    # prefix: run 3
    src = FIX / "torchtitan_wps_2024.log"
    lines = [ln for ln in src.read_text().splitlines() if "step:" in ln]
    first = [f"[rank0]:{ln}" for ln in lines]
    restart = [f"[rank0]:{_shift(ln, 600)}" for ln in lines]
    pasted = ["  " + _bump(_shift(ln, -86 * 86400), 640) for ln in lines]
    path = tmp_path / "three.log"
    path.write_text("\n".join(first + restart + pasted) + "\n")
    f = read_log_file(path).files[0]
    assert f.runs == ["three#1", "three#2", "three#3"], f.run_boundaries
    assert "step went back" in f.run_boundaries[0] and "clock went back" in f.run_boundaries[1]


# ------------------------------------------------------------ copies from nodes whose clocks differ


def _text_bases(base_logs: list[Path]) -> list[Path]:
    """Text logs: what ranks print to a shared stdout (a JSONL file has one writer, so no copies
    from other nodes)."""
    out = [p for p in base_logs if p.suffix == ".log"]
    assert out, "no text base"
    return out


def _two_nodes(src: Path, folder: Path, *, skews: tuple[float, ...], late: bool) -> Path:
    """``src`` as ranks without a prefix on several nodes print it: every line once per node, node
    k's clock ``skews[k - 1]`` s off node 0's; ``late``: the other nodes' copy of a step line comes
    after node 0's next one (start-up lines all come before the first step: every rank prints them
    before the first collective)."""
    text = src.read_text(encoding="utf-8")
    lines = [
        _RANKS.sub("", ln)
        for ln in (text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"))
    ]
    records = set(_read(src)["line"])
    out: list[str] = []
    held: list[str] = []
    for n, ln in enumerate(lines, start=1):
        out.append(ln)
        copies = [_shift(ln, s) for s in skews]
        if late and n in records:
            out += held
            held = copies
        else:
            out += copies
    out += held
    path = folder / f"nodes_{src.stem}{src.suffix}"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("skews", "late"),
    [
        ((8.0,), False),
        ((-8.0,), False),
        ((8.0,), True),
        ((-8.0, 3.0, 8.0), False),
        ((NODE_SKEW_MAX_S - 1,), False),
    ],
    ids=["8s_ahead", "8s_behind", "8s_behind_a_line_late", "four_nodes", "skew_bound"],
)
def test_one_line_printed_by_ranks_on_nodes_whose_clocks_differ_is_one_row_with_the_first_copys_values(  # noqa: E501
    base_logs, tmp_path, skews, late
):
    for src in _text_bases(base_logs):
        plain = _read(src)
        path = _two_nodes(src, tmp_path, skews=skews, late=late)
        table = read_log_file(path)
        what = f"{src.name} on {len(skews) + 1} nodes, clocks {skews} s off"
        _same(table.steps, _expect(plain), what)
        assert table.files[0].n_folded == len(skews) * len(plain), what
        assert table.files[0].runs == [run_of(path)], what


def test_copies_from_two_nodes_that_differ_in_a_value_are_both_kept(base_logs, tmp_path):
    for src in _text_bases(base_logs):
        plain = _read(src)
        path = _two_nodes(src, tmp_path, skews=(8.0,), late=False)
        lines = path.read_text(encoding="utf-8").split("\n")
        # node 1's copies (every second line) name another step: a different record, never folded
        # into node 0's
        path.write_text(
            "\n".join(ln if i % 2 == 0 else _bump(ln, 1_000_000) for i, ln in enumerate(lines)),
            encoding="utf-8",
        )
        s = read_log_file(path).steps
        assert len(s) == 2 * len(plain), src.name
        assert (s["step"] >= 1_000_000).sum() == len(plain), src.name
