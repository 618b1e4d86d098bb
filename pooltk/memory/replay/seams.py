"""The replay's only home of torch's private pipelining names, each with what it is used for.

[Note: the replay's seams into torch]
The replay runs torch's own ``PipelineStage`` and schedule classes; it reaches inside them in
exactly these places, all on the stage or schedule *object* (never on torch's classes):

- the warm-up vote: torch 2.12-2.14's schedules vote on static vs dynamic shape inference with
  an all-reduce and call ``.item()`` on the result (``_PipelineSchedule._warmup_p2p``), which is
  data-dependent under fake tensors. The replay gives every stage its static shapes
  (``input_args`` / ``output_args``) and sets each stage's ``_inference_mode`` to
  ``InferenceMode.STATIC`` itself, then makes the schedule object's ``_warmup_p2p`` a no-op; on a
  torch without the vote (2.11) nothing is changed;
- the receive infos of torch 2.11-2.14 (``args_recv_info`` / ``grad_recv_info``: per chunk, a
  tuple of ``_RecvInfo`` whose ``buffer`` is the receive buffer; stage-0 inputs are root
  arguments without one) and the setup calls that fill them (``_prepare_forward_infra`` /
  ``_prepare_backward_infra``): only the torch 2.15 emulation touches them
  (:mod:`pooltk.memory.replay.lazy`).

:func:`missing` names what this torch lacks, so a replay on a torch whose internals moved
stops with the name and the fix instead of a traceback from inside the schedule.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CHUNK_ARGS",
    "RECV_INFOS",
    "SETUP_METHODS",
    "chunk_of",
    "is_root_info",
    "missing",
    "set_static",
    "skip_vote",
]

RECV_INFOS: dict[str, str] = {"forward": "args_recv_info", "grad": "grad_recv_info"}
"""Per direction, the stage attribute mapping chunk -> tuple of ``_RecvInfo`` (torch 2.11-2.14)."""

SETUP_METHODS: tuple[str, ...] = ("_prepare_forward_infra", "_prepare_backward_infra")
"""The stage methods that make the receive infos and their buffers (torch 2.11-2.14)."""


CHUNK_ARGS: tuple[str, ...] = ("fwd_chunk_id", "bwd_chunk_id")
"""How torch's stage methods name the microbatch they act on, when it is passed by keyword."""


def chunk_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """The microbatch a stage method call acts on: its first argument, positional or by keyword."""
    if args:
        return int(args[0])
    for name in CHUNK_ARGS:
        if name in kwargs:
            return int(kwargs[name])
    raise TypeError(
        f"a stage method was called without a microbatch index (found keywords {sorted(kwargs)})"
    )


def _inference_mode() -> Any:
    try:
        from torch.distributed.pipelining._utils import InferenceMode
    except ImportError:
        return None
    return InferenceMode


def set_static(stage: Any) -> bool:
    """Give ``stage`` static shape inference (torch 2.12+); False where this torch has no such mode (2.11)."""
    mode = _inference_mode()
    if mode is None or not hasattr(stage, "_inference_mode"):
        return False
    stage._inference_mode = mode.STATIC
    return True


def skip_vote(schedule: Any) -> bool:
    """Make the schedule object's warm-up vote a no-op (every stage already static); False where there is none."""
    if not hasattr(schedule, "_warmup_p2p") or _inference_mode() is None:
        return False
    schedule._warmup_p2p = lambda *args, **kwargs: None
    return True


def is_root_info(info: Any) -> bool:
    """True for a stage-0 root argument (no receive buffer): ``is_root_arg`` on 2.12+, no ``buffer`` on 2.11."""
    return bool(getattr(info, "is_root_arg", False)) or not hasattr(info, "buffer")


def missing(stage: Any, *, lazy: bool) -> list[str]:
    """The names of [Note: the replay's seams into torch] this torch's stage lacks (empty: all present)."""
    names = list(SETUP_METHODS) + list(RECV_INFOS.values()) if lazy else []
    return [n for n in names if not hasattr(stage, n)]
