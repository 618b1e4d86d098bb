"""PoolConfig: what a user chooses for the ring pool, validated at construction (found / required /
fix).

The schedule is chosen at install (``pooltk.install(schedule=...)``). It is the one config type: the
memory model takes it with the ring policy to model as keywords; what the proofs also build (rings
without the guard, a set short, K = M, Automodel's single ring, one ring per stage) is the
harness's, private to it: :class:`pooltk.parity.experiments.Harness`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from pooltk._validate import check_int

__all__ = ["PoolConfig"]


@dataclass(kw_only=True, slots=True, frozen=True)
class PoolConfig:
    """How many receive-buffer sets each pooled stage keeps beyond its live set, and the last-stage
    release.

    Sizes come from :func:`pooltk.pool.ring.ring_size` ([Note: ring sizes]): forward
    ``min(M, live + slack)``, grad ``min(M, live + grad_slack)``.
    """

    slack: int = 2
    """Forward (activation) sets beyond the live set (1F1B: ``W = min(M, N - i)``). The meaning of
    Automodel's ``pp_recv_buffer_pool_slack``. 0 is the live-set limit."""

    grad_slack: int = 1
    """Gradient sets beyond the live set (one under 1F1B)."""

    release: bool = True
    """After each last-stage microbatch's backward, keep the schedule's loss and the stage's output
    as values without their autograd graph, so the received input is not held until the step ends
    ([Note: releasing what the schedule keeps]). Same bits; the returned losses and merged output
    carry no graph. On the lazy layout (torch 2.15) this is all pooltk does."""

    def __post_init__(self) -> None:
        check_int(
            "PoolConfig.slack",
            self.slack,
            low=0,
            fix="pass slack=0 for the live-set limit, or a small positive integer such as 2.",
        )
        check_int(
            "PoolConfig.grad_slack",
            self.grad_slack,
            low=0,
            fix="pass grad_slack=0 or 1 (the default).",
        )
        if not isinstance(self.release, bool):
            raise ValueError(
                f"PoolConfig.release: found {self.release!r}; required True or False. "
                "Fix: release=True (default) or release=False."
            )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line such as ``slack=2 grad_slack=1``."""
        return f"slack={self.slack} grad_slack={self.grad_slack}" + (
            "" if self.release else " release=off"
        )
