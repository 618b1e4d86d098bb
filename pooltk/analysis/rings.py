"""The one slack rule (the ring kept for a (stage, direction) whose live set is known), the one stock
rule (what torch <= 2.14 pre-allocates), and :class:`RingRule`, the rules the memory model and the
proofs size rings by.

The pool (:mod:`pooltk.pool.sizing`, 1F1B and ``schedule="auto"`` plans), the analysis tables, the
memory model and the notebooks all call :func:`ring_from_live`, so none of them can disagree about
how slack turns a live set into a ring. The pool's own rule is a user's
:class:`~pooltk.config.PoolConfig` (``tight``, shared per rank); a :class:`RingRule` also says which
other rule to model or build (Automodel's single ring, K = M to measure, a ring a set short).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from pooltk._validate import check_choice, check_int

if TYPE_CHECKING:  # for annotations only
    from pooltk.analysis.lifetimes import Direction

__all__ = ["POLICIES", "Policy", "RingRule", "SHARINGS", "Sharing", "ring_from_live", "stock_count"]

Policy = Literal["tight", "automodel", "measure"]
POLICIES: tuple[str, ...] = get_args(Policy)
Sharing = Literal["rank", "stage"]
SHARINGS: tuple[str, ...] = get_args(Sharing)


@dataclass(kw_only=True, slots=True, frozen=True)
class RingRule:
    """How rings are sized from live sets and shared, for the memory model and the proofs."""

    slack: int = 2
    """Forward sets beyond the live set (``pooltk.PoolConfig.slack``)."""
    grad_slack: int = 1
    """Gradient sets beyond the live set (``tight`` only)."""
    policy: Policy = "tight"
    """``tight``: the pool's rule, ``min(M, live + slack)`` per direction; ``automodel``: the original single
    ring ``max(2, min(M, max(1, N - i) + slack))`` for both directions (1F1B); ``measure``: K = M, to record
    the live set a run really has."""
    forward_shortfall: int = 0
    """Negative controls only: forward rings this many sets below the rule (never below 1)."""
    sharing: Sharing = "rank"
    """``rank``: a rank's stages with the same boundary tensors share one ring per direction ([Note: rank-shared
    rings]); ``stage``: one ring per (stage, direction)."""

    def __post_init__(self) -> None:
        check_int("RingRule.slack", self.slack, low=0, fix="pass slack=0 for the live-set limit, or e.g. 2.")
        check_int("RingRule.grad_slack", self.grad_slack, low=0, fix="pass grad_slack=0 or 1.")
        check_int("RingRule.forward_shortfall", self.forward_shortfall, low=0, fix="leave it at 0.")
        check_choice("RingRule.policy", self.policy, POLICIES, fix=f"use one of {POLICIES}.")
        check_choice("RingRule.sharing", self.sharing, SHARINGS, fix=f"use one of {SHARINGS}.")

    @classmethod
    def of(cls, config: Any) -> "RingRule":
        """The rule ``config`` sizes rings by: a RingRule itself, the harness's rings' rule, a PoolConfig's tight rule."""
        if isinstance(config, RingRule):
            return config
        if isinstance(getattr(config, "rule", None), RingRule):
            return config.rule
        return cls(slack=config.slack, grad_slack=config.grad_slack)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line such as ``tight slack=2 grad_slack=1``."""
        text = f"{self.policy} slack={self.slack}" + (f" grad_slack={self.grad_slack}" if self.policy == "tight" else "")
        text += f" forward_shortfall={self.forward_shortfall}" if self.forward_shortfall else ""
        return text + (f" sharing={self.sharing}" if self.sharing != "rank" else "")


def ring_from_live(live: int, n_microbatches: int, direction: Direction | str, config: Any) -> int:
    """The ring kept for a (stage, direction) whose smallest safe ``c mod K`` ring is ``live``.

    The one slack rule: ``min(M, live + slack)`` forward, ``min(M, live + grad_slack)`` grad;
    ``M`` under the ``measure`` policy; 0 (stock) where the direction receives nothing
    (``live == 0``). ``forward_shortfall`` (negative controls only) then takes sets away, never
    below 1.
    """
    if live == 0:
        return 0
    rule = RingRule.of(config)
    if rule.policy == "measure":
        return n_microbatches
    k = min(n_microbatches, live + (rule.slack if direction == "forward" else rule.grad_slack))
    return max(1, k - rule.forward_shortfall) if direction == "forward" and rule.forward_shortfall else k


def stock_count(num_stages: int, stage_index: int, direction: Direction | str, n_microbatches: int, *,
                forward_only: bool = False) -> int:
    """Sets stock torch 2.11-2.14 pre-allocates for a (stage, direction): ``M``, or 0 where nothing is received.

    Stage 0 receives no activations (its inputs are the root arguments), the last stage no
    gradients (it computes them from the loss), and a forward-only step no gradients at all.
    """
    if direction == "forward":
        return 0 if stage_index == 0 else n_microbatches
    return 0 if (forward_only or stage_index == num_stages - 1) else n_microbatches
