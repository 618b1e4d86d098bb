"""Which schedules may be pooled, and how the schedule driving a stage is observed.

[Note: gating]
A ring is safe only when its size covers the schedule's live set. pooltk proves that
bound for torch's ``Schedule1F1B`` alone (see [Note: ring sizes] in :mod:`pooltk.pool.sizing`),
so the allowlist is ``{"1f1b"}``, matched the way torch's ``get_schedule_class`` matches
names (case-insensitive), or the class ``Schedule1F1B`` itself (not subclasses, which may
reorder actions). GPipe posts all M forward receives before any backward, so any ring
smaller than M silently corrupts gradients; every other schedule has its own, deeper
in-flight depth.

The name given at install is only a default. The schedule that actually drives a stage
is observed when it sets the stage up: the setup call is made from the schedule's own
``_initialize_pp_stages``, so the schedule object is on the call stack. When it can be
observed, the observed class decides; when it cannot (a caller set the stage up by hand),
the install-time name decides.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pooltk.analysis.catalog import ALLOWLIST, schedule_key
from pooltk.analysis.programs import INERT_KINDS
from pooltk.pool.adapters.stage_api import GUARDED_STAGE_METHODS
from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.analysis.rings import ring_from_live

if TYPE_CHECKING:
    from pooltk.config import PoolConfig

__all__ = [
    "ALLOWLIST",
    "AUTO",
    "GateDecision",
    "RingPlan",
    "PoolSetupError",
    "decide",
    "refusal",
    "observe_schedule",
    "plan_rings",
    "schedule_allowed",
]

class PoolSetupError(RuntimeError):
    """pooltk failed inside a torch layout it recognises: a bug or an unforeseen stage, never fail-open.

    Fields: ``stage``, ``direction`` (or None), ``cause`` (the original exception, also chained).
    See [Note: fail-open only for unknown layouts] in pooltk/pool/install.py.
    """

    def __init__(self, *, stage: int | None, direction: str | None, cause: BaseException, what: str) -> None:
        self.stage, self.direction, self.cause = stage, direction, cause
        where = f"stage {stage}" + (f" {direction}" if direction else "")
        super().__init__(
            f"pooltk: {what} failed for {where}: found {type(cause).__name__}: {cause}; required: pooltk either "
            "pools a stage it recognises or refuses it with a reason, never falls back silently. Fix: report this "
            "with the traceback; to train now without the pool, do not call pooltk.install() "
            "(or call pooltk.uninstall() before the stages are set up)."
        )


AUTO = "auto"
"""``install(schedule="auto")``: pool any schedule pooltk can analyse (see [Note: auto rings])."""

def _schedule_1f1b_class() -> type | None:
    try:
        from torch.distributed.pipelining.schedules import Schedule1F1B
    except ImportError:  # pragma: no cover - torch without pipelining
        return None
    return Schedule1F1B


def schedule_allowed(schedule: str | type | object | None) -> bool:
    """True if ``schedule`` (name, class or instance) is on the allowlist."""
    if schedule is None:
        return False
    if isinstance(schedule, str):
        return schedule_key(schedule) in ALLOWLIST
    cls = schedule if isinstance(schedule, type) else type(schedule)
    return cls is _schedule_1f1b_class()


def observe_schedule(max_depth: int = 24) -> object | None:
    """The torch pipeline schedule object on the current call stack, if any."""
    try:
        from torch.distributed.pipelining.schedules import _PipelineSchedule
    except ImportError:  # pragma: no cover
        return None
    frame = sys._getframe(1)
    depth = 0
    while frame is not None and depth < max_depth:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, _PipelineSchedule):
            return candidate
        frame = frame.f_back
        depth += 1
    return None


@dataclass(frozen=True, slots=True)
class GateDecision:
    """Whether one stage setup is pooled, and why."""

    pool: bool
    schedule: str | None
    """Normalized name of the schedule that decided (observed, or given at install)."""
    observed: bool
    """True when the driving schedule was seen on the call stack."""
    reason: str
    plan: "RingPlan | None" = None
    """Per-stage ring sizes from the schedule's analysis (``schedule="auto"``); None: 1F1B closed form."""


# [Note: refusals]
# The pool sees a microbatch's buffer only through the stage methods it wraps (receive posts
# claim a slot, compute steps release it). Two things bypass them, so a stage is kept stock,
# with the reason, whatever the schedule:
#
# - a schedule with a custom function registered (``register_custom_function``) for a compute
#   action (F, B, I, W, OVERLAP_F_B): the function may compute without the stage methods,
#   so a slot is never released (a false PoolOverrunError) or released while still read;
# - a stage whose class, outside torch, overrides a wrapped method (``get_fwd_recv_ops``,
#   ``forward_one_chunk``, ``backward_one_chunk`` ...) or the methods that read received
#   buffers: the override runs instead of the wrapper, which turns the guard off silently.
#
# Both are checked at every setup (the first step, and each eval/train switch). A custom
# function registered after the first step is not seen until the next setup.

