"""The rings the proofs build, through the pool's one private seam: a user's config, or what no user
chooses.

[Note: the harness seam]
A user chooses slack, grad slack and the release (:class:`pooltk.PoolConfig`), and the pool sizes
every ring from it by the one slack rule (:func:`pooltk.pool.ring.ring_size`). The proofs also need
rings no user should build: without the guard (negative controls), a set short of the live set, K =
M to measure the live set a run really has, Automodel's single ring for A/B, one ring per stage
where a rank would share. :class:`Harness` says which, and sizes them (:meth:`Harness.ring_size`);
:func:`install` and :func:`pool_stage` hand it to the pool through ``pooltk.pool.install._install``
/ ``_pool_stage``, the one place the pool takes it (the private install's ``harness``: the pool
reads ``guard``, ``sharing``, ``policy`` and ``ring_size``, nothing else). A :class:`Harness` a
user's config builds exactly (:attr:`Harness.users`) is installed as that plain ``PoolConfig`` (no
experiment at all).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pooltk._validate import check_choice, check_int
from pooltk.config import PoolConfig

__all__ = ["POLICIES", "SHARINGS", "Harness", "install", "pool_stage"]

POLICIES: tuple[str, ...] = ("tight", "automodel", "measure")
"""``tight``: the pool's rule; ``automodel``: Automodel's original single ring; ``measure``: K =
M."""
SHARINGS: tuple[str, ...] = ("rank", "stage")
"""``rank``: a rank's stages with the same boundary tensors share one ring per direction; ``stage``:
one ring per (stage, direction)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Harness:
    """What a harness variant pools with (see [Note: the harness seam])."""

    slack: int = 2
    """Forward sets beyond the live set (``pooltk.PoolConfig.slack``)."""
    grad_slack: int = 1
    """Gradient sets beyond the live set (``tight`` only)."""
    release: bool = True
    """The last-stage release (``pooltk.PoolConfig.release``)."""
    guard: bool = True
    """False only for negative controls: no ownership, no holders' check, no version bump."""
    policy: str = "tight"
    """``tight`` (the pool's, ``min(M, live + slack)`` per direction), ``automodel`` (the original
    single ring ``max(2, min(M, max(1, N - i) + slack))`` for both directions, 1F1B) or ``measure``
    (K = M, to record the live set a run really has)."""
    forward_shortfall: int = 0
    """Negative controls: forward rings this many sets below the rule, never below 1 (needs
    ``force=True``)."""
    sharing: str = "rank"
    """``rank`` (the pool's, [Note: rank-shared rings]) or ``stage``: one ring per (stage,
    direction) where a rank would share."""

    def __post_init__(self) -> None:
        check_int(
            "Harness.slack",
            self.slack,
            low=0,
            fix="pass slack=0 for the live-set limit, or e.g. 2.",
        )
        check_int("Harness.grad_slack", self.grad_slack, low=0, fix="pass grad_slack=0 or 1.")
        check_int("Harness.forward_shortfall", self.forward_shortfall, low=0, fix="leave it at 0.")
        check_choice("Harness.policy", self.policy, POLICIES, fix=f"use one of {POLICIES}.")
        check_choice("Harness.sharing", self.sharing, SHARINGS, fix=f"use one of {SHARINGS}.")
        self.config  # noqa: B018 - validates release
        if not isinstance(self.guard, bool):
            raise ValueError(
                f"Harness.guard: found {self.guard!r}; required True or False. "
                "Fix: guard=True (default) or guard=False."
            )
        if self.policy == "measure" and not self.guard:
            raise ValueError(
                "Harness: found policy='measure' with guard=False; required the guard (it does the "
                "measuring). Fix: guard=True."
            )

    @property
    def config(self) -> PoolConfig:
        """The part a user chooses."""
        return PoolConfig(slack=self.slack, grad_slack=self.grad_slack, release=self.release)

    @property
    def users(self) -> bool:
        """True when a user's PoolConfig builds exactly these rings (guard on, tight, no shortfall,
        rank sharing)."""
        return (
            self.guard
            and self.policy == "tight"
            and not self.forward_shortfall
            and self.sharing == "rank"
        )

    def ring_size(
        self,
        *,
        live: int,
        receives: int,
        direction: str,
        stage: int | None = None,
        num_stages: int | None = None,
    ) -> int:
        """K for a ring whose live set is ``live`` (0 where ``live`` is 0: the direction stays
        stock).

        ``measure``: ``receives`` (K = M). ``automodel`` with ``stage`` and ``num_stages`` given
        (the 1F1B closed form; a plan passes neither and gets the tight rule): Automodel's single
        ring (:func:`pooltk.memory.model.automodel_ring`) in both directions. Otherwise the pool's
        rule (:func:`pooltk.pool.ring.ring_size`). ``forward_shortfall`` then takes sets away
        forward, never below 1.
        """
        if live == 0:
            return 0
        if self.policy == "measure":
            return receives
        if self.policy == "automodel" and stage is not None and num_stages is not None:
            from pooltk.memory.model import automodel_ring

            k = automodel_ring(num_stages, stage, receives, self.slack)
        else:
            from pooltk.pool.ring import ring_size

            k = ring_size(live, receives, direction, self.config)
        if direction == "forward" and self.forward_shortfall:
            return max(1, k - self.forward_shortfall)
        return k

    def describe(self) -> str:
        """One line such as ``tight slack=2 grad_slack=1`` (what differs from a user's rings
        added)."""
        text = f"{self.policy} slack={self.slack}" + (
            f" grad_slack={self.grad_slack}" if self.policy == "tight" else ""
        )
        text += f" forward_shortfall={self.forward_shortfall}" if self.forward_shortfall else ""
        text += f" sharing={self.sharing}" if self.sharing != "rank" else ""
        return (
            text + ("" if self.guard else " guard=off") + ("" if self.release else " release=off")
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def install(
    harness: Harness | PoolConfig, *, schedule: str | None = "1f1b", force: bool = False
) -> Any:
    """``pooltk.install`` with ``harness`` (see [Note: the harness seam])."""
    from pooltk.pool.install import _install

    if isinstance(harness, PoolConfig):
        return _install(harness, {}, schedule, force, None)
    if harness.forward_shortfall and not force:
        raise ValueError(
            "Harness: found forward_shortfall without force=True; required force=True to build a "
            "ring smaller than the live set. Fix: pass force=True."
        )
    return _install(harness.config, {}, schedule, force, None if harness.users else harness)


def pool_stage(
    stage: Any, harness: Harness | PoolConfig, *, schedule: str | None = "1f1b", force: bool = False
) -> Any:
    """``pooltk.pool_stage`` with ``harness``."""
    from pooltk.pool.install import _pool_stage

    if isinstance(harness, PoolConfig):
        return _pool_stage(stage, harness, {}, schedule, force, None)
    return _pool_stage(
        stage, harness.config, {}, schedule, force, None if harness.users else harness
    )
