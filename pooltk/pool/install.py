"""The pool's public surface: install, uninstall, pooled, pool_stage, probe, and the report.

[Note: what install does]
``install()`` finds this torch's layout by feature and binds the pool's hooks
(pooltk/pool/stage.py) on the classes that define them: the setups that make receive buffers,
and the runtime methods that post receives, send, compute and reset; on the lazy layout only
compute and reset (the release). Nothing else of torch changes. ``uninstall()`` undoes the
bindings (torch's own objects back) and gives live pooled stages stock buffers; ``pool_stage``
binds the same hooks on one stage object. One install per process.

[Note: fail-open only for unknown layouts]
pooltk stands down (``installed=False``, one :class:`PoolWarning`, nothing changed) only on a
layout or runtime signature it does not recognise. Inside a recognised layout an error raises
``PoolSetupError``; a deliberate refusal keeps a stage stock and says why ([Note: refusals]).

[Note: stream ordering]
On GPUs a slot is re-posted only after its previous user's last read was queued, and torch's NCCL
group makes the receive's stream wait on the current stream, so kernels queued earlier read it
first. What breaks this: kernels on a side stream reading a received tensor; make the current
stream wait on side streams before the stage returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from pooltk.analysis.catalog import schedule_key
from pooltk.config import PoolConfig
from pooltk.pool import errors, events
from pooltk.pool.gating import refusal
from pooltk.pool.ring import Ring, RingUse, ring_size
from pooltk.pool.stage import (
    give_back_stock,
    kept_stock,
    runtime_hooks,
    runtime_names,
    setup_hooks,
    stage_state,
    state_for,
)
from pooltk.pool.torch_compat.bind import Binding, bind, bound
from pooltk.pool.torch_compat.layouts import Layout, detect
from pooltk.pool.torch_compat.stage_api import schedule_base, signature_problems, stage_base

_TAG = "pooltk"
_UNINSTALLED = "found pooltk.uninstall(): the rings were replaced by stock buffers, one set per "
_UNINSTALLED += "microbatch"
_UNPOOLED = "found pooltk.unpool_stage(): the rings were replaced by stock buffers"


@dataclass(frozen=True, slots=True, eq=False)
class InstallReport:
    """What an install (process-wide, one stage's, or a probe) found, does, and has seen."""

    installed: bool  # pooltk acts: rings for allowlisted schedules and/or the last-stage release
    mode: str  # rings+release, rings, release or stock: what pooltk does, in one word
    layout: str | None  # the layout family found (prepare-infra, setup-recv-info, lazy), or None
    reason: str  # the layout's description when installed, else why not
    torch_version: str
    alloc_free: bool = False  # only K buffer sets are ever made (no transient of all M at setup)
    config: PoolConfig | None = None
    schedule: str | None = None  # given at install; one seen driving a setup decides over it
    scope: str = "process"  # process (the classes), stage (one stage object) or probe
    events: list = field(default_factory=list)  # every decision and outcome: [Note: pool log lines]
    _stages: weakref.WeakSet = field(default_factory=weakref.WeakSet, repr=False)

    @classmethod
    def of(
        cls,
        layout: Layout | None,
        reason: str,
        config: PoolConfig | None,
        *,
        installed: bool,
        schedule: str | None = None,
        scope: str = "process",
    ) -> InstallReport:
        eager = installed and layout is not None and not layout.per_receive
        release = installed and (config is None or config.release)
        mode = "+".join(p for p, on in (("rings", eager), ("release", release)) if on) or "stock"
        targets = layout.setup_targets if eager else ()
        alloc_free = bool(targets) and all(t.alloc_free for t in targets)
        name = layout.name if layout is not None else None
        return cls(
            installed=installed,
            mode=mode,
            layout=name,
            reason=reason,
            torch_version=torch.__version__,
            alloc_free=alloc_free,
            config=config,
            schedule=schedule,
            scope=scope,
        )

    def usage(self) -> list[RingUse]:
        """One :class:`RingUse` per live pooled stage and direction, of its last step (``held_sets``
        reaching ``stock``: it saved nothing; re-homes, if so, were a WARNING). A rank-shared ring
        is a row per member stage (``stages`` names them): count its sets and bytes once."""
        rows = []
        for stage in sorted(self._stages, key=lambda s: getattr(s, "stage_index", 0)):
            state = stage_state(stage)
            rows.extend(state.usage(stage.stage_index) if state is not None else ())
        return rows

    def stage_events(self, kind: str | None = None) -> list[events.PoolEvent]:
        """Per-stage events, optionally of one ``kind`` (``pooled``, ``kept-stock``, ...)."""
        return [e for e in self.events if e.stage is not None and kind in (None, e.kind)]

    def to_dict(self) -> dict[str, Any]:
        names = ("installed", "layout", "reason", "torch_version", "schedule", "alloc_free")
        out = {n: getattr(self, n) for n in (*names, "scope", "mode")}
        config = self.config.to_dict() if self.config else None
        return out | {"config": config, "events": [e.to_dict() for e in self.events]}


@dataclass(eq=False)
class _Install:
    """The install in force: what its hooks read, and the bindings that undo it."""

    config: PoolConfig
    harness: Any  # the proofs' rings (pooltk.parity.experiments.Harness), or None: a user's
    schedule: str | None
    force: bool
    layout: Layout
    report: InstallReport
    bindings: list[Binding] = field(default_factory=list)
    groups: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary)
    """schedule object -> its rank-shared rings ([Note: rank-shared rings])."""

    events = property(lambda self: self.report.events)
    stages = property(
        lambda self: self.report._stages,
        doc="Live stages pooltk acts on: what uninstall gives back.",
    )
    guard = property(lambda self: self.harness.guard if self.harness is not None else True)
    sharing = property(lambda self: self.harness.sharing if self.harness is not None else "rank")

    def ring_size(self, *, live: int, receives: int, direction: str, **closed_form: int) -> int:
        """K for a live set: the user's rule ([Note: ring sizes]), or the harness's (which may
        read the 1F1B stage and pipeline, ``stage`` and ``num_stages``)."""
        if self.harness is None:
            return ring_size(live, receives, direction, self.config)
        return self.harness.ring_size(
            live=live, receives=receives, direction=direction, **closed_form
        )


