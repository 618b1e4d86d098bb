"""The fuzzer's seeded set: >= 50 random models on real gloo ranks, pooled vs stock, zero silent differences."""

import pytest

from pooltk.parity.fuzz import SCHEDULES, draw_cases, run_fuzz, summarize

pytestmark = [pytest.mark.dist, pytest.mark.timeout(900)]


def test_fifty_seeded_random_models_are_bitwise_equal_or_loud_never_silently_different(no_leftover_ranks):
    cases = draw_cases(54, seed=11, pp_choices=(2,))
    results = run_fuzz(cases, steps=2, batch=27, timeout_s=800)
    s = summarize(results)
    silent = [f"{r.case.label}: {r.detail}" for r in results if r.verdict == "silent"]
    assert silent == []
    assert s.cases == 54 and s.equal + s.loud + s.invalid == 54
    # The draw exercised every poolable schedule, and the models that alias their buffers were re-homed.
    assert {r.case.schedule for r in results if r.verdict == "equal"} == {name for name, _, _ in SCHEDULES}
    assert s.rehomed_cases > 0
    assert s.invalid <= 54 // 3, [r.detail for r in results if r.verdict == "invalid"][:3]
