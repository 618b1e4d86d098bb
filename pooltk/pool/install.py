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
manager, which uninstalls on exit). Every wrapper carries ``__pooltk_original__``, so a
wrapper left by another copy of this module (an ``importlib.reload`` in a notebook, a second
copy of the package) is recognised: ``install()`` refuses to nest on top of it, and
``uninstall()`` from any copy removes it and puts torch's own function back.

[Note: fail-open only for unknown layouts]
pooltk stands down (``installed=False``, a warning, nothing changed) only when it does not
recognise this torch's layout. Inside a recognised layout an error is a pooltk bug or a
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
import functools
import logging
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from pooltk.config import PoolConfig
from pooltk.pool.adapters import OPTIONAL_HOT_METHODS, HOT_METHODS, Layout, SetupTarget, detect
from pooltk.pool.events import PoolEvent, emit
from pooltk.pool.gating import GateDecision, PoolSetupError, decide, normalize_schedule_name, refusal
from pooltk.pool.ring import DirectionRing, Rehome, recv_positions
from pooltk.pool.sizing import ring_sizes

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
    events: list = field(default_factory=list, compare=False)
    """Every decision and per-stage outcome since this install, in order (:class:`PoolEvent`):
    pooled with which rings, kept stock and why, slots re-homed by copy on conflict. The same
    lines go to the ``pooltk`` logger on rank 0 (see [Note: pool log lines] in events.py)."""

    def stage_events(self, kind: str | None = None) -> list[PoolEvent]:
        """Per-stage events, optionally of one ``kind`` (``pooled``, ``kept-stock``, ``re-homed``)."""
        return [e for e in self.events if e.stage is not None and (kind is None or e.kind == kind)]

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
            "events": [e.to_dict() for e in self.events],
        }


@dataclass(slots=True)
class _Settings:
    config: PoolConfig
    schedule: str | None
    force: bool


@dataclass(slots=True)
class _Context:
    """What a wrapper needs: the settings it pools with, and the report it records into."""

    settings: _Settings
    report: InstallReport


@dataclass(slots=True)
class _ProcessState:
    report: InstallReport | None = None
    settings: _Settings | None = None
    # (owner class, attribute name, original object or _MISSING)
    originals: list[tuple[type, str, Any]] = field(default_factory=list)
    stages: "weakref.WeakSet[Any]" = field(default_factory=weakref.WeakSet)
    """Live stages that hold a ring (given stock buffers back at uninstall)."""


_MISSING = object()
_STATE = _ProcessState()
_LOCK = threading.RLock()
_WARNED: set[str] = set()
"""Warnings already raised since the last install/uninstall (reset by both)."""


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, PoolWarning, stacklevel=3)


def _torch_version() -> str:
    return str(getattr(torch, "__version__", "unknown"))


def _is_pooltk_wrapper(obj: Any) -> bool:
    return hasattr(obj, "__pooltk_original__")


def _innermost(obj: Any) -> Any:
    seen = 0
    while _is_pooltk_wrapper(obj) and seen < 64:
        obj, seen = obj.__pooltk_original__, seen + 1
    return obj


# ---------------------------------------------------------------------------------------
# Lazy buffer factory (alloc-free setup)
# ---------------------------------------------------------------------------------------


