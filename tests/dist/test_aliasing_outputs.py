"""Issue #11 classes 1-2 on real gloo ranks: outputs / input gradients that alias a receive slot.

Before the fix (a321c7a) the eval case differed silently from stock (merged outputs of early
microbatches overwritten); now the slot is re-homed (copy on conflict) and the run is bitwise equal.
"""

import pytest

from pooltk import PoolConfig
from pooltk.parity import ParitySpec, Variant, run_parity

pytestmark = [pytest.mark.dist, pytest.mark.timeout(600)]


def _pair(name, **kw):
    cfg = kw.pop("config", PoolConfig())
    return (Variant(name=f"stock/{name}", **kw), Variant(name=f"pooled/{name}", pooled=True, config=cfg, **kw))


def test_class1_last_stage_output_viewing_its_input_is_equal_in_eval_and_train_and_re_homed(no_leftover_ranks):
    variants = _pair("view-eval", bodies=("block", "view"), eval_only=True) + _pair("view-train", bodies=("block", "view"))
    report = run_parity(ParitySpec(pp=2, microbatches=8, steps=2, hidden=16, seq_len=4, variants=variants,
                                   timeout_s=300))
    for name in ("view-eval", "view-train"):
        v = report.variant(f"pooled/{name}")
        assert v.bitwise_equal and v.outputs_bitwise_equal, name
        assert v.recv[1]["forward"].get("rehomes", 0) > 0, name  # the aliasing was seen and paid for
        assert v.rings[1]["forward"] < 8  # still a ring, not M sets


def test_class2_input_gradient_viewing_the_received_gradient_is_equal_with_grad_slack_0(no_leftover_ranks):
    variants = _pair("grad-view", bodies=("block", "transpose", "block"), config=PoolConfig(slack=0, grad_slack=0))
    report = run_parity(ParitySpec(pp=3, microbatches=6, steps=2, hidden=16, seq_len=4, variants=variants,
                                   timeout_s=300))
    v = report.variant("pooled/grad-view")
    assert v.bitwise_equal and v.outputs_bitwise_equal
    assert v.recv[1]["grad"].get("rehomes", 0) > 0  # stage 1 sends a view of its grad slot upstream
