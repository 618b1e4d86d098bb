"""``python -m tools.cpu_runs`` (regenerates data/cpu_runs): a bad flag stops it before any rank."""

from __future__ import annotations

import pytest

from tools import cpu_runs


@pytest.mark.parametrize(
    ("argv", "flag", "found"),
    [
        (["--pp", "1"], "--pp", "1"),
        (["--microbatches", "2"], "--microbatches", "2"),  # fewer than the 4 stages
        (["--steps", "0"], "--steps", "0"),
        (["--seq-lens", "16384", "0"], "--seq-lens", "0"),
    ],
)
def test_a_bad_flag_exits_2_naming_the_flag_the_value_and_a_fix_before_any_rank(
    argv, flag, found, capsys, monkeypatch
):
    def no_run(*args, **kwargs):
        raise AssertionError("ranks started")

    monkeypatch.setattr(cpu_runs, "write_cpu_runs", no_run)
    with pytest.raises(SystemExit) as exit_:
        cpu_runs.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert f"{flag}: found {found}; required" in err and "Fix:" in err, err


def test_good_flags_reach_the_writer_with_their_values(monkeypatch, tmp_path, capsys):
    seen = {}

    def record(out, **kwargs):
        seen.update(kwargs, out=out)
        return [tmp_path / "a.jsonl"]

    monkeypatch.setattr(cpu_runs, "write_cpu_runs", record)
    argv = ["--out", str(tmp_path), "--seq-lens", "64", "--pp", "2", "--microbatches", "2"]
    assert cpu_runs.main(argv) == 0
    assert seen["out"] == str(tmp_path) and seen["seq_lens"] == (64,) and seen["pp"] == 2
    assert capsys.readouterr().out.strip() == str(tmp_path / "a.jsonl")
