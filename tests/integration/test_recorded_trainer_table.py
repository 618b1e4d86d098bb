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
    pooled = verdicts[~verdicts["variant"].str.contains("forced") & (verdicts["pool_impl"] != "stock")]
    assert len(pooled) >= 5
    assert pooled["losses_equal_stock"].all() and pooled["params_equal_stock"].all()
    assert verdicts["claim_ok"].all()


def test_forced_gpipe_original_diverges_silently_and_pooltk_raises(table):
    verdicts = trainers.claims(table).set_index(["pp", "variant"])
    for pp in sorted(table["pp"].unique()):
        original = verdicts.loc[(pp, "automodel_pool_gpipe_forced")]
        assert original["outcome"] == "ok" and original["params_equal_stock"] is False
        assert "PoolOverrunError" in verdicts.loc[(pp, "pooltk_gpipe_forced")]["outcome"]


def test_side_by_side_pooltk_live_set_is_smallest_and_stock_largest(table):
    wide = trainers.side_by_side(table)
    pooled = [c for c in trainers.COLUMNS_SIDE_BY_SIDE if c != "stock" and c in wide.columns]
    assert (wide[pooled].le(wide["stock"], axis=0)).all().all()
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
