"""pooltk.integrations.torchtitan on a fake torchtitan: options, install-before-train, argv
untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import pooltk
from pooltk._validate import InputError
from pooltk.integrations import torchtitan as tt

FAKE_LOGGING = textwrap.dedent("""
    import logging, sys
    def init_logger():
        logging.basicConfig(stream=sys.stdout, level=logging.INFO, \
format="[titan] %(name)s - %(message)s")
""")

FAKE_TRAIN = textwrap.dedent("""
    import json, sys
    import pooltk
    from torchtitan.tools.logging import init_logger
    init_logger()
    report = pooltk.installed()
    print("FAKE-TITAN " + json.dumps({
        "argv": sys.argv[1:],
        "name": __name__,
        "installed": report is not None and report.installed,
        "config": report.config.to_dict() if report is not None else None,
        "schedule": report.schedule if report is not None else None,
    }))
""")


def test_pooltk_flags_are_split_from_torchtitan_arguments_in_order():
    options, rest = tt.options_from(
        [
            "--module",
            "llama3",
            "--pooltk.slack",
            "0",
            "--config",
            "x",
            "--pooltk.release=false",
            "--pooltk.grad-slack",
            "0",
            "--training.steps",
            "5",
        ],
        env={},
    )
    assert rest == ["--module", "llama3", "--config", "x", "--training.steps", "5"]
    assert options.config == pooltk.PoolConfig(slack=0, grad_slack=0, release=False)
    assert options.enable and options.schedule == "1f1b"


def test_environment_sets_options_and_flags_win():
    options, _ = tt.options_from(
        ["--pooltk.slack", "1"],
        env={"POOLTK_SLACK": "3", "POOLTK_SCHEDULE": "auto", "POOLTK_RELEASE": "false"},
    )
    assert (
        options.config.slack == 1 and options.schedule == "auto" and options.config.release is False
    )


@pytest.mark.parametrize(
    "argv, what",
    [
        (["--pooltk.slak", "1"], "--pooltk.<field>"),
        (["--pooltk.slack", "-1"], "--pooltk.slack"),
        (["--pooltk.slack", "two"], "--pooltk.slack"),
        (["--pooltk.schedule", "gpipe"], "--pooltk.schedule"),
        (["--pooltk.release", "maybe"], "--pooltk.release"),
        (
            ["--pooltk.policy", "automodel"],
            "--pooltk.<field>",
        ),  # a ring no user chooses is not an option
    ],
)
def test_bad_options_name_flag_found_required_fix(argv, what):
    with pytest.raises(InputError) as err:
        tt.options_from(argv, env={})
    assert err.value.what == what and err.value.fix


def _run_entry(tmp_path, *args, env=None):
    pkg = tmp_path / "torchtitan"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(FAKE_TRAIN)
    (pkg / "tools").mkdir(exist_ok=True)
    (pkg / "tools" / "__init__.py").write_text("")
    (pkg / "tools" / "logging.py").write_text(FAKE_LOGGING)
    run_env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        **(env or {}),
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pooltk.integrations.torchtitan", *args],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("FAKE-TITAN "))
    seen = json.loads(line[len("FAKE-TITAN ") :])
    seen["log"] = proc.stdout
    return seen


def test_entry_installs_pooltk_before_torchtitan_train_runs_as_main(tmp_path):
    seen = _run_entry(
        tmp_path,
        "--module",
        "llama3",
        "--pooltk.slack",
        "0",
        "--pooltk.schedule",
        "auto",
        "--training.steps",
        "5",
    )
    assert seen["name"] == "__main__"
    assert seen["argv"] == ["--module", "llama3", "--training.steps", "5"]
    assert seen["installed"] is True and seen["config"]["slack"] == 0 and seen["schedule"] == "auto"


def test_install_line_reaches_the_trainer_log_after_its_logger_is_set_up(tmp_path):
    log = _run_entry(tmp_path, "--pooltk.slack", "0", "--pooltk.schedule", "auto")["log"]
    assert (
        "[titan] pooltk - pooltk: installed (policy=tight, slack=0, grad_slack=1, schedule=auto"
        in log
    )


def test_stock_run_through_the_entry_is_logged_as_not_installed(tmp_path):
    log = _run_entry(tmp_path, env={"POOLTK_ENABLE": "false"})["log"]
    assert "[titan] pooltk - pooltk: not installed (reason=--pooltk.enable false" in log
    assert "pooltk: installed" not in log


def test_device_cpu_is_refused_when_torchtitan_already_chose_another(monkeypatch):
    import types

    monkeypatch.setitem(
        sys.modules, "torchtitan.tools.utils", types.SimpleNamespace(device_type="cuda")
    )
    with pytest.raises(InputError) as err:
        tt.force_device("cpu")
    assert err.value.what == "--pooltk.device" and "cuda" in str(err.value)


def test_cpu_device_module_answers_index_zero_and_no_allocator_statistics():
    from pooltk.integrations.cpu_device import cpu_device_module

    module = cpu_device_module()
    assert module.current_device() == 0 and module.memory_stats() == {}
    assert module.get_device_properties().total_memory > 0 and module.device_count() == 1


def test_entry_with_enable_false_runs_torchtitan_stock(tmp_path):
    seen = _run_entry(tmp_path, "--module", "llama3", env={"POOLTK_ENABLE": "false"})
    assert seen["installed"] is False and seen["argv"] == ["--module", "llama3"]
