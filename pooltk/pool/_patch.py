"""The wrappers torch's stage methods get: setup (build the ring), receive posts, sends, compute, reset.

Each wrapper belongs to one install (:class:`~pooltk.pool.report.InstallReport`) and passes straight through for
a stage the pool does not manage, or once that install is undone. Setup runs again at every eval/train switch.
Every torch name comes from :mod:`pooltk.pool.adapters`.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable

import torch

from pooltk.pool import events
from pooltk.pool import release as rel
from pooltk.pool.adapters import SetupTarget
from pooltk.pool.adapters.placeholders import PlaceholderFactory, materialize_all
from pooltk.pool.adapters.stage_api import RECV_INFO_ATTRS, cached_forward, call_arg
from pooltk.pool.gating import PoolSetupError, decide, refusal
from pooltk.pool.guard import is_version_error, name_reuse
from pooltk.pool.handoff import drop_handed, drop_handoff_buffers, real_buffer, template
from pooltk.pool.ring import DirectionRing, live_1f1b, recv_positions
from pooltk.pool.report import InstallReport
from pooltk.pool.state import LATE, LOCK, NEW, RUNNING, SET_UP, StageState, stage_state, state_for

__all__ = ["give_back_stock_buffers", "kept_stock", "runtime_wrappers", "setup_wrapper"]


def _positions(infos_by_chunk: dict[int, tuple]) -> list[int]:
    """Positions that receive into a tensor (empty: nothing to pool), the same in every chunk."""
    if not infos_by_chunk:
        return []
    positions = recv_positions(infos_by_chunk[0])
    if positions and any(len(infos) != len(infos_by_chunk[0]) for infos in infos_by_chunk.values()):
        raise RuntimeError("recv infos differ in structure between microbatches")
    return positions


def _build(
    stage: Any,
    target: SetupTarget,
    st: StageState,
    install: InstallReport,
    factory: PlaceholderFactory | None,
    observed: object | None,
) -> DirectionRing | None:
    """The ring one direction of a just-set-up stage receives into, bound onto its recv infos (None: stock).

    Alone: a ``c mod K`` ring. Under ``schedule="auto"``, a rank's stages whose boundaries carry the same tensors
    join one ring coloured from the action order ([Note: rank-shared rings]), rebuilt over every member so far.
    """
    infos = getattr(stage, target.infos_attr)
    positions = _positions(infos)
    me, direction = stage.stage_index, target.direction
    if not positions:
        return None
    m = st.n_microbatches
    if st.plan is not None:  # [Note: auto rings]
        live = st.plan.min_safe.get((me, direction), 0)
        k = install.ring_size(live=live, receives=m, direction=direction)
    else:  # the 1F1B closed form, [Note: ring sizes]
        live = live_1f1b(stage.num_stages, me, m, direction)
        k = install.ring_size(
            live=live, receives=m, direction=direction, stage=me, num_stages=stage.num_stages
        )
    if k <= 0:
        return None
    members = {me: (stage, positions)}
    slot_map, old, group = None, None, None
    if st.plan is not None and install.sharing == "rank" and observed is not None:
        from pooltk.analysis.sharing import rank_rings

        key = (direction, tuple(template(infos[0][j].buffer, factory) for j in positions))
        groups = install.groups.setdefault(observed, {})
        group = groups.get(key)
        if group is None or me in group["members"] or group["plan"] is not st.plan:
            group = groups[key] = {"plan": st.plan, "members": {}, "ring": None}
        group["members"][me] = (stage, positions)
        members, old = group["members"], group["ring"]
        keys = {(s, direction): key for s in members}
        spans = [b for b in st.plan.spans if (b.stage, b.direction) in keys]
        (mine,) = [
            r
            for r in rank_rings(
                st.plan.program,
                spans,
                lambda live, receives, d: install.ring_size(
                    live=live, receives=receives, direction=d
                ),
                groups=keys,
            )
            if me in r.stages
        ]
        k, live, slot_map = mine.size, mine.live, dict(mine.slots) if mine.shared else None
    slots = [list(ts) for ts in old.slots[:k]] if old is not None else []
    for _ in range(k - len(slots)):
        slots.append(
            [
                factory.real(infos[0][j].buffer)
                if factory is not None and factory.is_placeholder(infos[0][j].buffer)
                else torch.empty_like(infos[0][j].buffer.detach())
                for j in positions
            ]
        )
    ring = DirectionRing(
        stage=min(members),
        direction=direction,
        live=live,
        n_microbatches=st.n_microbatches,
        slots=slots,
        slot_map=slot_map,
        guard=install.guard,
        say=_said(st),
    )
    for s, (member, member_positions) in sorted(members.items()):
        ring.bind(s, getattr(member, target.infos_attr), member_positions)
        if member is not stage:
            state_for(member).set_ring(direction, ring)
    if group is not None:
        group["ring"] = ring
    return ring


def kept_stock(stage: Any, report: Any, reason: str) -> None:
    """Record (once per stage and reason) that ``stage`` keeps torch's buffers, and why."""
    st = state_for(stage)
    st.report = st.report or report
    events.say(
        st, ("stock", reason), "kept-stock", stage=getattr(stage, "stage_index", "?"), reason=reason
    )


