"""titan_suite.py's verdicts on what `pooltk logs` read; run_suite.py's three-way verdicts (no
trainer needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "integration"))
titan_suite = pytest.importorskip("titan_suite")
import run_suite  # noqa: E402 - tools/integration/run_suite.py (titan_suite imports it too)

sys.path.pop(0)

LAST = (7.92651).hex()
GOOD = {
    "format": "torchtitan",
    "n_steps": 5,
    "first_step": 1,
    "last_step": 5,
    "final_loss": 7.92651,
    "pooled": True,
    "pool_impl": "pooltk",
    "slack": 2,
    "layout": "setup-recv-info",
}


def test_a_pooled_log_read_as_pooled_with_every_step_passes():
    row = titan_suite.log_row(2, "pooltk_tight", ROOT / "x.log", dict(GOOD), 5, LAST)
    assert (
        row["claim_ok"] is True
        and row["pool_read"] == "pooled=True pool_impl=pooltk slack=2 layout=setup-recv-info"
    )


@pytest.mark.parametrize(
    "change",
    [
        {"pooled": None, "pool_impl": None, "slack": None, "layout": None},
        {"slack": 0},
        {"n_steps": 4},
        {"last_step": 4},
        {"final_loss": 7.9265},
    ],
)
def test_a_log_read_with_a_wrong_tag_missing_step_or_other_loss_fails(change):
    assert (
        titan_suite.log_row(2, "pooltk_tight", ROOT / "x.log", {**GOOD, **change}, 5, LAST)[
            "claim_ok"
        ]
        is False
    )


def test_a_stock_run_must_read_as_not_pooled():
    stock = {**GOOD, "pooled": False}
    assert titan_suite.log_row(2, "stock", ROOT / "x.log", stock, 5, LAST)["claim_ok"] is True
    assert titan_suite.log_row(2, "stock", ROOT / "x.log", dict(GOOD), 5, LAST)["claim_ok"] is False


def test_every_variant_passes_the_device_and_its_pool_flags_to_the_entry():
    args = titan_suite.titan_args("pooltk_auto_interleaved", 2, Path("/a"), Path("/d"), 5, 8)
    assert args[:1] == ["--pooltk.device=cpu"] and "--pooltk.schedule=auto" in args
    assert args[args.index("--parallelism.pipeline_parallel_schedule") + 1] == "Interleaved1F1B"


# --- run_suite's three-way verdicts (pooled vs stock vs fresh), on records written here -----------

from pooltk.parity.summary import HOOKS_REASON, KEPT_REASON, VERDICTS  # noqa: E402


def _rec(
    variant,
    rank,
    *,
    pool="pooltk",
    losses=("0x1p+0",),
    params="p",
    ok=True,
    error_type="",
    error="",
    hooks=0,
    fresh=None,
    eval_sha256=None,
    input_hook=False,
    schedule="1f1b",
):
    """One rank's record as the rank programs write it (rank r holds stage r)."""
    if not ok:
        return {
            "variant": variant,
            "rank": rank,
            "pp": 2,
            "schedule": schedule,
            "pool": pool,
            "ok": False,
            "error_type": error_type,
            "error": error,
            "input_hook": input_hook,
        }
    r = {
        "variant": variant,
        "rank": rank,
        "pp": 2,
        "schedule": schedule,
        "pool": pool,
        "ok": True,
        "torch": "2.13.0+cpu",
        "losses": list(losses) if rank == 1 else [],
        "params_sha256": f"{params}{rank}",
        "step_s": [1.0, 1.0],
        "recv": {str(rank): {"forward": {"bytes": 8}, "grad": {"bytes": 8}}},
        "hooks": {str(rank): {"forward": hooks, "grad": 0}},
        "input_hook": input_hook,
    }
    if eval_sha256 is not None and rank == 1:
        r["eval_sha256"] = eval_sha256
    if pool == "fresh":
        r["fresh"] = {
            str(rank): fresh
            or {"layout": "setup-recv-info", "bound": True, "posts": 40, "post_storages": 40}
        }
    return r


def _both(variant, **kw):
    return [_rec(variant, 0, **kw), _rec(variant, 1, **kw)]


def _refs(stock_params="p", fresh_params="p", stock_hooks=0, fresh=None, schedule="1f1b"):
    """The stock and fresh runs of one schedule (run_suite.BASELINE / FRESH names)."""
    stock, fresh_name = run_suite.BASELINE[schedule], run_suite.FRESH[schedule]
    return [
        *_both(stock, pool="stock", params=stock_params, hooks=stock_hooks, schedule=schedule),
        *_both(
            fresh_name,
            pool="fresh",
            params=fresh_params,
            hooks=1 if stock_hooks else 0,
            fresh=fresh,
            schedule=schedule,
        ),
    ]


