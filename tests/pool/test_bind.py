"""pooltk.pool.torch_compat.bind: the one binder wraps a class or one object, composes over an
earlier binding, reads the call's arguments by name, and undoes exactly."""

from __future__ import annotations

import contextlib
import inspect

import pytest

from pooltk.pool.torch_compat.bind import Hooks, bind, bound


class Base:
    def forward_one_chunk(self, fwd_chunk_id, args, kwargs=None):
        """torch's docstring."""
        return ("forward", fwd_chunk_id)

    def clear_runtime_states(self):
        return "cleared"


class Stage(Base):
    pass


def test_a_class_binding_goes_on_the_class_that_defines_the_method_and_undo_restores_that_object():
    original = vars(Base)["forward_one_chunk"]
    seen = []
    binding = bind(
        Stage, {"forward_one_chunk": Hooks(before=lambda s, c: seen.append(c.chunk))}, tag="t"
    )
    assert (
        "forward_one_chunk" not in vars(Stage) and vars(Base)["forward_one_chunk"] is not original
    )
    assert Stage().forward_one_chunk(3, ()) == ("forward", 3)
    assert Stage().forward_one_chunk(fwd_chunk_id=4, args=()) == ("forward", 4) and seen == [3, 4]
    assert inspect.signature(vars(Base)["forward_one_chunk"]) == inspect.signature(original)
    assert binding.undo() and not binding.undo()
    assert vars(Base)["forward_one_chunk"] is original


def test_an_object_binding_touches_only_that_object_and_undo_removes_its_attribute():
    stage, other = Stage(), Stage()
    binding = bind(stage, {"clear_runtime_states": Hooks(after=lambda s, c, r: r + "!")}, tag="t")
    assert stage.clear_runtime_states() == "cleared!" and other.clear_runtime_states() == "cleared"
    assert bound(stage, "t") is binding and bound(other, "t") is None
    binding.undo()
    assert "clear_runtime_states" not in vars(stage) and bound(stage, "t") is None


def test_bindings_compose_and_undone_in_reverse_order_leave_the_original():
    stage, calls = Stage(), []
    first = bind(
        stage, {"clear_runtime_states": Hooks(before=lambda s, c: calls.append(1))}, tag="first"
    )
    second = bind(
        stage, {"clear_runtime_states": Hooks(before=lambda s, c: calls.append(2))}, tag="second"
    )
    stage.clear_runtime_states()
    assert calls == [2, 1]
    first.undo()  # out of order: it stays in the chain, passing straight through
    calls.clear()
    stage.clear_runtime_states()
    assert calls == [2]
    second.undo()
    assert "clear_runtime_states" not in vars(stage)


def test_a_second_binding_under_one_tag_is_refused_and_missing_names_are_listed():
    stage = Stage()
    binding = bind(
        stage, {"clear_runtime_states": Hooks(), "backward_weight_one_chunk": Hooks()}, tag="t"
    )
    assert binding.missing == ("backward_weight_one_chunk",)
    with pytest.raises(ValueError, match="already bound"):
        bind(stage, {"clear_runtime_states": Hooks()}, tag="t")


def test_around_wraps_the_call_and_raw_decides_whether_to_proceed():
    stage, log = Stage(), []

    @contextlib.contextmanager
    def around(s, c):
        log.append("in")
        yield
        log.append("out")

    bind(stage, {"forward_one_chunk": Hooks(around=around)}, tag="a")
    bind(stage, {"clear_runtime_states": Hooks(raw=lambda s, c, proceed: "skipped")}, tag="r")
    assert stage.forward_one_chunk(0, ()) == ("forward", 0) and log == ["in", "out"]
    assert stage.clear_runtime_states() == "skipped"


def test_a_binding_that_fails_part_way_leaves_nothing_bound():
    class Meta(type):
        def __getattr__(cls, name):  # noqa: ANN001, ANN204 - a method no class of the MRO defines
            if name == "from_meta":
                return lambda *a: None
            raise AttributeError(name)

    class Odd(metaclass=Meta):
        def clear_runtime_states(self):  # noqa: ANN201
            return "cleared"

    before = vars(Odd)["clear_runtime_states"]
    with pytest.raises(TypeError, match="from_meta"):
        bind(Odd, {"clear_runtime_states": Hooks(), "from_meta": Hooks()}, tag="t")
    assert vars(Odd)["clear_runtime_states"] is before and bound(Odd, "t") is None


def test_an_object_binding_keeps_the_methods_signature_through_several_bindings():
    stage = Stage()
    before = inspect.signature(stage.forward_one_chunk)
    for tag in ("first", "second"):
        bind(stage, {"forward_one_chunk": Hooks()}, tag=tag)
        assert inspect.signature(stage.forward_one_chunk) == before, tag
    assert stage.forward_one_chunk(3, ()) == ("forward", 3)