def _said(st: StageState) -> Callable:
    """What a ring says: each of its re-homes (the first per direction a WARNING), and once that it saved nothing."""
    return lambda kind, **fields: events.say(
        st, (kind, fields["direction"]), kind, again=kind == "re-homed", **fields
    )


def _pooled_line(stage: Any, st: StageState) -> None:
    """``stage I pooled (fwd ring K/M, grad ring K/M)`` once per distinct ring shape, then shared and handoff lines."""
    m = st.n_microbatches
    sizes = []
    for direction, attr in RECV_INFO_ATTRS.items():
        ring = st.ring(direction)
        first = (getattr(stage, attr, None) or {}).get(0)
        sizes.append(
            ring.size
            if ring is not None
            else 0
            if direction in st.handoff or not first
            else m
            if recv_positions(first)
            else 0
        )
    events.say(
        st,
        ("pooled", m, tuple(sizes)),
        "pooled",
        stage=stage.stage_index,
        forward=sizes[0],
        grad=sizes[1],
        n_microbatches=m,
    )
    for direction, ring in st.rings().items():
        if ring.shared:
            events.say(
                st,
                ("shared", direction, ring.size),
                "shared",
                stage=stage.stage_index,
                direction=direction,
                stages=sorted(ring.members),
                size=ring.size,
                receives=m * len(ring.members),
            )
    for direction in st.handoff:
        events.say(
            st, ("handoff", direction), "handoff", stage=stage.stage_index, direction=direction
        )