class _PlaceholderFactory:
    """Swaps ``stage._make_tensor_from_meta`` during one setup call for a shape-only maker.

    Placeholders live on the ``meta`` device (no storage). After the call the ring makes
    real tensors for its K sets with torch's own factory, and every placeholder the ring
    does not take is made real (stock); see [Note: what install does]. The swap happens
    under the install lock; the maker is marked, so a maker left by another copy of pooltk
    is seen through to torch's own factory rather than nested.
    """

    def __init__(self) -> None:
        from torch.distributed.pipelining import stage as stage_mod

        self._mod = stage_mod
        self._orig = _innermost(stage_mod._make_tensor_from_meta)
        self._saved: Any = None
        self.made: dict[int, tuple[Any, Any]] = {}  # id(placeholder) -> (meta, device)

    def __enter__(self) -> "_PlaceholderFactory":
        orig, made = self._orig, self.made

        def make_placeholder(meta: Any, device: Any) -> torch.Tensor:
            t = orig(meta, torch.device("meta"))
            made[id(t)] = (meta, device)
            return t

        make_placeholder.__pooltk_original__ = orig  # type: ignore[attr-defined]
        self._saved = self._mod._make_tensor_from_meta
        self._mod._make_tensor_from_meta = make_placeholder
        return self

    def __exit__(self, *exc: object) -> None:
        self._mod._make_tensor_from_meta = self._saved

    def is_placeholder(self, t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_meta and id(t) in self.made

    def real(self, placeholder: torch.Tensor) -> torch.Tensor:
        meta, device = self.made[id(placeholder)]
        return self._orig(meta, device)


def _materialize_all(infos_by_chunk: dict[int, tuple], factory: _PlaceholderFactory | None) -> None:
    """Give every placeholder a real buffer (stock behaviour for a direction without a ring)."""
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


def _ring_size(stage: Any, direction: str, n_mb: int, config: PoolConfig, plan: Any) -> int:
    if plan is not None:  # schedule="auto": sizes from the schedule's analysis
        return plan.sizes.get((stage.stage_index, direction), 0)
    sizes = ring_sizes(stage.num_stages, stage.stage_index, n_mb, config)
    return sizes.forward if direction == "forward" else sizes.grad


def _build_ring(
    stage: Any, target: SetupTarget, n_mb: int, config: PoolConfig, factory: _PlaceholderFactory | None,
    plan: Any = None, on_rehome: Callable[[Rehome], None] | None = None,
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
    k = _ring_size(stage, target.direction, n_mb, config, plan)
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
        on_rehome=on_rehome,
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
# Per-stage outcomes (see [Note: pool log lines] in events.py)
# ---------------------------------------------------------------------------------------


def _kept_stock(stage: Any, report: InstallReport | None, reason: str) -> None:
    """Record (once per stage and reason) that ``stage`` keeps torch's buffers, and why."""
    seen = stage.__dict__.setdefault("_pooltk_said", set())
    if ("stock", reason) in seen:
        return
    seen.add(("stock", reason))
    idx = getattr(stage, "stage_index", "?")
    emit(report.events if report is not None else None, PoolEvent(
        kind="kept-stock", stage=idx if isinstance(idx, int) else None, level=logging.WARNING,
        message=f"pooltk: stage {idx} kept stock (reason={reason})", fields={"reason": reason}))


def _pooled_line(stage: Any, report: InstallReport | None) -> None:
    """Log ``stage I pooled (fwd ring K/M, grad ring K/M)`` once per distinct ring shape."""
    d = stage.__dict__
    n_mb = d.get("_pooltk_mb")
    if n_mb is None:
        return
    sizes = []
    for direction, attr in (("forward", "args_recv_info"), ("grad", "grad_recv_info")):
        ring = d.get(_RING_ATTR[direction])
        if ring is not None:
            sizes.append(ring.size)
            continue
        infos = getattr(stage, attr, None) or {}
        first = infos.get(0) if isinstance(infos, dict) else None
        sizes.append(n_mb if first and recv_positions(first) else 0)
    if not any(_RING_ATTR[x] in d for x in ("forward", "grad")):
        return
    key = ("pooled", n_mb, tuple(sizes))
    seen = d.setdefault("_pooltk_said", set())
    if key in seen:
        return
    seen.add(key)
    emit(report.events if report is not None else None, PoolEvent(
        kind="pooled", stage=stage.stage_index,
        message=f"pooltk: stage {stage.stage_index} pooled (fwd ring {sizes[0]}/{n_mb}, grad ring {sizes[1]}/{n_mb})",
        fields={"forward": sizes[0], "grad": sizes[1], "n_microbatches": n_mb}))


def _rehome_reporter(stage: Any, report: InstallReport | None) -> Callable[[Rehome], None]:
    def on_rehome(ev: Rehome) -> None:
        first = (ev.direction,) not in stage.__dict__.setdefault("_pooltk_rehomed", set())
        stage.__dict__["_pooltk_rehomed"].add((ev.direction,))
        why = ("the previous microbatch's " + ("output" if ev.direction == "forward" else "input gradient")
               + " shares it" if ev.lent else f"{ev.holders} reference(s) outside the pool still hold it")
        msg = (f"pooltk: stage {ev.stage} {ev.direction} slot {ev.slot} re-homed ({ev.nbytes} bytes): {why} when "
               f"microbatch {ev.incoming} posts its receive (a stage output or input gradient that is a view of a "
               "received buffer, or a tensor kept by a hook); the holders keep the old storage and the slot gets "
               "a fresh one (copy on conflict). Later re-homes of this ring are logged at DEBUG and counted.")
        emit(report.events if report is not None else None, PoolEvent(
            kind="re-homed", stage=ev.stage, level=logging.WARNING if first else logging.DEBUG, message=msg,
            fields={"direction": ev.direction, "slot": ev.slot, "position": ev.position, "bytes": ev.nbytes,
                    "incoming": ev.incoming, "holders": ev.holders, "lent": ev.lent}))

    return on_rehome


# ---------------------------------------------------------------------------------------
# Wrappers
# ---------------------------------------------------------------------------------------

ContextFn = Callable[[Any], "_Context | None"]


def _setup_wrapper(original: Callable, target: SetupTarget, context_of: ContextFn) -> Callable:
    @functools.wraps(original)
    def pooltk_setup(self: Any, *args: Any, **kwargs: Any) -> Any:
        ctx = context_of(self)
        if ctx is None:
            return original(self, *args, **kwargs)
        settings, report = ctx.settings, ctx.report
        try:
            decision: GateDecision = decide(install_schedule=settings.schedule, force=settings.force,
                                            config=settings.config, stage=self)
        except PoolSetupError as exc:
            exc.stage, exc.direction = getattr(self, "stage_index", None), target.direction
            raise
        d = self.__dict__
        d["_pooltk_gate"] = decision
        d["_pooltk_report"] = report
        if not decision.pool:
            _set_ring(self, target.direction, None)
            _kept_stock(self, report, decision.reason)
            return original(self, *args, **kwargs)
        n_mb = _num_microbatches(args, kwargs)
        d["_pooltk_mb"] = n_mb
        with _LOCK:
            factory = _PlaceholderFactory() if target.alloc_free else None
            if factory is not None:
                with factory:
                    result = original(self, *args, **kwargs)
            else:
                result = original(self, *args, **kwargs)
        infos = getattr(self, target.infos_attr, {})
        try:
            ring = _build_ring(self, target, n_mb, settings.config, factory, decision.plan,
                               on_rehome=_rehome_reporter(self, report))
            _materialize_all(infos, factory)  # directions and positions without a ring are stock
        except Exception as exc:  # inside a recognised layout: loud, see [Note: fail-open only for unknown layouts]
            raise PoolSetupError(stage=getattr(self, "stage_index", None), direction=target.direction, cause=exc,
                                 what=f"building the {target.direction} ring") from exc
        _set_ring(self, target.direction, ring)
        if ring is not None:
            _track_stage(self)
        d["_pooltk_pending"] = True
        return result

    pooltk_setup.__pooltk_original__ = original  # type: ignore[attr-defined]
    return pooltk_setup


def _track_stage(stage: Any) -> None:
    """Remember a live stage that holds a ring (weakly), so uninstall can give it stock buffers."""
    with _LOCK:
        _STATE.stages.add(stage)


def _chunk_arg(args: tuple, kwargs: dict) -> int:
    if args:
        return args[0]
    for key in ("fwd_chunk_id", "bwd_chunk_id", "chunk_id", "mb_index"):
        if key in kwargs:
            return kwargs[key]
    raise TypeError("pooltk: cannot find the microbatch index argument")


def _first_use(stage: Any, report_of: Callable[[Any], InstallReport | None]) -> None:
    """Once per setup: log the stage's rings; or, for a stage never set up under pooltk, say so."""
    d = stage.__dict__
    if d.pop("_pooltk_pending", False):
        _pooled_line(stage, d.get("_pooltk_report"))
        return
    if "_pooltk_gate" not in d and "_pooltk_late" not in d:
        d["_pooltk_late"] = True
        report = report_of(stage)
        if report is not None and report.installed and getattr(stage, "args_recv_info", None):
            _kept_stock(stage, report, (
                "set up before pooltk.install(): its receive buffers are torch's (M sets) until its next setup "
                "(an eval/train switch). Fix: call pooltk.install() before the schedule's first step"))


def _hot_wrappers(originals: dict[str, Callable], report_of: Callable[[Any], InstallReport | None]) -> dict[str, Callable]:
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
        d = self.__dict__
        if "_pooltk_seen" not in d or d.get("_pooltk_pending"):
            d["_pooltk_seen"] = True
            _first_use(self, report_of)
        result = fwd_one(self, *args, **kwargs)
        ring = d.get("_pooltk_forward")
        if ring is not None:
            chunk = _chunk_arg(args, kwargs)
            cached = self.fwd_cache.get(chunk)
            if cached is not None:
                ring.note_lent(chunk, cached[0])  # outputs sharing the slot: see [Note: copy on conflict]
            if not self.has_backward:
                if cached is not None:  # never read again in a forward-only step
                    ring.retire_inputs(chunk, cached[1])
                ring.release(chunk)
        return result

    out["forward_one_chunk"] = forward_one_chunk

    bwd_one = originals["backward_one_chunk"]

    @functools.wraps(bwd_one)
    def backward_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = bwd_one(self, *args, **kwargs)
        d = self.__dict__
        ring_f, ring_g = d.get("_pooltk_forward"), d.get("_pooltk_grad")
        if (ring_f is not None or ring_g is not None) and self.has_backward:
            if ring_g is not None:  # input gradients sharing the grad slot: see [Note: copy on conflict]
                ring_g.note_lent(_chunk_arg(args, kwargs), self.bwd_cache.get(_chunk_arg(args, kwargs), ()))
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


def _patch_sites(layout: Layout) -> list[tuple[type, str]]:
    """Every (class, attribute) install patches for ``layout``."""
    base, originals = _hot_originals(layout)
    sites = [(t.owner, t.name) for t in layout.setup_targets]
    sites += [(_defining_class(base, name), name) for name in originals]
    return sites


def _foreign_wrappers(layout: Layout) -> list[tuple[type, str, Any]]:
    """pooltk wrappers on torch's classes that this copy of the module did not install."""
    mine = {(owner, name) for owner, name, _ in _STATE.originals}
    found = []
    for owner, name in _patch_sites(layout):
        fn = owner.__dict__.get(name)
        if _is_pooltk_wrapper(fn) and (owner, name) not in mine:
            found.append((owner, name, fn))
    return found


def _give_back_stock_buffers(stage: Any, report: InstallReport | None, why: str) -> bool:
    """Replace a live stage's rings by stock buffers (one fresh set per microbatch); True if it had any."""
    d = stage.__dict__
    had = False
    for direction, attr in _RING_ATTR.items():
        ring = d.pop(attr, None)
        if ring is None:
            continue
        had = True
        infos_by_chunk = getattr(stage, "args_recv_info" if direction == "forward" else "grad_recv_info", {})
        for chunk, infos in infos_by_chunk.items():
            for k, j in enumerate(ring.positions):
                old = infos[j].buffer
                if not isinstance(old, torch.Tensor):
                    continue
                fresh = torch.empty_like(ring.slots[chunk % ring.size][k])
                if getattr(old, "requires_grad", False):
                    fresh.requires_grad_(True)
                infos[j].buffer = fresh
    for key in ("_pooltk_gate", "_pooltk_pending", "_pooltk_mb"):
        d.pop(key, None)
    if had:
        _kept_stock(stage, report, why)
    return had


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


def _installed_line(cfg: PoolConfig, sched: str | None, layout: str) -> str:
    return (f"pooltk: installed (policy={cfg.policy}, slack={cfg.slack}, grad_slack={cfg.grad_slack}, "
            f"schedule={sched}, layout={layout})")


def _not_installed(report: InstallReport) -> InstallReport:
    emit(report.events, PoolEvent(kind="not-installed", level=logging.WARNING,
                                  message=f"pooltk: not installed (reason={report.reason})",
                                  fields={"reason": report.reason}))
    _warn_once(f"pooltk: not installed: {report.reason}")
    return report


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
        WARNING log line) when this torch's layout is unknown or already keeps only live
        buffers. Its ``events`` grow as stages are set up (see [Note: pool log lines]).

    Raises:
        ValueError: bad config values; pooltk is already installed with different settings
            (see [Note: installing twice]); or another copy of pooltk's wrappers is in place.
    """
    cfg = _resolve_config(config, fields)
    _check_force(cfg, force)
    sched = normalize_schedule_name(schedule)
    wanted = _Settings(config=cfg, schedule=sched, force=bool(force))
    with _LOCK:
        if _STATE.report is not None and _STATE.report.installed:
            if _STATE.settings == wanted:
                return _STATE.report
            current = _STATE.report
            raise ValueError(
                f"pooltk is already installed with {current.config.describe() if current.config else None}, "
                f"schedule={current.schedule!r}, force={current.force}; found a second install with "
                f"{cfg.describe()}, schedule={sched!r}, force={bool(force)}. Fix: call pooltk.uninstall() first, "
                "or use the pooltk.pooled(...) context manager. See [Note: installing twice] in pooltk/pool/install.py."
            )
        _WARNED.clear()
        detection = detect()
        layout = detection.layout
        if layout is None or layout.stands_down:
            return _not_installed(InstallReport(
                installed=False, layout=layout.name if layout else None, reason=detection.reason,
                torch_version=_torch_version(), config=cfg, schedule=sched, force=bool(force)))
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
        report = InstallReport(
            installed=True, layout=layout.name, reason=detection.reason, torch_version=_torch_version(),
            config=cfg, schedule=sched, force=bool(force),
            alloc_free=all(t.alloc_free for t in layout.setup_targets),
        )
        base, hot_originals = _hot_originals(layout)
        wrappers = _hot_wrappers(hot_originals, lambda _stage: _STATE.report)
        context = _Context(settings=wanted, report=report)

        def context_of(_stage: Any) -> _Context | None:
            return context if _STATE.report is report else None

        patches: list[tuple[type, str, Callable]] = []
        for target in layout.setup_targets:
            original = target.owner.__dict__[target.name]
            patches.append((target.owner, target.name, _setup_wrapper(original, target, context_of)))
        for name, fn in wrappers.items():
            patches.append((_defining_class(base, name), name, fn))
        originals: list[tuple[type, str, Any]] = []
        for owner, name, fn in patches:
            originals.append((owner, name, owner.__dict__.get(name, _MISSING)))
            setattr(owner, name, fn)
        _STATE.originals = originals
        _STATE.settings = wanted
        _STATE.report = report
        emit(report.events, PoolEvent(kind="installed", message=_installed_line(cfg, sched, layout.name),
                                      fields={"policy": cfg.policy, "slack": cfg.slack, "grad_slack": cfg.grad_slack,
                                              "schedule": sched, "layout": layout.name}))
        return report


def uninstall() -> bool:
    """Restore every wrapped method to torch's original function object. Returns True if anything was undone.

    Also removes pooltk wrappers left by another copy of this module (see [Note: installing
    twice]); and every live stage that holds a ring gets stock buffers back at once, reported
    as ``kept stock`` (see [Note: install state and late stages]).
    """
    with _LOCK:
        report = _STATE.report
        undone = bool(_STATE.originals)
        for owner, name, original in reversed(_STATE.originals):
            if original is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        _STATE.originals, _STATE.report, _STATE.settings = [], None, None
        detection = detect()
        if detection.layout is not None and not detection.layout.stands_down:
            for owner, name, fn in _foreign_wrappers(detection.layout):
                setattr(owner, name, _innermost(fn))
                undone = True
            from torch.distributed.pipelining import stage as stage_mod

            maker = getattr(stage_mod, "_make_tensor_from_meta", None)
            if _is_pooltk_wrapper(maker):
                stage_mod._make_tensor_from_meta = _innermost(maker)
                undone = True
        for stage in list(_STATE.stages):
            _give_back_stock_buffers(stage, report, "pooltk.uninstall() while the stage was set up: its rings were "
                                     "replaced by stock buffers (one set per microbatch), so no ring runs unguarded")
        _STATE.stages = weakref.WeakSet()
        _WARNED.clear()
        return undone


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
    with _LOCK:
        if _STATE.report is not None and _STATE.report.installed:
            raise ValueError(
                "pool_stage: pooltk is already installed process-wide, which pools every stage. "
                "Fix: use one form: pooltk.uninstall() then pool_stage(...), or rely on the process-wide install."
            )
        detection = detect()
        layout = detection.layout
        sched = normalize_schedule_name(schedule)
        if layout is None or layout.stands_down:
            return _not_installed(InstallReport(
                installed=False, layout=layout.name if layout else None, reason=detection.reason,
                torch_version=_torch_version(), config=cfg, schedule=sched, force=bool(force), scope="stage"))
        refused = refusal(stage, None)
        if refused is not None:  # binding would bypass the subclass's own methods: see [Note: refusals]
            report = InstallReport(installed=False, layout=layout.name, reason=refused, torch_version=_torch_version(),
                                   config=cfg, schedule=sched, force=bool(force), scope="stage")
            _kept_stock(stage, report, refused)
            return report
        report = InstallReport(
            installed=True, layout=layout.name, reason=detection.reason, torch_version=_torch_version(), config=cfg,
            schedule=sched, force=bool(force), alloc_free=all(t.alloc_free for t in layout.setup_targets),
            scope="stage",
        )
        context = _Context(settings=_Settings(config=cfg, schedule=sched, force=bool(force)), report=report)
        base, hot_originals = _hot_originals(layout)
        bound: dict[str, Callable] = dict(_hot_wrappers({n: _innermost(f) for n, f in hot_originals.items()},
                                                        lambda _s: report))
        for target in layout.setup_targets:
            if isinstance(stage, target.owner):
                bound[target.name] = _setup_wrapper(_innermost(target.owner.__dict__[target.name]), target,
                                                    lambda _s: context)
        for name, fn in bound.items():
            stage.__dict__[name] = types.MethodType(fn, stage)
        stage.__dict__["_pooltk_instance_methods"] = tuple(bound)
        stage.__dict__["_pooltk_report"] = report
        return report


def unpool_stage(stage: Any) -> bool:
    """Remove what pool_stage bound on ``stage``; a ring it holds is replaced by stock buffers now."""
    with _LOCK:
        names = stage.__dict__.pop("_pooltk_instance_methods", ())
        for name in names:
            stage.__dict__.pop(name, None)
        _give_back_stock_buffers(stage, stage.__dict__.get("_pooltk_report"),
                                 "pooltk.unpool_stage(): its rings were replaced by stock buffers")
        return bool(names)


def stage_rings(stage: Any) -> dict[str, DirectionRing]:
    """The rings a stage holds now, by direction (empty for a stock stage)."""
    return {d: stage.__dict__[a] for d, a in _RING_ATTR.items() if a in stage.__dict__}