_LOCK = threading.RLock()
"""Guards install, uninstall, pool_stage and unpool_stage."""
_current: _Install | None = None
"""The process-wide install in force."""


def install(
    config: PoolConfig | None = None,
    *,
    schedule: str | None = "1f1b",
    force: bool = False,
    **fields: Any,
) -> InstallReport:
    """Pool receive buffers process-wide, for stages set up from now on.

    ``config`` is a :class:`PoolConfig`, or its fields as keywords (``slack=2``). ``schedule`` is
    assumed where none is seen driving a setup ([Note: gating]); ``"auto"`` pools every schedule
    pooltk can analyse ([Note: auto rings] in pooltk/analysis/plans.py). ``force`` pools schedules
    outside the allowlist. The report's ``installed`` is False (with a :class:`PoolWarning`) on an
    unknown layout; its ``events`` and :meth:`InstallReport.usage` grow as stages run. Raises
    ValueError for bad config values, or when pooltk is already installed with other settings.
    """
    return _install(config, fields, schedule, force, None)


def _install(
    config: PoolConfig | None, fields: dict, schedule: str | None, force: bool, harness: Any
) -> InstallReport:
    """``install`` with the harness's rings: the one private seam (pooltk.parity.experiments)."""
    global _current
    _check_schedule(schedule)
    with _LOCK:
        if _current is not None:
            return _same_install(_current, _config(config, fields), schedule, force, harness)
        report, inst = _prepare(config, fields, schedule, force, harness, "process")
        if inst is None:
            return report
        _bind(inst, None)
        _current = inst
        policy = getattr(harness, "policy", "tight")
        what = {"policy": policy, "schedule": report.schedule, "layout": report.layout}
        said = events.event("installed", mode=report.mode, **what, **inst.config.to_dict())
        events.emit(report.events, said)
        return report


def _bind(inst: _Install, stage: Any) -> None:
    """Bind the hooks on torch's classes (``stage`` None) or on one stage object; all or none."""
    by_target = {stage_base() if stage is None else stage: runtime_hooks(inst.layout, inst)}
    for target in inst.layout.setup_targets:
        if stage is None:
            by_target.setdefault(target.owner, {})[target.name] = setup_hooks(target, inst)
        elif isinstance(stage, target.owner):
            by_target[stage][target.name] = setup_hooks(target, inst)
    try:
        for target, hooks in by_target.items():
            inst.bindings.append(bind(target, hooks, tag=_TAG))
    except BaseException:
        _undo(inst)
        raise


def _same_install(
    inst: _Install, config: PoolConfig, schedule: str | None, force: bool, harness: Any
) -> InstallReport:
    """A second install: the one in force if it asks the same, else refused."""
    asked = (config, schedule_key(schedule), bool(force), harness)
    if asked == (inst.config, inst.schedule, inst.force, inst.harness):
        return inst.report
    text = errors.SECOND_INSTALL.format(
        config=config.describe(),
        schedule=asked[1],
        current=inst.config.describe(),
        current_schedule=inst.schedule,
    )
    raise ValueError(text)


def _prepare(
    config: PoolConfig | None,
    fields: dict,
    schedule: str | None,
    force: bool,
    harness: Any,
    scope: str,
) -> tuple[InstallReport, _Install | None]:
    """What every install form does first: the config, the layout, the report, and the install;
    None where pooltk stands down ([Note: fail-open only for unknown layouts])."""
    cfg = _config(config, fields)
    layout, reason = _layout()
    installed, reason = _acts(layout, reason, cfg)
    sched = schedule_key(schedule)
    report = InstallReport.of(layout, reason, cfg, installed=installed, schedule=sched, scope=scope)
    if not installed:
        events.emit(report.events, events.event("not-installed", reason=report.reason))
        text = errors.NOT_INSTALLED.format(reason=reason)
        warnings.warn(text, errors.PoolWarning, stacklevel=4)
        return report, None
    return report, _Install(cfg, harness, sched, bool(force), layout, report)


