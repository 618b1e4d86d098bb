"""The one slack rule (the ring kept for a (stage, direction) whose live set is known), the one stock
rule (what torch <= 2.14 pre-allocates), and :class:`RingRule`, the rules the memory model and the
proofs size rings by.

The pool (:func:`ring_and_live`: 1F1B and ``schedule="auto"`` plans), the analysis tables, the
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

__all__ = [
    "POLICIES",
    "Policy",
    "RingRule",
    "RingSizes",
    "SHARINGS",
    "Sharing",
    "automodel_ring_size",
    "check_shape",
    "inflight_1f1b",
    "live_set_1f1b",
    "ring_and_live",
    "ring_from_live",
    "ring_sizes",
    "stock_count",
    "stock_sets",
]

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
        check_int(
            "RingRule.slack",
            self.slack,
            low=0,
            fix="pass slack=0 for the live-set limit, or e.g. 2.",
        )
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
        text = f"{self.policy} slack={self.slack}" + (
            f" grad_slack={self.grad_slack}" if self.policy == "tight" else ""
        )
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
    return (
        max(1, k - rule.forward_shortfall)
        if direction == "forward" and rule.forward_shortfall
        else k
    )


def stock_count(
    num_stages: int,
    stage_index: int,
    direction: Direction | str,
    n_microbatches: int,
    *,
    forward_only: bool = False,
) -> int:
    """Sets stock torch 2.11-2.14 pre-allocates for a (stage, direction): ``M``, or 0 where nothing is received.

    Stage 0 receives no activations (its inputs are the root arguments), the last stage no
    gradients (it computes them from the loss), and a forward-only step no gradients at all.
    """
    if direction == "forward":
        return 0 if stage_index == 0 else n_microbatches
    return 0 if (forward_only or stage_index == num_stages - 1) else n_microbatches


# ---------------------------------------------------------------------------------------
# [Note: ring sizes]
# Under torch's ``Schedule1F1B`` stage ``i`` of ``N`` runs ``W = min(M, N - i)`` warmup forwards; the
# forward receive for microbatch ``k + W`` is posted only after the backward of microbatch ``k``. So at
# most ``W`` activation buffers are live on stage ``i`` (none on stage 0, whose inputs are the root
# arguments) and one gradient buffer (none on the last stage). Chunk ``c`` uses slot ``c mod K``, safe
# exactly when ``K`` is at least the live set: ``tight`` keeps ``min(M, W + slack)`` forward and
# ``min(M, 1 + grad_slack)`` grad; Automodel's single ring ``max(2, min(M, max(1, N - i) + slack))`` for
# both; stock ``M`` each. Other schedules get their smallest safe ring from their own action order
# (:mod:`pooltk.analysis.plans`), turned into a ring by the same :func:`ring_from_live`.
# ---------------------------------------------------------------------------------------


def check_shape(num_stages: int, stage_index: int, n_microbatches: int) -> None:
    """Raise ValueError (an :class:`~pooltk._validate.InputError`) unless (N, i, M) describe a real stage."""
    check_int("num_stages", num_stages, low=1)
    check_int("n_microbatches", n_microbatches, low=1)
    check_int(
        "stage_index",
        stage_index,
        low=0,
        high=num_stages - 1,
        fix=f"stages of a {num_stages}-stage pipeline are 0..{num_stages - 1}.",
    )


def inflight_1f1b(num_stages: int, stage_index: int, n_microbatches: int) -> int:
    """1F1B warmup depth ``W = min(M, N - i)``: forwards in flight before the first backward."""
    check_shape(num_stages, stage_index, n_microbatches)
    return min(n_microbatches, num_stages - stage_index)


@dataclass(frozen=True, slots=True)
class RingSizes:
    """Buffer sets a stage holds per direction. 0 means the direction has no receives."""

    forward: int
    grad: int

    @property
    def total(self) -> int:
        return self.forward + self.grad


def stock_sets(num_stages: int, stage_index: int, n_microbatches: int) -> RingSizes:
    """What stock torch allocates: one set per microbatch and direction."""
    check_shape(num_stages, stage_index, n_microbatches)
    return RingSizes(
        forward=stock_count(num_stages, stage_index, "forward", n_microbatches),
        grad=stock_count(num_stages, stage_index, "grad", n_microbatches),
    )


def live_set_1f1b(num_stages: int, stage_index: int, n_microbatches: int) -> RingSizes:
    """The most buffer sets ever live at once under 1F1B (the slack-0 tight ring)."""
    from pooltk.analysis.stage_sets import formula_live

    return RingSizes(
        forward=formula_live(num_stages, stage_index, "forward", n_microbatches),
        grad=formula_live(num_stages, stage_index, "grad", n_microbatches),
    )


def automodel_ring_size(num_stages: int, stage_index: int, n_microbatches: int, slack: int) -> int:
    """Automodel's original single ring ``max(2, min(M, max(1, N - i) + slack))``."""
    check_shape(num_stages, stage_index, n_microbatches)
    return max(2, min(n_microbatches, max(1, num_stages - stage_index) + slack))


def ring_sizes(num_stages: int, stage_index: int, n_microbatches: int, config: Any) -> RingSizes:
    """Sets per direction a 1F1B stage keeps under ``config``'s rule. See [Note: ring sizes]."""
    rule, live = RingRule.of(config), live_set_1f1b(num_stages, stage_index, n_microbatches)
    if rule.policy == "automodel":
        k = automodel_ring_size(num_stages, stage_index, n_microbatches, rule.slack)
        return RingSizes(
            forward=max(1, k - rule.forward_shortfall) if live.forward else 0,
            grad=k if live.grad else 0,
        )
    return RingSizes(
        forward=ring_from_live(live.forward, n_microbatches, "forward", rule),
        grad=ring_from_live(live.grad, n_microbatches, "grad", rule),
    )


def ring_and_live(
    num_stages: int,
    stage_index: int,
    n_microbatches: int,
    direction: str,
    rule: Any,
    plan: Any = None,
) -> tuple[int, int]:
    """(K, the live set K is sized from) for one direction of a stage; K 0 leaves the direction stock.

    A 1F1B stage's come from the closed form; a schedule pooled with ``schedule="auto"`` brings its plan
    (:class:`pooltk.analysis.plans.RingPlan`, [Note: auto rings]).
    """
    if plan is not None:
        key = (stage_index, direction)
        return plan.sizes.get(key, 0), plan.min_safe.get(key, 0)
    k, live = (
        ring_sizes(num_stages, stage_index, n_microbatches, rule),
        live_set_1f1b(num_stages, stage_index, n_microbatches),
    )
    return (k.forward, live.forward) if direction == "forward" else (k.grad, live.grad)
