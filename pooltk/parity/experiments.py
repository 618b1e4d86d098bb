"""The rings the proofs build, through the pool's one private seam: a user's config, or what no user chooses.

[Note: the harness seam]
A user chooses slack, grad slack and the release (:class:`pooltk.PoolConfig`). The proofs also need rings
no user should build: without the guard (negative controls), a set short of the live set, K = M to
measure the live set a run really has, Automodel's single ring for A/B, one ring per stage where a rank
would share. :class:`Rings` says which; :func:`install` and :func:`pool_stage` hand it to the pool
through ``pooltk.pool.install._install`` / ``_pool_stage``, the one place the pool takes it
(``InstallReport.experiment``). A :class:`Rings` a user could have chosen is installed as plain
``PoolConfig`` (no experiment at all).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pooltk.analysis.rings import RingRule
from pooltk.config import PoolConfig

__all__ = ["Rings", "install", "pool_stage"]


@dataclass(kw_only=True, slots=True, frozen=True)
class Rings:
    """What a harness variant pools with (see [Note: the harness seam])."""

    slack: int = 2
    grad_slack: int = 1
    release: bool = True
    policy: str = "tight"
    """``tight`` (the pool's), ``automodel`` (the original single ring) or ``measure`` (K = M)."""
    guard: bool = True
    """False only for negative controls: no ownership, no holders' check, no version bump."""
    forward_shortfall: int = 0
    """Negative controls: forward rings this many sets below the rule (needs ``force=True``)."""
    sharing: str = "rank"
    """``rank`` (the pool's) or ``stage``: one ring per (stage, direction) where a rank would share."""

    def __post_init__(self) -> None:
        self.rule  # noqa: B018 - validates slack, grad_slack, policy, shortfall and sharing
        PoolConfig(slack=self.slack, grad_slack=self.grad_slack, release=self.release)
        if not isinstance(self.guard, bool):
            raise ValueError(f"Rings.guard: found {self.guard!r}; required True or False.")
        if self.policy == "measure" and not self.guard:
            raise ValueError(
                "Rings: found policy='measure' with guard=False; required the guard (it does the "
                "measuring). Fix: guard=True."
            )

    @property
    def rule(self) -> RingRule:
        return RingRule(
            slack=self.slack,
            grad_slack=self.grad_slack,
            policy=self.policy,
            forward_shortfall=self.forward_shortfall,
            sharing=self.sharing,
        )

    @property
    def config(self) -> PoolConfig:
        """The part a user chooses."""
        return PoolConfig(slack=self.slack, grad_slack=self.grad_slack, release=self.release)

    @property
    def users(self) -> bool:
        """True when a user's PoolConfig builds exactly these rings."""
        return self.guard and self.rule == RingRule.of(self.config)

    def describe(self) -> str:
        return (
            self.rule.describe()
            + ("" if self.guard else " guard=off")
            + ("" if self.release else " release=off")
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def install(
    rings: Rings | PoolConfig, *, schedule: str | None = "1f1b", force: bool = False
) -> Any:
    """``pooltk.install`` with ``rings`` (see [Note: the harness seam])."""
    from pooltk.pool.install import _install

    if isinstance(rings, PoolConfig):
        return _install(rings, {}, schedule, force, None)
    if rings.forward_shortfall and not force:
        raise ValueError(
            "Rings: found forward_shortfall without force=True; required force=True to build a ring "
            "smaller than the live set. Fix: pass force=True."
        )
    return _install(rings.config, {}, schedule, force, None if rings.users else rings)


def pool_stage(
    stage: Any, rings: Rings | PoolConfig, *, schedule: str | None = "1f1b", force: bool = False
) -> Any:
    """``pooltk.pool_stage`` with ``rings``."""
    from pooltk.pool.install import _pool_stage

    if isinstance(rings, PoolConfig):
        return _pool_stage(stage, rings, {}, schedule, force, None)
    return _pool_stage(stage, rings.config, {}, schedule, force, None if rings.users else rings)
