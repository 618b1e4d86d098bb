"""Issue #11 classes 1-2 and issue #18 holders on real gloo ranks: what aliases or keeps a receive
slot.

Before the fix (a321c7a) the eval case differed silently from stock (merged outputs of early
microbatches overwritten); now the slot is re-homed (copy on conflict) and the run is bitwise equal.
"""

import pytest

from pooltk.parity.experiments import Harness
from pooltk.parity import ParitySpec, Variant, run_parity

pytestmark = [pytest.mark.dist, pytest.mark.timeout(600)]


def _pair(name, **kw):
    cfg = kw.pop("config", Harness())
    return (
        Variant(name=f"stock/{name}", **kw),
        Variant(name=f"pooled/{name}", pooled=True, config=cfg, **kw),
    )


def test_class1_last_stage_output_viewing_its_input_is_equal_in_eval_and_train_and_re_homed(
    no_leftover_ranks,
):
    variants = _pair("view-eval", bodies=("block", "view"), eval_only=True) + _pair(
        "view-train", bodies=("block", "view")
    )
    report = run_parity(
        ParitySpec(
            pp=2, microbatches=8, steps=2, hidden=16, seq_len=4, variants=variants, timeout_s=300
        )
    )
    for name in ("view-eval", "view-train"):
        v = report.variant(f"pooled/{name}")
        assert v.bitwise_equal and v.outputs_bitwise_equal, name
        assert v.recv[1]["forward"].get("rehomes", 0) > 0, (
            name
        )  # the aliasing was seen and paid for
        assert v.rings[1]["forward"] < 8  # still a ring, not M sets


def test_class2_input_gradient_viewing_the_received_gradient_is_equal_with_grad_slack_0(
    no_leftover_ranks,
):
    variants = _pair(
        "grad-view", bodies=("block", "transpose", "block"), config=Harness(slack=0, grad_slack=0)
    )
    report = run_parity(
        ParitySpec(
            pp=3, microbatches=6, steps=2, hidden=16, seq_len=4, variants=variants, timeout_s=300
        )
    )
    v = report.variant("pooled/grad-view")
    assert v.bitwise_equal and v.outputs_bitwise_equal
    assert v.recv[1]["grad"].get("rehomes", 0) > 0  # stage 1 sends a view of its grad slot upstream


# Issue #18: models that keep something of their received input, judged against fresh (a new buffer
# per receive, torch 2.15's semantics). pp3 1F1B, slack 0: the middle stage's forward ring is 2 sets
# for 6 microbatches.

KEEPERS = {
    "hooks": ("block", "grad_hook", "block"),
    "window": ("block", "keep_window", "block"),
    "prev": ("block", "keep_prev", "block"),
}


def _three(models, *, eval_only=False, pp=3, microbatches=6):
    from pooltk.parity.summary import run_three_way

    variants = ()
    for key, bodies in models.items():
        variants += _pair(
            key, bodies=bodies, eval_only=eval_only, config=Harness(slack=0, grad_slack=0)
        )
    return run_three_way(
        ParitySpec(
            pp=pp,
            microbatches=microbatches,
            steps=3,
            hidden=8,
            seq_len=3,
            variants=variants,
            timeout_s=300,
        )
    )


@pytest.fixture(scope="module")
def keepers():
    three = _three(KEEPERS)
    return {j.variant.split("/", 1)[1]: j for j in three.judgements}, three


def test_hooks_on_received_inputs_pile_up_in_stock_and_pooled_equals_fresh_reported_as_explained(
    keepers,
):
    j, three = keepers
    assert (
        j["hooks"].verdict == "explained"
        and j["hooks"].equal_fresh
        and not j["hooks"].stock_equal_fresh
    )
    assert (
        "pile up across steps (pytorch issue #185331): 3 hooks on one stock buffer"
        in j["hooks"].reason
    )
    assert three.report.variant("stock/hooks").recv[1]["forward"]["max_hooks"] == 3  # one per step
    assert three.report.variant("fresh/hooks").recv[1]["forward"]["max_hooks"] == 1


def test_inputs_kept_across_a_step_are_overwritten_in_stock_and_pooled_equals_fresh_explained(
    keepers,
):
    j, _ = keepers
    assert (
        j["window"].verdict == "explained"
        and j["window"].equal_fresh
        and not j["window"].stock_equal_fresh
    )
    assert "previous step's inputs kept in a list" in j["window"].reason


def test_the_previous_microbatchs_input_kept_without_its_graph_is_equal_in_all_three(keepers):
    j, three = keepers
    assert j["prev"].verdict == "equal" and j["prev"].stock_equal_fresh
    assert (
        three.report.variant("pooled/prev").recv[1]["forward"].get("rehomes", 0) > 0
    )  # seen and re-homed


def test_the_previous_input_kept_with_its_graph_equals_fresh_or_stops_with_an_error_naming_pooltk(
    no_leftover_ranks,
):
    from pooltk.parity import ParityRankError
    from pooltk.parity.summary import names_pooltk

    bodies = ("block", "keep_prev_graph", "keep_prev_graph", "block")
    try:
        three = _three({"graph": bodies}, pp=4, microbatches=8)
    except ParityRankError as exc:
        # stock and fresh train on; the pooled run must say pooltk did it, and what to do
        assert names_pooltk(exc.error_type, exc.message), exc.message[:400]
        assert "detach" in exc.message or "slack" in exc.message
        return
    assert three.judgements[0].verdict in ("equal", "explained"), three.line


def test_a_cache_keyed_by_the_received_inputs_data_ptr_is_outside_the_contract_with_its_reason(
    no_leftover_ranks,
):
    three = _three({"ptr": ("block", "ptr_cache", "block")})
    j = three.judgements[0]
    # an address is not an identity: the pool no longer spends its saving on address reads, so the
    # ring's reused address makes the cache answer for another microbatch; the verdict says so
    # (never "silent")
    assert j.verdict == "outside", three.line
    assert "address_reuse" in j.reason and "not an identity" in j.reason
    v = three.report.variant("pooled/ptr")
    assert not v.recv[1]["forward"].get("rehomes", 0)  # and it cost no re-home


def test_dlpack_exports_of_the_received_input_kept_in_eval_are_never_silently_wrong(
    no_leftover_ranks,
):
    three = _three(
        {"dl": ("block", "dlpack", "block"), "np": ("block", "dlpack_numpy", "block")},
        eval_only=True,
    )
    assert all(j.verdict in ("equal", "explained", "loud") for j in three.judgements), three.line
