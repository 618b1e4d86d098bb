"""The replay's one reach into torch's schedule: answering its warm-up vote without peers.

[Note: the replay's seams into torch]
The replay runs torch's own ``PipelineStage`` and schedule classes. Everything it touches of
their stage methods and receive infos goes through pooltk.pool.torch_compat (the binder, the
names, torch 2.15's per-receive semantics). One thing more is here: torch 2.12-2.14's schedules
vote on static vs dynamic shape inference with an all-reduce and call ``.item()`` on the result
(``_PipelineSchedule._warmup_p2p``), which needs real peers and is data-dependent under fake
tensors. The replay (and anything running one stage without peers) gives each stage its static
shapes and :func:`set_static`, then :func:`skip_vote` makes the schedule object's vote a no-op;
on a torch without the vote (2.11) nothing changes.
"""

from __future__ import annotations

from typing import Any

from pooltk.pool.torch_compat.bind import Hooks, bind


def _inference_mode() -> Any:
    try:
        from torch.distributed.pipelining._utils import InferenceMode
    except ImportError:
        return None
    return InferenceMode


def set_static(stage: Any) -> bool:
    """Give ``stage`` static shape inference (torch 2.12+); False where there is no such mode."""
    mode = _inference_mode()
    if mode is None or not hasattr(stage, "_inference_mode"):
        return False
    stage._inference_mode = mode.STATIC
    return True


def skip_vote(schedule: Any) -> bool:
    """Make the schedule object's warm-up vote a no-op (its stages already static)."""
    if not hasattr(schedule, "_warmup_p2p") or _inference_mode() is None:
        return False
    bind(schedule, {"_warmup_p2p": Hooks(raw=lambda obj, call, proceed: None)}, tag="pooltk-vote")
    return True