def _config(config: PoolConfig | None, fields: dict) -> PoolConfig:
    """The one config an install form asks for: ``config`` or its fields, never both."""
    if config is not None and fields:
        raise ValueError(errors.CONFIG_AND_FIELDS.format(fields=sorted(fields)))
    if config is not None and not isinstance(config, PoolConfig):
        raise ValueError(errors.NOT_A_CONFIG.format(kind=type(config).__name__))
    known = [f.name for f in dataclasses.fields(PoolConfig)]
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise ValueError(errors.NOT_A_FIELD.format(fields=unknown, known=known))
    return config if config is not None else PoolConfig(**fields)


def _check_schedule(schedule: Any) -> None:
    """An install form's ``schedule``: a name, a torch schedule class or instance, or None."""
    if schedule is None or isinstance(schedule, str):
        return
    kind = schedule if isinstance(schedule, type) else type(schedule)
    if not issubclass(kind, schedule_base()):
        raise ValueError(errors.NOT_A_SCHEDULE.format(kind=repr(schedule)))


def _layout() -> tuple[Layout | None, str]:
    """The layout install would use and why; None where pooltk does not recognise this torch."""
    found = detect()
    if found.layout is None:
        return None, found.reason
    layout = found.layout
    problems = signature_problems(stage_base(), runtime_names(layout))
    for target in layout.setup_targets:  # the microbatch count is read from them by name too
        problems += signature_problems(target.owner, (target.name,))
    if problems:
        unknown = f"found layout {layout.name!r} with stage methods pooltk does not know: "
        return None, unknown + "; ".join(problems)
    return found.layout, found.reason


def _acts(layout: Layout | None, reason: str, config: PoolConfig) -> tuple[bool, str]:
    """Whether pooltk acts on ``layout`` under ``config``, and why: on the lazy layout the
    last-stage release is all there is to do."""
    if layout is None:
        return False, reason
    if not layout.per_receive:
        return True, reason
    if config.release:
        return True, reason + "; pooltk installs the last-stage release alone"
    return False, reason + "; release=False leaves nothing to do here"


def uninstall() -> bool:
    """Put torch's own methods back; live pooled stages get stock buffers. True if anything was
    undone."""
    global _current
    with _LOCK:
        inst, _current = _current, None
        if inst is None:
            return False
        _undo(inst)
        for stage in list(inst.stages):
            give_back_stock(stage, inst, _UNINSTALLED)
        return True


def _undo(inst: _Install) -> None:
    for binding in reversed(inst.bindings):
        binding.undo()


def installed() -> InstallReport | None:
    """The process-wide install in force, or None."""
    return _current.report if _current is not None else None


@contextlib.contextmanager
def pooled(
    config: PoolConfig | None = None,
    *,
    schedule: str | None = "1f1b",
    force: bool = False,
    **fields: Any,
) -> Iterator[InstallReport]:
    """``with pooltk.pooled(slack=2) as report:`` install for the block, uninstall after."""
    with _LOCK:
        was = _current is not None
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
    """Pool one stage object (for code that builds its own stages), from its next setup; torch's
    classes are untouched."""
    return _pool_stage(stage, config, fields, schedule, force, None)


def _pool_stage(
    stage: Any,
    config: PoolConfig | None,
    fields: dict,
    schedule: str | None,
    force: bool,
    harness: Any,
) -> InstallReport:
    _check_schedule(schedule)
    with _LOCK:
        if _current is not None:
            raise ValueError(errors.STAGE_UNDER_PROCESS)
        report, inst = _prepare(config, fields, schedule, force, harness, "stage")
        refused = refusal(stage, None) if inst is not None else None
        if refused is not None:  # binding would bypass the subclass's own methods
            report = inst.report = InstallReport.of(
                inst.layout,
                refused,
                inst.config,
                installed=False,
                schedule=inst.schedule,
                scope="stage",
            )
            kept_stock(stage, inst, refused)
        elif inst is not None:
            _bind(inst, stage)
            state_for(stage, inst)
        return report


def unpool_stage(stage: Any) -> bool:
    """Remove what pool_stage bound on ``stage``; a ring it holds is replaced by stock buffers."""
    with _LOCK:
        binding = bound(stage, _TAG)
        if binding is None:
            return False
        binding.undo()
        state = stage_state(stage)
        give_back_stock(stage, state.install if state is not None else None, _UNPOOLED)
        return True


def probe() -> InstallReport:
    """What install() would do here (with the default config), without changing anything."""
    layout, reason = _layout()
    installed, reason = _acts(layout, reason, PoolConfig())
    return InstallReport.of(layout, reason, None, installed=installed, scope="probe")


def stage_rings(stage: Any) -> dict[str, Ring]:
    """The rings a stage holds now, by direction (empty for a stock stage)."""
    state = stage_state(stage)
    return dict(state.rings) if state is not None else {}
