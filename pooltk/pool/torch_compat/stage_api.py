"""torch's stage runtime as pooltk reads it: every method and attribute name, in one place.

Relied on in every layout family: the runtime methods of ``_PipelineStageBase`` and their leading
arguments (checked at install: a renamed one is an unknown layout), ``args_recv_info`` /
``grad_recv_info`` (per chunk, a tuple of ``_RecvInfo`` whose ``buffer`` is the receive buffer),
``fwd_cache[chunk] = (outputs, inputs)`` until the chunk's backward, the last stage's
``output_chunks`` and the schedule's ``_internal_losses`` (both kept until the step ends).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch

from pooltk.pool.errors import MISSING_ARGUMENT

POST_FORWARD_RECV = "get_fwd_recv_ops"  # after a chunk's buffers are in its recv infos
POST_GRAD_RECV = "get_bwd_recv_ops"
POST_FORWARD_SEND = "get_fwd_send_ops"
FORWARD = "forward_one_chunk"
BACKWARD = "backward_one_chunk"  # whole, or a split backward's input-gradient step
BACKWARD_WEIGHT = "backward_weight_one_chunk"  # a split backward's weight-gradient step
LOCAL_GRAD = "set_local_bwd_input"  # a V schedule's same-rank gradient handoff (no receive)
RESET = "clear_runtime_states"  # the end-of-step reset

# What the pool wraps (stage.runtime_names): on an eager layout the hot, send ([Note: finished
# sends]) and handoff methods; on the lazy one (torch 2.15) the release methods alone; on both the
# optional ones where torch has them. Then the methods that make receive buffers in some family.
HOT_METHODS = (POST_FORWARD_RECV, POST_GRAD_RECV, FORWARD, BACKWARD, RESET)
OPTIONAL_HOT_METHODS = (BACKWARD_WEIGHT,)
SEND_METHODS = (POST_FORWARD_SEND,)
HANDOFF_METHODS = (LOCAL_GRAD,)
RELEASE_METHODS = (FORWARD, BACKWARD, RESET)
INFRA_METHODS = ("_prepare_forward_infra", "_prepare_backward_infra")  # every eager family's
SETUP_METHODS = INFRA_METHODS + ("_setup_forward_recv_info", "_setup_backward_recv_info")
# What a pooled stage's class may not override ([Note: refusals]): the wrapped, the readers.
_READERS = ("_retrieve_recv_activations", "_retrieve_recv_grads")
GUARDED_STAGE_METHODS = (
    HOT_METHODS + OPTIONAL_HOT_METHODS + SEND_METHODS + HANDOFF_METHODS + _READERS
)
RECV_INFO_ATTRS = {"forward": "args_recv_info", "grad": "grad_recv_info"}

# The leading parameters (after ``self``) of each wrapped method, in torch's order.
RUNTIME_ARGS = {
    POST_FORWARD_RECV: ("fwd_chunk_id",),
    POST_GRAD_RECV: ("bwd_chunk_id",),
    POST_FORWARD_SEND: ("fwd_chunk_id",),
    FORWARD: ("fwd_chunk_id", "args", "kwargs"),
    BACKWARD: ("bwd_chunk_id", "loss", "full_backward"),
    BACKWARD_WEIGHT: ("bwd_chunk_id",),
    LOCAL_GRAD: ("next_stage_bwd_outputs", "mb_index"),
    **{name: ("num_microbatches",) for name in SETUP_METHODS},
}
_CHUNK_ARGS = ("fwd_chunk_id", "bwd_chunk_id", "mb_index")
_DEFAULTS = {"loss": None, "full_backward": True, "kwargs": None, "args": ()}


@dataclass(frozen=True, slots=True)
class Call:
    """One call of a torch stage method, as a hook sees it (the arguments read by name)."""

    method: str
    args: tuple
    kwargs: dict

    def arg(self, name: str) -> Any:
        """Parameter ``name``: positional or keyword, else torch's default."""
        if name in self.kwargs:
            return self.kwargs[name]
        position = RUNTIME_ARGS[self.method].index(name)
        if position < len(self.args):
            return self.args[position]
        if name in _DEFAULTS:
            return _DEFAULTS[name]
        raise TypeError(MISSING_ARGUMENT.format(method=self.method, name=name))

    @property
    def chunk(self) -> int | None:
        """The microbatch the call acts on; None for a method without one (setup, reset)."""
        names = RUNTIME_ARGS.get(self.method, ())
        name = next((n for n in names if n in _CHUNK_ARGS), None)
        return None if name is None else self.arg(name)

    n_microbatches = property(lambda self: int(self.arg("num_microbatches")))
    full_backward = property(
        lambda self: bool(self.arg("full_backward")),
        doc="False: a split backward's input-gradient step.",
    )
    loss = property(lambda self: self.arg("loss"), doc="The last stage's loss (None elsewhere).")
    local_grads = property(
        lambda self: self.arg("next_stage_bwd_outputs"),
        doc="A same-rank handoff's gradients (the next stage's input gradients).",
    )


