"""The pool's public surface: install, uninstall, pooled, pool_stage, probe (the wrappers are _patch.py's).

[Note: what install does]
``install()`` detects the layout (:mod:`pooltk.pool.adapters`), then wraps, on the classes that
define them:

- the setup methods that make receive buffers (per layout): after the original runs,
  the stage's recv-info map is rebound onto a ring of K sets (:class:`pooltk.pool.ring.DirectionRing`);
  where the layout allows, torch's buffer factory is swapped during the call for one that
  makes shape-only placeholders, so only the K real sets are ever allocated;
- the runtime methods (``get_fwd_recv_ops`` / ``get_bwd_recv_ops`` claim a slot and hand
  out a fresh alias; ``forward_one_chunk`` / ``backward_one_chunk`` /
  ``backward_weight_one_chunk`` release it and, on the last stage, let the schedule's kept
  losses and outputs drop their graphs ([Note: releasing what the schedule keeps] in
  release.py); ``clear_runtime_states`` resets ownership).

On the lazy layout (torch 2.15: a buffer allocated per receive, dropped when consumed) there is
no pre-allocation for a ring to replace, but the last stage still keeps all M inputs alive
through the schedule's kept graphs: install wraps only the compute and reset methods and
installs the release (``report.mode == "release"``). The wrappers themselves live in
:mod:`pooltk.pool._patch`; ``uninstall()`` puts the original function objects back (identity,
not copies).

[Note: installing twice]
``install()`` with the same config, schedule and force is a no-op returning the current
report. With anything different it raises ``ValueError``: stages already set up hold
rings sized by the first config, and silently mixing two configs in one process would
make the memory report lie. Call ``uninstall()`` first (or use the ``pooled()`` context
manager, which uninstalls on exit). Every wrapper carries ``__pooltk_original__``, so a
wrapper left by another copy of this module (an ``importlib.reload`` in a notebook, a second
copy of the package) is recognised: ``install()`` refuses to nest on top of it, and
``uninstall()`` from any copy removes it and puts torch's own function back.

[Note: fail-open only for unknown layouts]
pooltk stands down (``installed=False``, a warning, nothing changed) only when it does not
recognise this torch's layout (including a runtime method whose arguments are not the ones the
adapters name). Inside a recognised layout an error is a pooltk bug or a
stage it did not foresee: it raises :class:`~pooltk.pool.gating.PoolSetupError` naming the
stage, direction and cause. Deliberate refusals (schedule not allowlisted, not analysable,
custom callbacks, overriding subclasses; see [Note: refusals] in gating.py) keep the stage
stock and say so in the report and the log ([Note: pool log lines] in events.py).

[Note: install state and late stages]
Patching is process-wide and guarded by one lock (install, uninstall, pool_stage, and the
swap of torch's module-level ``_make_tensor_from_meta`` during a setup call). A stage set
up before ``install()`` keeps torch's buffers until its next setup; the first time the
pool sees it compute it reports ``kept stock`` with that reason. ``uninstall()`` (and
``unpool_stage``) give every live pooled stage stock buffers again (M sets, as torch makes
them), so no ring keeps working without its guard, and report each stage.

[Note: stream ordering]
On GPUs the pool's correctness also rests on ordering, which CPU runs cannot show. A slot
is re-posted on the host only after the previous microbatch's use of it was *queued*
(its backward, or its forward in eval, has returned on the host). torch's NCCL process
group makes its communication stream wait on the current stream before running a
receive, so the receive cannot overwrite the slot before the kernels queued earlier on
the current stream have read it. What breaks this: kernels on another stream that read a
received tensor (a side stream for overlap, a custom all-gather) without making the
current stream wait on them (``torch.cuda.current_stream().wait_stream(side)``) or
``record_stream`` on the tensor. The check you can make: run the parity harness on the
GPU job with the guard on (``pooltk parity`` / ``torchrun -m pooltk.parity``); and where a
model uses side streams, make the current stream wait on them before the stage returns.
Sends need no such rule: a send still in flight holds its tensor, which [Note: copy on
conflict] (ring.py) counts, so the slot is re-homed rather than overwritten.
"""

from __future__ import annotations

import contextlib
import types
import warnings
import weakref
from typing import Any, Callable, Iterator

