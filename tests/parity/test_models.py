"""The fuzzer draws bodies torch accepts, and its stateful bodies keep nothing of torch's shape
inference."""

import pytest
import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from pooltk.parity.fuzz import SPLIT_BACKWARD, draw_cases
from pooltk.parity.models import (
    BODIES,
    SPLIT_BACKWARD_BODIES,
    SPLIT_BACKWARD_RACY,
    STATEFUL_BODIES,
    VIEW_OUTPUT_BODIES,
    FuzzStage,
)


def _split_backward_accepts(body: str, aux: str | None) -> bool:
    """Run torch's own split backward (input grads, then weight grads) over one non-first fuzz
    stage, twice."""
    st = FuzzStage(body, hidden=8, seed=1, first=False, aux=aux)
    for _ in range(2):  # the second forward sees what the first kept
        x = torch.randn(2, 3, 8, requires_grad=True)
        ins = [x] + ([torch.randn(2, 1, 1, dtype=torch.float64, requires_grad=True)] if aux else [])
        out = st(*ins)
        outs = list(out) if isinstance(out, tuple) else [out]
        try:
            _, groups = stage_backward_input(
                outs, [torch.randn_like(o) for o in outs], ins, st.parameters()
            )
            stage_backward_weight(st.parameters(), groups)
        except RuntimeError:
            return False
        st.step_end()
    return True


@pytest.mark.parametrize("aux", [None, "pass", "mix"])
def test_split_backward_bodies_are_those_torchs_split_backward_accepts_less_the_racy_ones(aux):
    accepted = {b for b in BODIES if _split_backward_accepts(b, aux)}
    # Everything the fuzzer draws there is accepted by this torch; a newer torch may accept more
    # (2.15's split backward takes the 3-D linear's view output, 'inplace'), never less than the
    # drawn set.
    assert set(SPLIT_BACKWARD_BODIES) | set(SPLIT_BACKWARD_RACY) <= accepted
    assert not set(SPLIT_BACKWARD_BODIES) & set(SPLIT_BACKWARD_RACY)
    assert set(BODIES) - accepted <= set(VIEW_OUTPUT_BODIES)
    if tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) < (
        2,
        15,
    ):  # measured on 2.11-2.14
        assert accepted == set(SPLIT_BACKWARD_BODIES) | set(SPLIT_BACKWARD_RACY)
        assert set(VIEW_OUTPUT_BODIES) == set(BODIES) - accepted


def test_split_backward_training_draws_hold_no_view_output_body_and_every_body_is_drawn():
    cases = draw_cases(300, seed=3)
    split_train = [c for c in cases if c.schedule in SPLIT_BACKWARD and not c.eval_only]
    assert split_train
    assert not any(
        set(c.bodies) & (set(VIEW_OUTPUT_BODIES) | set(SPLIT_BACKWARD_RACY)) for c in split_train
    )
    assert {b for c in cases for b in c.bodies} == set(BODIES)
    assert all(len(c.variants()) == 3 and c.variants()[0].buffers == "fresh" for c in cases[:6])


def _forward_metadata_inference(stage, x):  # the name torch 2.12+ gives its shape-inference forward
    return stage(x)


@pytest.mark.parametrize("body", sorted(STATEFUL_BODIES))
def test_stateful_bodies_keep_nothing_from_torchs_shape_inference_forward(body):
    st = FuzzStage(body, hidden=8, seed=1, first=False, aux=None)
    x = torch.randn(2, 3, 8, requires_grad=body != "dlpack")
    _forward_metadata_inference(st, x)
    assert st.prev is None and st.current == [] and st.cache == {}
    if x.requires_grad:
        assert x._backward_hooks is None or len(x._backward_hooks) == 0


def test_a_data_ptr_cache_hits_on_a_repeated_address_within_a_step_and_is_cleared_at_step_end():
    st = FuzzStage("ptr_cache", hidden=8, seed=1, first=False, aux=None)
    buf = torch.randn(2, 3, 8)
    first = st(buf).detach().clone()
    buf.copy_(torch.randn(2, 3, 8))  # a later receive into the same buffer: same address
    stale = st(buf).detach()
    expect = (st.block(buf) + 0.1 * (buf**2).mean(-1, keepdim=True)).detach()
    assert not torch.equal(
        stale, expect
    )  # the cached value is the old one: what a reused buffer gives
    st.step_end()
    assert torch.equal(st(buf).detach(), expect) and not torch.equal(first, expect)


@pytest.mark.parametrize("pp_choices", [(), (1,), (2, 0), "234", 3, (2.5,)])
def test_draw_cases_refuses_rank_counts_a_launch_cannot_run(pp_choices):
    """() was random's IndexError, (1,) and (0,) drew cases of 1 or 0 ranks (refused by ParitySpec
    only once run_fuzz launched), '234' and 3 were TypeErrors."""
    from pooltk._validate import InputError

    with pytest.raises(InputError, match=r"^fuzz pp_choices: found .*; required .*(>= 2)"):
        draw_cases(3, pp_choices=pp_choices)


@pytest.mark.parametrize("timeout_s", [0, -1, float("inf"), float("nan"), "600"])
def test_run_fuzz_refuses_a_timeout_before_any_launch(timeout_s, monkeypatch):
    """It was refused as ParitySpec.timeout_s from inside a launch attempt, after the chunk was
    split down to one case."""
    import pooltk.parity.fuzz as fuzz
    from pooltk._validate import InputError

    monkeypatch.setattr(fuzz, "run_parity", lambda spec: pytest.fail("it launched"))
    with pytest.raises(InputError, match=r"^fuzz timeout_s: found .*; required a finite number"):
        fuzz.run_fuzz(draw_cases(2), timeout_s=timeout_s)