_COMPUTE_ACTIONS = frozenset({"F", "B", "I", "W", "OVERLAP_F_B"})
"""``_ComputationType`` values whose custom functions would compute without the stage methods."""

def refusal(stage: object | None, schedule: object | None) -> str | None:
    """Why ``stage`` (driven by ``schedule``) must stay stock, or None. See [Note: refusals]."""
    custom = getattr(schedule, "_comp_type_to_function_map", None) if schedule is not None else None
    if custom:
        kinds = sorted(str(getattr(k, "value", k)) for k in custom if str(getattr(k, "value", k)) in _COMPUTE_ACTIONS)
        if kinds:
            return (f"schedule {type(schedule).__name__} has custom functions registered for {', '.join(kinds)} "
                    "(register_custom_function); they can compute without the stage methods the pool's guard "
                    "watches, so its receive buffers stay stock. Fix: register custom functions only for "
                    "UNSHARD/RESHARD/REDUCE_GRAD, or run this schedule unpooled.")
    if stage is not None:
        for klass in type(stage).__mro__:
            if klass.__module__.startswith("torch."):
                break
            overridden = [m for m in GUARDED_STAGE_METHODS if m in klass.__dict__]
            if overridden:
                return (f"stage class {klass.__qualname__} overrides {', '.join(overridden)}; the override runs "
                        "instead of the pool's guarded wrapper, so its receive buffers stay stock. Fix: do not "
                        "override these methods in a pooled stage (wrap the module instead), or run it unpooled.")
    return None


def _plan_cached(observed: object, config: "PoolConfig") -> RingPlan:
    key = (bool(getattr(observed, "_has_backward", True)), config)
    cache = observed.__dict__.setdefault("_pooltk_plans", {})
    if key not in cache:
        cache[key] = plan_rings(observed, config)
    return cache[key]


def decide(*, install_schedule: str | None, force: bool, config: "PoolConfig | None" = None,
           stage: object | None = None) -> GateDecision:
    """Decide for the stage being set up right now. See [Note: gating], [Note: auto rings], [Note: refusals]."""
    observed = observe_schedule()
    refused = refusal(stage, observed)
    if refused is not None:
        return GateDecision(pool=False, schedule=schedule_key(observed or install_schedule),
                            observed=observed is not None, reason=refused)
    if schedule_key(install_schedule) == AUTO:
        return _decide_auto(observed, config, force)
    if observed is not None:
        name, allowed, how = schedule_key(observed), schedule_allowed(observed), "observed"
    else:
        name, allowed, how = schedule_key(install_schedule), schedule_allowed(install_schedule), "given at install"
    if allowed:
        return GateDecision(pool=True, schedule=name, observed=observed is not None, reason=f"schedule {name!r} ({how}) is allowlisted")
    if force:
        return GateDecision(
            pool=True, schedule=name, observed=observed is not None,
            reason=f"schedule {name!r} ({how}) is not allowlisted; pooled anyway because force=True",
        )
    return GateDecision(
        pool=False, schedule=name, observed=observed is not None,
        reason=(
            f"schedule {name!r} ({how}) has no proven in-flight bound (allowlist: {sorted(ALLOWLIST)}); "
            "stock receive buffers kept. Use schedule='auto' to pool schedules pooltk can analyse; "
            "pass force=True only for experiments."
        ),
    )


def _decide_auto(observed: object | None, config: "PoolConfig | None", force: bool) -> GateDecision:
    from pooltk.config import PoolConfig
    from pooltk.analysis.programs import ScheduleAnalysisError

    if observed is None:
        return GateDecision(pool=False, schedule=None, observed=False, reason=(
            "schedule='auto' needs the driving schedule, but none was on the call stack at setup; stock receive "
            "buffers kept. Fix: let the schedule set the stage up (its first step), or install with schedule='1f1b'."
        ))
    name = schedule_key(observed)
    if schedule_allowed(observed):
        return GateDecision(pool=True, schedule=name, observed=True,
                            reason=f"schedule {name!r} (observed) is allowlisted")
    try:
        plan = _plan_cached(observed, config or PoolConfig())
    except ScheduleAnalysisError as exc:
        return GateDecision(pool=False, schedule=name, observed=True,
                            reason=f"schedule {name!r} (observed) cannot be analysed: {exc} Stock receive buffers kept.")
    except Exception as exc:  # a bug inside a recognised layout: loud, never a silent stock fallback
        raise PoolSetupError(stage=None, direction=None, cause=exc,
                             what=f"ring planning for schedule {name!r}") from exc
    return GateDecision(pool=True, schedule=name, observed=True, plan=plan,
                        reason=f"schedule {name!r} (observed) analysed from its action order: rings sized per stage")