from pooltk.config import PoolConfig
from pooltk.pool._patch import give_back_stock_buffers, kept_stock, runtime_wrappers, setup_wrapper
from pooltk.pool.adapters import Layout, detect
from pooltk.pool.adapters.stage_api import (
    HANDOFF_METHODS,
    HOT_METHODS,
    OPTIONAL_HOT_METHODS,
    SEND_METHODS,
    defining_class,
    originals_of,
    signature_problems,
    stage_base,
)
from pooltk.pool.events import emit, installed_event, not_installed_event
from pooltk.analysis.catalog import schedule_key
from pooltk.pool.gating import PoolSetupError, refusal
from pooltk.pool.marks import innermost, is_wrapper
from pooltk.pool.report import InstallReport, PoolWarning, make_report
from pooltk.pool.ring import DirectionRing
from pooltk.pool.state import LOCK, MISSING, STATE, Context, Settings, stage_state, state_for

__all__ = [
    "InstallReport",
    "PoolSetupError",
    "PoolWarning",
    "install",
    "installed",
    "pool_stage",
    "pooled",
    "probe",
    "stage_rings",
    "uninstall",
    "unpool_stage",
]

_WARNED: set[str] = set()
"""Warnings already raised since the last install/uninstall (reset by both)."""

_RELEASE_METHODS = ("forward_one_chunk", "backward_one_chunk", "clear_runtime_states")
"""What the lazy layout wraps: compute steps and the reset (no receive posts: no rings)."""


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, PoolWarning, stacklevel=3)


def _usable_layout() -> tuple[Layout | None, str]:
    """The detected layout and its reason; None where pooltk does not recognise this torch."""
    detection = detect()
    layout = detection.layout
    if layout is None:
        return None, detection.reason
    problems = signature_problems(stage_base(), tuple(_runtime_names(layout)))
    if problems:
        return None, (f"layout {layout.name!r} detected, but the stage's runtime methods are not the ones pooltk "
                      f"wraps: {'; '.join(problems)}")
    return layout, detection.reason


def _runtime_names(layout: Layout) -> tuple[str, ...]:
    """The runtime methods install wraps on ``layout`` (no receive posts where there are no rings)."""
    return (_RELEASE_METHODS if layout.per_receive else HOT_METHODS + SEND_METHODS + HANDOFF_METHODS) + OPTIONAL_HOT_METHODS


def _runtime_originals(layout: Layout) -> dict[str, Callable]:
    return originals_of(stage_base(), _runtime_names(layout))


def _patch_sites(layout: Layout) -> list[tuple[type, str]]:
    """Every (class, attribute) install patches for ``layout``."""
    base = stage_base()
    sites = [(t.owner, t.name) for t in layout.setup_targets]
    sites += [(defining_class(base, name), name) for name in _runtime_originals(layout)]
    return sites


def _foreign_wrappers(layout: Layout) -> list[tuple[type, str, Any]]:
    """pooltk wrappers on torch's classes that this copy of the module did not install."""
    mine = {(owner, name) for owner, name, _ in STATE.originals}
    found = []
    for owner, name in _patch_sites(layout):
        fn = owner.__dict__.get(name)
        if is_wrapper(fn) and (owner, name) not in mine:
            found.append((owner, name, fn))
    return found


def _not_installed(report: InstallReport) -> InstallReport:
    emit(report.events, not_installed_event(report.reason))
    _warn_once(f"pooltk: not installed: {report.reason}")
    return report


def _describe(layout: Layout, reason: str, config: PoolConfig) -> str:
    if not layout.per_receive:
        return reason
    if config.release:
        return (reason + "; pooltk installs only the last-stage release (the schedule's kept losses and outputs let "
                "go of their graphs after each backward), so the last stage too holds only its live set")
    return reason + "; release=False, so pooltk has nothing to do here and keeps stock behaviour"


# ---------------------------------------------------------------------------------------
# Public surface
# ---------------------------------------------------------------------------------------


def probe() -> InstallReport:
    """What install() would do here (with the default config), without changing anything."""
    layout, reason = _usable_layout()
    config = PoolConfig()
    if layout is None:
        return make_report(installed=False, layout=None, reason=reason, scope="probe")
    return make_report(installed=True, layout=layout, reason=_describe(layout, reason, config), scope="probe")


def _resolve_config(config: PoolConfig | None, overrides: dict[str, Any]) -> PoolConfig:
    if config is not None and overrides:
        raise ValueError(
            f"install: found both config= and field overrides {sorted(overrides)}; required one or the other. "
            "Fix: pass PoolConfig(...) or keyword fields such as slack=2, not both."
        )
    if config is None:
        return PoolConfig(**overrides)
    if not isinstance(config, PoolConfig):
        raise ValueError(f"install: config found {type(config).__name__}; required pooltk.PoolConfig.")
    return config


