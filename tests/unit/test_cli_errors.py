"""[Note: command-line errors]: every bad flag value is reported as the flag, the value found, the
rule and a fix."""

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
    (
        ["parity", "--schedule", "ZBVZeroBubble", "--vpp", "1"],
        "--vpp",
        "1 with --schedule ZBVZeroBubble",
    ),
    (["parity", "--schedule", "1F1B", "--vpp", "2"], "--vpp", "2 with --schedule 1F1B"),
    (
        ["parity", "--schedule", "Interleaved1F1B", "--frontend", "both"],
        "--frontend",
        "'both' with --vpp 2",
    ),
    (
        ["parity", "--schedule", "DualPipeV", "--pp", "4", "--microbatches", "4"],
        "--microbatches",
        "4 with --schedule DualPipeV --pp 4 --vpp 2",
    ),
    # a V schedule at --vpp 3 was named --microbatches, with a fix (--microbatches 24) that could
    # not fix it; --shortfall without --force launched every rank, each refused naming force=True
    (
        ["parity", "--schedule", "ZBVZeroBubble", "--vpp", "3"],
        "--vpp",
        "3 with --schedule ZBVZeroBubble",
    ),
    (["parity", "--shortfall", "1"], "--shortfall", "1 without --force"),
    (["report", "--jobs", "0"], "--jobs", "0"),
    (["report", "--timeout", "-5"], "--timeout", "-5.0"),
    (["report", "--parity-steps", "0"], "--parity-steps", "0"),
    (["fuzz", "--pp", "2", "1"], "--pp", "1"),
    (["fuzz", "--cases", "0"], "--cases", "0"),
    # infinity is a float argparse takes, and it is > 0 (parity's ranks failed on it)
    (["parity", "--timeout", "inf"], "--timeout", "inf"),
    (["report", "--timeout", "inf"], "--timeout", "inf"),
]


@pytest.mark.parametrize(("argv", "flag", "found"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_a_bad_flag_value_names_the_flag_the_value_and_a_fix_and_exits_2(argv, flag, found, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"pooltk {argv[0]}: error: {flag}: found {found}; required "), err
    fix = err.split(" Fix: ", 1)[1]
    assert re.search(r"--[a-z]", fix) or "leave it" in fix, (
        err
    )  # the fix speaks in flags, not library fields
    assert "Spec." not in err and "PoolConfig." not in err, err


K3 = ["--preset", "kimi-k3-gb200-2k-hidden"]


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", *K3, "--boundary-mib", "inf"],
        ["memory", *K3, "--capacity", "inf"],
        ["memory", *K3, "--capacity", "gb200", "--reference-peak-gib", "inf"],
        ["memory", *K3, "--capacity", "gb200", "--weights-gib", "inf"],
        ["estimate", "--preset", "llama3-70b-pp8", "--capacity", "inf"],
        ["estimate", "--preset", "llama3-70b-pp8", "--overhead-gib", "inf"],
    ],
    ids=lambda argv: " ".join(argv[-2:]),
)
def test_an_infinite_size_is_refused_as_a_finite_number(argv, capsys):
    assert main(argv) == 2  # was an OverflowError from round(inf * 2**30)
    err = capsys.readouterr().err
    assert f"error: {argv[-2]}: found inf; required a finite " in err and "Traceback" not in err


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
        "--jobs",
        "0",
        "an integer >= 1",
        "--jobs 1",
    )


def test_a_multi_stage_schedule_defaults_to_two_stages_per_rank_and_pools_with_auto():
    import argparse

    from pooltk.parity.command import check_args, register, spec_from_args

    parser = argparse.ArgumentParser()
    register(parser)
    args = parser.parse_args(
        [
            "--schedule",
            "Interleaved1F1B",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--auto",
            "--sharing",
            "stage",
        ]
    )
    check_args(args)
    spec = spec_from_args(args)
    assert args.vpp == 2 and {v.stages_per_rank for v in spec.variants} == {2}
    pooled = [v for v in spec.variants if v.pooled]
    assert [(v.install_schedule, v.config.sharing) for v in pooled] == [("auto", "stage")]


def test_torch_2_11s_v_schedule_warm_up_failure_on_gloo_is_named_and_nothing_else_is():
    from pooltk.parity.rank import known_cause

    text = (
        '  File ".../schedules.py", line 1526, in _initialize_stages\n'
        "    _wait_batch_p2p(_batch_p2p(all_ops))\n"
        "RuntimeError: [enforce fail at pair.cc:789] state_ >= CONNECTED. 1 vs 4. "
        "Pair is not connected "
        "([127.0.0.1]:55202$1 <--> [none])\n"
    )
    assert "same rank (a V schedule)" in known_cause(text) and "NCCL" in known_cause(text)
    assert known_cause(text.replace("_initialize_stages", "_step_microbatches")) == ""
    assert known_cause("RuntimeError: Connection reset by peer") == ""
