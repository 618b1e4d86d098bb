"""PoolConfig: what the ring pool is asked to do, validated at construction.

Every error names the field, the value found, what is required, and the fix.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from pooltk._validate import check_choice, check_int

__all__ = ["POLICIES", "Policy", "PoolConfig", "SHARINGS", "Sharing"]

Policy = Literal["tight", "automodel", "measure"]
POLICIES: tuple[str, ...] = get_args(Policy)
"""The policy names, read from :data:`Policy` (one list)."""

Sharing = Literal["rank", "stage"]
SHARINGS: tuple[str, ...] = get_args(Sharing)
"""The ring granularities, read from :data:`Sharing`."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PoolConfig:
    """How many receive-buffer sets each pooled stage keeps, and how misuse is caught.

    The ring sizes themselves are computed in :mod:`pooltk.pool.sizing` from this config and
    the stage's place in the pipeline; see [Note: ring sizes] there.
    """

    slack: int = 2
    """Forward (activation) ring slack: extra buffer sets beyond the 1F1B in-flight depth
    W = min(M, N - i). The meaning of Automodel's ``pp_recv_buffer_pool_slack``. 0 is the
    live-set limit: exactly as many sets as can be live at once."""

    grad_slack: int = 1
    """Gradient ring slack beyond the one grad buffer 1F1B keeps live. Only the ``tight``
    policy reads it; ``automodel`` uses one ring size for both directions."""

    policy: Policy = "tight"
    """``"tight"``: forward K_f = min(M, W + slack), grad K_g = min(M, 1 + grad_slack).
    ``"automodel"``: the original single K = max(2, min(M, max(1, N - i) + slack)) for
    both directions, kept for A/B comparison (1F1B only).
    ``"measure"``: K = M (no memory saved); the guard's ownership records the peak number
    of buffers really live in a run (``DirectionRing.peak_owned``), to check an analysis.
    For schedules pooled with ``schedule="auto"``, ``tight`` means the analysed minimum
    safe ring plus slack (see :mod:`pooltk.pool.gating`)."""

    guard: bool = True
    """Turn early buffer reuse into a loud error: slot ownership is checked at every
    receive post (:class:`pooltk.pool.guard.PoolOverrunError`) and the slot's version counter
    is bumped, so autograd refuses to read an overwritten activation. Turn off only to
    demonstrate the silent corruption the guard prevents."""

    forward_shortfall: int = 0
    """Experiments only: shrink every forward ring by this many sets below what the policy
    gives (never below 1). Used by the negative controls that show an undersized ring
    corrupts gradients (guard off) or is caught (guard on). Needs ``force=True`` at install."""

    release: bool = True
    """After each last-stage microbatch's backward, keep the schedule's loss and the stage's output
    for that microbatch as values without their autograd graph, so the received input is not held
    until the step ends (see [Note: releasing what the schedule keeps] in pooltk/pool/release.py).
    Same bits for the user; the returned losses and merged output carry no graph. On the lazy
    layout (torch 2.15) this is all pooltk does. ``False`` keeps torch's retention."""

    sharing: Sharing = "rank"
    """``"rank"``: where a rank holds several stages (multi-stage schedules pooled with
    ``schedule="auto"``), the stages whose boundaries carry the same tensors share one ring per
    direction, sized by what is live on the rank at once and coloured from the schedule's action
    order ([Note: rank-shared rings] in pooltk/analysis/sharing.py). ``"stage"``: one ring per
    (stage, direction), as before. Single-stage schedules (1F1B) are the same under both."""

    def __post_init__(self) -> None:
        check_int("PoolConfig.slack", self.slack, low=0,
                  fix="pass slack=0 for the live-set limit, or a small positive integer such as 2.")
        check_int("PoolConfig.grad_slack", self.grad_slack, low=0,
                  fix="pass grad_slack=0 for the live-set limit, or 1 (the default).")
        check_int("PoolConfig.forward_shortfall", self.forward_shortfall, low=0,
                  fix="leave it at 0; it exists only to build undersized rings for negative controls.")
        check_choice("PoolConfig.policy", self.policy, POLICIES,
                     fix="use 'tight' (per-direction rings, the default), 'automodel' (the original single ring) "
                     "or 'measure' (K = M, the guard records the peak live buffers).")
        check_choice("PoolConfig.sharing", self.sharing, SHARINGS,
                     fix="use 'rank' (one ring per rank, direction and boundary; the default) or 'stage' "
                     "(one ring per stage and direction).")
        if self.policy == "measure" and self.guard is False:
            raise ValueError(
                "PoolConfig.policy='measure' with guard=False: the measurement is the guard's slot ownership. "
                "Fix: leave guard=True."
            )
        if not isinstance(self.release, bool):
            raise ValueError(
                f"PoolConfig.release: found {self.release!r}; required True or False. Fix: pass release=True "
                "(default) or release=False to keep the schedule's graphs until the step ends."
            )
        if not isinstance(self.guard, bool):
            raise ValueError(
                f"PoolConfig.guard: found {self.guard!r}; required True or False. Fix: pass guard=True (default)."
            )

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the fields, for reports and JSON."""
        return asdict(self)

    def describe(self) -> str:
        """One line such as ``tight slack=2 grad_slack=1 guard=on``."""
        text = f"{self.policy} slack={self.slack}"
        if self.policy == "tight":
            text += f" grad_slack={self.grad_slack}"
        text += f" guard={'on' if self.guard else 'off'}"
        if self.forward_shortfall:
            text += f" forward_shortfall={self.forward_shortfall}"
        if self.sharing != "rank":
            text += f" sharing={self.sharing}"
        return text
