"""tools/gpu_check (issue #26's device check) runs on CPU here: the pooled stage re-homes nothing
behind a launcher that reads its input's address and an inductor-compiled layer, and holds K forward
sets where stock holds M."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_device_check_holds_its_claim_on_cpu(repo_root, tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.gpu_check",
            "--device",
            "cpu",
            "--microbatches",
            "8",
            "--steps",
            "2",
            "--json",
            str(out),
        ],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads(out.read_text())
    stock, pooled = result["rows"]
    assert result["claim"]["holds_the_ring"] and pooled["rehomes"] == 0
    assert pooled["address_reads"] > stock["address_reads"] > 0  # the launcher ran in both variants
    assert (
        pooled["recv_peak_storages"]["forward"]
        == pooled["rings"]["forward"]
        < stock["recv_peak_storages"]["forward"]
    )
