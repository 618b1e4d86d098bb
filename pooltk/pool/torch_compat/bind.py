"""The one way pooltk wraps torch's methods: on a class or on one object, with exact undo.

[Note: binding]
``bind(target, {name: Hooks(...)}, tag=...)`` wraps each named method of ``target``:
- a class: the method is replaced on the class in its MRO that defines it (``stage_base()``'s
  runtime methods live on ``_PipelineStageBase``), so every instance sees the wrapper;
- an object: the wrapper goes into the object's ``__dict__``, bound to it; its class is untouched.
A wrapper runs ``before(obj, call)``, then the call inside ``around(obj, call)`` (a context), then
returns ``after(obj, call, result)``; or ``raw(obj, call, proceed)`` alone, which decides whether
and how to ``proceed()``. ``call`` is a :class:`~pooltk.pool.torch_compat.stage_api.Call`, so no
hook reads positional arguments. A binding wraps whatever the attribute is now (torch's method or
an earlier binding), keeps ``functools.wraps`` (torch's signature stays readable), and
:meth:`Binding.undo` puts back the very objects it replaced. A binding undone while a later one
still wraps it stays in that chain as a pass-through: undo in reverse order to restore exactly.
One binding per (target, tag). Names the target lacks are skipped and listed in ``missing``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltk.pool.errors import ALREADY_BOUND, ON_NO_CLASS
from pooltk.pool.torch_compat.stage_api import Call

_ABSENT = object()
_ON_CLASSES: dict[type, dict[str, Binding]] = {}  # class -> {tag: Binding}
_ON_OBJECT = "_pooltk_bindings"  # an object's own {tag: Binding}: it goes with the object


@dataclass(frozen=True, slots=True, kw_only=True)
class Hooks:
    """What runs around one method (see [Note: binding])."""

    before: Callable[[Any, Call], None] | None = None
    around: Callable[[Any, Call], contextlib.AbstractContextManager] | None = None
    after: Callable[[Any, Call, Any], Any] | None = None
    raw: Callable[[Any, Call, Callable[[], Any]], Any] | None = None


@dataclass(eq=False, slots=True)
class Binding:
    """What one :func:`bind` replaced; ``active`` False once undone (its wrappers pass through)."""

    tag: str
    target: Any
    missing: tuple[str, ...] = ()
    active: bool = True
    # (owner, name, what was there or _ABSENT, the wrapper put there), in binding order
    replaced: list[tuple[Any, str, Any, Any]] = field(default_factory=list)

    def undo(self) -> bool:
        """Put back what this binding replaced; False if it was already undone."""
        if not self.active:
            return False
        self.active = False
        for owner, name, previous, wrapper in reversed(self.replaced):
            if vars(owner).get(name) is wrapper:  # else a later binding wraps it: it passes through
                _put(owner, name, _skip_undone(previous))
        bindings = _bindings(self.target)
        bindings.pop(self.tag, None)
        if not bindings and not isinstance(self.target, type):
            vars(self.target).pop(_ON_OBJECT, None)
        return True


def bound(target: Any, tag: str) -> Binding | None:
    """The binding ``tag`` has on ``target`` now, if any."""
    if isinstance(target, type):
        return _ON_CLASSES.get(target, {}).get(tag)
    return getattr(target, "__dict__", {}).get(_ON_OBJECT, {}).get(tag)


def _bindings(target: Any) -> dict[str, Binding]:
    if isinstance(target, type):
        return _ON_CLASSES.setdefault(target, {})
    return vars(target).setdefault(_ON_OBJECT, {})


def bind(target: Any, hooks: Mapping[str, Hooks], *, tag: str) -> Binding:
    """Wrap the methods ``hooks`` names on ``target`` (a class or one object); see [Note: binding].

    Raises:
        ValueError: ``target`` already has a binding tagged ``tag``.
        TypeError: a class's method is defined on no class of its MRO (nothing stays bound).
    """
    if bound(target, tag) is not None:
        raise ValueError(ALREADY_BOUND.format(tag=tag, target=target))
    missing = tuple(n for n in hooks if not callable(getattr(target, n, None)))
    binding = Binding(tag=tag, target=target, missing=missing)
    _bindings(target)[tag] = binding
    try:
        for name, hook in hooks.items():
            if name not in binding.missing:
                _bind_one(binding, name, hook)
    except BaseException:
        binding.undo()  # all or none
        raise
    return binding


def _bind_one(binding: Binding, name: str, hook: Hooks) -> None:
    owner, original = _wrapped(binding.target, name)
    wrapper = _wrapper(binding, name, original, hook)
    previous = vars(owner).get(name, _ABSENT)
    wrapper.__pooltk_binding__ = (binding, previous)
    if not isinstance(owner, type):
        wrapper = wrapper.__get__(owner)  # bound to the object, as its own attribute
    binding.replaced.append((owner, name, previous, wrapper))
    _put(owner, name, wrapper)


def _skip_undone(value: Any) -> Any:
    """What to put back: past wrappers of bindings undone out of order, to the first live one."""
    found = getattr(value, "__pooltk_binding__", None)  # a bound method reads its function's
    while found is not None and not found[0].active:
        value = found[1]
        found = getattr(value, "__pooltk_binding__", None)
    return value


def _put(owner: Any, name: str, value: Any) -> None:
    """Set (or, for ``_ABSENT``, remove) ``owner``'s own attribute ``name``."""
    if isinstance(owner, type):
        setattr(owner, name, value)  # never _ABSENT: the wrapper went on a class that had it
    elif value is _ABSENT:
        vars(owner).pop(name, None)
    else:
        vars(owner)[name] = value


def _wrapped(target: Any, name: str) -> tuple[Any, Callable]:
    """(where the wrapper goes, what it wraps, called as ``fn(obj, *args, **kwargs)``)."""
    if isinstance(target, type):
        owner = next((k for k in target.__mro__ if name in vars(k)), None)
        if owner is None:
            raise TypeError(ON_NO_CLASS.format(cls=target.__name__, name=name))
        return owner, vars(owner)[name]
    method = getattr(target, name)  # torch's method, or an earlier binding on this object

    @functools.wraps(method)
    def unbound(obj: Any, *args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    # the signature is the function's, self included: the wrapper is bound to the object again
    unbound.__wrapped__ = getattr(method, "__func__", method)
    return target, unbound


def _wrapper(binding: Binding, name: str, original: Callable, hooks: Hooks) -> Callable:
    @functools.wraps(original)
    def pooltk_wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
        if not binding.active:
            return original(obj, *args, **kwargs)
        call = Call(name, args, kwargs)
        if hooks.raw is not None:
            return hooks.raw(obj, call, lambda: original(obj, *args, **kwargs))
        if hooks.before is not None:
            hooks.before(obj, call)
        with hooks.around(obj, call) if hooks.around is not None else contextlib.nullcontext():
            result = original(obj, *args, **kwargs)
        return result if hooks.after is None else hooks.after(obj, call, result)

    return pooltk_wrapper
