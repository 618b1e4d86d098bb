"""``pooltk report --logs DIR --run-info FILE``: notebook 03 on the user's logs, runs compared side
by side."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from pooltk.logs import read_logs
from pooltk.logs.metrics import summarize
from pooltk.nb.logs import compare_runs, load_run_info, per_rank
from pooltk.nb.report import LOGS_NOTEBOOK, ReportConfig, inject_parameters

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).resolve().parent / "fixtures"


def test_the_analysis_notebook_has_a_parameters_cell_and_values_are_injected_after_it():
    nb = nbformat.read(ROOT / LOGS_NOTEBOOK, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert (
        len(tagged) == 1
        and "LOG_PATHS" in nb.cells[tagged[0]].source
        and "RUN_INFO_FILE" in nb.cells[tagged[0]].source
    )
    inject_parameters(nb, {"LOG_PATHS": ["/x"], "RUN_INFO_FILE": None})
    injected: dict = {}
    exec(
        nb.cells[tagged[0] + 1].source, injected
    )  # the cell right after sets the values (however they are spelled)
    assert injected["LOG_PATHS"] == ["/x"] and injected["RUN_INFO_FILE"] is None
    with pytest.raises(ValueError, match="tagged 'parameters'"):
        inject_parameters(nbformat.v4.new_notebook(), {"A": 1})


def test_runs_side_by_side_with_ratios_to_the_baseline(tmp_path):
    for name in ("stock", "pooled"):
        shutil.copy(FIX / "torchtitan_wps_2024.log", tmp_path / f"{name}.log")
    text = (tmp_path / "pooled.log").read_text()
    (tmp_path / "pooled.log").write_text(
        "2026-09-14 10:00:00,000 - pooltk - INFO - "
        "pooltk: installed (policy=tight, slack=1, grad_slack=1, "
        "schedule=Schedule1F1B, layout=lazy)\n" + re.sub(r"memory:\s+(\d)", r"memory: 1\1", text)
    )
    logs = read_logs(tmp_path)
    out = compare_runs(summarize(logs, warn=False), logs.steps, baseline="stock").set_index("run")
    assert out.loc["stock", "tok_per_s_per_gpu_vs_stock"] == 1.0
    assert out.loc["pooled", "peak_mem_gib_vs_stock"] > 1.0
    assert bool(out.loc["pooled", "pooled"]) is True and str(out.loc["stock", "pooled"]) == "<NA>"
    with pytest.raises(ValueError, match="baseline run"):
        compare_runs(summarize(logs, warn=False), logs.steps, baseline="nope")


def test_per_rank_table_has_one_row_per_run_and_rank():
    logs = read_logs(FIX / "torchtitan_pp_allranks.log")
    t = per_rank(logs.steps)
    assert len(t) == t[["run", "rank"]].drop_duplicates().shape[0] > 1


def test_run_info_file_one_object_or_one_per_run(tmp_path):
    (tmp_path / "all.json").write_text(json.dumps({"world_size": 8, "pp": 2}))
    (tmp_path / "per.json").write_text(
        json.dumps({"a": {"world_size": 8}, "b": {"world_size": 16}})
    )
    assert load_run_info(tmp_path / "all.json").world_size == 8
    assert load_run_info(tmp_path / "per.json")["b"].world_size == 16
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="required a JSON object"):
        load_run_info(tmp_path / "bad.json")


def test_report_refuses_missing_logs_with_a_fix(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ReportConfig(logs=(tmp_path / "none",))


@pytest.mark.notebook
def test_report_logs_runs_notebook_03_on_a_folder_from_the_command_line(tmp_path):
    logs = tmp_path / "my_runs"
    logs.mkdir()
    raw = (FIX / "automodel_text_current.log").read_bytes()
    (logs / "k3_2k.log").write_bytes(
        b"".join(b"  0: " + ln for ln in raw.splitlines(keepends=True))
    )  # srun --label
    shutil.copy(FIX / "torchtitan_wps_2024.log", logs / "titan.log")
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"world_size": 8, "pp": 2}))
    out = tmp_path / "report"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pooltk.cli import main; sys.exit(main())",
            "report",
            "--logs",
            str(logs),
            "--run-info",
            str(facts),
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    html = (out / "03_kimi_k3_gb200_1k_vs_2k.html").read_text()
    assert "Parameters injected by pooltk report" in html and str(logs) in html
    assert "k3_2k" in html and "titan" in html and "runs side by side" in html
