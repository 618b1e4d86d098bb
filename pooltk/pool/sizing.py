"""How many buffer sets a stage keeps: the one home of live sets and the slack rule.

[Note: ring sizes]
Under torch's ``Schedule1F1B`` stage ``i`` of ``N`` runs ``W = min(M, N - i)`` warmup
forwards; the forward receive for microbatch ``k + W`` is posted only after the backward
of microbatch ``k`` has finished. So at most ``W`` activation buffers are live on stage
``i`` (none on stage 0, whose inputs are the root arguments), and one gradient buffer
(none on the last stage, which computes its gradient from the loss). Chunk ``c`` uses slot
``c mod K``; the ring is safe exactly when ``K`` is at least the live set:

- ``tight``     forward ``K_f = min(M, W + slack)``, grad ``K_g = min(M, 1 + grad_slack)``
- ``automodel`` one ``K = max(2, min(M, max(1, N - i) + slack))`` for both directions
- stock torch   ``M`` sets per direction

Schedules other than 1F1B get their smallest safe ring ``k0`` per (stage, direction) from their
own action order (:mod:`pooltk.analysis.lifetimes`); :func:`~pooltk.analysis.rings.ring_from_live`
(re-exported here) turns any ``k0`` into a ring with the same slack rule, ``min(M, k0 + slack)``. The pool (1F1B and ``schedule="auto"``
plans), the memory model (:mod:`pooltk.memory.model`), the analysis tables and the notebooks call
these functions, so none of them can disagree about how many sets a stage holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from pooltk._validate import check_int
from pooltk.analysis.rings import RingRule, ring_from_live, stock_count  # the slack and stock rules live below the pool
from pooltk.config import PoolConfig

__all__ = [
    "RingSizes",
    "automodel_ring_size",
    "check_shape",
    "inflight_1f1b",
    "live_set_1f1b",
    "ring_and_live",
    "ring_from_live",
    "ring_sizes",
    "slot_of",
    "stock_sets",
]


def check_shape(num_stages: int, stage_index: int, n_microbatches: int) -> None:
    """Raise ValueError (an :class:`~pooltk._validate.InputError`) unless (N, i, M) describe a real stage."""
    check_int("num_stages", num_stages, low=1)
    check_int("n_microbatches", n_microbatches, low=1)
    check_int("stage_index", stage_index, low=0, high=num_stages - 1, fix=f"stages of a {num_stages}-stage pipeline are 0..{num_stages - 1}.")


def inflight_1f1b(num_stages: int, stage_index: int, n_microbatches: int) -> int:
    """1F1B warmup depth ``W = min(M, N - i)``: forwards in flight before the first backward."""
    check_shape(num_stages, stage_index, n_microbatches)
    return min(n_microbatches, num_stages - stage_index)


@dataclass(frozen=True, slots=True)
class RingSizes:
    """Buffer sets a stage holds per direction. 0 means the direction has no receives."""

    forward: int
    """Activation (forward receive) buffer sets."""
    grad: int
    """Gradient (backward receive) buffer sets."""

    @property
    def total(self) -> int:
        return self.forward + self.grad


def stock_sets(num_stages: int, stage_index: int, n_microbatches: int) -> RingSizes:
    """What stock torch allocates: one set per microbatch and direction."""
    check_shape(num_stages, stage_index, n_microbatches)
    return RingSizes(forward=stock_count(num_stages, stage_index, "forward", n_microbatches),
                     grad=stock_count(num_stages, stage_index, "grad", n_microbatches))


def live_set_1f1b(num_stages: int, stage_index: int, n_microbatches: int) -> RingSizes:
    """The most buffer sets ever live at once under 1F1B (the slack-0 tight ring)."""
    w = inflight_1f1b(num_stages, stage_index, n_microbatches)
    first, last = stage_index == 0, stage_index == num_stages - 1
    return RingSizes(forward=0 if first else w, grad=0 if last else 1)


def automodel_ring_size(num_stages: int, stage_index: int, n_microbatches: int, slack: int) -> int:
    """The original single ring size ``max(2, min(M, max(1, N - i) + slack))``."""
    check_shape(num_stages, stage_index, n_microbatches)
    return max(2, min(n_microbatches, max(1, num_stages - stage_index) + slack))


def ring_sizes(num_stages: int, stage_index: int, n_microbatches: int, config: PoolConfig) -> RingSizes:
    """Sets per direction that a pooled stage holds under ``config``. See [Note: ring sizes]."""
    m = n_microbatches
    w = inflight_1f1b(num_stages, stage_index, m)
    first, last = stage_index == 0, stage_index == num_stages - 1
    rule = RingRule.of(config)
    if rule.policy == "automodel":
        k = automodel_ring_size(num_stages, stage_index, m, rule.slack)
        k_f = max(1, k - rule.forward_shortfall)
        return RingSizes(forward=0 if first else k_f, grad=0 if last else k)
    return RingSizes(forward=0 if first else ring_from_live(w, m, "forward", config),
                     grad=0 if last else ring_from_live(1, m, "grad", config))


def ring_and_live(num_stages: int, stage_index: int, n_microbatches: int, direction: str, rule: PoolConfig,
                  plan: object = None) -> tuple[int, int]:
    """(K, the live set K is sized from) for one direction of a stage: the schedule's plan where it was
    analysed (``schedule="auto"``), else the 1F1B closed form. K 0: the direction stays stock."""
    if plan is not None:
        key = (stage_index, direction)
        return plan.sizes.get(key, 0), plan.min_safe.get(key, 0)
    k = ring_sizes(num_stages, stage_index, n_microbatches, rule)
    live = live_set_1f1b(num_stages, stage_index, n_microbatches)
    return (k.forward, live.forward) if direction == "forward" else (k.grad, live.grad)


def slot_of(chunk: int, ring: int) -> int:
    """Slot that microbatch ``chunk`` uses in a ring of ``ring`` sets."""
    check_int("ring size", ring, low=1)
    return chunk % ring
