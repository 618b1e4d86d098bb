"""Which stages may be pooled: the allowlist, the schedule observed driving a setup, and the refusals.

[Note: gating]
A ring is safe only when it covers the schedule's live set, proven in closed form for torch's
``Schedule1F1B`` alone ([Note: ring sizes]): the allowlist is ``1f1b`` (name or the class itself).
``schedule="auto"`` also pools any schedule pooltk can analyse, with rings from its action order ([Note:
auto rings]). The schedule seen setting a stage up (on the call stack) decides over the install's default.

[Note: refusals]
The pool sees a microbatch's buffer only through the stage methods it wraps, so a stage stays stock,
with the reason, when something bypasses them: a custom function registered for a compute action (F,
B, I, W, OVERLAP_F_B), or a stage class outside torch overriding a wrapped or buffer-reading method.
Checked at every setup.
"""

from __future__ import annotations

import sys

from pooltk.analysis.catalog import ALLOWLIST, ScheduleAnalysisError, schedule_key
from pooltk.pool.adapters.stage_api import GUARDED_STAGE_METHODS

__all__ = ["AUTO", "PoolSetupError", "decide", "observe_schedule", "refusal", "schedule_allowed"]

AUTO = "auto"


class PoolSetupError(RuntimeError):
    """pooltk failed inside a layout it recognises (never a silent fallback); ``stage``, ``direction``, ``cause``."""

    def __init__(
        self, *, stage: int | None, direction: str | None, cause: BaseException, what: str
    ) -> None:
        self.stage, self.direction, self.cause = stage, direction, cause
        where = f"stage {stage}" + (f" {direction}" if direction else "")
        super().__init__(
            f"pooltk: {what} failed for {where}: found {type(cause).__name__}: {cause}.\n"
            "Fix: report it with the traceback; to train now, run without pooltk.install()."
        )


def schedule_allowed(schedule: str | type | object | None) -> bool:
    """True if ``schedule`` (name, class or instance) is on the allowlist."""
    if schedule is None:
        return False
    if isinstance(schedule, str):
        return schedule_key(schedule) in ALLOWLIST
    from torch.distributed.pipelining.schedules import Schedule1F1B

    return (schedule if isinstance(schedule, type) else type(schedule)) is Schedule1F1B


def observe_schedule(max_depth: int = 24) -> object | None:
    """The torch pipeline schedule object on the current call stack, if any."""
    from torch.distributed.pipelining.schedules import _PipelineSchedule

    frame = sys._getframe(1)
    for _ in range(max_depth):
        if frame is None:
            return None
        if isinstance(frame.f_locals.get("self"), _PipelineSchedule):
            return frame.f_locals["self"]
        frame = frame.f_back
    return None


_COMPUTE_ACTIONS = frozenset({"F", "B", "I", "W", "OVERLAP_F_B"})


def refusal(stage: object | None, schedule: object | None) -> str | None:
    """Why ``stage`` (driven by ``schedule``) must stay stock, or None. See [Note: refusals]."""
    custom = getattr(schedule, "_comp_type_to_function_map", None) or {}
    kinds = sorted(
        v for v in (str(getattr(k, "value", k)) for k in custom) if v in _COMPUTE_ACTIONS
    )
    if kinds:
        return (
            f"found custom functions for {', '.join(kinds)} on {type(schedule).__name__}, which can compute "
            "without the stage methods the guard watches; fix: register them only for "
            "UNSHARD/RESHARD/REDUCE_GRAD, or run this schedule unpooled"
        )
    for klass in type(stage).__mro__ if stage is not None else ():
        if klass.__module__.startswith("torch."):
            break
        overridden = [m for m in GUARDED_STAGE_METHODS if m in klass.__dict__]
        if overridden:
            return (
                f"found {klass.__qualname__} overriding {', '.join(overridden)}, which would run instead of the "
                "guarded wrapper; fix: wrap the module instead of overriding these, or run it unpooled"
            )
    return None


def decide(*, install_schedule: str | None, force: bool, stage: object | None) -> tuple:
    """For the stage being set up now: ``(pool, reason, schedule name, plan or None, observed schedule)``."""
    observed = observe_schedule()
    name = schedule_key(observed if observed is not None else install_schedule)
    how = "observed" if observed is not None else "given at install"
    refused = refusal(stage, observed)
    if refused is not None:
        return False, refused, name, None, observed
    if schedule_allowed(observed if observed is not None else install_schedule):
        return True, f"schedule {name!r} ({how}) is allowlisted", name, None, observed
    if schedule_key(install_schedule) == AUTO and observed is not None:
        from pooltk.analysis.plans import plan_rings

        cache = observed.__dict__.setdefault("_pooltk_plans", {})
        key = bool(getattr(observed, "_has_backward", True))
        try:
            if key not in cache:
                cache[key] = plan_rings(observed)
        except ScheduleAnalysisError as exc:
            return (
                False,
                f"schedule {name!r} (observed) cannot be analysed: {exc}",
                name,
                None,
                observed,
            )
        except (
            Exception
        ) as exc:  # a bug inside a recognised layout: loud, never a silent stock fallback
            raise PoolSetupError(
                stage=None, direction=None, cause=exc, what=f"ring planning for {name!r}"
            ) from exc
        return (
            True,
            f"schedule {name!r} (observed) analysed from its action order",
            name,
            cache[key],
            observed,
        )
    if schedule_key(install_schedule) == AUTO:
        return (
            False,
            "found no schedule on the call stack at setup, which schedule='auto' needs; fix: let the "
            "schedule set the stage up (its first step), or install with schedule='1f1b'",
            name,
            None,
            None,
        )
    if force:
        return (
            True,
            f"schedule {name!r} ({how}) is not allowlisted; pooled because force=True",
            name,
            None,
            observed,
        )
    return (
        False,
        f"found schedule {name!r} ({how}) with no proven in-flight bound (allowlist {sorted(ALLOWLIST)}); "
        "fix: install(schedule='auto') to pool schedules pooltk can analyse",
        name,
        None,
        observed,
    )