def setup_wrapper(original: Callable, target: SetupTarget, install: InstallReport) -> Callable:
    """Decide, let torch set up (its buffers shape-only placeholders), then build the ring."""

    @functools.wraps(original)
    def pooltk_setup(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not install.active:
            return original(self, *args, **kwargs)
        try:
            pool, reason, name, plan, observed = decide(
                install_schedule=install.schedule,
                force=install.force,
                stage=self,
            )
        except PoolSetupError as exc:
            exc.stage, exc.direction = getattr(self, "stage_index", None), target.direction
            raise
        st = state_for(self)
        st.phase, st.pooled, st.reason, st.schedule, st.plan = SET_UP, pool, reason, name, plan
        st.report, st.observed = install, weakref.ref(observed) if observed is not None else None
        if not pool:
            st.set_ring(target.direction, None)
            kept_stock(self, install, reason)
            return original(self, *args, **kwargs)
        st.n_microbatches = int(args[0] if args else kwargs["num_microbatches"])
        factory = PlaceholderFactory() if target.alloc_free else None
        if factory is not None:
            with factory:  # this thread only, for this call: [Note: placeholders without patching]
                result = original(self, *args, **kwargs)
        else:
            result = original(self, *args, **kwargs)
        st.handoff.pop(target.direction, None)
        try:
            if plan is not None and (self.stage_index, target.direction) in plan.handoff:
                ring = None  # a same-rank handoff: no receive buffers
                st.handoff[target.direction] = drop_handoff_buffers(self, target, factory)
            else:
                ring = _build(self, target, st, install, factory, observed)
                materialize_all(
                    getattr(self, target.infos_attr, {}), factory
                )  # what has no ring is stock
        except (
            Exception
        ) as exc:  # inside a recognised layout: loud ([Note: fail-open only for unknown layouts])
            raise PoolSetupError(
                stage=getattr(self, "stage_index", None),
                direction=target.direction,
                cause=exc,
                what=f"building the {target.direction} ring",
            ) from exc
        st.set_ring(target.direction, ring)
        if ring is not None:
            with LOCK:
                install.stages.add(self)
        return result

    return pooltk_setup


def _first_use(stage: Any, install: InstallReport) -> StageState:
    """Once per setup, at the stage's first compute: say its rings, decide the release ([Note: a stage's life])."""
    st = state_for(stage)
    st.report = st.report or install
    if st.phase == SET_UP:
        if st.pooled:
            _pooled_line(stage, st)
    elif st.phase == NEW and install.rings:  # set up before install: stock until its next setup
        st.phase = LATE
        if getattr(stage, "args_recv_info", None):
            kept_stock(
                stage,
                install,
                "found it set up before pooltk.install(), so its buffers are torch's "
                "until its next setup; fix: call pooltk.install() before the first step",
            )
        return st
    elif st.phase == NEW:  # the lazy layout: no setup is wrapped, the release is the whole pool
        refused = refusal(
            stage, None
        )  # no call-stack look here: it would pin a running frame's locals
        st.pooled, st.reason = refused is None, refused or "the lazy layout: the release alone"
        if refused is not None:
            kept_stock(stage, install, refused)
    st.phase = RUNNING
    if (
        st.pooled
        and not st.release
        and install.config.release
        and stage.is_last
        and stage.has_backward
    ):
        rel.start(stage, st, install.layout)
    return st


def _checked(fn: Callable, method: str) -> Callable:
    """Re-raise autograd's version error as PoolReuseError where a slot was bumped ([Note: naming the reuse])."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except RuntimeError as exc:
            st = stage_state(self)
            if st is not None and is_version_error(exc):
                named = name_reuse(
                    exc,
                    stage=self.stage_index,
                    rings=st.rings(),
                    microbatch=call_arg(method, "bwd_chunk_id", args, kwargs),
                )
                if named is not None:
                    raise named from exc
            raise

    return wrapper


def runtime_wrappers(originals: dict[str, Callable], install: InstallReport) -> dict[str, Callable]:
    """The runtime wrappers for the methods in ``originals``; each passes through for unmanaged stages."""

    def managed(stage: Any) -> StageState | None:
        return stage_state(stage) if install.active else None

    def recv(method: str, direction: str, attr: str) -> Callable:
        original = originals[method]
        arg = "fwd_chunk_id" if direction == "forward" else "bwd_chunk_id"

        @functools.wraps(original)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            st = managed(self)
            ring = st.ring(direction) if st is not None else None
            if ring is None or (direction == "grad" and not self.has_backward):
                return original(self, *args, **kwargs)
            chunk = args[0] if args else call_arg(method, arg, args, kwargs)
            ring.post(
                chunk, self.stage_index, getattr(self, attr)[chunk], training=self.has_backward
            )
            ops = original(self, *args, **kwargs)
            ring.note_ops(chunk, self.stage_index, recvs=ops)
            return ops

        return wrapper

    out = (
        {
            "get_fwd_recv_ops": recv("get_fwd_recv_ops", "forward", "args_recv_info"),
            "get_bwd_recv_ops": recv("get_bwd_recv_ops", "grad", "grad_recv_info"),
        }
        if "get_fwd_recv_ops" in originals
        else {}
    )

    if "get_fwd_send_ops" in originals:
        send = originals["get_fwd_send_ops"]

        @functools.wraps(send)
        def get_fwd_send_ops(self: Any, *args: Any, **kwargs: Any) -> Any:
            ops = send(self, *args, **kwargs)
            st = managed(self)
            if st is not None and st.forward is not None:  # [Note: finished sends]
                chunk = (
                    args[0] if args else call_arg("get_fwd_send_ops", "fwd_chunk_id", args, kwargs)
                )
                st.forward.note_ops(chunk, self.stage_index, sends=ops)
            return ops

        out["get_fwd_send_ops"] = get_fwd_send_ops

    fwd = originals["forward_one_chunk"]

    @functools.wraps(fwd)
    def forward_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not install.active:
            return fwd(self, *args, **kwargs)
        st = stage_state(self)
        if (
            st is None
            or st.phase in (NEW, SET_UP)
            or (
                st.pooled
                and not st.release
                and self.is_last
                and self.has_backward
                and install.config.release
            )
        ):
            st = _first_use(self, install)
        result = fwd(self, *args, **kwargs)
        chunk = args[0] if args else call_arg("forward_one_chunk", "fwd_chunk_id", args, kwargs)
        if st.release and self.has_backward:
            st.outputs[chunk] = result
        if not self.has_backward:  # a forward-only step: done with its inputs now
            cached = cached_forward(self, chunk)
            if st.pooled and install.config.release:
                result = rel.forward_only(self, chunk, cached, result)  # [Note: forward-only steps]
            if st.forward is not None:
                if cached is not None:
                    st.forward.retire_inputs(chunk, self.stage_index, cached[1])
                st.forward.release(chunk, self.stage_index)
            if st.handoff:
                drop_handed(self, st, chunk, cached[1] if cached is not None else None)
        return result

    out["forward_one_chunk"] = forward_one_chunk

    bwd = _checked(originals["backward_one_chunk"], "backward_one_chunk")

    @functools.wraps(bwd)
    def backward_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = bwd(self, *args, **kwargs)
        st = managed(self)
        if st is None or not self.has_backward:
            return result
        chunk = args[0] if args else call_arg("backward_one_chunk", "bwd_chunk_id", args, kwargs)
        if call_arg("backward_one_chunk", "full_backward", args, kwargs):
            _done(self, st, chunk, call_arg("backward_one_chunk", "loss", args, kwargs))
        elif st.release:  # the weight pass still walks this graph: the release waits for it
            st.losses[chunk] = call_arg("backward_one_chunk", "loss", args, kwargs)
        return result

    out["backward_one_chunk"] = backward_one_chunk

    if "backward_weight_one_chunk" in originals:
        bwd_w = _checked(originals["backward_weight_one_chunk"], "backward_weight_one_chunk")

        @functools.wraps(bwd_w)
        def backward_weight_one_chunk(self: Any, *args: Any, **kwargs: Any) -> Any:
            result = bwd_w(self, *args, **kwargs)
            st = managed(self)
            if st is not None:
                chunk = call_arg("backward_weight_one_chunk", "bwd_chunk_id", args, kwargs)
                _done(self, st, chunk, st.losses.pop(chunk, None))
            return result

        out["backward_weight_one_chunk"] = backward_weight_one_chunk

    if "set_local_bwd_input" in originals:
        set_bwd = originals["set_local_bwd_input"]

        @functools.wraps(set_bwd)
        def set_local_bwd_input(self: Any, *args: Any, **kwargs: Any) -> Any:
            st = managed(self)
            templates = st.handoff.get("grad") if st is not None else None
            if (
                templates
            ):  # a None gradient makes torch zero the (absent) buffer: give that one a real one
                grads = call_arg("set_local_bwd_input", "next_stage_bwd_outputs", args, kwargs)
                chunk = call_arg("set_local_bwd_input", "mb_index", args, kwargs)
                for j, info in enumerate(
                    self.grad_recv_info.get(chunk, ()) if isinstance(grads, tuple) else ()
                ):
                    if (
                        j < len(grads)
                        and grads[j] is None
                        and j in templates
                        and getattr(info.buffer, "is_meta", 0)
                    ):
                        info.buffer = real_buffer(templates[j], zero=True)
            return set_bwd(self, *args, **kwargs)

        out["set_local_bwd_input"] = set_local_bwd_input

    clear = originals["clear_runtime_states"]

    @functools.wraps(clear)
    def clear_runtime_states(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = clear(self, *args, **kwargs)
        st = managed(self)
        if st is not None:
            for ring in st.rings().values():
                ring.reset()
            st.outputs.clear()
            st.losses.clear()
        return result

    out["clear_runtime_states"] = clear_runtime_states
    return out


def _done(stage: Any, st: StageState, chunk: int, loss: Any) -> None:
    """The chunk's backward is complete (its weight pass too): its slots, handoffs and kept graph go."""
    st.release_slots(chunk, stage.stage_index)
    if st.handoff:
        drop_handed(stage, st, chunk)
    if st.release:
        rel.release_chunk(stage, st, chunk, loss)


def give_back_stock_buffers(stage: Any, report: Any, why: str) -> bool:
    """Replace a live stage's rings and handoff placeholders by stock buffers (one per microbatch)."""
    st = stage_state(stage)
    if st is None:
        return False
    had = bool(st.handoff or st.rings())
    for direction, templates in st.handoff.items():
        for infos in getattr(stage, RECV_INFO_ATTRS[direction], {}).values():
            for j, t in templates.items():
                if getattr(infos[j].buffer, "is_meta", False):
                    infos[j].buffer = real_buffer(t)
    for direction, ring in st.rings().items():
        positions = ring.members.get(stage.stage_index, ())
        for infos in getattr(stage, RECV_INFO_ATTRS[direction], {}).values():
            for j in positions:
                if isinstance(infos[j].buffer, torch.Tensor):
                    infos[j].buffer = torch.empty_like(infos[j].buffer.detach()).requires_grad_(
                        infos[j].buffer.requires_grad
                    )
        st.set_ring(direction, None)
    st.handoff.clear()
    st.phase, st.pooled, st.release = NEW, False, False
    st.outputs.clear()
    st.losses.clear()
    if had:
        events.emit(
            report.events if report is not None else None,
            events.event("unpooled", stage=getattr(stage, "stage_index", "?"), reason=why),
        )
    return had
