"""The wrappers torch's stage methods get: setup (build rings), post, compute (release), reset.

Wrappers do nothing for a stage the pool does not manage, so stock stages pay one dict lookup.
Setup is wrapped (not patched once) because a schedule reruns it on an eval/train switch. Every
torch name they touch comes from :mod:`pooltk.pool.adapters`; all state lives in one
:class:`~pooltk.pool.state.StageState` per stage ([Note: per-stage state]).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from pooltk.config import PoolConfig
from pooltk.pool import release as rel
from pooltk.pool.adapters import SetupTarget
from pooltk.pool.adapters.placeholders import PlaceholderFactory, materialize_all
from pooltk.pool.adapters.stage_api import RECV_INFO_ATTRS, cached_forward, call_arg
from pooltk.pool.events import (emit, handoff_event, kept_stock_event, no_saving_event, pooled_event, rehome_event,
                                shared_event, unpooled_event)
from pooltk.pool.gating import GateDecision, PoolSetupError, decide, observe_schedule, refusal
from pooltk.pool.guard import is_version_error, name_reuse
from pooltk.pool.handoff import drop_handed, drop_handoff_buffers, real_buffer, template
from pooltk.pool.marks import mark
from pooltk.pool.report import InstallReport
from pooltk.pool.ring import DirectionRing, Rehome, recv_positions
from pooltk.pool.sizing import live_set_1f1b, ring_sizes
from pooltk.pool.state import LOCK, STATE, Context, StageState, stage_state, state_for

__all__ = ["give_back_stock_buffers", "kept_stock", "runtime_wrappers", "setup_wrapper"]

ContextFn = Callable[[Any], "Context | None"]



# ---------------------------------------------------------------------------------------
# Rings
# ---------------------------------------------------------------------------------------


def _ring_size(stage: Any, direction: str, n_mb: int, config: PoolConfig, plan: Any) -> tuple[int, int]:
    """(K, the live set K was sized from) for one direction of ``stage``."""
    if plan is not None:  # schedule="auto": sizes from the schedule's analysis
        key = (stage.stage_index, direction)
        return plan.sizes.get(key, 0), plan.min_safe.get(key, 0)
    sizes = ring_sizes(stage.num_stages, stage.stage_index, n_mb, config)
    live = live_set_1f1b(stage.num_stages, stage.stage_index, n_mb)
    return (sizes.forward, live.forward) if direction == "forward" else (sizes.grad, live.grad)


def _real_like(buf: torch.Tensor, factory: PlaceholderFactory | None) -> torch.Tensor:
    """A real buffer of ``buf``'s kind (torch's own maker for a placeholder)."""
    return factory.real(buf) if factory is not None and factory.is_placeholder(buf) else torch.empty_like(buf)


def _ring_positions(infos_by_chunk: dict[int, tuple]) -> list[int]:
    """Positions of the recv infos that receive into a tensor (empty: nothing to pool), checked alike per chunk."""
    if not infos_by_chunk:
        return []
    positions = recv_positions(infos_by_chunk[0])
    if positions and any(len(infos) != len(infos_by_chunk[0]) for infos in infos_by_chunk.values()):
        raise RuntimeError("recv infos differ in structure between microbatches")
    return positions


def build_ring(
    stage: Any, target: SetupTarget, n_mb: int, config: PoolConfig, factory: PlaceholderFactory | None,
    plan: Any = None, on_rehome: Callable[[Rehome], None] | None = None, on_full: Callable | None = None,
) -> DirectionRing | None:
    """The ring for one direction of a stage just set up, bound onto its recv infos (None: stays stock)."""
    infos_by_chunk: dict[int, tuple] = getattr(stage, target.infos_attr)
    n_mb = len(infos_by_chunk) or n_mb
    positions = _ring_positions(infos_by_chunk)
    if not positions:
        return None  # first stage (root args) forward, or last stage grads
    k, live = _ring_size(stage, target.direction, n_mb, config, plan)
    if k <= 0:
        return None
    slots: list[list[torch.Tensor]] = []
    for s in range(k):
        tensors = []
        for j in positions:
            buf = infos_by_chunk[s][j].buffer
            tensors.append(factory.real(buf) if factory is not None and factory.is_placeholder(buf) else buf.detach())
        slots.append(tensors)
    ring = DirectionRing(stage=stage.stage_index, direction=target.direction, size=k, n_microbatches=n_mb,
                         positions=positions, slots=slots, guard=config.guard, live=live, on_rehome=on_rehome,
                         on_full=on_full)
    ring.bind(infos_by_chunk)
    return ring


@dataclass(slots=True)
class _Group:
    """The stages of one rank that share a ring (one direction, one boundary key) in one setup round."""

    plan: Any
    members: dict = field(default_factory=dict)
    """stage index -> (stage object, positions)."""
    ring: DirectionRing | None = None


def _boundary_key(infos_by_chunk: dict[int, tuple], positions: list[int], factory: PlaceholderFactory | None) -> tuple:
    return tuple(template(infos_by_chunk[0][j].buffer, factory) for j in positions)


def join_rank_ring(
    stage: Any, target: SetupTarget, n_mb: int, config: PoolConfig, factory: PlaceholderFactory | None,
    plan: Any, groups: dict, on_rehome: Callable[[Rehome], None] | None = None, on_full: Callable | None = None,
) -> DirectionRing | None:
    """Join the rank-shared ring of ``stage``'s boundary, rebuilding it over every member so far.

    See [Note: rank-shared rings] (pooltk/analysis/sharing.py). ``groups`` holds this schedule's
    groups; a stage that is already a member, or a plan that changed (an eval/train switch), starts a
    new setup round. Slots the previous ring of the group had are kept; only the extra ones are
    allocated. A group of one stage is that stage's own ``c mod K`` ring.
    """
    from pooltk.analysis.sharing import rank_rings

    infos_by_chunk: dict[int, tuple] = getattr(stage, target.infos_attr)
    positions = _ring_positions(infos_by_chunk)
    if not positions:
        return None
    direction, me = target.direction, stage.stage_index
    if plan.sizes.get((me, direction), 0) <= 0:
        return None
    key = (direction, _boundary_key(infos_by_chunk, positions, factory))
    group = groups.get(key)
    if group is None or me in group.members or group.plan is not plan:
        group = groups[key] = _Group(plan=plan)
    group.members[me] = (stage, positions)
    keys = {(s, direction): key for s in group.members}
    spans = [b for b in plan.spans if (b.stage, b.direction) in keys]
    (mine,) = [r for r in rank_rings(plan.program, spans, config, groups=keys) if me in r.stages]
    old = group.ring
    slots = list(old.slots[:mine.size]) if old is not None else []
    template = [infos_by_chunk[0][j].buffer for j in positions]
    while len(slots) < mine.size:
        slots.append([_real_like(t, factory) for t in template])
    first = min(group.members)
    ring = DirectionRing(stage=first, direction=direction, size=mine.size, n_microbatches=n_mb,
                         positions=group.members[first][1], slots=slots, guard=config.guard, live=mine.live,
                         on_rehome=on_rehome, on_full=on_full, slot_map=dict(mine.slots) if mine.shared else None)
    for s, (member, member_positions) in sorted(group.members.items()):
        ring.bind(getattr(member, target.infos_attr), stage=s, positions=member_positions)
        if member is not stage:
            state_for(member).set_ring(direction, ring)
    group.ring = ring
    return ring


# ---------------------------------------------------------------------------------------
# Per-stage outcomes, as log lines (the wording is events.py's)
# ---------------------------------------------------------------------------------------


def _sink(report: InstallReport | None) -> list | None:
    return report.events if report is not None else None


def kept_stock(stage: Any, report: InstallReport | None, reason: str) -> None:
    """Record (once per stage and reason) that ``stage`` keeps torch's buffers, and why."""
    st = state_for(stage)
    if ("stock", reason) in st.said:
        return
    st.said.add(("stock", reason))
    emit(_sink(report), kept_stock_event(getattr(stage, "stage_index", "?"), reason))


