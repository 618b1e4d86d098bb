"""Issue #36: a ring's WARNING reaches the training log from the rank where it happens, naming the
rank.

Four gloo ranks (1F1B pp4), the last stage keeping its previous microbatch's input (so its forward
ring re-homes a slot). Every rank's ``logging`` writes into one file, as torchrun's ``--tee`` does
with its ``[rankN]:`` prefix; that file is the captured training log.
"""

import os
import textwrap
from pathlib import Path

import polars as pl
import pytest

from pooltk.cli import main
from pooltk.logs import runs
from pooltk.parity import ParitySpec, Variant, run_parity
from pooltk.parity.experiments import Harness

pytestmark = [pytest.mark.dist, pytest.mark.timeout(300)]

FIX = Path(__file__).resolve().parents[1] / "logs" / "fixtures"

PRELUDE = (
    """
import logging, os, sys
logging.basicConfig(filename=os.environ["POOLTK_TEST_LOG"], level=logging.INFO,
                    format=f"[rank{sys.argv[1]}]:[titan] %(asctime)s - %(name)s - """
    """%(levelname)s - %(message)s")
"""
)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rank-warnings")
    (tmp / "log_every_rank.py").write_text(textwrap.dedent(PRELUDE))
    log = tmp / "train.log"
    bodies = ("block", "block", "block", "keep_prev")
    variants = (
        Variant(name="stock/keep-prev", bodies=bodies),
        Variant(
            name="pooled/keep-prev",
            pooled=True,
            bodies=bodies,
            config=Harness(slack=0, grad_slack=0),
        ),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", f"{tmp}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
        mp.setenv("POOLTK_TEST_LOG", str(log))
        report = run_parity(
            ParitySpec(
                pp=4, microbatches=8, steps=2, hidden=8, seq_len=3, variants=variants, timeout_s=240
            ),
            prelude="log_every_rank",
        )
    return report, log.read_text().splitlines()


def test_a_stage_3_re_home_is_in_the_captured_log_with_rank_3(captured, no_leftover_ranks):
    report, lines = captured
    assert report.variant("pooled/keep-prev").recv[3]["forward"].get("rehomes", 0) > 0
    rehomed = [ln for ln in lines if "re-homed" in ln]
    assert rehomed and all(ln.startswith("[rank3]:") and " - WARNING - " in ln for ln in rehomed)
    assert "pooltk: [rank 3] stage 3 forward slot" in rehomed[0]
    facts = [p.facts for p in runs.find_pool_lines(pl.Series(lines)) if p.kind == "warning"]
    assert {(f["rank"], f["stage"], f["direction"], f["what"]) for f in facts} >= {
        (3, 3, "forward", "re-homed")
    }


def test_info_lines_come_from_rank_0_only(captured):
    _, lines = captured
    info = [ln for ln in lines if " - pooltk - INFO - " in ln]
    assert any("pooltk: installed (" in ln for ln in info)
    assert info and all(ln.startswith("[rank0]:") for ln in info)


def test_pooltk_logs_names_the_rank_and_stage_of_each_warning(captured, tmp_path, capsys):
    _, lines = captured
    body = (FIX / "torchtitan_pp_allranks.log").read_text()
    (tmp_path / "titan.log").write_text(body + "\n".join(lines) + "\n")
    assert main(["logs", str(tmp_path / "titan.log")]) == 0
    out = capsys.readouterr().out
    assert "rank 3): stage 3 forward ring re-homed a slot" in out
