"""The fuzzer's seeded set on real gloo ranks: random models, pooled vs stock vs fresh, never
silently different.

One seeded draw (pp2, every poolable schedule, every body class: views, hooks on received inputs,
tensors kept across microbatches and steps with and without their graph, address-keyed caches,
DLPack exports), run once for the module; each test reads its own claim off the same results.
"""

import pytest

from pooltk.parity.fuzz import SCHEDULES, SPLIT_BACKWARD, draw_cases, run_fuzz, summarize
from pooltk.parity.models import STATEFUL_BODIES, VIEW_OUTPUT_BODIES

pytestmark = [pytest.mark.dist, pytest.mark.timeout(600)]

# Holders only C++ sees (issue #18): a DLPack export of the received input.
_CPP_HOLDERS = ("dlpack", "dlpack_numpy")


@pytest.fixture(scope="module")
def fuzzed():
    cases = draw_cases(30, seed=11, pp_choices=(2,))
    return run_fuzz(cases, steps=2, batch=15, timeout_s=500)


def _bad(results, keep, verdicts=("silent",)):
    return [
        f"{r.verdict} {r.case.label}: {r.detail}"
        for r in results
        if r.verdict in verdicts and keep(r)
    ]


def test_seeded_random_models_are_never_silently_different_from_fresh(fuzzed):
    from pooltk.parity.summary import VERDICTS

    assert _bad(fuzzed, lambda r: True) == []
    s = summarize(fuzzed)
    assert s.cases == 30 and sum(getattr(s, k) for k in VERDICTS) == 30
    # The draw exercised every poolable schedule, and the models that alias their buffers were
    # re-homed.
    assert {r.case.schedule for r in fuzzed if r.verdict in ("equal", "explained")} == {
        n for n, _, _ in SCHEDULES
    }
    assert s.rehomed_cases > 0


def test_every_error_a_pooled_run_raises_names_pooltk(fuzzed):
    assert _bad(fuzzed, lambda r: True, verdicts=("unnamed",)) == []


def test_only_models_outside_the_contract_are_judged_outside_and_dlpack_exports_are_never_silent(
    fuzzed,
):
    from pooltk.parity.models import OUTSIDE_CONTRACT

    outside = [r for r in fuzzed if r.verdict == "outside"]
    assert all(set(r.case.bodies) & set(OUTSIDE_CONTRACT) for r in outside), [
        r.case.label for r in outside
    ]
    assert _bad(fuzzed, lambda r: bool(set(r.case.bodies) & set(_CPP_HOLDERS))) == []


def test_the_draw_holds_only_bodies_torch_accepts_so_no_case_is_invalid(fuzzed):
    assert [f"{r.case.label}: {r.detail}" for r in fuzzed if r.verdict == "invalid"] == []
    split_train = [
        r.case for r in fuzzed if r.case.schedule in SPLIT_BACKWARD and not r.case.eval_only
    ]
    assert split_train and not any(set(c.bodies) & set(VIEW_OUTPUT_BODIES) for c in split_train)


def test_stock_reuse_effects_are_reported_as_explained_with_their_reason(fuzzed):
    explained = [r for r in fuzzed if r.verdict == "explained"]
    assert explained, (
        "the seeded draw should hold a model whose stock numbers depend on buffer reuse"
    )
    for r in explained:
        assert r.stock_equal_fresh is False and r.equal_fresh is True and r.equal_stock is False
        assert "pile up" in r.detail or "kept" in r.detail, r.detail
    drawn = {b for r in fuzzed for b in r.case.bodies}
    assert set(STATEFUL_BODIES) <= drawn
