"""The pool's public surface: install, uninstall, pooled, pool_stage, probe (the wrappers are _patch.py's).

[Note: what install does]
``install()`` detects the layout (by feature) and replaces, on the classes that define them, only the stage
methods the adapters name: the setups that make receive buffers (rebuilt onto rings) and the runtime methods
that post receives, send, compute and reset; on the lazy layout only compute and reset (the release).
``uninstall()`` puts torch's own objects back and gives live pooled stages stock buffers; ``pool_stage``
binds the same wrappers on one stage object. One install per process: after ``importlib.reload`` restart
the interpreter.

[Note: fail-open only for unknown layouts]
pooltk stands down (``installed=False``, one warning, nothing changed) only on a layout or runtime signature
it does not recognise. Inside a recognised layout an error raises ``PoolSetupError``; a deliberate refusal
keeps a stage stock and says why ([Note: refusals]).

[Note: stream ordering]
On GPUs a slot is re-posted only after its previous user's last read was queued, and torch's NCCL group
makes the receive's stream wait on the current stream, so kernels queued earlier read it first (a forward
send the ring does not count finished earlier still: [Note: finished sends]). What breaks this: kernels on a
side stream reading a received tensor; make the current stream wait on side streams before the stage returns.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator

from pooltk.analysis.catalog import schedule_key
from pooltk.config import PoolConfig
from pooltk.pool import events
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
from pooltk.pool.gating import PoolSetupError, refusal
from pooltk.pool.report import InstallReport, PoolWarning, make_report
from pooltk.pool.state import CURRENT, LOCK, MISSING, stage_state, state_for

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

_RELEASE_METHODS = ("forward_one_chunk", "backward_one_chunk", "clear_runtime_states")
"""What the lazy layout wraps: compute steps and the reset (no receive posts: no rings)."""


def _layout() -> tuple[Layout | None, str]:
    """The layout install would use and why; None where pooltk does not recognise this torch."""
    found = detect()
    if found.layout is None:
        return None, found.reason
    problems = signature_problems(stage_base(), _runtime_names(found.layout))
    if problems:
        return (
            None,
            f"found layout {found.layout.name!r} with runtime methods pooltk does not know: {'; '.join(problems)}",
        )
    return found.layout, found.reason


def _runtime_names(layout: Layout) -> tuple[str, ...]:
    eager = HOT_METHODS + SEND_METHODS + HANDOFF_METHODS
    return (_RELEASE_METHODS if layout.per_receive else eager) + OPTIONAL_HOT_METHODS


def _prepare(
    config: PoolConfig | None,
    fields: dict,
    schedule: str | None,
    force: bool,
    scope: str,
    experiment: Any,
) -> InstallReport:
    """What every install form does first: the config, the layout, the report (``installed`` False: stands down)."""
    if config is not None and fields:
        raise ValueError(
            f"pooltk: found config= and fields {sorted(fields)}; required one or the other.\n"
            "Fix: pass PoolConfig(...) or keyword fields such as slack=2."
        )
    if config is not None and not isinstance(config, PoolConfig):
        raise ValueError(
            f"pooltk: config found {type(config).__name__}; required pooltk.PoolConfig."
        )
    cfg = config if config is not None else PoolConfig(**fields)
    sched = schedule_key(schedule)
    layout, reason = _layout()
    if layout is not None and layout.per_receive:
        reason += (
            "; pooltk installs the last-stage release alone"
            if cfg.release
            else "; release=False leaves nothing to do here"
        )
    installed = layout is not None and not (layout.per_receive and not cfg.release)
    report = make_report(
        installed=installed,
        layout=layout,
        reason=reason,
        config=cfg,
        schedule=sched,
        force=force,
        scope=scope,
        experiment=experiment,
    )
    if not installed:
        events.emit(report.events, events.event("not-installed", reason=report.reason))
        warnings.warn(f"pooltk: not installed: {report.reason}", PoolWarning, stacklevel=4)
    return report


def install(
    config: PoolConfig | None = None,
    *,
    schedule: str | None = "1f1b",
    force: bool = False,
    **fields: Any,
) -> InstallReport:
    """Pool receive buffers process-wide, for stages set up from now on.

    Args:
        config: a :class:`PoolConfig`, or its fields as keywords (``slack=2``).
        schedule: the schedule assumed where none is seen driving a setup ([Note: gating]); ``"auto"``
            pools every schedule pooltk can analyse ([Note: auto rings]).
        force: pool schedules outside the allowlist (experiments).

    Returns:
        An :class:`InstallReport`: ``installed`` False (with a :class:`PoolWarning`) on an unknown layout;
        ``mode`` says what is installed; ``events`` and :meth:`InstallReport.usage` grow as stages run.

    Raises:
        ValueError: bad config values, or pooltk already installed with other settings.
    """
    return _install(config, fields, schedule, force, None)


def _install(
    config: PoolConfig | None, fields: dict, schedule: str | None, force: bool, experiment: Any
) -> InstallReport:
    """``install`` with the harness's rings (the one private seam: :mod:`pooltk.parity.experiments`)."""
    with LOCK:
        current = CURRENT[0]
        if current is not None:
            same = (config or PoolConfig(**fields), schedule_key(schedule), bool(force), experiment)
            if same == (current.config, current.schedule, current.force, current.experiment):
                return current
            raise ValueError(
                f"pooltk: found a second install ({same[0].describe()}, schedule={same[1]!r}) while "
                f"one is in force ({current.config.describe()}, schedule={current.schedule!r}).\n"
                "Fix: pooltk.uninstall() first, or use the pooltk.pooled(...) context manager."
            )
        prepared = _prepare(config, fields, schedule, force, "process", experiment)
        if not prepared.installed:
            return prepared
        originals = originals_of(stage_base(), _runtime_names(prepared.found))
        patches = [
            (t.owner, t.name, setup_wrapper(t.owner.__dict__[t.name], t, prepared))
            for t in prepared.found.setup_targets
        ]
        patches += [
            (defining_class(stage_base(), name), name, fn)
            for name, fn in runtime_wrappers(originals, prepared).items()
        ]
        for owner, name, fn in patches:
            prepared.originals.append((owner, name, owner.__dict__.get(name, MISSING)))
            setattr(owner, name, fn)
        CURRENT[0] = prepared
        cfg = prepared.config
        events.emit(
            prepared.events,
            events.event(
                "installed",
                policy="tight" if experiment is None else experiment.policy,
                slack=cfg.slack,
                grad_slack=cfg.grad_slack,
                schedule=prepared.schedule,
                layout=prepared.layout,
                mode=prepared.mode,
            ),
        )
        return prepared