def _judge(records):
    rows = run_suite.compare(records, trainer="t", version="0", steps=5, microbatches=8)
    assert {r["verdict"] for r in rows} <= {"", *VERDICTS}
    return {(r["variant"], r["stage"]): r for r in rows}


def test_a_pooled_run_equal_to_stock_and_fresh_is_equal_and_keeps_its_claim():
    rows = _judge([*_refs(), *_both("pooltk_tight")])
    for stage in "01":
        row = rows[("pooltk_tight", stage)]
        assert (
            row["verdict"],
            row["equal_stock"],
            row["equal_fresh"],
            row["stock_equal_fresh"],
        ) == ("equal", True, True, True)
        assert row["claim_ok"] is True and rows[("fresh", stage)]["claim_ok"] is True
        assert rows[("stock", stage)]["verdict"] == "" and rows[("fresh", stage)]["verdict"] == ""


def test_a_pooled_run_equal_to_fresh_where_stock_differs_is_explained_with_the_hooks_it_measured():
    rows = _judge([*_refs(stock_params="s", stock_hooks=5), *_both("pooltk_tight", params="p")])
    for (
        stage
    ) in "01":  # stage 0 has no hooks of its own: the case's reason, measured over every rank
        row = rows[("pooltk_tight", stage)]
        assert (
            row["verdict"],
            row["equal_stock"],
            row["equal_fresh"],
            row["stock_equal_fresh"],
        ) == ("explained", False, True, False)
        assert (
            row["reason"].startswith(HOOKS_REASON)
            and "5 hooks on one stock buffer" in row["reason"]
        )
        assert row["claim_ok"] is True


def test_an_explained_case_without_hooks_names_a_kept_tensor():
    rows = _judge([*_refs(stock_params="s"), *_both("pooltk_tight")])
    assert rows[("pooltk_tight", "1")]["verdict"] == "explained"
    assert rows[("pooltk_tight", "1")]["reason"].startswith(KEPT_REASON)


@pytest.mark.parametrize("stock_params", ["p", "s"])
def test_a_pooled_run_that_differs_from_fresh_is_silent_and_fails_its_claim(stock_params):
    rows = _judge([*_refs(stock_params=stock_params), *_both("pooltk_tight", params="x")])
    row = rows[("pooltk_tight", "0")]
    assert row["verdict"] == "silent" and row["equal_fresh"] is False and row["claim_ok"] is False
    assert "params differ" in row["reason"]


def test_a_pooled_loss_differing_on_the_last_stage_alone_fails_the_whole_case():
    rows = _judge([*_refs(), _rec("pooltk_live", 0), _rec("pooltk_live", 1, losses=("0x1.8p+0",))])
    assert (
        rows[("pooltk_live", "0")]["verdict"] == "equal"
        and rows[("pooltk_live", "1")]["verdict"] == "silent"
    )
    assert rows[("pooltk_live", "0")]["claim_ok"] is False


def test_an_overrun_on_one_rank_is_loud_on_every_rank_and_keeps_the_guard_claim():
    records = [
        *_refs(),
        *_refs(schedule="gpipe"),
        _rec(
            "pooltk_gpipe_forced",
            0,
            ok=False,
            error_type="RuntimeError",
            error="Connection reset by peer",
            schedule="gpipe",
        ),
        _rec(
            "pooltk_gpipe_forced",
            1,
            ok=False,
            error_type="PoolOverrunError",
            error="pooltk: stage 1 forward ring overrun",
            schedule="gpipe",
        ),
    ]
    rows = [
        r
        for r in run_suite.compare(records, trainer="t", version="0", steps=5, microbatches=8)
        if r["variant"] == "pooltk_gpipe_forced"
    ]
    assert len(rows) == 2 and all(r["verdict"] == "loud" and r["claim_ok"] is True for r in rows)
    assert all(r["reason"].startswith("rank 1: PoolOverrunError: pooltk") for r in rows)


def test_an_error_that_does_not_name_pooltk_is_unnamed_and_fails():
    rows = _judge(
        [
            *_refs(),
            *[
                _rec(
                    "pooltk_tight",
                    r,
                    ok=False,
                    error_type="RuntimeError",
                    error="one of the variables needed for gradient computation has been modified",
                )
                for r in (0, 1)
            ],
        ]
    )
    assert (
        rows[("pooltk_tight", "?")]["verdict"] == "unnamed"
        and rows[("pooltk_tight", "?")]["claim_ok"] is False
    )


def test_without_a_fresh_run_a_pooled_variant_is_invalid_never_a_pass():
    rows = _judge([*_both("stock", pool="stock"), *_both("pooltk_tight")])
    assert (
        rows[("pooltk_tight", "0")]["verdict"] == "invalid"
        and rows[("pooltk_tight", "0")]["claim_ok"] is False
    )
    assert rows[("stock", "0")]["claim_ok"] is False  # a reference with nothing to compare with


