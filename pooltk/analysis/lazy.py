"""What torch's lazy receive buffers hold (torch >= 2.15): per (stage, direction), from the live sets.

[Note: lazy receive buffers]
From 2.15 torch allocates each receive buffer just before its receive is posted and drops it when
the stage has consumed it, so stock torch already holds only the receive live set
(:func:`pooltk.analysis.lifetimes.live_sets`) on every stage and direction, except one: the LAST
stage's forward direction holds all ``M``. The schedule keeps every microbatch's loss in
``_PipelineSchedule._internal_losses`` until the step ends; after its backward the loss's
autograd graph is still alive (saved tensors are freed, the nodes are not), and its
``AccumulateGrad`` node for the received leaf holds that leaf's storage. Releasing what the
schedule keeps (pooltk's last-stage release, issue 17) leaves the live set everywhere.

Measured on stock 2.15.0 (CPU gloo, weakrefs on every ``allocate_buffer`` result;
``../shared/reference/torch-layouts.md``, "torch 2.15.0 and the last stage"): 1F1B pp4 M8
forward 3, 2, 8 on stages 1..3 (live sets 3, 2, 1), the last stage 16 at M16; Interleaved1F1B
pp4 vpp2 M8 forward 8 8 6 4 4 4 8 on stages 1..7 (live sets 8 8 6 4 4 4 2).

The rule is the receive live set, a lower bound by at most one buffer: where the live set is 1,
torch 2.15 measured up to 2 -- gradient 2, 2, 1 on stages 0..2 of 1F1B pp4 M8 (lifetimes 1, 1, 1), and the
released last stage 2 forward (commit 361f55f). The holder: torch's ``Schedule1F1B._step_microbatches``
binds each ``get_*_recv_ops`` result to a local (``bwd_recvs`` / ``fwd_recvs``) that still references
the previous microbatch's op, so its buffer, while the next one is allocated inside that call.
``tests/schedules/test_lazy_step_holder.py`` runs the installed torch's step with a buffer per receive
and reproduces every measured figure but stage 2's gradient (2 there; 2.15 measured 1, so its step
releases earlier on that stage, cause not read: 2.15's source was not at hand).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pooltk.analysis.lifetimes import Direction

__all__ = ["lazy_holds"]


def lazy_holds(
    live: Mapping[tuple[int, Direction], int],
    num_stages: int,
    n_microbatches: int,
    *,
    released: bool = False,
) -> dict[tuple[int, Direction], int]:
    """Receive buffers torch's lazy layout holds per (stage, direction). See [Note: lazy receive buffers].

    Args:
        live: the receive live set per (stage, direction), e.g. from
            :func:`pooltk.analysis.lifetimes.live_sets` (0 where nothing is received).
        num_stages: pipeline stages (the last one is ``num_stages - 1``).
        n_microbatches: microbatches per step ``M``.
        released: ``True`` for what remains once the last stage's kept losses and outputs are
            released (pooltk's last-stage release): the live set everywhere.
    """
    last = num_stages - 1
    return {
        (stage, d): (
            n_microbatches if (d == "forward" and stage == last and k and not released) else k
        )
        for (stage, d), k in live.items()
    }
