"""torch's stage runtime as the pool's wrappers use it: every torch name in one place.

Relied on in every family: the runtime methods of ``_PipelineStageBase`` and their leading arguments
(checked at install: a renamed one is an unknown layout), ``fwd_cache[chunk] = (outputs, inputs)`` until the
chunk's backward, the last stage's ``output_chunks`` and the schedule's ``_internal_losses`` (step end).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

__all__ = [
    "GUARDED_STAGE_METHODS",
    "HANDOFF_METHODS",
    "HOT_METHODS",
    "OPTIONAL_HOT_METHODS",
    "RECV_INFO_ATTRS",
    "RUNTIME_ARGS",
    "SEND_METHODS",
    "cached_forward",
    "call_arg",
    "defining_class",
    "originals_of",
    "output_chunks",
    "schedule_losses",
    "signature_problems",
    "stage_base",
]

HOT_METHODS: tuple[str, ...] = (
    "get_fwd_recv_ops",
    "get_bwd_recv_ops",
    "forward_one_chunk",
    "backward_one_chunk",
    "clear_runtime_states",
)
"""Wrapped in every eager family: receive posts, compute steps, the reset."""

OPTIONAL_HOT_METHODS: tuple[str, ...] = ("backward_weight_one_chunk",)
"""Wrapped where torch has them (split backward)."""

SEND_METHODS: tuple[str, ...] = ("get_fwd_send_ops",)
"""Wrapped on eager layouts ([Note: finished sends]); an override is not refused: its sends just count as holders."""

HANDOFF_METHODS: tuple[str, ...] = ("set_local_bwd_input",)
"""Wrapped on eager layouts where torch has it: a V schedule's same-rank gradient handoff."""

GUARDED_STAGE_METHODS: tuple[str, ...] = (
    HOT_METHODS
    + OPTIONAL_HOT_METHODS
    + HANDOFF_METHODS
    + ("_retrieve_recv_activations", "_retrieve_recv_grads")
)
"""Methods a pooled stage's class may not override ([Note: refusals]): the wrapped ones and the readers."""

RECV_INFO_ATTRS: dict[str, str] = {"forward": "args_recv_info", "grad": "grad_recv_info"}
"""Direction -> the stage attribute holding each chunk's recv infos."""

RUNTIME_ARGS: dict[str, tuple[str, ...]] = {
    "get_fwd_recv_ops": ("fwd_chunk_id",),
    "get_bwd_recv_ops": ("bwd_chunk_id",),
    "get_fwd_send_ops": ("fwd_chunk_id",),
    "forward_one_chunk": ("fwd_chunk_id", "args", "kwargs"),
    "backward_one_chunk": ("bwd_chunk_id", "loss", "full_backward"),
    "backward_weight_one_chunk": ("bwd_chunk_id",),
    "set_local_bwd_input": ("next_stage_bwd_outputs", "mb_index"),
}
"""The leading parameters (after ``self``) of each wrapped method, in torch's order."""

_DEFAULTS: dict[str, Any] = {"loss": None, "full_backward": True, "kwargs": None, "args": ()}


def call_arg(method: str, name: str, args: tuple, kwargs: dict) -> Any:
    """The value of parameter ``name`` in a call of ``method`` (positional or keyword, else torch's default)."""
    if name in kwargs:
        return kwargs[name]
    pos = RUNTIME_ARGS[method].index(name)
    if pos < len(args):
        return args[pos]
    if name in _DEFAULTS:
        return _DEFAULTS[name]
    raise TypeError(f"pooltk: {method}() was called without its {name!r} argument")


def signature_problems(base: type, methods: tuple[str, ...]) -> list[str]:
    """Methods of ``base`` among ``methods`` whose leading parameters are not the ones :data:`RUNTIME_ARGS` names."""
    problems = []
    for method in methods:
        names, fn = RUNTIME_ARGS.get(method), getattr(base, method, None)
        if names is None or fn is None:
            if fn is None and method in HOT_METHODS:
                problems.append(f"{method} missing")
            continue
        try:
            params = [p for p in inspect.signature(fn).parameters if p != "self"]
        except (TypeError, ValueError):
            problems.append(f"{method} has no readable signature")
            continue
        if tuple(params[: len(names)]) != names:
            problems.append(
                f"{method}({', '.join(params[: len(names)])}) where pooltk expects ({', '.join(names)})"
            )
    return problems


def stage_base() -> type:
    """``_PipelineStageBase``, the class that defines the runtime methods."""
    from torch.distributed.pipelining import stage

    return stage._PipelineStageBase


def cached_forward(stage: Any, chunk: int) -> tuple[tuple, list] | None:
    """``(outputs, inputs)`` torch keeps for ``chunk`` between its forward and backward, or None."""
    return getattr(stage, "fwd_cache", {}).get(chunk)


def output_chunks(stage: Any) -> list | None:
    """The last stage's kept outputs (merged at step end), or None where torch keeps none."""
    kept = getattr(stage, "output_chunks", None)
    return kept if isinstance(kept, list) else None


def schedule_losses(schedule: Any) -> list | None:
    """The schedule's per-microbatch losses, kept until step end, or None where it keeps none."""
    kept = getattr(schedule, "_internal_losses", None)
    return kept if isinstance(kept, list) else None


def originals_of(base: type, names: tuple[str, ...]) -> dict[str, Callable]:
    """``{name: function}`` for each method of ``names`` that ``base`` has, from its defining class."""
    return {
        n: defining_class(base, n).__dict__[n] for n in names if callable(getattr(base, n, None))
    }


def defining_class(base: type, name: str) -> type:
    """The class in ``base``'s MRO whose ``__dict__`` defines ``name``."""
    return next(k for k in base.__mro__ if name in k.__dict__)
