"""Every flag that names an output (``--csv``, ``--out``) is checked before the command works, and a
write that fails is an error naming the flag, never a traceback (pooltk.cli.errors.check_output and
write_output)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pooltk.cli import main

REPO = Path(__file__).resolve().parents[2]
LOG = REPO / "tests" / "logs" / "fixtures" / "automodel_text_2025_07.log"

COMMANDS = {  # each would work for minutes (or at all) if the output were not checked first
    "logs": lambda out: ["logs", "--csv", out, str(LOG)],
    "fuzz": lambda out: ["fuzz", "--cases", "500", "--csv", out],
    "schedules": lambda out: ["schedules", "--pp", "4", "--csv", out],
    "schedules --validate": lambda out: ["schedules", "--validate", "--csv", out],
    "memory --measure": lambda out: ["memory", "--measure", "--csv", out],
}
LAB = {"logs", "memory --measure"}
"""Commands whose work needs the lab stack before they read their flags (a core install names
the extra instead: tests/unit/test_core_and_lab.py)."""


def _lab_stack(command: str) -> None:
    if command in LAB:
        pytest.importorskip("pandas")
        pytest.importorskip("polars")


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a_file"
    path.write_text("not a folder\n")
    return path


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_output_under_a_file_is_refused_before_the_command_works(command, a_file, capsys):
    _lab_stack(command)
    rc, err = _error(capsys, COMMANDS[command](str(a_file / "out.csv")))
    assert rc == 2
    assert f"error: --csv: found '{a_file / 'out.csv'}' under '{a_file}', which is a file" in err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_folder_given_as_the_output_file_is_refused_naming_a_file_in_it(
    command, tmp_path, capsys
):
    _lab_stack(command)
    rc, err = _error(capsys, COMMANDS[command](str(tmp_path)))
    assert rc == 2
    assert f"--csv: found '{tmp_path}', a folder; required a file" in err
    assert f"e.g. {tmp_path / 'out.csv'}" in err


def test_the_reports_output_folder_may_not_be_a_file(a_file, capsys):
    rc, err = _error(capsys, ["report", "--out", str(a_file), "--notebooks", "none"])
    assert rc == 2 and f"--out: found '{a_file}', a file; required a folder" in err


def test_missing_folders_of_an_output_are_made(tmp_path, capsys):
    _lab_stack("logs")
    out = tmp_path / "new" / "deeper" / "runs.csv"
    assert main(["logs", "--csv", str(out), str(LOG)]) == 0
    assert out.read_text().startswith("run,")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize(
    "argv",
    [["logs", "--csv", "/dev/full", str(LOG)], ["schedules", "--pp", "4", "--csv", "/dev/full"]],
)
def test_a_write_that_fails_names_the_flag_and_the_cause_and_exits_1(argv, capsys):
    _lab_stack(argv[0])
    rc, err = _error(capsys, argv)
    assert rc == 1
    assert "error: --csv: found '/dev/full' not written: No space left on device" in err


def test_the_composition_records_output_is_checked_before_the_suite_runs(a_file, capsys):
    from pooltk.parity.compositions import main as compositions

    with pytest.raises(SystemExit) as exit_:
        compositions(["--csv", str(a_file / "rows.csv")])
    assert exit_.value.code == 2
    assert f"--csv: found '{a_file / 'rows.csv'}' under '{a_file}'" in capsys.readouterr().err
