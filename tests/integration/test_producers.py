"""NeMo Automodel's own LLM recipe as a log producer (tools/integration/producers.py).

The verdicts on what ``pooltk logs`` read need no trainer; the recipe run itself needs
.venvs/automodel (built by scripts/integration) and skips with the reason where it is absent.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pooltk.integrations import automodel as am

ROOT = Path(__file__).resolve().parents[2]
AUTOMODEL = ROOT / ".venvs" / "automodel" / "bin" / "python"
sys.path.insert(0, str(ROOT / "tools" / "integration"))
producers = pytest.importorskip("producers")
producers_assets = pytest.importorskip("producers_assets")
sys.path.pop(0)

STEPS = 3
RECORD = [{"step": s, "loss": x} for s, x in enumerate([5.514211177825928, 5.531175136566162, 5.420938491821289])]


def _read(fmt: str, *, final_loss: float, n_steps: int = STEPS, first: int = 0, pooled=None, impl=None, slack=None):
    run = {"run": "pooltk", "format": fmt, "n_steps": n_steps, "first_step": first, "last_step": first + n_steps - 1,
           "final_loss": final_loss, "pooled": pooled, "pool_impl": impl, "slack": slack}
    return {"runs": [run], "files": []}


def _judge(variant: str, text: dict, jsonl: dict, folder: dict, record=RECORD, stock=RECORD, code=0) -> dict:
    rows = producers.judge(variant, 2, STEPS, code, record, stock, text, jsonl, folder)
    assert [r["claim"] for r in rows] == list(producers.CLAIMS)
    return {r["claim"]: r["ok"] for r in rows}


def _good(variant: str) -> tuple[dict, dict, dict]:
    pool = producers.EXPECTED_POOL[variant]
    pool = {"pooled": pool["pooled"], "impl": pool["pool_impl"], "slack": pool["slack"]}
    return (_read("automodel_text", final_loss=5.4209, **pool), _read("automodel_jsonl", final_loss=RECORD[-1]["loss"]),
            _read("automodel_text", final_loss=RECORD[-1]["loss"], **pool))


@pytest.mark.parametrize("variant", list(producers.VARIANTS))
def test_a_run_read_to_its_steps_with_its_pool_columns_holds_every_claim(variant):
    assert all(_judge(variant, *_good(variant)).values())


def test_a_pooltk_run_whose_log_reads_unpooled_fails_the_pool_claims():
    text, jsonl, folder = _good("pooltk")
    silent = {"runs": [{**text["runs"][0], "pooled": None, "pool_impl": None, "slack": None}]}
    folder_silent = {"runs": [{**folder["runs"][0], "pooled": None, "pool_impl": None, "slack": None}]}
    verdict = _judge("pooltk", silent, jsonl, folder_silent)
    assert not verdict["text_pool"] and not verdict["folder"] and verdict["text_steps"]


def test_a_stock_run_read_as_pooled_fails():
    text, jsonl, folder = _good("automodel_pool")
    assert not _judge("stock", text, jsonl, folder)["text_pool"]


@pytest.mark.parametrize("change, claim", [
    ({"n_steps": 2}, "text_steps"), ({"first_step": 1}, "text_steps"), ({"final_loss": 5.421}, "text_steps"),
    ({"format": "torchtitan"}, "text_steps")])
def test_a_text_log_read_to_other_steps_or_loss_fails(change, claim):
    text, jsonl, folder = _good("stock")
    text = {"runs": [{**text["runs"][0], **change}]}
    assert not _judge("stock", text, jsonl, folder)[claim]


def test_a_jsonl_loss_rounded_or_a_jsonl_with_pool_columns_fails():
    text, jsonl, folder = _good("stock")
    rounded = {"runs": [{**jsonl["runs"][0], "final_loss": 5.4209}]}
    assert not _judge("stock", text, rounded, folder)["jsonl_steps"]
    tagged = {"runs": [{**jsonl["runs"][0], "pooled": True, "pool_impl": "pooltk", "slack": 2}]}
    assert not _judge("stock", text, tagged, folder)["jsonl_pool"]


def test_a_folder_read_as_two_runs_or_a_reader_error_fails():
    text, jsonl, _ = _good("stock")
    two = {"runs": [text["runs"][0], jsonl["runs"][0]]}
    assert not _judge("stock", text, jsonl, two)["folder"]
    assert not _judge("stock", {"error": "boom"}, jsonl, text)["text_steps"]


def test_a_recipe_that_ran_other_steps_or_other_losses_fails():
    text, jsonl, folder = _good("pooltk")
    assert not _judge("pooltk", text, jsonl, folder, record=RECORD[:2])["recipe_steps"]
    other = [*RECORD[:2], {"step": 2, "loss": 5.420938491821290}]
    assert not _judge("pooltk", text, jsonl, folder, stock=other)["losses_equal_stock"]
    assert not _judge("pooltk", text, jsonl, folder, code=None)["launch"]


@pytest.mark.parametrize("variant, implementation", [("stock", "stock"), ("automodel_pool", "automodel"),
                                                     ("pooltk", "pooltk")])
def test_each_variant_s_yaml_asks_for_its_pool_in_the_user_s_own_keys(variant, implementation, tmp_path):
    path = producers_assets.write_recipe(variant, tmp_path / "assets", tmp_path / variant, pp=2, steps=STEPS)
    cfg = json.loads(path.read_text())  # JSON text is YAML; Automodel's loader reads it with yaml.safe_load
    assert am.plan(cfg["distributed"]["pipeline"]).implementation == implementation
    assert cfg["checkpoint"]["checkpoint_dir"] == str(tmp_path / variant)  # where training.jsonl lands
    assert cfg["step_scheduler"]["max_steps"] == STEPS and cfg["distributed"]["pp_size"] == 2


# --- the recipe itself, in the Automodel venv -------------------------------------------------------------

KNOWN = {("pooltk", "text_pool"), ("pooltk", "folder")}
"""Claims that fail today (strict xfail: they fail this test the day they hold, so the mark goes)."""

KNOWN_REASON = ("pooltk.integrations.automodel.main installs pooltk before Automodel's recipe configures logging, "
                "so its `pooltk: installed (...)` line reaches no handler and the log reads unpooled (the stage "
                "line lands); fix: call Automodel's log_utils.setup_logging() in main() before apply(cfg)")


@pytest.fixture(scope="module")
def recipe_claims(tmp_path_factory):
    if not AUTOMODEL.exists():
        pytest.skip(f"{AUTOMODEL.parent.parent} absent: build it with `bash scripts/integration` (needs pip access)")
    out = tmp_path_factory.mktemp("producers")
    proc = subprocess.run([str(AUTOMODEL), str(ROOT / "tools/integration/producers.py"), "--pp", "2", "--steps",
                           str(STEPS), "--out", str(out), "--reader-python", sys.executable],
                          capture_output=True, text=True, timeout=1500, cwd=ROOT)
    path = out / "automodel_recipe" / "pp2" / "claims.csv"
    assert path.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {(r["variant"], r["claim"]): r for r in csv.DictReader(open(path))}, proc


@pytest.mark.dist
@pytest.mark.timeout(1600)
@pytest.mark.parametrize("variant, claim", [
    pytest.param(v, c, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_REASON)] if (v, c) in KNOWN else [])
    for v in producers.VARIANTS for c in producers.CLAIMS])
def test_automodel_s_own_recipe_on_cpu_writes_logs_pooltk_logs_reads_to_its_steps_and_pool(recipe_claims, variant,
                                                                                            claim):
    rows, proc = recipe_claims
    row = rows[(variant, claim)]
    assert row["ok"] == "True", f"{variant} {claim}: found {row['found']}, expected {row['expected']}\n" + \
        proc.stdout[-1500:]
