"""[Note: command-line errors]: every bad flag value is reported as the flag, the value found, the rule and a fix."""

from __future__ import annotations

import re

import pytest

from pooltk.cli import main
from pooltk.cli.errors import FlagError, check_flag_int, message

CASES = [
    (["parity", "--pp", "0"], "--pp", "0"),
    (["parity", "--pp", "4", "--microbatches", "0"], "--microbatches", "0"),
    (["parity", "--slack", "-1"], "--slack", "-1"),
    (["parity", "--grad-slack", "-2"], "--grad-slack", "-2"),
    (["parity", "--steps", "0"], "--steps", "0"),
    (["parity", "--timeout", "0"], "--timeout", "0.0"),
    (["parity", "--schedule", "NoSuchSchedule"], "--schedule", "'NoSuchSchedule'"),
    (["report", "--jobs", "0"], "--jobs", "0"),
    (["report", "--timeout", "-5"], "--timeout", "-5.0"),
    (["report", "--parity-steps", "0"], "--parity-steps", "0"),
    (["cpu-runs", "--pp", "1"], "--pp", "1"),
    (["cpu-runs", "--microbatches", "2"], "--microbatches", "2"),
    (["cpu-runs", "--seq-lens", "16384", "0"], "--seq-lens", "0"),
    (["fuzz", "--pp", "2", "1"], "--pp", "1"),
    (["fuzz", "--cases", "0"], "--cases", "0"),
]


@pytest.mark.parametrize(("argv", "flag", "found"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_flag_value_names_the_flag_the_value_and_a_fix_and_exits_2(argv, flag, found, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"pooltk {argv[0]}: {flag}: found {found}; required "), err
    fix = err.split(" Fix: ", 1)[1]
    assert re.search(r"--[a-z]", fix) or "leave it" in fix, err  # the fix speaks in flags, not library fields
    assert "Spec." not in err and "PoolConfig." not in err, err


def test_a_library_field_error_is_reworded_to_the_flag_from_its_fields():
    from pooltk import PoolConfig
    from pooltk.parity.command import FIELDS

    with pytest.raises(ValueError) as info:
        PoolConfig(slack=-3)
    text = message(info.value, FIELDS)
    assert text.startswith("--slack: found -3; required an integer >= 0."), text
    assert message(ValueError("plain"), FIELDS) == "plain"


def test_flag_errors_carry_their_fields():
    with pytest.raises(FlagError) as info:
        check_flag_int("--jobs", 0, low=1, fix="--jobs 1")
    assert (info.value.what, info.value.found, info.value.required, info.value.fix) == (
        "--jobs", "0", "an integer >= 1", "--jobs 1")
