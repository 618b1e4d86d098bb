"""May this stage be pooled: the allowlist, the schedule seen driving a setup, and the refusals.

[Note: gating]
A ring is safe only when it covers the schedule's live set, proven in closed form for torch's
``Schedule1F1B`` alone ([Note: ring sizes]): the allowlist is ``1f1b`` (its name, or the class
itself). ``schedule="auto"`` also pools any schedule pooltk can analyse, with live sets from its
own action order ([Note: auto rings] in pooltk/analysis/plans.py). The schedule seen setting a
stage up (on the call stack) decides over the install's default.

[Note: refusals]
The pool sees a microbatch's buffer only through the stage methods it wraps, so a stage stays
stock, with the reason, when something bypasses them: a custom function registered for a compute
action (F, B, I, W, OVERLAP_F_B), or a stage class outside torch overriding a wrapped or
buffer-reading method. Checked at every setup (on the lazy layout, at a stage's first compute).
"""

from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

from pooltk.analysis.catalog import ALLOWLIST, ScheduleAnalysisError, schedule_key
from pooltk.pool.errors import PoolSetupError
from pooltk.pool.torch_compat.stage_api import (
    GUARDED_STAGE_METHODS,
    custom_compute,
    is_torch_class,
    runs_backward,
    schedule_1f1b,
    schedule_base,
)

AUTO = "auto"


@dataclass(frozen=True, slots=True)
class Decision:
    """The gate's answer for one stage at one setup."""

    pooled: bool
    reason: str
    schedule: str | None  # the schedule that decided (seen driving the setup, or the install's)
    plan: Any = None  # under schedule="auto": the RingPlan of its live sets (analysis/plans.py)
    observed: weakref.ref | None = None  # the schedule seen at setup (weak: stages never keep it)

    def schedule_object(self) -> Any:
        """The schedule object seen driving the setup, while it lives; None otherwise."""
        return self.observed() if self.observed is not None else None


def schedule_allowed(schedule: str | type | object | None) -> bool:
    """True if ``schedule`` (name, class or instance) is on the allowlist."""
    if schedule is None:
        return False
    if isinstance(schedule, str):
        return schedule_key(schedule) in ALLOWLIST
    return (schedule if isinstance(schedule, type) else type(schedule)) is schedule_1f1b()


def observe_schedule() -> object | None:
    """The innermost torch pipeline schedule object on the current call stack, if any (the whole
    stack: wrappers between a schedule and its stage's setup cannot hide it)."""
    any_schedule = schedule_base()
    frame = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), any_schedule):
            return frame.f_locals["self"]
        frame = frame.f_back
    return None


def refusal(stage: object | None, schedule: object | None) -> str | None:
    """Why ``stage`` (driven by ``schedule``) must stay stock, or None. See [Note: refusals]."""
    kinds = custom_compute(schedule)
    if kinds:
        return (
            f"found custom functions for {', '.join(kinds)} on {type(schedule).__name__}, which "
            "can compute without the stage methods the guard watches; fix: register them only "
            "for UNSHARD/RESHARD/REDUCE_GRAD, or run this schedule unpooled"
        )
    for klass in type(stage).__mro__ if stage is not None else ():
        if is_torch_class(klass):
            break
        overridden = [m for m in GUARDED_STAGE_METHODS if m in vars(klass)]
        if overridden:
            return (
                f"found {klass.__qualname__} overriding {', '.join(overridden)}, which would run "
                "instead of the guarded wrapper; fix: wrap the module instead of overriding "
                "these, or run it unpooled"
            )
    return None


def decide_lazy(stage: object) -> Decision:
    """The lazy layout (torch 2.15) pools by the release alone; no call-stack look at compute time
    (it would pin a running frame's locals)."""
    refused = refusal(stage, None)
    return Decision(refused is None, refused or "the lazy layout: the release alone", None)


def decide(*, install_schedule: str | None, force: bool, stage: object | None) -> Decision:
    """The gate's answer for the stage being set up now ([Note: gating], [Note: refusals])."""
    seen = observe_schedule()
    schedule = install_schedule if seen is None else seen
    name = schedule_key(schedule)
    how = "observed" if seen is not None else "given at install"
    observed = weakref.ref(seen) if seen is not None else None
    answer = partial(Decision, schedule=name, observed=observed)
    refused = refusal(stage, seen)
    if refused is not None:
        return answer(False, refused)
    if schedule_allowed(schedule):
        return answer(True, f"schedule {name!r} ({how}) is allowlisted")
    if schedule_key(install_schedule) == AUTO:
        return _decide_auto(name, seen)
    if force:
        return answer(
            True, f"schedule {name!r} ({how}) is not allowlisted; pooled because force=True"
        )
    return answer(
        False,
        f"found schedule {name!r} ({how}) with no proven in-flight bound (allowlist "
        f"{sorted(ALLOWLIST)}); fix: install(schedule='auto') to pool schedules pooltk can analyse",
    )


def _decide_auto(name: str | None, seen: object | None) -> Decision:
    """``schedule="auto"``: pool what can be analysed, with its plan (cached on the schedule)."""
    if seen is None:
        reason = (
            "found no schedule on the call stack at setup, which schedule='auto' needs; fix: let "
            "the schedule set the stage up (its first step), or install with schedule='1f1b'"
        )
        return Decision(False, reason, name)
    from pooltk.analysis.plans import plan_rings

    answer = partial(Decision, schedule=name, observed=weakref.ref(seen))
    plans = vars(seen).setdefault("_pooltk_plans", {})
    training = runs_backward(seen)
    try:
        if training not in plans:
            plans[training] = plan_rings(seen)
    except ScheduleAnalysisError as exc:
        return answer(False, f"schedule {name!r} (observed) cannot be analysed: {exc}")
    except Exception as exc:  # a bug inside a recognised layout: loud, never a silent fallback
        what = f"ring planning for {name!r}"
        raise PoolSetupError(stage=None, direction=None, cause=exc, what=what) from exc
    reason = f"schedule {name!r} (observed) analysed from its action order"
    return answer(True, reason, plan=plans[training])
