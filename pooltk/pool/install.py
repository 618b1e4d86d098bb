"""Class-level patching of torch's pipeline stages, its exact undo, and the per-stage form.

[Note: what install does]
``install()`` detects the layout (:mod:`pooltk.pool.adapters`), then wraps, on the classes that
define them:

- the setup methods that make receive buffers (per layout): after the original runs,
  the stage's recv-info map is rebound onto a ring of K sets (:class:`pooltk.pool.ring.DirectionRing`);
  where the layout allows, torch's buffer factory is swapped during the call for one that
  makes shape-only placeholders, so only the K real sets are ever allocated;
- the runtime methods (``get_fwd_recv_ops`` / ``get_bwd_recv_ops`` claim a slot and hand
  out a fresh alias; ``forward_one_chunk`` / ``backward_one_chunk`` /
  ``backward_weight_one_chunk`` release it; ``clear_runtime_states`` resets ownership).

Wrappers do nothing for a stage that has no ring, so stock stages pay one dict lookup.
Setup is wrapped (not patched once) because a schedule reruns it on an eval/train switch.
``uninstall()`` puts the original function objects back (identity, not copies).

[Note: installing twice]
``install()`` with the same config, schedule and force is a no-op returning the current
report. With anything different it raises ``ValueError``: stages already set up hold
rings sized by the first config, and silently mixing two configs in one process would
make the memory report lie. Call ``uninstall()`` first (or use the ``pooled()`` context
manager, which uninstalls on exit).
"""

from __future__ import annotations

import contextlib
import functools
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from pooltk.pool.adapters import OPTIONAL_HOT_METHODS, HOT_METHODS, Layout, SetupTarget, detect
from pooltk.config import PoolConfig
from pooltk.pool.gating import GateDecision, decide, normalize_schedule_name
from pooltk.pool.ring import DirectionRing, recv_positions
from pooltk.pool.sizing import ring_sizes

