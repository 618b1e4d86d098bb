"""The shipped CPU run logs are Automodel-schema training.jsonl, readable by pooltk's own reader."""

import json

import pytest

pytest.importorskip("pandas")


def test_shipped_cpu_runs_are_four_readable_runs_with_sidecars(repo_root):
    from pooltk.logs import read_logs

    folder = repo_root / "data" / "cpu_runs"
    table = read_logs([folder])
    counts = table.steps.groupby("run").size().to_dict()
    assert set(counts) == {"cpu_seq32_stock", "cpu_seq32_pooled", "cpu_seq64_stock", "cpu_seq64_pooled"}
    for run, n in counts.items():
        meta = json.loads((folder / f"{run}_training.meta.json").read_text())
        assert n == meta["steps"]
        assert meta["pp"] == 4 and meta["bitwise_equal_to_stock"] is True
    # pooled and stock twins logged identical losses (bitwise parity), different buffer bytes
    s = table.steps.set_index(["run", "step"])["loss"]
    assert (s["cpu_seq32_stock"] == s["cpu_seq32_pooled"]).all()
    m_stock = json.loads((folder / "cpu_seq32_stock_training.meta.json").read_text())
    m_pool = json.loads((folder / "cpu_seq32_pooled_training.meta.json").read_text())
    assert m_pool["recv_buffer_bytes_per_stage"]["1"] < m_stock["recv_buffer_bytes_per_stage"]["1"]