@pytest.mark.parametrize(
    "fresh",
    [
        {"layout": "setup-recv-info", "bound": True, "posts": 40, "post_storages": 39},
        {"layout": "setup-recv-info", "bound": False, "posts": 0, "post_storages": 0},
        {"layout": "setup-recv-info", "bound": True, "posts": 0, "post_storages": 0},
    ],
)
def test_a_fresh_run_that_reused_a_storage_or_bound_nothing_fails_its_claim(fresh):
    rows = _judge([*_refs(fresh=fresh), *_both("pooltk_tight")])
    assert rows[("fresh", "0")]["claim_ok"] is False


def test_a_lazy_torch_fresh_run_binds_nothing_and_passes():
    rows = _judge(
        [*_refs(fresh={"layout": "lazy", "bound": False, "posts": 0, "post_storages": 0})]
    )
    assert rows[("fresh", "0")]["claim_ok"] is True


def test_the_aliasing_eval_step_is_judged_against_fresh_and_its_original_pool_must_be_silent():
    def eval_refs(fresh_eval):
        return [
            *_both("stock_alias_eval", pool="stock", eval_sha256="e"),
            *_both("fresh_alias_eval", pool="fresh", eval_sha256=fresh_eval),
        ]

    rows = _judge(
        [
            *_refs(),
            *eval_refs("e"),
            *_both("pooltk_alias_eval", eval_sha256="e"),
            *_both("automodel_pool_alias_eval", pool="automodel", eval_sha256="x"),
        ]
    )
    assert (
        rows[("pooltk_alias_eval", "1")]["verdict"] == "equal"
        and rows[("pooltk_alias_eval", "1")]["claim_ok"]
    )
    original = rows[("automodel_pool_alias_eval", "1")]
    assert (
        original["verdict"] == "silent"
        and "eval differ" in original["reason"]
        and original["claim_ok"] is True
    )
    # fresh's eval step differing from stock's: pooled equal to fresh there is explained
    rows = _judge([*_refs(), *eval_refs("f"), *_both("pooltk_alias_eval", eval_sha256="f")])
    assert rows[("pooltk_alias_eval", "1")]["verdict"] == "explained"
    assert rows[("pooltk_alias_eval", "1")]["stock_equal_fresh"] is False


def test_a_hooked_model_is_judged_against_its_own_stock_and_fresh_runs():
    hooked = [
        *_both("stock_input_hook", pool="stock", params="s", hooks=5, input_hook=True),
        *_both("fresh_input_hook", pool="fresh", params="h", hooks=1, input_hook=True),
    ]
    rows = _judge([*_refs(), *hooked, *_both("pooltk_input_hook", params="h", input_hook=True)])
    row = rows[("pooltk_input_hook", "1")]
    assert (
        row["verdict"] == "explained"
        and "5 hooks on one stock buffer" in row["reason"]
        and row["claim_ok"]
    )


def test_fresh_variants_run_the_rank_with_fresh_and_no_pool():
    for name in ("fresh", "fresh_interleaved", "fresh_gpipe", "fresh_input_hook"):
        assert "--fresh" in titan_suite.rank_args(name, Path("/r.jsonl"))
        assert "--pooltk.enable=false" in titan_suite.titan_args(
            name, 2, Path("/a"), Path("/d"), 5, 8
        )
    assert "--fresh" not in titan_suite.rank_args("stock", Path("/r.jsonl"))
    assert titan_suite.rank_args("pooltk_input_hook", Path("/r.jsonl"))[-1] == "--input-hook"
    fresh_log = titan_suite.log_row(2, "fresh", ROOT / "x.log", {**GOOD, "pooled": False}, 5, LAST)
    assert fresh_log["pool_expected"] == "pooled=False" and fresh_log["claim_ok"] is True


def test_a_chosen_variant_brings_the_stock_and_fresh_runs_it_is_judged_against():
    assert titan_suite.with_references(["pooltk_tight"]) == ["stock", "fresh", "pooltk_tight"]
    assert titan_suite.with_references(["stock", "pooltk_tight", "pooltk_input_hook"]) == [
        "stock",
        "fresh",
        "pooltk_tight",
        "stock_input_hook",
        "fresh_input_hook",
        "pooltk_input_hook",
    ]
    assert titan_suite.with_references(["pooltk_gated_gpipe"]) == [
        "stock_gpipe",
        "fresh_gpipe",
        "pooltk_gated_gpipe",
    ]
    assert titan_suite.with_references(list(titan_suite.VARIANTS)) == list(titan_suite.VARIANTS)
