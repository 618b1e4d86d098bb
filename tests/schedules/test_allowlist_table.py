"""The beyond-1F1B table: original allowlist vs pooltk auto vs live set, per schedule and stage.

The recorded validation (`pooltk schedules --validate`) is checked where it is written: see
tests/parity/test_schedule_check.py.
"""

import pytest

pytest.importorskip("pandas")

from pooltk import PoolConfig  # noqa: E402
from pooltk.analysis.stage_sets import stock_count  # noqa: E402
from pooltk.memory.model import automodel_ring  # noqa: E402
from pooltk.nb.schedules import allowlist_table  # noqa: E402


def test_seed_allowlist_pools_1f1b_only_and_pooltk_auto_sits_between_live_set_and_stock():
    t = allowlist_table(
        ["1F1B", "GPipe", "Interleaved1F1B", "ZBVZeroBubble"], pp=4, n_microbatches=8, slack=2
    )
    one = t[t.schedule == "1F1B"].set_index("stage")
    for s in range(4):
        k = automodel_ring(4, s, 8, 2)
        receiving = sum(stock_count(4, s, d, 8) > 0 for d in ("forward", "grad"))
        assert one.loc[s, "seed_allowlist"] == k * receiving
    others = t[t.schedule != "1F1B"]
    assert (others.seed_allowlist == others.stock).all()
    assert (t.live_peak <= t.pooltk_auto).all() and (t.pooltk_auto <= t.stock).all()
    inter = t[t.schedule == "Interleaved1F1B"]
    assert inter.pooltk_auto.sum() < inter.stock.sum()


def test_tight_1f1b_column_matches_the_pools_own_ring_sizes():
    from pooltk.pool.ring import live_1f1b, ring_size

    config = PoolConfig(slack=2, grad_slack=1)
    t = allowlist_table(["1F1B"], pp=4, n_microbatches=8, slack=2, grad_slack=1).set_index("stage")
    for s in range(4):
        total = sum(ring_size(live_1f1b(4, s, 8, d), 8, d, config) for d in ("forward", "grad"))
        assert t.loc[s, "pooltk_auto"] == total


def test_stock_lazy_is_the_live_set_but_all_m_forward_on_every_schedules_last_stage():
    # torch >= 2.15 allocates per receive: stock holds the live set, except the last stage keeps all
    # M forward (measured on 1F1B and Interleaved1F1B, see tests/memory/test_stock_lazy.py); pooltk
    # auto beats it there.
    from pooltk.analysis.lifetimes import live_sets

    t = allowlist_table(
        ["1F1B", "Interleaved1F1B", "ZBVZeroBubble"], pp=4, n_microbatches=8, slack=2
    )
    for name, rows in t.groupby("schedule"):
        part = rows.set_index("stage")
        last = int(part.index.max())
        live = live_sets(name, pp=4, n_microbatches=8, stages_per_rank=int(part.vpp.iloc[0]))
        assert (part.drop(index=last).stock_lazy == part.drop(index=last).live_peak).all(), name
        assert (
            part.loc[last, "stock_lazy"]
            == part.loc[last, "live_peak"] - live[(last, "forward")] + 8
        ), name
        assert part.loc[last, "pooltk_auto"] < part.loc[last, "stock_lazy"], name
