"""The recorded side-by-side run (data/validation/trainers_*.csv, read as package data)."""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from pooltk._validate import InputError  # noqa: E402
from pooltk.nb import trainers  # noqa: E402


@pytest.fixture(scope="module")
def table():
    return trainers.load_table()


def test_every_pooled_variant_in_the_recorded_run_is_bitwise_equal_to_stock(table):
    verdicts = trainers.claims(table)
    pooled = verdicts[~verdicts["variant"].isin(trainers.EXPECTED_TO_DIFFER) & (verdicts["pool_impl"] != "stock")]
    for trainer in ("automodel", "torchtitan"):
        assert len(pooled[pooled["trainer"] == trainer]) >= 5, trainer
    assert pooled["losses_equal_stock"].all() and pooled["params_equal_stock"].all()
    assert verdicts["claim_ok"].all()


def test_aliasing_stage_original_pool_differs_silently_and_pooltk_is_bitwise_equal(table):
    verdicts = trainers.claims(table).set_index(["trainer", "pp", "variant"])
    for pp in sorted(table[table["trainer"] == "automodel"]["pp"].unique()):
        original = verdicts.loc[("automodel", pp, "automodel_pool_alias_eval")]
        assert original["outcome"] == "ok" and original["eval_equal_stock"] is False
        assert verdicts.loc[("automodel", pp, "pooltk_alias_eval")]["eval_equal_stock"] is True


def test_forced_gpipe_original_diverges_silently_and_pooltk_raises(table):
    verdicts = trainers.claims(table).set_index(["trainer", "pp", "variant"])
    for pp in sorted(table[table["trainer"] == "automodel"]["pp"].unique()):
        original = verdicts.loc[("automodel", pp, "automodel_pool_gpipe_forced")]
        assert original["outcome"] == "ok" and original["params_equal_stock"] is False
        assert "PoolOverrunError" in verdicts.loc[("automodel", pp, "pooltk_gpipe_forced")]["outcome"]


def test_side_by_side_pooltk_live_set_is_smallest_and_stock_largest(table):
    wide = trainers.side_by_side(table)
    pooled = [c for c in trainers.COLUMNS_SIDE_BY_SIDE if c != "stock" and c in wide.columns]
    # Automodel's pool has no torchtitan rows (NaN there): compare where measured
    assert (wide[pooled].le(wide["stock"], axis=0) | wide[pooled].isna()).all().all()
    live = "live set (pooltk slack 0)"
    assert (wide[live] <= wide[pooled].min(axis=1)).all()
    assert (wide[live] < wide["stock"]).all()


def test_load_table_names_a_missing_file_and_the_fix(tmp_path):
    with pytest.raises(InputError, match="scripts/integration"):
        trainers.load_table(tmp_path / "rows.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="missing"):
        trainers.load_table(bad)


def test_torchtitan_rows_cover_pp2_and_pp4_with_interleaved_auto_pooled_and_smaller(table):
    titan = table[table["trainer"] == "torchtitan"]
    assert sorted(titan["pp"].unique()) == [2, 4]
    auto = titan[titan["variant"] == "pooltk_auto_interleaved"]
    assert len(auto) == 2 * 2 + 2 * 4 and (auto["recv_bytes"] < auto["stock_recv_bytes"]).all()


def test_every_recorded_torchtitan_log_was_read_with_all_steps_and_the_right_pool_tag():
    logs = trainers.load_logs()
    assert len(logs) == 16 and logs["claim_ok"].all()
    assert (logs["n_steps"] == 5).all() and (logs["first_step"] == 1).all() and (logs["last_step"] == 5).all()
    gated = logs["variant"] == "pooltk_gated_gpipe"  # installed, every stage kept stock by the gate: not pooled
    pooled = logs["variant"].str.startswith("pooltk") & ~gated
    assert logs[pooled]["pool_read"].str.startswith("pooled=True pool_impl=pooltk").all()
    assert logs[gated]["pool_read"].str.startswith("pooled=False pool_impl=pooltk").all() and gated.sum() == 2
    assert logs[~pooled]["pool_read"].str.startswith("pooled=False").all()
