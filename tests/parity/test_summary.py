"""Three-way verdicts (pooltk.parity.summary): pooled vs stock vs fresh, over reports built by
hand."""

from types import SimpleNamespace

from pooltk.parity.summary import (
    HOOKS_REASON,
    exit_code,
    fresh_followup,
    judge,
    names_pooltk,
    needs_fresh_comparison,
    verdict_line,
)


def _v(name, *, pooled, reference, equal=None, hooks=0, diff=0.0):
    recv = {
        1: {"forward": {"bytes": 0, "sets": 1, "max_hooks": hooks}, "grad": {"bytes": 0, "sets": 0}}
    }
    return SimpleNamespace(
        name=name,
        pooled=pooled,
        reference=reference,
        params_bitwise_equal=equal,
        outputs_bitwise_equal=equal,
        params_max_abs_diff=diff,
        recv=recv,
    )


class Report:
    def __init__(self, variants, spec_variants=(), steps=3):
        self.variants = variants
        self.spec = SimpleNamespace(steps=steps, variants=tuple(spec_variants))

    def variant(self, name):
        return next(v for v in self.variants if v.name == name)


def _report(*, pooled_eq_stock, fresh_eq_stock, stock_hooks=0):
    return Report(
        [
            _v("fresh/m", pooled=False, reference="stock/m", equal=fresh_eq_stock, hooks=1),
            _v("stock/m", pooled=False, reference=None, hooks=stock_hooks),
            _v("pooled/m", pooled=True, reference="stock/m", equal=pooled_eq_stock, diff=0.5),
        ]
    )


def test_pooled_equal_to_stock_is_equal_without_a_second_launch():
    r = _report(pooled_eq_stock=True, fresh_eq_stock=True)
    assert needs_fresh_comparison(r) == []
    (j,) = judge(r)
    assert j.verdict == "equal" and exit_code([j]) == 0 and verdict_line([j]) == "verdict: 1 equal"


def test_pooled_differing_where_stock_and_fresh_agree_is_silent():
    r = _report(pooled_eq_stock=False, fresh_eq_stock=True)
    assert needs_fresh_comparison(r) == []
    (j,) = judge(r)
    assert j.verdict == "silent" and j.equal_fresh is False and exit_code([j]) == 1
    assert "SILENT pooled/m" in verdict_line([j])


def test_pooled_equal_to_fresh_where_stock_differs_is_explained_with_the_measured_hook_pile_up():
    r = _report(pooled_eq_stock=False, fresh_eq_stock=False, stock_hooks=3)
    assert needs_fresh_comparison(r) == ["pooled/m"]
    follow = Report(
        [
            _v("fresh/m", pooled=False, reference=None),
            _v("pooled/m|vs-fresh", pooled=True, reference="fresh/m", equal=True),
        ]
    )
    (j,) = judge(r, follow)
    assert (j.verdict, j.equal_stock, j.equal_fresh, j.stock_equal_fresh) == (
        "explained",
        False,
        True,
        False,
    )
    assert (
        HOOKS_REASON in j.reason
        and "3 hooks on one stock buffer after 3 steps, 1 on a fresh one" in j.reason
    )
    line = verdict_line([j])
    assert (
        exit_code([j]) == 0
        and "stock's numbers depend on buffer reuse" in line
        and "#185331" in line
    )


def test_explained_names_the_kept_tensor_from_the_bodies_and_differing_from_fresh_too_is_silent():
    r = _report(pooled_eq_stock=False, fresh_eq_stock=False)
    follow = Report([_v("pooled/m|vs-fresh", pooled=True, reference="fresh/m", equal=True)])
    (j,) = judge(r, follow, {"pooled/m": ("block", "keep_window")})
    assert j.verdict == "explained" and "previous step's inputs kept in a list" in j.reason
    follow_bad = Report([_v("pooled/m|vs-fresh", pooled=True, reference="fresh/m", equal=False)])
    assert judge(r, follow_bad)[0].verdict == "silent"
    assert judge(r)[0].verdict == "silent"  # never measured against fresh: not a pass


def test_the_follow_up_launch_runs_fresh_then_pooled_compared_with_fresh():
    from pooltk import PoolConfig
    from pooltk.parity.spec import Variant, with_fresh

    spec_vs = with_fresh(
        (Variant(name="stock/m"), Variant(name="pooled/m", pooled=True, config=PoolConfig()))
    )
    assert [v.name for v in spec_vs] == ["fresh/m", "stock/m", "pooled/m"]
    r = _report(pooled_eq_stock=False, fresh_eq_stock=False)
    r.spec.variants = spec_vs
    f, p = fresh_followup(r, ["pooled/m"])
    assert (f.name, f.buffers) == ("fresh/m", "fresh")
    assert (p.name, p.pooled, p.compare_to) == ("pooled/m|vs-fresh", True, "fresh")


def test_an_error_is_loud_only_when_it_names_pooltk():
    assert names_pooltk("PoolOverrunError", "slot 1 still owned")
    assert names_pooltk(
        "RuntimeError", "pooltk: stage 1 forward slot 0 was re-used by microbatch 3 ..."
    )
    assert not names_pooltk(
        "RuntimeError",
        "one of the variables needed for gradient computation has been "
        "modified by an inplace operation",
    )
