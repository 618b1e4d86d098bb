"""How many sets a ring keeps: the live set it is sized from, plus slack (the arithmetic: pooltk.analysis.rings).

A 1F1B stage's sizes come from the closed form ([Note: ring sizes] in pooltk/analysis/rings.py); a schedule
pooled with ``schedule="auto"`` brings its own, from its action order ([Note: auto rings]).
"""

from __future__ import annotations

from typing import Any

from pooltk.analysis.rings import live_set_1f1b, ring_sizes

__all__ = ["ring_and_live"]


def ring_and_live(num_stages: int, stage_index: int, n_microbatches: int, direction: str, rule: Any,
                  plan: Any = None) -> tuple[int, int]:
    """(K, the live set K is sized from) for one direction of a stage; K 0 leaves the direction stock."""
    if plan is not None:
        key = (stage_index, direction)
        return plan.sizes.get(key, 0), plan.min_safe.get(key, 0)
    k, live = ring_sizes(num_stages, stage_index, n_microbatches, rule), live_set_1f1b(num_stages, stage_index,
                                                                                        n_microbatches)
    return (k.forward, live.forward) if direction == "forward" else (k.grad, live.grad)
