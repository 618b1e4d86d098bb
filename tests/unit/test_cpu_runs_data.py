"""The shipped CPU run logs are Automodel-schema training.jsonl, readable by pooltk's own reader."""

import json

import pytest

pytest.importorskip("pandas")


def test_shipped_cpu_runs_are_four_readable_runs_with_sidecars(repo_root):
    from pooltk.logs import read_logs

    folder = repo_root / "data" / "cpu_runs"
    table = read_logs([folder])
    counts = table.steps.groupby("run").size().to_dict()
    assert set(counts) == {
        "cpu_seq16384_stock",
        "cpu_seq16384_pooled",
        "cpu_seq32768_stock",
        "cpu_seq32768_pooled",
    }
    for run, n in counts.items():
        meta = json.loads((folder / f"{run}_training.meta.json").read_text())
        assert n == meta["steps"]
        assert meta["pp"] == 4 and meta["bitwise_equal_to_stock"] is True
    # pooled and stock twins logged identical losses (bitwise parity), different buffer bytes
    s = table.steps.set_index(["run", "step"])["loss"]
    assert (s["cpu_seq16384_stock"] == s["cpu_seq16384_pooled"]).all()
    m_stock = json.loads((folder / "cpu_seq16384_stock_training.meta.json").read_text())
    m_pool = json.loads((folder / "cpu_seq16384_pooled_training.meta.json").read_text())
    assert m_pool["recv_buffer_bytes_per_stage"]["1"] < m_stock["recv_buffer_bytes_per_stage"]["1"]


def test_the_mem_column_shows_the_pool_saving_on_the_middle_stage(repo_root):
    from pooltk.logs import read_logs

    steps = read_logs([repo_root / "data" / "cpu_runs"]).steps.set_index(["run", "step"])["mem_gib"]
    for seq in (16384, 32768):
        assert (steps[f"cpu_seq{seq}_pooled"] < steps[f"cpu_seq{seq}_stock"]).all()