def _pooled_line(stage: Any, st: StageState) -> None:
    """Log ``stage I pooled (fwd ring K/M, grad ring K/M)`` once per distinct ring shape."""
    n_mb = st.n_microbatches
    if n_mb is None or not st.rings():
        return
    sizes = []
    for direction, attr in RECV_INFO_ATTRS.items():
        ring = st.ring(direction)
        if ring is not None:
            sizes.append(ring.size)
            continue
        if direction in st.handoff:
            sizes.append(0)
            continue
        infos = getattr(stage, attr, None) or {}
        first = infos.get(0) if isinstance(infos, dict) else None
        sizes.append(n_mb if first and recv_positions(first) else 0)
    key = ("pooled", n_mb, tuple(sizes))
    if key in st.said:
        return
    st.said.add(key)
    emit(_sink(st.report), pooled_event(stage.stage_index, sizes[0], sizes[1], n_mb))
    for direction, ring in st.rings().items():
        if ring.shared:
            emit(_sink(st.report), shared_event(stage.stage_index, direction, sorted(ring.members), ring.size,
                                                n_mb * len(ring.members)))
    for direction in st.handoff:
        emit(_sink(st.report), handoff_event(stage.stage_index, direction))


def _rehome_reporter(stage: Any, st: StageState) -> Callable[[Rehome], None]:
    def on_rehome(ev: Rehome) -> None:
        first = ev.direction not in st.rehomed
        st.rehomed.add(ev.direction)
        emit(_sink(st.report), rehome_event(stage=ev.stage, direction=ev.direction, slot=ev.slot,
                                            position=ev.position, incoming=ev.incoming, nbytes=ev.nbytes,
                                            holders=ev.holders, first=first, check=ev.why))

    return on_rehome