# ---------------------------------------------------------------------------------------
# schedule="auto": ring sizes derived from the driving schedule's own action order
#
# [Note: auto rings]
# With ``install(schedule="auto")`` a schedule outside the allowlist is pooled when
# pooltk can analyse it: the buffer lifetimes of its lowered action order
# (``pooltk.analysis.lifetimes``) give, per (stage, direction), the smallest ring K for which the
# ``c mod K`` slot map never overwrites a live buffer; the ring is that plus slack (capped
# at M). The analysis is run for the schedule's class and shape and then checked against
# the schedule object's own ``pipeline_order_with_comms`` where it has one, so an object
# whose order was replaced (a CSV, a hand-edited list) is refused. A (stage, direction)
# that receives nothing (a V-schedule same-rank handoff, first-stage inputs, last-stage
# grads) keeps stock behaviour. Any refusal leaves the stage stock and says why.
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RingPlan:
    """Ring sizes for every stage of one schedule shape, derived from its action order."""

    schedule: str
    n_microbatches: int
    sizes: dict
    """K per (stage, direction); 0 means that direction stays stock."""
    min_safe: dict
    """Smallest safe ``c mod K`` ring per (stage, direction) from the analysis (0: no receives)."""
    handoff: frozenset = frozenset()
    """(stage, direction) pairs fed by a same-rank handoff (V schedules): no receive buffers at all."""
    program: Any = field(default=None, compare=False, repr=False)
    """The analysed :class:`~pooltk.analysis.programs.Program` (for rank-shared rings)."""
    spans: tuple = field(default=(), compare=False, repr=False)
    """Its receive lifetimes (:func:`pooltk.analysis.lifetimes.lifetimes_of`)."""


def _order_events(order: dict, rank: int) -> list[tuple[str, int, int]]:
    out = []
    for action in order.get(rank, []):
        if action is None:
            continue
        subs = action.sub_actions if getattr(action, "sub_actions", None) else (action,)
        for a in subs:
            kind = a.computation_type.value
            if kind in INERT_KINDS:
                continue
            out.append((kind, a.stage_index, a.microbatch_index))
    return out


def plan_rings(schedule: object, config: "PoolConfig") -> RingPlan:
    """Analyse the schedule object driving a setup; see [Note: auto rings].

    Raises:
        ScheduleAnalysisError: the schedule cannot be analysed (the message says why).
    """
    from pooltk.analysis.programs import ScheduleAnalysisError, resolve_schedule
    from pooltk.analysis.lifetimes import ScheduleShape, analyse, min_safe_ring

    cls = type(schedule)
    resolve_schedule(cls)  # refuses custom runtime (CSV) schedules, base classes, step overrides
    n_mb = int(schedule._n_microbatches)
    num_stages = int(schedule._num_stages)
    pp = int(getattr(schedule, "pp_group_size", num_stages))
    defer = bool(getattr(schedule, "_defer_pp_recv", False))
    forward_only = not bool(getattr(schedule, "_has_backward", True))
    prog, spans = analyse(ScheduleShape(schedule=cls, pp=pp, n_microbatches=n_mb, stages_per_rank=num_stages // pp,
                                        forward_only=forward_only, defer_pp_recv=defer))
    order = getattr(schedule, "pipeline_order_with_comms", None)
    if isinstance(order, dict) and order:
        rank = int(getattr(schedule, "rank", 0))
        mine = _order_events(order, rank)
        if forward_only:
            mine = [e for e in mine if e[0] not in ("RECV_B", "SEND_B", "B", "I", "W")]
        analysed = [(e.kind, e.stage, e.microbatch) for e in prog.events.get(rank, ())]
        if mine != analysed:
            raise ScheduleAnalysisError(
                f"{cls.__name__}: this schedule object's pipeline_order_with_comms on rank {rank} differs from the "
                "order torch builds for its class and shape (a custom or loaded action list?); pooltk cannot vouch "
                "for its receive lifetimes and leaves it stock."
            )
    sizes, safe, handoff = {}, {}, set()
    s2r = prog.stage_to_rank
    for stage in range(prog.num_stages):
        for direction in DIRECTIONS:
            k0 = min_safe_ring(spans, stage, direction, n_mb)
            safe[(stage, direction)] = k0
            sizes[(stage, direction)] = ring_from_live(k0, n_mb, direction, config)
            neighbour = stage - 1 if direction == "forward" else stage + 1
            if neighbour in s2r and s2r[neighbour] == s2r[stage] and not (forward_only and direction == "grad"):
                handoff.add((stage, direction))
    return RingPlan(schedule=cls.__name__, n_microbatches=n_mb, sizes=sizes, min_safe=safe,
                    handoff=frozenset(handoff), program=prog, spans=tuple(spans))