def uninstall() -> bool:
    """Put torch's own methods back; live pooled stages get stock buffers (``unpooled``). True if anything was undone."""
    with LOCK:
        current, CURRENT[0] = CURRENT[0], None
        if current is None:
            return False
        current.active = False
        for owner, name, original in reversed(current.originals):
            if original is MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        for stage in list(current.stages):
            give_back_stock_buffers(
                stage,
                current,
                "found pooltk.uninstall(): the rings were replaced by stock "
                "buffers, one set per microbatch",
            )
        return True


def installed() -> InstallReport | None:
    """The process-wide install report in force, or None."""
    return CURRENT[0]


@contextlib.contextmanager
def pooled(
    config: PoolConfig | None = None,
    *,
    schedule: str | None = "1f1b",
    force: bool = False,
    **fields: Any,
) -> Iterator[InstallReport]:
    """``with pooltk.pooled(slack=2) as report:`` install for the block, uninstall after."""
    was = CURRENT[0] is not None
    report = install(config, schedule=schedule, force=force, **fields)
    try:
        yield report
    finally:
        if not was:
            uninstall()


def pool_stage(
    stage: Any,
    config: PoolConfig | None = None,
    *,
    schedule: str | None = "1f1b",
    force: bool = False,
    **fields: Any,
) -> InstallReport:
    """Pool one stage object (for code that builds its own stages), from its next setup; classes are untouched."""
    return _pool_stage(stage, config, fields, schedule, force, None)


def _pool_stage(
    stage: Any,
    config: PoolConfig | None,
    fields: dict,
    schedule: str | None,
    force: bool,
    experiment: Any,
) -> InstallReport:
    with LOCK:
        if CURRENT[0] is not None:
            raise ValueError(
                "pooltk.pool_stage: found pooltk installed process-wide, which pools every stage.\n"
                "Fix: pooltk.uninstall() first, or rely on the process-wide install."
            )
        prepared = _prepare(config, fields, schedule, force, "stage", experiment)
        if not prepared.installed:
            return prepared
        refused = refusal(stage, None)
        if (
            refused is not None
        ):  # binding would bypass the subclass's own methods ([Note: refusals])
            report = make_report(
                installed=False,
                layout=prepared.found,
                reason=refused,
                config=prepared.config,
                schedule=prepared.schedule,
                force=force,
                scope="stage",
            )
            kept_stock(stage, report, refused)
            return report
        base = stage_base()
        bound: dict[str, Callable] = runtime_wrappers(
            originals_of(base, _runtime_names(prepared.found)), prepared
        )
        for t in prepared.found.setup_targets:
            if isinstance(stage, t.owner):
                bound[t.name] = setup_wrapper(t.owner.__dict__[t.name], t, prepared)
        for name, fn in bound.items():
            stage.__dict__[name] = fn.__get__(stage)
        st = state_for(stage)
        st.instance_methods, st.bound, st.report = tuple(bound), prepared, prepared
        return prepared


def unpool_stage(stage: Any) -> bool:
    """Remove what pool_stage bound on ``stage``; a ring it holds is replaced by stock buffers now."""
    with LOCK:
        st = stage_state(stage)
        if st is None or st.bound is None:
            return False
        prepared, st.bound = st.bound, None
        prepared.active = False
        for name in st.instance_methods:
            stage.__dict__.pop(name, None)
        st.instance_methods = ()
        give_back_stock_buffers(
            stage, prepared, "found pooltk.unpool_stage(): the rings were replaced by stock buffers"
        )
        return True


def probe() -> InstallReport:
    """What install() would do here (with the default config), without changing anything."""
    layout, reason = _layout()
    return make_report(installed=layout is not None, layout=layout, reason=reason, scope="probe")


def stage_rings(stage: Any) -> dict:
    """The rings a stage holds now, by direction (empty for a stock stage)."""
    st = stage_state(stage)
    return st.rings() if st is not None else {}
