"""``fresh``: stock torch with every receive landing in a new buffer (torch 2.15's semantics).

The reference pooltk is judged against besides stock. Stock torch <= 2.14 hands microbatch ``c``
the same receive buffer in every step, so what a model keeps of its received input (a hook on
it, a tensor kept across a step) sees that reuse; from 2.15 every receive gets a buffer of its
own. A pool that is right gives what a fresh buffer per receive gives.

[Note: fresh buffers]
``fresh_stage(stage)`` binds [Note: per-receive buffers]' hooks on the stage *object* (never on
torch's classes, so ``unfresh_stage`` restores the stage exactly): before torch builds a chunk's
receive ops, each receive buffer of the chunk becomes a new one (same shape, dtype and
``requires_grad``; no hooks, no ``.grad``), and where a V schedule's same-rank handoff would zero
the buffer of a None gradient, it zeroes a new one. The old buffer stays with whoever holds it and
is never written again. On the lazy layout (torch 2.15) stock already is fresh: nothing is bound.
An unknown layout, a pooled stage or a second call is a :class:`FreshError` (a reference must
never be a silent no-op).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pooltk.pool.torch_compat.bind import bind, bound
from pooltk.pool.torch_compat.layouts import detect
from pooltk.pool.torch_compat.per_receive import per_receive_hooks

_TAG = "pooltk-fresh"


class FreshError(RuntimeError):
    """pooltk could not make this stage's receives land in fresh buffers (found / required /
    fix)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FreshStage:
    """What :func:`fresh_stage` did to one stage."""

    stage: int
    layout: str
    """The torch layout family found (``prepare-infra``, ``setup-recv-info``, ``lazy``)."""
    bound: bool
    """True when hooks were bound (eager families); False on ``lazy``, where stock is fresh."""
    note: str


def fresh_stage(stage: Any, *, posted: list | None = None) -> FreshStage:
    """Make every receive of ``stage`` land in a new buffer; see [Note: fresh buffers].

    Call it on a built stage before its schedule's first step, with pooltk not installed.
    ``posted`` receives ``(direction, buffer)`` for every buffer handed to a receive (for checks:
    it keeps them all alive).

    Raises:
        FreshError: the torch layout is unknown, the stage is pooled, or it is already fresh.
    """
    import pooltk

    found, index = detect(), getattr(stage, "stage_index", None)
    where = f"pooltk fresh: stage {index}: found"
    if found.layout is None:
        raise FreshError(
            f"{where} no known receive-buffer layout in this torch ({found.reason}); required "
            "prepare-infra, setup-recv-info or lazy. Fix: run the fresh reference on a torch "
            "pooltk knows (`pooltk probe`)."
        )
    if bound(stage, _TAG) is not None:
        raise FreshError(f"{where} it already fresh; required a stock stage. Fix: call it once.")
    if pooltk.stage_rings(stage):
        raise FreshError(
            f"{where} a pooltk ring on it; required a stock stage (fresh is the reference a pool "
            "is judged against). Fix: pooltk.uninstall() first."
        )
    name = found.layout.name
    if found.layout.per_receive:
        note = f"layout {name!r}: torch already allocates each receive buffer right before its "
        note += "receive, so stock is fresh; nothing bound"
        return FreshStage(stage=index, layout=name, bound=False, note=note)
    needed = ("get_fwd_recv_ops", "get_bwd_recv_ops", "args_recv_info")
    missing = [n for n in needed if not hasattr(stage, n)]
    if missing:
        raise FreshError(
            f"{where} no {', '.join(missing)} on {type(stage).__name__}; required a "
            "torch.distributed.pipelining stage. Fix: pass the stage object the schedule drives."
        )
    record = None if posted is None else lambda direction, buf: posted.append((direction, buf))
    bind(stage, per_receive_hooks(drop_after_use=False, posted=record), tag=_TAG)
    note = f"layout {name!r}: every receive post gets a new buffer, the previous one stays with "
    note += "its holders"
    return FreshStage(stage=index, layout=name, bound=True, note=note)


def is_fresh(stage: Any) -> bool:
    """True when :func:`fresh_stage` bound its hooks on ``stage``."""
    return bound(stage, _TAG) is not None


def unfresh_stage(stage: Any) -> bool:
    """Remove what :func:`fresh_stage` bound; True if there was anything."""
    binding = bound(stage, _TAG)
    return binding.undo() if binding is not None else False
