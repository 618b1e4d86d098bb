"""The real trainers, in their venvs (.venvs/<trainer>, built by scripts/integration).

Skips with the reason where the venv is absent (the main suite); scripts/integration fails loudly
instead. One PP2 launch, stock then pooltk tight, 5 steps: bitwise equal, fewer receive bytes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AUTOMODEL = ROOT / ".venvs" / "automodel" / "bin" / "python"


@pytest.mark.dist
@pytest.mark.timeout(600)
def test_pooltk_tight_inside_automodel_autopipeline_is_bitwise_equal_to_stock_with_fewer_bytes(
    tmp_path,
):
    if not AUTOMODEL.exists():
        pytest.skip(
            f"{AUTOMODEL.parent.parent} absent: build it with `bash scripts/integration` "
            "(needs pip access)"
        )
    sys.path.insert(0, str(ROOT / "tools" / "integration"))
    try:
        from ranks import launch
        from run_suite import compare
    finally:
        sys.path.pop(0)
    import json

    records = tmp_path / "records.jsonl"
    argv = [
        str(ROOT / "tools/integration/automodel_rank.py"),
        "--pp",
        "2",
        "--variants",
        "stock,pooltk_tight",
        "--out",
        str(records),
    ]
    codes, _ = launch(argv, world=2, timeout_s=540, log_dir=tmp_path, python=str(AUTOMODEL))
    assert codes == [0, 0], (tmp_path / "rank0.log").read_text()[-2000:]
    rows = compare(
        [json.loads(x) for x in records.read_text().splitlines()],
        trainer="automodel",
        version="0.7.0",
        steps=5,
        microbatches=8,
    )
    tight = [r for r in rows if r["variant"] == "pooltk_tight"]
    assert tight and all(r["losses_equal_stock"] and r["params_equal_stock"] for r in tight)
    assert all(r["recv_bytes"] < r["stock_recv_bytes"] for r in tight)


TORCHTITAN = ROOT / ".venvs" / "torchtitan" / "bin" / "python"


@pytest.mark.dist
@pytest.mark.timeout(600)
def test_pooltk_tight_inside_torchtitan_trainer_is_bitwise_equal_to_stock_and_its_log_reads_pooled(
    tmp_path,
):
    if not TORCHTITAN.exists():
        pytest.skip(
            f"{TORCHTITAN.parent.parent} absent: "
            "build it with `TRAINERS=torchtitan bash scripts/integration`"
        )
    import csv
    import subprocess

    proc = subprocess.run(
        [
            str(TORCHTITAN),
            str(ROOT / "tools/integration/titan_suite.py"),
            "--pp",
            "2",
            "--variants",
            "stock",
            "pooltk_tight",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=560,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = list(csv.DictReader(open(tmp_path / "torchtitan" / "rows.csv")))
    tight = [r for r in rows if r["variant"] == "pooltk_tight"]
    assert len(tight) == 2 and all(
        r["losses_equal_stock"] == r["params_equal_stock"] == "True" for r in tight
    )
    assert all(int(r["recv_bytes"]) < int(r["stock_recv_bytes"]) for r in tight)
    logs = {r["variant"]: r for r in csv.DictReader(open(tmp_path / "torchtitan" / "logs.csv"))}
    assert logs["pooltk_tight"]["pool_read"].startswith("pooled=True pool_impl=pooltk slack=2")
    assert logs["stock"]["pool_read"].startswith("pooled=False") and logs["stock"]["n_steps"] == "5"