def _full_reporter(stage: Any, st: StageState) -> Callable[[DirectionRing, str], None]:
    """One WARNING per stage and direction when a ring comes to hold as much as stock (see events.no_saving_event)."""
    def on_full(ring: DirectionRing, why: str) -> None:
        key = ("no-saving", ring.direction)
        if key in st.said:
            return
        st.said.add(key)
        use = ring.usage(stage.stage_index)
        emit(_sink(st.report), no_saving_event(stage=stage.stage_index, direction=ring.direction,
                                               held=use.held_sets, stock=use.stock, ring=use.ring,
                                               rehomes=use.rehomes, check=why))

    return on_full


# ---------------------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------------------


def setup_wrapper(original: Callable, target: SetupTarget, context_of: ContextFn) -> Callable:
    """Wrap one setup method: decide, let torch set up (with placeholders), then build the ring."""

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
        st = state_for(self)
        st.gate, st.report = decision, report
        observed = observe_schedule()
        st.schedule = weakref.ref(observed) if observed is not None else None
        if not decision.pool:
            st.set_ring(target.direction, None)
            kept_stock(self, report, decision.reason)
            return original(self, *args, **kwargs)
        n_mb = int(call_arg_setup(args, kwargs))
        st.n_microbatches = n_mb
        factory = PlaceholderFactory() if target.alloc_free else None
        if factory is not None:
            with factory:  # this thread only, for this call: [Note: placeholders without patching]
                result = original(self, *args, **kwargs)
        else:
            result = original(self, *args, **kwargs)
        infos = getattr(self, target.infos_attr, {})
        plan, config = decision.plan, settings.config
        st.handoff.pop(target.direction, None)
        try:
            if plan is not None and (self.stage_index, target.direction) in plan.handoff:
                ring = None  # a same-rank handoff: no receive buffers ([Note: rank-shared rings])
                st.handoff[target.direction] = drop_handoff_buffers(self, target, factory)
            else:
                if plan is not None and config.sharing == "rank" and observed is not None:
                    ring = join_rank_ring(self, target, n_mb, config, factory, plan,
                                          ctx.groups.setdefault(observed, {}), on_rehome=_rehome_reporter(self, st),
                                          on_full=_full_reporter(self, st))
                else:
                    ring = build_ring(self, target, n_mb, config, factory, plan, on_rehome=_rehome_reporter(self, st),
                                      on_full=_full_reporter(self, st))
                materialize_all(infos, factory)  # directions and positions without a ring are stock
        except Exception as exc:  # inside a recognised layout: loud, see [Note: fail-open only for unknown layouts]
            raise PoolSetupError(stage=getattr(self, "stage_index", None), direction=target.direction, cause=exc,
                                 what=f"building the {target.direction} ring") from exc
        st.set_ring(target.direction, ring)
        if ring is not None:
            with LOCK:
                STATE.stages.add(self)
                report.stages.add(self)
        st.pending = True
        return result

    return mark(pooltk_setup, original)