__all__ = [
    "InstallReport",
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


class PoolWarning(UserWarning):
    """pooltk left stock behaviour in place (unknown torch layout, schedule not allowlisted, ...)."""


@dataclass(frozen=True, slots=True)
class InstallReport:
    """What ``install()`` / ``pool_stage()`` / ``probe()`` found and did."""

    installed: bool
    """True when the pool is active (receive buffers will be pooled for allowlisted schedules)."""
    layout: str | None
    """Layout family detected (``prepare-infra``, ``setup-recv-info``, ``lazy``) or None."""
    reason: str
    """Why: the layout's description when installed, else why not."""
    torch_version: str
    config: PoolConfig | None = None
    schedule: str | None = None
    """Schedule name given at install (the observed schedule decides per stage where visible)."""
    force: bool = False
    alloc_free: bool = False
    """True when only K buffer sets are ever allocated (no transient of all M at setup)."""
    scope: str = "process"
    """``process`` (class-level install), ``stage`` (one stage object) or ``probe``."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "installed": self.installed,
            "layout": self.layout,
            "reason": self.reason,
            "torch_version": self.torch_version,
            "config": self.config.to_dict() if self.config else None,
            "schedule": self.schedule,
            "force": self.force,
            "alloc_free": self.alloc_free,
            "scope": self.scope,
        }


@dataclass(slots=True)
class _Settings:
    config: PoolConfig
    schedule: str | None
    force: bool


@dataclass(slots=True)
class _ProcessState:
    report: InstallReport | None = None
    settings: _Settings | None = None
    # (owner class, attribute name, original object or _MISSING)
    originals: list[tuple[type, str, Any]] = field(default_factory=list)


_MISSING = object()
_STATE = _ProcessState()
_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, PoolWarning, stacklevel=3)


def _torch_version() -> str:
    return str(getattr(torch, "__version__", "unknown"))


# ---------------------------------------------------------------------------------------
# Lazy buffer factory (alloc-free setup)
# ---------------------------------------------------------------------------------------


class _PlaceholderFactory:
    """Swaps ``stage._make_tensor_from_meta`` during one setup call for a shape-only maker.

    Placeholders live on the ``meta`` device (no storage). After the call the ring makes
    real tensors for its K sets with torch's own factory; see [Note: what install does].
    """

    def __init__(self) -> None:
        from torch.distributed.pipelining import stage as stage_mod

        self._mod = stage_mod
        self._orig = stage_mod._make_tensor_from_meta
        self.made: dict[int, tuple[Any, Any]] = {}  # id(placeholder) -> (meta, device)

    def __enter__(self) -> "_PlaceholderFactory":
        orig, made = self._orig, self.made

        def make_placeholder(meta: Any, device: Any) -> torch.Tensor:
            t = orig(meta, torch.device("meta"))
            made[id(t)] = (meta, device)
            return t

        self._mod._make_tensor_from_meta = make_placeholder
        return self

    def __exit__(self, *exc: object) -> None:
        self._mod._make_tensor_from_meta = self._orig

    def is_placeholder(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_meta and id(t) in self.made

    def real(self, placeholder: torch.Tensor) -> torch.Tensor:
        meta, device = self.made[id(placeholder)]
        return self._orig(meta, device)


def _materialize_all(infos_by_chunk: dict[int, tuple], factory: _PlaceholderFactory | None) -> None:
    """Fail-open: give every placeholder a real buffer (stock behaviour)."""
    if factory is None:
        return
    for infos in infos_by_chunk.values():
        for info in infos:
            buf = getattr(info, "buffer", None)
            if factory.is_placeholder(buf):
                real = factory.real(buf)
                if buf.requires_grad:
                    real.requires_grad_(True)
                info.buffer = real


def _num_microbatches(args: tuple, kwargs: dict) -> int:
    if args:
        return int(args[0])
    return int(kwargs["num_microbatches"])


def _build_ring(
    stage: Any, target: SetupTarget, n_mb: int, config: PoolConfig, factory: _PlaceholderFactory | None,
    plan: Any = None,
) -> DirectionRing | None:
    infos_by_chunk: dict[int, tuple] = getattr(stage, target.infos_attr)
    n_mb = len(infos_by_chunk) or n_mb
    if not infos_by_chunk:
        return None
    positions = recv_positions(infos_by_chunk[0])
    if not positions:
        return None  # first stage (root args) forward, or last stage grads
    if any(len(infos_by_chunk[c]) != len(infos_by_chunk[0]) for c in range(n_mb)):
        raise RuntimeError("recv infos differ in structure between microbatches")
    if plan is not None:  # schedule="auto": sizes from the schedule's analysis
        k = plan.sizes.get((stage.stage_index, target.direction), 0)
    else:
        sizes = ring_sizes(stage.num_stages, stage.stage_index, n_mb, config)
        k = sizes.forward if target.direction == "forward" else sizes.grad
    if k <= 0:
        return None
    slots: list[list[torch.Tensor]] = []
    for s in range(k):
        tensors = []
        for j in positions:
            buf = infos_by_chunk[s][j].buffer
            tensors.append(factory.real(buf) if factory is not None and factory.is_placeholder(buf) else buf.detach())
        slots.append(tensors)
    ring = DirectionRing(
        stage=stage.stage_index,
        direction=target.direction,
        size=k,
        n_microbatches=n_mb,
        positions=positions,
        slots=slots,
        guard=config.guard,
    )
    ring.bind(infos_by_chunk)
    return ring


_RING_ATTR = {"forward": "_pooltk_forward", "grad": "_pooltk_grad"}


def _set_ring(stage: Any, direction: str, ring: DirectionRing | None) -> None:
    attr = _RING_ATTR[direction]
    if ring is None:
        stage.__dict__.pop(attr, None)
    else:
        stage.__dict__[attr] = ring


# ---------------------------------------------------------------------------------------
# Wrappers
# ---------------------------------------------------------------------------------------

SettingsFn = Callable[[Any], "_Settings | None"]


def _setup_wrapper(original: Callable, target: SetupTarget, settings_of: SettingsFn) -> Callable:
    @functools.wraps(original)
    def pooltk_setup(self: Any, *args: Any, **kwargs: Any) -> Any:
        settings = settings_of(self)
        if settings is None:
            return original(self, *args, **kwargs)
        decision: GateDecision = decide(install_schedule=settings.schedule, force=settings.force,
                                        config=settings.config)
        self.__dict__["_pooltk_gate"] = decision
        if not decision.pool:
            _warn_once(f"pooltk: {decision.reason}")
            _set_ring(self, target.direction, None)
            return original(self, *args, **kwargs)
        n_mb = _num_microbatches(args, kwargs)
        factory = _PlaceholderFactory() if target.alloc_free else None
        if factory is not None:
            with factory:
                result = original(self, *args, **kwargs)
        else:
            result = original(self, *args, **kwargs)
        try:
            ring = _build_ring(self, target, n_mb, settings.config, factory, decision.plan)
        except Exception as exc:  # fail open: stock buffers, one warning
            _materialize_all(getattr(self, target.infos_attr, {}), factory)
            _warn_once(f"pooltk: could not pool {target.direction} buffers of stage {self.stage_index} "
                       f"({type(exc).__name__}: {exc}); stock buffers kept")
            ring = None
        _set_ring(self, target.direction, ring)
        return result

    pooltk_setup.__pooltk_original__ = original  # type: ignore[attr-defined]
    return pooltk_setup


def _chunk_arg(args: tuple, kwargs: dict) -> int:
    if args:
        return args[0]
    for key in ("fwd_chunk_id", "bwd_chunk_id", "chunk_id", "mb_index"):
        if key in kwargs:
            return kwargs[key]
    raise TypeError("pooltk: cannot find the microbatch index argument")


def _hot_wrappers(originals: dict[str, Callable]) -> dict[str, Callable]:
    """Runtime wrappers; each is a no-op pass-through for stages without a ring."""
    out: dict[str, Callable] = {}

    get_fwd = originals["get_fwd_recv_ops"]

    @functools.wraps(get_fwd)
    def get_fwd_recv_ops(self: Any, *args: Any, **kwargs: Any) -> Any:
        ring = self.__dict__.get("_pooltk_forward")
        if ring is not None:
            chunk = _chunk_arg(args, kwargs)
            ring.post(chunk, self.args_recv_info[chunk])
        return get_fwd(self, *args, **kwargs)

    out["get_fwd_recv_ops"] = get_fwd_recv_ops

    get_bwd = originals["get_bwd_recv_ops"]

    @functools.wraps(get_bwd)
    def get_bwd_recv_ops(self: Any, *args: Any, **kwargs: Any) -> Any:
        ring = self.__dict__.get("_pooltk_grad")
        if ring is not None and self.has_backward:
            chunk = _chunk_arg(args, kwargs)
            ring.post(chunk, self.grad_recv_info[chunk])
        return get_bwd(self, *args, **kwargs)

    out["get_bwd_recv_ops"] = get_bwd_recv_ops

    fwd_one = originals["forward_one_chunk"]

    @functools.wraps(fwd_one)
    def forward_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = fwd_one(self, *args, **kwargs)
        ring = self.__dict__.get("_pooltk_forward")
        if ring is not None and not self.has_backward:
            ring.release(_chunk_arg(args, kwargs))
        return result

    out["forward_one_chunk"] = forward_one_chunk

    bwd_one = originals["backward_one_chunk"]

    @functools.wraps(bwd_one)
    def backward_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = bwd_one(self, *args, **kwargs)
        d = self.__dict__
        ring_f, ring_g = d.get("_pooltk_forward"), d.get("_pooltk_grad")
        if (ring_f is not None or ring_g is not None) and self.has_backward:
            full = kwargs.get("full_backward", args[2] if len(args) > 2 else True)
            if full:  # a split backward (I now, W later) keeps both until W: see [Note: slot ownership]
                chunk = _chunk_arg(args, kwargs)
                for ring in (ring_f, ring_g):
                    if ring is not None:
                        ring.release(chunk)
        return result

    out["backward_one_chunk"] = backward_one_chunk

    if "backward_weight_one_chunk" in originals:
        bwd_w = originals["backward_weight_one_chunk"]

        @functools.wraps(bwd_w)
        def backward_weight_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = bwd_w(self, *args, **kwargs)
            d = self.__dict__
            for attr in ("_pooltk_forward", "_pooltk_grad"):
                ring = d.get(attr)
                if ring is not None:
                    ring.release(_chunk_arg(args, kwargs))
            return result

        out["backward_weight_one_chunk"] = backward_weight_one_chunk

    clear = originals["clear_runtime_states"]

    @functools.wraps(clear)
    def clear_runtime_states(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = clear(self, *args, **kwargs)
        d = self.__dict__
        for attr in ("_pooltk_forward", "_pooltk_grad"):
            ring = d.get(attr)
            if ring is not None:
                ring.reset()
        return result

    out["clear_runtime_states"] = clear_runtime_states
    for fn in out.values():
        fn.__pooltk_original__ = originals[fn.__name__]  # type: ignore[attr-defined]
    return out


def _defining_class(base: type, name: str) -> type:
    for klass in base.__mro__:
        if name in klass.__dict__:
            return klass
    raise AttributeError(name)


def _hot_originals(layout: Layout) -> tuple[type, dict[str, Callable]]:
    from torch.distributed.pipelining import stage as stage_mod

    base = stage_mod._PipelineStageBase
    originals = {}
    for name in HOT_METHODS + OPTIONAL_HOT_METHODS:
        if callable(getattr(base, name, None)):
            originals[name] = _defining_class(base, name).__dict__[name]
    return base, originals


# ---------------------------------------------------------------------------------------
# Public surface
# ---------------------------------------------------------------------------------------


def probe() -> InstallReport:
    """What install() would do here, without changing anything."""
    detection = detect()
    layout = detection.layout
    if layout is None:
        return InstallReport(installed=False, layout=None, reason=detection.reason,
                             torch_version=_torch_version(), scope="probe")
    if layout.stands_down:
        return InstallReport(installed=False, layout=layout.name, reason=detection.reason,
                             torch_version=_torch_version(), scope="probe")
    return InstallReport(
        installed=True, layout=layout.name, reason=detection.reason, torch_version=_torch_version(),
        alloc_free=all(t.alloc_free for t in layout.setup_targets), scope="probe",
    )


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
        An :class:`InstallReport`; ``installed`` is False (with a :class:`PoolWarning`)
        when this torch's layout is unknown or already keeps only live buffers.

    Raises:
        ValueError: bad config values, or pooltk is already installed with different
            settings (see [Note: installing twice]).
    """
    cfg = _resolve_config(config, fields)
    _check_force(cfg, force)
    sched = normalize_schedule_name(schedule)
    wanted = _Settings(config=cfg, schedule=sched, force=bool(force))
    if _STATE.report is not None and _STATE.report.installed:
        if _STATE.settings == wanted:
            return _STATE.report
        current = _STATE.report
        raise ValueError(
            f"pooltk is already installed with {current.config.describe() if current.config else None}, "
            f"schedule={current.schedule!r}, force={current.force}; found a second install with {cfg.describe()}, "
            f"schedule={sched!r}, force={bool(force)}. Fix: call pooltk.uninstall() first, or use the "
            "pooltk.pooled(...) context manager. See [Note: installing twice] in pooltk/pool/install.py."
        )
    detection = detect()
    layout = detection.layout
    if layout is None or layout.stands_down:
        report = InstallReport(installed=False, layout=layout.name if layout else None, reason=detection.reason,
                               torch_version=_torch_version(), config=cfg, schedule=sched, force=bool(force))
        _warn_once(f"pooltk: not installed: {detection.reason}")
        return report
    base, hot_originals = _hot_originals(layout)
    wrappers = _hot_wrappers(hot_originals)

    def settings_of(_stage: Any) -> _Settings | None:
        return _STATE.settings

    patches: list[tuple[type, str, Callable]] = []
    for target in layout.setup_targets:
        original = target.owner.__dict__[target.name]
        patches.append((target.owner, target.name, _setup_wrapper(original, target, settings_of)))
    for name, fn in wrappers.items():
        patches.append((_defining_class(base, name), name, fn))
    originals: list[tuple[type, str, Any]] = []
    for owner, name, fn in patches:
        originals.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, fn)
    _STATE.originals = originals
    _STATE.settings = wanted
    _STATE.report = InstallReport(
        installed=True, layout=layout.name, reason=detection.reason, torch_version=_torch_version(), config=cfg,
        schedule=sched, force=bool(force), alloc_free=all(t.alloc_free for t in layout.setup_targets),
    )
    return _STATE.report