def recv_positions(infos: tuple) -> list[int]:
    """Positions of a chunk's recv infos that receive into a tensor (root arguments skipped)."""
    return [j for j, info in enumerate(infos) if isinstance(receive_buffer(info), torch.Tensor)]


def receive_buffer(info: Any) -> Any:
    """The buffer a recv info receives into; None for a stage-0 root argument (2.12+ or <= 2.11)."""
    return None if getattr(info, "is_root_arg", False) else getattr(info, "buffer", None)


def recv_infos(stage: Any, direction: str) -> dict[int, tuple]:
    """``{chunk: recv infos}`` of one direction of ``stage`` (empty before its setup)."""
    return getattr(stage, RECV_INFO_ATTRS[direction], None) or {}


def cached_forward(stage: Any, chunk: int) -> tuple[tuple, list] | None:
    """``(outputs, inputs)`` torch keeps for ``chunk`` between its forward and backward."""
    return getattr(stage, "fwd_cache", {}).get(chunk)


def keep_forward(stage: Any, chunk: int, cached: tuple[tuple, list]) -> None:
    stage.fwd_cache[chunk] = cached


def output_chunks(stage: Any) -> list | None:
    """The last stage's kept outputs (merged at step end), or None where torch keeps none."""
    kept = getattr(stage, "output_chunks", None)
    return kept if isinstance(kept, list) else None


def schedule_losses(schedule: Any) -> list | None:
    """The schedule's per-microbatch losses, kept until the step ends, or None."""
    kept = getattr(schedule, "_internal_losses", None)
    return kept if isinstance(kept, list) else None


def op_tensor(op: Any) -> Any:
    """The tensor a P2P op (``torch.distributed.P2POp``) sends, or receives into."""
    return getattr(op, "tensor", None)


def point_op_at(op: Any, tensor: torch.Tensor) -> None:
    """Make a P2P op hold ``tensor`` instead of the one it was built with."""
    op.tensor = tensor


def replace_by_identity(kept: list | None, old: Any, new: Any) -> bool:
    """Put ``new`` wherever ``kept`` holds the object ``old`` itself; False if it holds none."""
    found = False
    for i in range(len(kept or ())):
        if kept[i] is old:
            kept[i], found = new, True
    return found


COMPUTE_ACTIONS = frozenset({"F", "B", "I", "W", "OVERLAP_F_B"})  # the rest move data or shard


def custom_compute(schedule: Any) -> list[str]:
    """The compute actions a schedule runs with functions of its own (``F``, ``B``, ``I``, ...)."""
    custom = getattr(schedule, "_comp_type_to_function_map", None) or {}
    kinds = (str(getattr(kind, "value", kind)) for kind in custom)
    return sorted(kind for kind in kinds if kind in COMPUTE_ACTIONS)


def is_torch_class(klass: type) -> bool:
    """True for a class torch itself defines (a stage class's MRO stops being a user's there)."""
    return klass.__module__.startswith("torch.")


def runs_backward(schedule: Any) -> bool:
    return bool(getattr(schedule, "_has_backward", True))


def schedule_base() -> type:
    """``_PipelineSchedule``: the base of every torch schedule."""
    from torch.distributed.pipelining.schedules import _PipelineSchedule

    return _PipelineSchedule


def schedule_1f1b() -> type:
    """``Schedule1F1B``: the schedule on the allowlist."""
    from torch.distributed.pipelining.schedules import Schedule1F1B

    return Schedule1F1B


def stage_base() -> type:
    """``_PipelineStageBase``, the class that defines the runtime methods."""
    from torch.distributed.pipelining import stage

    return stage._PipelineStageBase


def signature_problems(base: type, methods: tuple[str, ...]) -> list[str]:
    """Methods of ``base`` whose leading parameters are not those :data:`RUNTIME_ARGS` names."""
    problems = []
    for method in methods:
        names, fn = RUNTIME_ARGS.get(method), getattr(base, method, None)
        if fn is None and method in HOT_METHODS:
            problems.append(f"{method} missing")
        if names is None or fn is None:
            continue
        try:
            params = [p for p in inspect.signature(fn).parameters if p != "self"][: len(names)]
        except (TypeError, ValueError):
            problems.append(f"{method} has no readable signature")
            continue
        if tuple(params) != names:
            found, expected = ", ".join(params), ", ".join(names)
            problems.append(f"{method}({found}) where pooltk expects ({expected})")
    return problems
