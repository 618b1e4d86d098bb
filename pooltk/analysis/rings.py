"""The one slack rule (the ring a pool keeps for a (stage, direction) whose live set is known) and
the one stock rule (what torch <= 2.14 pre-allocates).

The pool (:mod:`pooltk.pool.sizing`, 1F1B and ``schedule="auto"`` plans), the analysis tables
(:func:`pooltk.analysis.lifetimes.tight_rings`), the memory model and the notebooks all call
:func:`ring_from_live`, so none of them can disagree about how slack turns a live set into a
ring. It lives here, below the pool, because it is pure arithmetic over a
:class:`~pooltk.config.PoolConfig`: the analysis needs it without importing the pool. See
[Note: ring sizes] in :mod:`pooltk.pool.sizing` for the sizes themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # both for annotations only: this module imports nothing at run time
    from pooltk.analysis.lifetimes import Direction
    from pooltk.config import PoolConfig

__all__ = ["ring_from_live", "stock_count"]


def ring_from_live(live: int, n_microbatches: int, direction: Direction | str, config: PoolConfig) -> int:
    """The ring kept for a (stage, direction) whose smallest safe ``c mod K`` ring is ``live``.

    The one slack rule: ``min(M, live + slack)`` forward, ``min(M, live + grad_slack)`` grad;
    ``M`` under the ``measure`` policy; 0 (stock) where the direction receives nothing
    (``live == 0``). ``forward_shortfall`` (negative controls only) then takes sets away, never
    below 1.
    """
    if live == 0:
        return 0
    if getattr(config, "policy", "tight") == "measure":
        return n_microbatches
    extra = config.slack if direction == "forward" else config.grad_slack
    k = min(n_microbatches, live + extra)
    shortfall = getattr(config, "forward_shortfall", 0)
    if direction == "forward" and shortfall:
        k = max(1, k - shortfall)
    return k


def stock_count(num_stages: int, stage_index: int, direction: Direction | str, n_microbatches: int, *,
                forward_only: bool = False) -> int:
    """Sets stock torch 2.11-2.14 pre-allocates for a (stage, direction): ``M``, or 0 where nothing is received.

    Stage 0 receives no activations (its inputs are the root arguments), the last stage no
    gradients (it computes them from the loss), and a forward-only step no gradients at all.
    """
    if direction == "forward":
        return 0 if stage_index == 0 else n_microbatches
    return 0 if (forward_only or stage_index == num_stages - 1) else n_microbatches