def call_arg_setup(args: tuple, kwargs: dict) -> int:
    """The microbatch count every setup method takes first (``num_microbatches``)."""
    return args[0] if args else kwargs["num_microbatches"]


# ---------------------------------------------------------------------------------------
# Runtime
# ---------------------------------------------------------------------------------------


def _first_use(stage: Any, ctx: Context | None) -> StageState | None:
    """Once per setup: log the stage's rings and turn the release on; a stage never set up under pooltk says so.

    On a layout that allocates per receive (lazy: no setup is wrapped) this is where a stage's state is
    made and the release decided.
    """
    st = stage_state(stage)
    if st is not None and st.pending:
        st.pending = False
        _pooled_line(stage, st)
    if ctx is None:
        return st
    wants_release = bool(ctx.settings.config.release and getattr(stage, "is_last", False)
                         and getattr(stage, "has_backward", False))
    if not ctx.rings:  # lazy layout: the release is the whole pool
        st = state_for(stage)
        st.report = ctx.report
        # No look at the call stack here: reading a running frame's locals (observe_schedule) pins
        # them until that frame returns, which on this layout kept one more receive buffer alive on
        # every stage (measured). The release finds the loss without the schedule (release.py).
        refused = refusal(stage, None)
        if refused is not None:
            kept_stock(stage, ctx.report, refused)
            st.late = st.seen = True  # never managed: the wrappers pass through
            return None
        if wants_release and not st.release:
            rel.start(stage, st, ctx.report.layout)
    elif st is None or (st.gate is None and not st.late):
        st = state_for(stage)
        st.late = True
        if ctx.report.installed and getattr(stage, "args_recv_info", None):
            kept_stock(stage, ctx.report, (
                "set up before pooltk.install(): its receive buffers are torch's (M sets) until its next setup "
                "(an eval/train switch). Fix: call pooltk.install() before the schedule's first step"))
    elif st.gate is not None and st.gate.pool and wants_release and not st.release:
        rel.start(stage, st, ctx.report.layout)
    st.seen = True
    return st


def _name_reuse(stage: Any, exc: RuntimeError, chunk: int | None) -> None:
    """Re-raise autograd's version error as PoolReuseError where a slot of ``stage`` was bumped ([Note: naming the reuse])."""
    st = stage_state(stage)
    if st is None or not is_version_error(exc):
        return
    named = name_reuse(exc, stage=stage.stage_index, rings=st.rings(), microbatch=chunk)
    if named is not None:
        raise named from exc