def _check_force(config: PoolConfig, force: bool) -> None:
    if config.forward_shortfall and not force:
        raise ValueError(
            f"PoolConfig.forward_shortfall={config.forward_shortfall} builds rings smaller than the live set; "
            "required force=True to acknowledge it is an experiment. Fix: pass force=True, or leave it at 0."
        )


def install(
    config: PoolConfig | None = None, *, schedule: str | None = "1f1b", force: bool = False, **fields: Any
) -> InstallReport:
    """Pool receive buffers process-wide, for stages set up from now on.

    Args:
        config: a :class:`PoolConfig`; or pass its fields as keywords (``slack=2``).
        schedule: schedule name assumed when a stage is set up without an observable
            schedule (the observed schedule decides otherwise); see [Note: gating].
            ``"auto"``: pool every schedule pooltk can analyse, with per-stage ring
            sizes from its action order; see [Note: auto rings] in pooltk/pool/gating.py.
        force: pool even schedules outside the allowlist (experiments, negative controls).

    Returns:
        An :class:`InstallReport`; ``installed`` is False (with a :class:`PoolWarning` and a
        WARNING log line) when this torch's layout is unknown. ``mode`` says what is installed
        (``rings+release`` on eager layouts, ``release`` on the lazy one). Its ``events`` grow as
        stages are set up (see [Note: pool log lines]).

    Raises:
        ValueError: bad config values; pooltk is already installed with different settings
            (see [Note: installing twice]); or another copy of pooltk's wrappers is in place.
    """
    cfg = _resolve_config(config, fields)
    _check_force(cfg, force)
    sched = schedule_key(schedule)
    wanted = Settings(config=cfg, schedule=sched, force=bool(force))
    with LOCK:
        if STATE.report is not None and STATE.report.installed:
            if STATE.settings == wanted:
                return STATE.report
            current = STATE.report
            raise ValueError(
                f"pooltk is already installed with {current.config.describe() if current.config else None}, "
                f"schedule={current.schedule!r}, force={current.force}; found a second install with "
                f"{cfg.describe()}, schedule={sched!r}, force={bool(force)}. Fix: call pooltk.uninstall() first, "
                "or use the pooltk.pooled(...) context manager. See [Note: installing twice] in pooltk/pool/install.py."
            )
        _WARNED.clear()
        layout, reason = _usable_layout()
        if layout is None or (layout.per_receive and not cfg.release):
            return _not_installed(make_report(installed=False, layout=layout, reason=_describe(layout, reason, cfg)
                                              if layout else reason, config=cfg, schedule=sched, force=force))
        foreign = _foreign_wrappers(layout)
        if foreign:
            where = ", ".join(f"{o.__name__}.{n} (from {getattr(fn, '__module__', '?')})" for o, n, fn in foreign[:3])
            raise ValueError(
                f"pooltk.install: found pooltk wrappers already on torch's stage classes that this copy of "
                f"pooltk.pool.install did not put there ({where}): another copy of the module installed them "
                "(importlib.reload, or a second copy of the package); required one install per process, because "
                "nesting two would wrap torch's buffer factory twice. Fix: call pooltk.uninstall() (any copy "
                "removes every pooltk wrapper and restores torch's own functions), then install again."
            )
        report = make_report(installed=True, layout=layout, reason=_describe(layout, reason, cfg), config=cfg,
                             schedule=sched, force=force)
        context = Context(settings=wanted, report=report, rings=report.rings)

        def context_of(_stage: Any) -> Context | None:
            return context if STATE.report is report else None

        base = stage_base()
        patches: list[tuple[type, str, Callable]] = []
        for target in layout.setup_targets:
            original = target.owner.__dict__[target.name]
            patches.append((target.owner, target.name, setup_wrapper(original, target, context_of)))
        for name, fn in runtime_wrappers(_runtime_originals(layout), context_of).items():
            patches.append((defining_class(base, name), name, fn))
        originals: list[tuple[type, str, Any]] = []
        for owner, name, fn in patches:
            originals.append((owner, name, owner.__dict__.get(name, MISSING)))
            setattr(owner, name, fn)
        STATE.originals = originals
        STATE.settings = wanted
        STATE.report = report
        emit(report.events, installed_event(policy=cfg.policy, slack=cfg.slack, grad_slack=cfg.grad_slack,
                                            schedule=sched, layout=layout.name, mode=report.mode))
        return report


