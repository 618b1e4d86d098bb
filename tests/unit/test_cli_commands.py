"""Every user command and every flag, frozen: adding, removing or renaming one fails here.

The list is the command line's contract (docs/pool.md, "Every command's flags"). A change to it
is deliberate: edit the list below in the same change, and the documents with it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pooltk.cli import _build_parser, main

SHAPE = ("--pp", "--microbatches", "--global-batch", "--micro-batch", "--dp", "--seq-len")

FLAGS: dict[str, tuple[str, ...]] = {
    "probe": ("--json",),
    "parity": (
        "--pp",
        "--microbatches",
        "--steps",
        "--hidden",
        "--seq-len",
        "--rows",
        "--vpp",
        "--slack",
        "--grad-slack",
        "--policy",
        "--schedule",
        "--auto",
        "--sharing",
        "--frontend",
        "--force",
        "--no-guard",
        "--shortfall",
        "--eval-between-steps",
        "--json",
        "--timeout",
    ),
    "memory": (
        "--preset",
        "--config",
        "--list-presets",
        "--list-devices",
        *SHAPE,
        "--hidden",
        "--dtype",
        "--schedule",
        "--vpp",
        "--sharing",
        "--allow-unpoolable",
        "--slack",
        "--grad-slack",
        "--policy",
        "--boundary-mib",
        "--capacity",
        "--reference-peak-gib",
        "--reference-variant",
        "--reference-stage",
        "--weights-gib",
        "--measure",
        "--reps",
        "--csv",
        "--steps",
        "--k3-story",
        "--estimate",
        "--unit",
        "--compare",
        "--json",
    ),
    "estimate": (
        "--preset",
        "--config",
        "--builder",
        "--model-config",
        *SHAPE,
        "--dtype",
        "--schedule",
        "--vpp",
        "--slack",
        "--grad-slack",
        "--sharing",
        "--checkpointing",
        "--split",
        "--ep",
        "--variants",
        "--ranks",
        "--optimizer",
        "--optimizer-impl",
        "--return-outputs",
        "--steps",
        "--real",
        "--jobs",
        "--capacity",
        "--overhead-gib",
        "--run-log",
        "--unit",
        "--json",
    ),
    "schedules": (
        "--schedule",
        "--pp",
        "--vpp",
        "--microbatches",
        "--defer-pp-recv",
        "--forward-only",
        "--slack",
        "--grad-slack",
        "--set-mib",
        "--validate",
        "--factors",
        "--no-guard-checks",
        "--json",
        "--csv",
    ),
    "logs": (
        "PATH",
        "--csv",
        "--json",
        "--format",
        "--engine",
        "--list-formats",
        "--strict",
        "--world-size",
        "--pp",
        "--tp",
        "--global-batch",
        "--seq-len",
        "--warmup-steps",
        "--active-params",
        "--flops-per-token",
        "--peak-tflops",
        "--device-capacity-gib",
        "--device-capacity-gb",
    ),
    "report": (
        "--out",
        "--notebooks",
        "--no-summary",
        "--jobs",
        "--parity-microbatches",
        "--parity-steps",
        "--timeout",
        "--logs",
        "--run-info",
        "--expected",
    ),
    "fuzz": ("--cases", "--seed", "--steps", "--batch", "--pp", "--csv"),
}
"""Each command's flags (a positional by its metavar), in the order its ``--help`` lists them."""


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = _build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)


def _flags(parser: argparse.ArgumentParser) -> tuple[str, ...]:
    """The parser's flags (``-h`` / ``--help`` left out) and positionals, in its order."""
    found: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        found += action.option_strings or [action.metavar or action.dest]
    return tuple(found)


def test_the_command_line_has_exactly_the_listed_commands() -> None:
    assert list(_subcommands()) == list(FLAGS)


@pytest.mark.parametrize("command", list(FLAGS))
def test_each_command_has_exactly_its_listed_flags(command: str) -> None:
    found = _flags(_subcommands()[command])
    added = sorted(set(found) - set(FLAGS[command]))
    removed = sorted(set(FLAGS[command]) - set(found))
    assert not added and not removed, f"pooltk {command}: added {added}, removed {removed}"
    assert found == FLAGS[command], "the same flags, in another order in --help"


@pytest.mark.parametrize("command", list(FLAGS))
def test_each_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert stopped.value.code == 0 and out.startswith(f"usage: pooltk {command}")
    for flag in FLAGS[command]:
        assert flag in out, f"pooltk {command} --help does not show {flag}"


def test_the_core_commands_never_import_pandas() -> None:
    """``pip install pooltk`` has no pandas: probe, memory and schedules print their tables
    without it (``--validate`` and the estimate may use it)."""
    program = "\n".join(
        [
            "import sys",
            "from pooltk.cli import main",
            "assert main(['probe']) == 0",
            "assert main(['memory', '--preset', 'kimi-k3-gb200-2k-calibrated', '--capacity',"
            " 'gb200', '--compare', 'kimi-k3-gb200-2k-hidden']) == 0",
            "assert main(['memory', '--k3-story']) == 0",
            "assert main(['schedules', '--schedule', 'interleaved1f1b', '--pp', '2',"
            " '--microbatches', '4', '--set-mib', '1']) == 0",
            "print('pandas' in sys.modules, file=sys.stderr)",
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == "False", out.stderr[-3000:]