def runtime_wrappers(originals: dict[str, Callable], context_of: ContextFn) -> dict[str, Callable]:
    """Runtime wrappers; each is a pass-through for stages the pool does not manage."""
    out: dict[str, Callable] = {}

    if "get_fwd_recv_ops" in originals:
        get_fwd = originals["get_fwd_recv_ops"]

        @functools.wraps(get_fwd)
        def get_fwd_recv_ops(self: Any, *args: Any, **kwargs: Any) -> Any:
            st = stage_state(self)
            ring = st.forward if st is not None else None
            if ring is not None:
                chunk = call_arg("get_fwd_recv_ops", "fwd_chunk_id", args, kwargs)
                ring.post(chunk, self.args_recv_info[chunk], self.stage_index, training=self.has_backward)
                ops = get_fwd(self, *args, **kwargs)
                ring.note_ops(chunk, ops, self.stage_index)
                return ops
            return get_fwd(self, *args, **kwargs)

        out["get_fwd_recv_ops"] = get_fwd_recv_ops

    if "get_bwd_recv_ops" in originals:
        get_bwd = originals["get_bwd_recv_ops"]

        @functools.wraps(get_bwd)
        def get_bwd_recv_ops(self: Any, *args: Any, **kwargs: Any) -> Any:
            st = stage_state(self)
            ring = st.grad if st is not None else None
            if ring is not None and self.has_backward:
                chunk = call_arg("get_bwd_recv_ops", "bwd_chunk_id", args, kwargs)
                ring.post(chunk, self.grad_recv_info[chunk], self.stage_index)
                ops = get_bwd(self, *args, **kwargs)
                ring.note_ops(chunk, ops, self.stage_index)
                return ops
            return get_bwd(self, *args, **kwargs)

        out["get_bwd_recv_ops"] = get_bwd_recv_ops

    if "get_fwd_send_ops" in originals:
        get_fwd_send = originals["get_fwd_send_ops"]

        @functools.wraps(get_fwd_send)
        def get_fwd_send_ops(self: Any, *args: Any, **kwargs: Any) -> Any:
            ops = get_fwd_send(self, *args, **kwargs)
            st = stage_state(self)
            ring = st.forward if st is not None else None
            if ring is not None:  # a send of a received tensor passed on: [Note: finished sends]
                ring.note_sends(call_arg("get_fwd_send_ops", "fwd_chunk_id", args, kwargs), ops, self.stage_index)
            return ops

        out["get_fwd_send_ops"] = get_fwd_send_ops

    fwd_one = originals["forward_one_chunk"]

    @functools.wraps(fwd_one)
    def forward_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        st = stage_state(self)
        if st is None or not st.seen or st.pending or (not st.release and not st.late and getattr(self, "is_last", False)):
            st = _first_use(self, context_of(self))
        result = fwd_one(self, *args, **kwargs)
        if st is None:
            return result
        chunk = call_arg("forward_one_chunk", "fwd_chunk_id", args, kwargs)
        if st.release and self.has_backward:
            rel.note_forward(st, chunk, result)
        ring = st.forward
        if ring is not None and not self.has_backward:
            cached = cached_forward(self, chunk)
            if cached is not None:  # never read again in a forward-only step
                ring.retire_inputs(chunk, cached[1], self.stage_index)
            ring.release(chunk, self.stage_index)
        if st.handoff and not self.has_backward:
            cached = cached_forward(self, chunk)
            drop_handed(self, st, chunk, cached[1] if cached is not None else None)
        return result

    out["forward_one_chunk"] = forward_one_chunk

    bwd_one = originals["backward_one_chunk"]

    @functools.wraps(bwd_one)
    def backward_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = bwd_one(self, *args, **kwargs)
        except RuntimeError as exc:
            _name_reuse(self, exc, call_arg("backward_one_chunk", "bwd_chunk_id", args, kwargs))
            raise
        st = stage_state(self)
        if st is None or not self.has_backward:
            return result
        chunk = call_arg("backward_one_chunk", "bwd_chunk_id", args, kwargs)
        full = call_arg("backward_one_chunk", "full_backward", args, kwargs)
        if full:  # a split backward (I now, W later) keeps both until W: see [Note: slot ownership]
            st.release_slots(chunk, self.stage_index)
            if st.handoff:
                drop_handed(self, st, chunk)
        if st.release:
            loss = call_arg("backward_one_chunk", "loss", args, kwargs)
            if full:
                rel.release_chunk(self, st, chunk, loss)
            else:  # the weight pass still walks this graph: release after it
                st.losses[chunk] = loss
        return result

    out["backward_one_chunk"] = backward_one_chunk

    if "backward_weight_one_chunk" in originals:
        bwd_w = originals["backward_weight_one_chunk"]

        @functools.wraps(bwd_w)
        def backward_weight_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                result = bwd_w(self, *args, **kwargs)
            except RuntimeError as exc:
                _name_reuse(self, exc, call_arg("backward_weight_one_chunk", "bwd_chunk_id", args, kwargs))
                raise
            st = stage_state(self)
            if st is None:
                return result
            chunk = call_arg("backward_weight_one_chunk", "bwd_chunk_id", args, kwargs)
            st.release_slots(chunk, self.stage_index)
            if st.handoff:
                drop_handed(self, st, chunk)
            if st.release and chunk in st.losses:
                rel.release_chunk(self, st, chunk, st.losses.pop(chunk))
            return result

        out["backward_weight_one_chunk"] = backward_weight_one_chunk

    if "set_local_bwd_input" in originals:
        set_bwd = originals["set_local_bwd_input"]

        @functools.wraps(set_bwd)
        def set_local_bwd_input(self: Any, *args: Any, **kwargs: Any) -> Any:
            st = stage_state(self)
            templates = st.handoff.get("grad") if st is not None else None
            if templates:  # a None gradient makes torch zero the (absent) buffer: give that one a real one
                grads = call_arg("set_local_bwd_input", "next_stage_bwd_outputs", args, kwargs)
                chunk = call_arg("set_local_bwd_input", "mb_index", args, kwargs)
                infos = self.grad_recv_info.get(chunk, ()) if isinstance(grads, tuple) else ()
                for j, info in enumerate(infos):
                    if j < len(grads) and grads[j] is None and j in templates and getattr(info.buffer, "is_meta", False):
                        info.buffer = real_buffer(templates[j], zero=True)
            return set_bwd(self, *args, **kwargs)

        out["set_local_bwd_input"] = set_local_bwd_input

    clear = originals["clear_runtime_states"]

    @functools.wraps(clear)
    def clear_runtime_states(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = clear(self, *args, **kwargs)
        st = stage_state(self)
        if st is not None:
            for ring in (st.forward, st.grad):
                if ring is not None:
                    ring.reset()
            st.outputs.clear()
            st.losses.clear()
        return result

    out["clear_runtime_states"] = clear_runtime_states
    for fn in out.values():
        mark(fn, originals[fn.__name__])
    return out


# ---------------------------------------------------------------------------------------
# Undo
# ---------------------------------------------------------------------------------------


def give_back_stock_buffers(stage: Any, report: InstallReport | None, why: str) -> bool:
    """Replace a live stage's rings by stock buffers (one fresh set per microbatch); True if it had any."""
    st = stage_state(stage)
    if st is None:
        return False
    had = False
    for direction, templates in st.handoff.items():  # no buffers were made there: make torch's own now
        had = True
        for infos in getattr(stage, RECV_INFO_ATTRS[direction], {}).values():
            for j, template in templates.items():
                if isinstance(infos[j].buffer, torch.Tensor) and infos[j].buffer.is_meta:
                    infos[j].buffer = real_buffer(template)
    st.handoff.clear()
    for direction, attr in RECV_INFO_ATTRS.items():
        ring = st.ring(direction)
        if ring is None:
            continue
        st.set_ring(direction, None)
        had = True
        positions = ring.members.get(stage.stage_index, ring.positions)
        for chunk, infos in getattr(stage, attr, {}).items():
            for k, j in enumerate(positions):
                old = infos[j].buffer
                if not isinstance(old, torch.Tensor):
                    continue
                fresh = torch.empty_like(ring.slots[ring.slot_of(chunk, stage.stage_index)][k])
                if getattr(old, "requires_grad", False):
                    fresh.requires_grad_(True)
                infos[j].buffer = fresh
    st.gate, st.pending, st.n_microbatches, st.release = None, False, None, False
    st.outputs.clear()
    st.losses.clear()
    if had:
        emit(_sink(report), unpooled_event(getattr(stage, "stage_index", "?"), why))
    return had