def uninstall() -> bool:
    """Restore every wrapped method to torch's original function object. Returns True if anything was undone.

    Also removes pooltk wrappers left by another copy of this module (see [Note: installing
    twice]); and every live stage that holds a ring gets stock buffers back at once, reported
    as ``unpooled`` (see [Note: install state and late stages]).
    """
    with LOCK:
        report = STATE.report
        undone = bool(STATE.originals)
        for owner, name, original in reversed(STATE.originals):
            if original is MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        STATE.originals, STATE.report, STATE.settings = [], None, None
        layout, _ = _usable_layout()
        if layout is not None:
            for owner, name, fn in _foreign_wrappers(layout):
                setattr(owner, name, innermost(fn))
                undone = True
        for stage in list(STATE.stages):
            give_back_stock_buffers(stage, report, "pooltk.uninstall(): the stage was pooled until now; its rings "
                                    "were replaced by stock buffers (one set per microbatch), so no ring runs "
                                    "unguarded")
        STATE.stages = weakref.WeakSet()
        _WARNED.clear()
        return undone


def installed() -> InstallReport | None:
    """The current process-wide install report, or None."""
    return STATE.report


@contextlib.contextmanager
def pooled(
    config: PoolConfig | None = None, *, schedule: str | None = "1f1b", force: bool = False, **fields: Any
) -> Iterator[InstallReport]:
    """``with pooltk.pooled(slack=2) as report:`` install for the block, uninstall after."""
    was_installed = STATE.report is not None
    report = install(config, schedule=schedule, force=force, **fields)
    try:
        yield report
    finally:
        if not was_installed:
            uninstall()


def pool_stage(
    stage: Any, config: PoolConfig | None = None, *, schedule: str | None = "1f1b", force: bool = False, **fields: Any
) -> InstallReport:
    """Pool one stage object (for code that builds its own stages); call before its first step.

    Binds the wrappers on the instance, leaving the classes untouched. The stage is pooled
    from its next setup (the schedule's first step, or an eval/train switch).
    Not combinable with a process-wide install (which already covers every stage).
    """
    cfg = _resolve_config(config, fields)
    _check_force(cfg, force)
    with LOCK:
        if STATE.report is not None and STATE.report.installed:
            raise ValueError(
                "pool_stage: pooltk is already installed process-wide, which pools every stage. "
                "Fix: use one form: pooltk.uninstall() then pool_stage(...), or rely on the process-wide install."
            )
        layout, reason = _usable_layout()
        sched = schedule_key(schedule)
        if layout is None or (layout.per_receive and not cfg.release):
            return _not_installed(make_report(installed=False, layout=layout, reason=_describe(layout, reason, cfg)
                                              if layout else reason, config=cfg, schedule=sched, force=force,
                                              scope="stage"))
        refused = refusal(stage, None)
        if refused is not None:  # binding would bypass the subclass's own methods: see [Note: refusals]
            report = make_report(installed=False, layout=layout, reason=refused, config=cfg, schedule=sched,
                                 force=force, scope="stage")
            kept_stock(stage, report, refused)
            return report
        report = make_report(installed=True, layout=layout, reason=_describe(layout, reason, cfg), config=cfg,
                             schedule=sched, force=force, scope="stage")
        context = Context(settings=Settings(config=cfg, schedule=sched, force=bool(force)), report=report,
                          rings=report.rings)
        bound: dict[str, Callable] = dict(runtime_wrappers(
            {n: innermost(f) for n, f in _runtime_originals(layout).items()}, lambda _s: context))
        for target in layout.setup_targets:
            if isinstance(stage, target.owner):
                bound[target.name] = setup_wrapper(innermost(target.owner.__dict__[target.name]), target,
                                                   lambda _s: context)
        for name, fn in bound.items():
            stage.__dict__[name] = types.MethodType(fn, stage)
        st = state_for(stage)
        st.instance_methods, st.report = tuple(bound), report
        return report


def unpool_stage(stage: Any) -> bool:
    """Remove what pool_stage bound on ``stage``; a ring it holds is replaced by stock buffers now."""
    with LOCK:
        st = stage_state(stage)
        if st is None:
            return False
        names, st.instance_methods = st.instance_methods, ()
        for name in names:
            stage.__dict__.pop(name, None)
        give_back_stock_buffers(stage, st.report, "pooltk.unpool_stage(): the stage was pooled until now; its rings "
                                "were replaced by stock buffers")
        return bool(names)


def stage_rings(stage: Any) -> dict[str, DirectionRing]:
    """The rings a stage holds now, by direction (empty for a stock stage)."""
    st = stage_state(stage)
    return st.rings() if st is not None else {}
