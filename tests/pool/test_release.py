"""The last-stage release, single process: what it detaches, what it keeps, and that values never
change.

The multi-process claims (0 re-homes on the last stage, bitwise equality, 2.15's live buffers) are
in tests/unit/test_last_stage_records.py (one live gloo launch; the recorded table's claims:
tools/last_stage/claims.py), and the compat matrix (2.15).
"""

from __future__ import annotations

import logging

import gc
import weakref
from collections import OrderedDict, defaultdict, namedtuple

import pytest
import torch

from pooltk.pool import release as rel
from pooltk.pool.gating import Decision
from pooltk.pool.stage import StageState


class _Stage:
    def __init__(self) -> None:
        self.stage_index, self.is_last, self.has_backward = 1, True, True
        self.output_chunks: list = []


class _Schedule:
    def __init__(self) -> None:
        self._internal_losses: list = []


def _microbatch(
    stage: _Stage, schedule: _Schedule, x: torch.Tensor, w: torch.Tensor, *, view: bool = False
):
    """One last-stage forward + loss + backward the way torch's schedule keeps them."""
    out = x @ w
    if view:
        out = out.view(-1)
    stage.output_chunks.append(out)
    loss = (out**2).mean()
    schedule._internal_losses.append(loss)
    loss.backward()
    return out, loss


def _state(stage: _Stage, schedule: _Schedule | None) -> StageState:
    observed = weakref.ref(schedule) if schedule is not None else None
    return StageState(decision=Decision(True, "test", "1f1b", observed=observed), release=True)


def test_after_the_release_nothing_of_the_schedule_holds_the_received_input():
    stage, schedule = _Stage(), _Schedule()
    st = _state(stage, schedule)
    x = torch.randn(4, 3, requires_grad=True)  # the received leaf
    w = torch.randn(3, 3, requires_grad=True)
    alive = weakref.ref(x)
    out, loss = _microbatch(stage, schedule, x, w, view=True)
    st.outputs[0] = out  # what the forward wrapper keeps for the release
    before = x._use_count()
    rel.release_chunk(stage, st, 0, loss)
    del out, loss, x
    gc.collect()
    assert alive() is None, (
        "the kept loss or output still holds the received input through its graph"
    )
    assert before > 1  # the graph did hold it before the release


def test_without_the_release_the_kept_graph_holds_the_received_input():
    stage, schedule = _Stage(), _Schedule()
    x = torch.randn(4, 3, requires_grad=True)
    alive = weakref.ref(x)
    out, loss = _microbatch(stage, schedule, x, torch.randn(3, 3, requires_grad=True), view=True)
    del out, loss, x
    gc.collect()
    assert alive() is not None  # the control: the claim above can fail


def test_the_released_loss_and_output_carry_the_same_bits_without_a_graph():
    stage, schedule = _Stage(), _Schedule()
    st = _state(stage, schedule)
    x = torch.randn(4, 3, requires_grad=True)
    out, loss = _microbatch(stage, schedule, x, torch.randn(3, 3, requires_grad=True), view=True)
    want_out, want_loss = out.detach().clone(), loss.detach().clone()
    st.outputs[0] = out  # what the forward wrapper keeps for the release
    rel.release_chunk(stage, st, 0, loss)
    kept_out, kept_loss = stage.output_chunks[0], schedule._internal_losses[0]
    assert torch.equal(kept_out, want_out) and kept_out.grad_fn is None
    assert torch.equal(kept_loss, want_loss) and kept_loss.grad_fn is None
    assert (
        kept_loss is loss
    )  # a loss that is not a view is detached in place: the step's local loses it too


def test_a_view_loss_is_replaced_in_the_schedules_list_where_the_schedule_is_known():
    stage, schedule = _Stage(), _Schedule()
    st = _state(stage, schedule)
    x = torch.randn(4, 3, requires_grad=True)
    out = x.sum(0)
    loss = out[:1]  # a view
    schedule._internal_losses.append(loss)
    loss.sum().backward()
    rel.release_chunk(stage, st, 0, loss)
    assert schedule._internal_losses[0] is not loss and schedule._internal_losses[0].grad_fn is None
    assert torch.equal(schedule._internal_losses[0], loss.detach())


def test_a_view_loss_without_a_known_schedule_keeps_its_graph_and_says_why_once():
    stage = _Stage()
    st = _state(stage, None)
    events: list = []
    st.install = type("Install", (), {"events": events})()
    for chunk in range(2):
        x = torch.randn(4, 3, requires_grad=True)
        loss = x.sum(0)[:1]
        loss.sum().backward()
        rel.release_chunk(stage, st, chunk, loss)
        assert loss.grad_fn is not None
    kept = [e for e in events if e.kind == "kept-graph"]
    assert (
        len(kept) == 1
        and kept[0].stage == 1
        and kept[0].level == logging.WARNING
        and kept[0].fields["reason"]
    )


def test_an_output_the_model_kept_itself_keeps_its_graph():
    stage, schedule = _Stage(), _Schedule()
    st = _state(stage, schedule)
    x = torch.randn(4, 3, requires_grad=True)
    out, loss = _microbatch(stage, schedule, x, torch.randn(3, 3, requires_grad=True), view=True)
    users_copy = out  # e.g. self.last_out = out inside the model
    st.outputs[0] = out  # what the forward wrapper keeps for the release
    rel.release_chunk(stage, st, 0, loss)
    assert (
        stage.output_chunks[0] is not users_copy and users_copy.grad_fn is not None
    )  # a real holder, seen by copy on conflict


@pytest.mark.parametrize(
    "make",
    [
        lambda t: (t, t * 2),
        lambda t: [t, {"a": t}],
        lambda t: OrderedDict(a=t, b=(t,)),
        lambda t: namedtuple("Out", "a b")(t, t + 1),
        lambda t: defaultdict(list, a=t, b=[t]),
    ],
)
def test_detached_keeps_the_structure_and_values_of_any_output(make):
    t = torch.randn(3, requires_grad=True) * 1.5
    value = make(t)
    out = rel.detached(value)
    assert type(out) is type(value)
    assert getattr(out, "default_factory", None) is getattr(value, "default_factory", None)
    flat_in, flat_out = [], []

    def walk(v, acc):
        if isinstance(v, torch.Tensor):
            acc.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x, acc)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x, acc)

    walk(value, flat_in)
    walk(out, flat_out)
    assert len(flat_in) == len(flat_out)
    assert all(
        torch.equal(a, b) and b.grad_fn is None and not b.requires_grad
        for a, b in zip(flat_in, flat_out)
    )