def uninstall() -> bool:
    """Restore every wrapped method to the original function object. Returns True if anything was undone.

    Stages already set up keep their rings until their next setup (which is then stock).
    """
    if not _STATE.originals:
        _STATE.report, _STATE.settings = None, None
        return False
    for owner, name, original in reversed(_STATE.originals):
        if original is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    _STATE.originals, _STATE.report, _STATE.settings = [], None, None
    return True


def installed() -> InstallReport | None:
    """The current process-wide install report, or None."""
    return _STATE.report


@contextlib.contextmanager
def pooled(
    config: PoolConfig | None = None, *, schedule: str | None = "1f1b", force: bool = False, **fields: Any
) -> Iterator[InstallReport]:
    """``with pooltk.pooled(slack=2) as report:`` install for the block, uninstall after."""
    was_installed = _STATE.report is not None
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
    if _STATE.report is not None and _STATE.report.installed:
        raise ValueError(
            "pool_stage: pooltk is already installed process-wide, which pools every stage. "
            "Fix: use one form: pooltk.uninstall() then pool_stage(...), or rely on the process-wide install."
        )
    detection = detect()
    layout = detection.layout
    sched = normalize_schedule_name(schedule)
    if layout is None or layout.stands_down:
        _warn_once(f"pooltk: not installed: {detection.reason}")
        return InstallReport(installed=False, layout=layout.name if layout else None, reason=detection.reason,
                             torch_version=_torch_version(), config=cfg, schedule=sched, force=bool(force),
                             scope="stage")
    settings = _Settings(config=cfg, schedule=sched, force=bool(force))
    base, hot_originals = _hot_originals(layout)
    bound: dict[str, Callable] = dict(_hot_wrappers(hot_originals))
    for target in layout.setup_targets:
        if isinstance(stage, target.owner):
            bound[target.name] = _setup_wrapper(target.owner.__dict__[target.name], target, lambda _s: settings)
    for name, fn in bound.items():
        stage.__dict__[name] = types.MethodType(fn, stage)
    stage.__dict__["_pooltk_instance_methods"] = tuple(bound)
    return InstallReport(
        installed=True, layout=layout.name, reason=detection.reason, torch_version=_torch_version(), config=cfg,
        schedule=sched, force=bool(force), alloc_free=all(t.alloc_free for t in layout.setup_targets), scope="stage",
    )


def unpool_stage(stage: Any) -> bool:
    """Remove what pool_stage bound on ``stage``; its next setup is stock."""
    names = stage.__dict__.pop("_pooltk_instance_methods", ())
    for name in names:
        stage.__dict__.pop(name, None)
    return bool(names)


def stage_rings(stage: Any) -> dict[str, DirectionRing]:
    """The rings a stage holds now, by direction (empty for a stock stage)."""
    return {d: stage.__dict__[a] for d, a in _RING_ATTR.items() if a in stage.__dict__}
