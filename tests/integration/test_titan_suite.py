"""tools/integration/titan_suite.py's verdicts on what `pooltk logs` read (no trainer needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "integration"))
titan_suite = pytest.importorskip("titan_suite")
sys.path.pop(0)

LAST = (7.92651).hex()
GOOD = {"format": "torchtitan", "n_steps": 5, "first_step": 1, "last_step": 5, "final_loss": 7.92651,
        "pooled": True, "pool_impl": "pooltk", "slack": 2, "layout": "setup-recv-info"}


def test_a_pooled_log_read_as_pooled_with_every_step_passes():
    row = titan_suite.log_row(2, "pooltk_tight", ROOT / "x.log", dict(GOOD), 5, LAST)
    assert row["claim_ok"] is True and row["pool_read"] == "pooled=True pool_impl=pooltk slack=2 layout=setup-recv-info"


@pytest.mark.parametrize("change", [{"pooled": None, "pool_impl": None, "slack": None, "layout": None},
                                    {"slack": 0}, {"n_steps": 4}, {"last_step": 4}, {"final_loss": 7.9265}])
def test_a_log_read_with_a_wrong_tag_missing_step_or_other_loss_fails(change):
    assert titan_suite.log_row(2, "pooltk_tight", ROOT / "x.log", {**GOOD, **change}, 5, LAST)["claim_ok"] is False


def test_a_stock_run_must_read_as_not_pooled():
    stock = {**GOOD, "pooled": False}
    assert titan_suite.log_row(2, "stock", ROOT / "x.log", stock, 5, LAST)["claim_ok"] is True
    assert titan_suite.log_row(2, "stock", ROOT / "x.log", dict(GOOD), 5, LAST)["claim_ok"] is False


def test_every_variant_passes_the_device_and_its_pool_flags_to_the_entry():
    args = titan_suite.titan_args("pooltk_auto_interleaved", 2, Path("/a"), Path("/d"), 5, 8)
    assert args[:1] == ["--pooltk.device=cpu"] and "--pooltk.schedule=auto" in args
    assert args[args.index("--parallelism.pipeline_parallel_schedule") + 1] == "Interleaved1F1B"
