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
pp4 vpp2 M8 forward 8 8 6 4 4 4 8 on stages 1..7 (live sets 8 8 6 4 4 4 2). The gradient
direction measured 2, 2, 1 on stages 0..2 of 1F1B pp4 M8 where the receive lifetimes give 1, 1, 1:
on stages 0 and 1 torch keeps one more gradient buffer alive than the receive lifetime (post to
the backward that reads it) accounts for; this rule does not model that extra buffer (see
``tests/memory/test_stock_lazy.py``). A candidate holder, read from torch 2.13's
``Schedule1F1B._step_microbatches`` (2.15's source was not at hand): its local ``bwd_recvs`` still
holds the previous microbatch's receive op, so its buffer, while ``get_bwd_recv_ops(k + 1)``
allocates the next. Run on that code with a buffer made per receive, the recording stand-in stage
gives 2 gradient buffers on stages 0, 1 and 2; that explains stages 0 and 1 but not stage 2's
measured 1, so 2.15's step differs there and the cause stays open.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pooltk.analysis.lifetimes import Direction

__all__ = ["lazy_holds"]


def lazy_holds(
    live: Mapping[tuple[int, Direction], int], num_stages: int, n_microbatches: int, *, released: bool = False
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
        (stage, d): (n_microbatches if (d == "forward" and stage == last and k and not released) else k)
        for (stage, d), k in live.items()
    }
