"""`pooltk schedules` per rank: each rank's stages summed, its rank-shared rings, its live set, and
bytes.

Checked against :func:`pooltk.analysis.lifetimes.shared_slots` (the per-rank-and-direction peak,
counted without the rings) and against the memory model (:func:`pooltk.memory.model.model_memory`),
which builds the same rings from its own path.
"""

from __future__ import annotations

import json

import pytest

from pooltk.analysis.lifetimes import lifetimes, shared_slots
from pooltk.cli import main
from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, PipelineShape, model_memory


def _json(capsys, *argv: str) -> dict:
    rc = main(["schedules", *argv, "--json"])
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out)


@pytest.mark.parametrize("schedule", ["Interleaved1F1B", "ZBVZeroBubble"])
def test_per_rank_sets_match_the_analysis_and_the_memory_model(capsys, schedule):
    data = _json(
        capsys,
        "--schedule",
        schedule,
        "--pp",
        "4",
        "--vpp",
        "2",
        "--microbatches",
        "8",
        "--slack",
        "0",
        "--grad-slack",
        "0",
    )
    (total,) = data["totals"]
    ranks = total["ranks"]
    spans = lifetimes(schedule, pp=4, n_microbatches=8, stages_per_rank=2)
    assert sum(r["rank_live"] for r in ranks) == shared_slots(spans).per_rank_direction
    model = model_memory(
        PipelineShape(pp=4, n_microbatches=8, schedule=schedule),
        Boundary.opaque(1),
        PoolConfig(slack=0, grad_slack=0),
    )
    for r in ranks:
        assert r["stages"] == list(model.rank_stages(r["rank"]))
        assert (r["stock"], r["tight"], r["shared"], r["rank_live"]) == tuple(
            model.rank_bytes(r["rank"], v) for v in ("stock", "tight", "shared", "rank_live")
        )  # one byte per set
    assert sum(r["stock"] for r in ranks) == total["stock"]


def test_set_mib_turns_sets_into_gib_per_stage_and_rank(capsys):
    rc = main(
        [
            "schedules",
            "--schedule",
            "Interleaved1F1B",
            "--pp",
            "2",
            "--vpp",
            "2",
            "--microbatches",
            "4",
            "--set-mib",
            "1024",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "per rank" in out and "rank-shared GiB" in out and "stock GiB" in out
    rank0 = next(line for line in out.splitlines() if line.split()[:2] == ["0", "0,2"])
    stock_sets, stock_gib = int(rank0.split()[2]), float(rank0.split()[-4])
    assert stock_gib == stock_sets  # 1024 MiB per set = 1 GiB


def test_a_non_positive_set_size_is_named(capsys):
    rc = main(["schedules", "--schedule", "1F1B", "--set-mib", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "--set-mib: found 0" in err and "Fix:" in err
