"""The memory model's bytes per stage and direction equal what real gloo stages hold, exactly.

Measured: distinct storages behind every stage's receive infos after real steps (stock and
pooled). Modelled: pooltk.memory.model.expected_bytes for the same shape, boundary and config.
"""

import pytest

from pooltk.parity.experiments import Harness
from pooltk.memory.model import expected_bytes, harness_boundary
from pooltk.parity import ParitySpec, default_variants, run_parity

pytestmark = [pytest.mark.dist, pytest.mark.timeout(600)]

CASES = [
    (
        4,
        8,
        [
            Harness(slack=2),
            Harness(slack=0, grad_slack=0),
            Harness(policy="automodel", slack=0),
            Harness(policy="automodel", slack=2),
        ],
    ),
    (2, 6, [Harness(slack=1, grad_slack=0), Harness(policy="automodel", slack=1)]),
    (3, 3, [Harness(slack=0), Harness(slack=5, grad_slack=3)]),
]


@pytest.mark.parametrize("pp, m, configs", CASES, ids=[f"pp{c[0]}-M{c[1]}" for c in CASES])
def test_modelled_bytes_equal_measured_bytes_on_real_stages(pp, m, configs, no_leftover_ranks):
    spec = ParitySpec(
        pp=pp,
        microbatches=m,
        steps=1,
        hidden=24,
        seq_len=3,
        rows_per_microbatch=2,
        timeout_s=300,
        variants=default_variants(configs),
    )
    report = run_parity(spec)
    assert report.bitwise_equal
    boundary = harness_boundary(rows=2, seq_len=3, hidden=24)
    stock = report.variants[0]
    checked = 0
    for v in report.variants[1:]:
        h = Harness(**v.config)
        model = expected_bytes(
            pp=pp,
            n_microbatches=m,
            boundaries=boundary,
            config=h.config,
            policy=h.policy,
            sharing=h.sharing,
        )
        for stage in range(pp):
            for d in ("forward", "grad"):
                exp = model[(stage, d)]
                assert v.recv[stage][d]["bytes"] == exp.pooled_bytes, (v.name, stage, d)
                assert v.recv[stage][d]["sets"] == exp.pooled_sets, (v.name, stage, d)
                assert stock.recv[stage][d]["bytes"] == exp.stock_bytes, (stage, d)
                checked += 1
    assert checked == 2 * pp * len(configs)


RANK_CASES = [
    ("Interleaved1F1B", 2, 8),
    ("InterleavedZeroBubble", 2, 8),
    ("ZBVZeroBubble", 2, 8),
    ("Interleaved1F1B", 4, 8),
]


@pytest.mark.parametrize(
    "schedule, pp, m", RANK_CASES, ids=[f"{s}-pp{p}-M{m}" for s, p, m in RANK_CASES]
)
def test_modelled_rank_bytes_equal_the_distinct_storages_each_rank_holds(
    schedule, pp, m, no_leftover_ranks
):
    from pooltk.memory.model import model_memory
    from pooltk.memory.shape import PipelineShape
    from pooltk.parity import Variant

    configs = {
        "rank": Harness(),
        "rank0": Harness(slack=0, grad_slack=0),
        "stage": Harness(sharing="stage"),
    }
    base = dict(schedule=schedule, stages_per_rank=2)
    variants = (Variant(name="stock", **base),) + tuple(
        Variant(name=k, pooled=True, config=c, install_schedule="auto", **base)
        for k, c in configs.items()
    )
    spec = ParitySpec(
        pp=pp,
        microbatches=m,
        steps=2,
        hidden=24,
        seq_len=3,
        rows_per_microbatch=2,
        timeout_s=300,
        variants=variants,
    )
    report = run_parity(spec)
    assert report.bitwise_equal
    boundary = harness_boundary(rows=2, seq_len=3, hidden=24)
    shape = PipelineShape(pp=pp, n_microbatches=m, schedule=schedule, stages_per_rank=2)
    for name, config in configs.items():
        measured = report.variant(name).rank_recv
        expected = model_memory(
            shape, boundary, config.config, policy=config.policy, sharing=config.sharing
        ).expected_rank_bytes()
        for rank in range(pp):
            got = sum(measured[rank][d]["bytes"] for d in ("forward", "grad"))
            assert got == expected[rank].pooled_bytes, (name, rank, got, expected[rank])
    from pooltk.parity import format_report

    printed = format_report(report).split("receive buffers per rank", 1)[
        1
    ]  # what `pooltk parity` shows per rank
    for name in configs:
        rank_line = next(ln for ln in printed.splitlines() if ln.split() and ln.split()[0] == name)
        for rank in range(pp):
            f, g = (report.variant(name).rank_recv[rank][d]["sets"] for d in ("forward", "grad"))
            assert f"r{rank} {f}+{g} " in rank_line, (name, rank_line)
    shared = model_memory(
        shape, boundary, configs["rank"].config, sharing="rank"
    ).expected_rank_bytes()
    per_stage = model_memory(
        shape, boundary, configs["stage"].config, sharing="stage"
    ).expected_rank_bytes()
    assert sum(e.pooled_bytes for e in shared.values()) <= sum(
        e.pooled_bytes for e in per_stage.values()
    )
