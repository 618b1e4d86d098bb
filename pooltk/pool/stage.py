"""What each torch stage method does under the pool: one named function per method.

[Note: a stage's life]
A stage's :class:`StageState` lives in its ``__dict__``. Its phase: ``new`` (first met by a hook);
``set-up`` (a setup ran under pooltk and the gate decided: the first compute logs the rings and
decides the release); ``running``; ``late`` (computing without a setup under pooltk: set up
before ``install()``, stock until its next setup). Every setup (each eval/train switch) starts
again at ``set-up``.

:func:`runtime_hooks` and :func:`setup_hooks` are the hook table: for each torch method, the
functions below that run around it (pooltk.pool.torch_compat.bind makes the wrappers). Each one
passes straight through for a stage the pool does not manage.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from pooltk.pool import events, handoff, release
from pooltk.pool.errors import PoolSetupError, is_version_error, name_reuse
from pooltk.pool.gating import Decision, decide, decide_lazy
from pooltk.pool.ring import Ring, RingUse, live_1f1b
from pooltk.pool.torch_compat.bind import Hooks
from pooltk.pool.torch_compat.layouts import Layout, SetupTarget
from pooltk.pool.torch_compat.placeholders import PlaceholderFactory, real_buffer
from pooltk.pool.torch_compat.stage_api import (
    HANDOFF_METHODS,
    HOT_METHODS,
    OPTIONAL_HOT_METHODS,
    RECV_INFO_ATTRS,
    RELEASE_METHODS,
    SEND_METHODS,
    Call,
    cached_forward,
    recv_infos,
    recv_positions,
)

_ATTR = "_pooltk"
NEW, SET_UP, RUNNING, LATE = "new", "set-up", "running", "late"
_SET_UP_EARLY = (
    "found it set up before pooltk.install(), so its buffers are torch's until its next setup; "
    "fix: call pooltk.install() before the first step"
)


@dataclass(slots=True, eq=False)
class StageState:
    """The pool's view of one stage (see [Note: a stage's life])."""

    phase: str = NEW
    decision: Decision | None = None
    """The gate's answer at the last setup (or first compute, on the lazy layout)."""
    install: Any = None
    """The install whose hooks set this stage up (its events, config and harness)."""
    n_microbatches: int | None = None
    rings: dict[str, Ring] = field(default_factory=dict)
    handoff: dict[str, dict] = field(default_factory=dict)
    """direction -> {position: handoff.Template} where a same-rank handoff feeds the stage."""
    release: bool = False
    """The last stage lets the schedule's kept graphs go after each backward (release.py)."""
    outputs: dict[int, Any] = field(default_factory=dict)
    """chunk -> the output its forward returned, until its backward (the release)."""
    losses: dict[int, Any] = field(default_factory=dict)
    """chunk -> the loss of a split backward, until its weight pass (the release)."""
    released: int = 0
    kept_graphs: int = 0
    said: set = field(default_factory=set)
    """Log lines already said for this stage (each is said once)."""

    @property
    def pooled(self) -> bool:
        return self.decision is not None and self.decision.pooled

    @property
    def reason(self) -> str:
        return self.decision.reason if self.decision is not None else ""

    def usage(self, stage: int | None = None) -> list[RingUse]:
        """What each ring held during the last step, beside stock and the live set."""
        return [r.usage(r.stage if stage is None else stage) for r in self.rings.values()]


def stage_state(stage: Any) -> StageState | None:
    """The pool's state of ``stage``, or None for a stage pooltk has never seen."""
    return getattr(stage, "__dict__", {}).get(_ATTR)


def state_for(stage: Any) -> StageState:
    """The state of ``stage``, made on first use."""
    state = stage_state(stage)
    if state is None:
        state = vars(stage)[_ATTR] = StageState()
    return state


# -- setup: decide, let torch set up (its buffers placeholders), build the ring ----------------


def on_setup(stage: Any, call: Call, proceed: Any, *, target: SetupTarget, install: Any) -> Any:
    """A setup method that makes receive buffers ([Note: placeholders without patching])."""
    where = getattr(stage, "stage_index", None)
    try:
        decision = decide(install_schedule=install.schedule, force=install.force, stage=stage)
    except PoolSetupError as exc:
        exc.stage, exc.direction = where, target.direction
        raise
    state = state_for(stage)
    state.phase, state.decision, state.install = SET_UP, decision, install
    state.rings.pop(target.direction, None)
    state.handoff.pop(target.direction, None)
    if not decision.pooled:
        kept_stock(stage, install, decision.reason)
        return proceed()
    state.n_microbatches = int(call.arg("num_microbatches"))
    factory = PlaceholderFactory() if target.alloc_free else None
    with factory if factory is not None else contextlib.nullcontext():
        result = proceed()  # on this thread only, for this call
    try:
        ring = _after_setup(stage, target.direction, state, install, factory)
    except Exception as exc:  # inside a recognised layout: loud, never a silent fallback
        what = f"building the {target.direction} ring"
        raise PoolSetupError(stage=where, direction=target.direction, cause=exc, what=what) from exc
    if ring is not None:
        state.rings[target.direction] = ring
        install.stages.add(stage)
    return result


def _after_setup(stage: Any, direction: str, state: StageState, install: Any, factory: Any) -> Any:
    """The ring the direction receives into (None: a handoff, or stock), every buffer made real."""
    plan = state.decision.plan
    if plan is not None and (stage.stage_index, direction) in plan.handoff:
        state.handoff[direction] = handoff.drop_handoff_buffers(stage, direction, factory)
        return None
    ring = build_ring(stage, direction, state, install, factory)
    for infos in recv_infos(stage, direction).values():  # what has no ring is stock
        for info in infos:
            if factory is not None and factory.is_placeholder(getattr(info, "buffer", None)):
                info.buffer = real_buffer(info.buffer, factory=factory)
    return ring


def build_ring(stage: Any, direction: str, state: StageState, install: Any, factory: Any) -> Any:
    """The ring one direction of a just-set-up stage receives into, bound on its recv infos.

    1F1B: K from the closed form ([Note: ring sizes]), slot ``c mod K``. A plan (``"auto"``): K
    from its live sets; a rank's stages whose boundaries carry the same tensors share one ring
    ([Note: rank-shared rings]).
    """
    infos = recv_infos(stage, direction)
    positions = recv_positions(infos[0]) if infos else []
    if not positions:
        return None
    if any(len(chunk_infos) != len(infos[0]) for chunk_infos in infos.values()):
        raise RuntimeError("recv infos differ in structure between microbatches")
    index, n, m, plan = (
        stage.stage_index,
        stage.num_stages,
        state.n_microbatches,
        state.decision.plan,
    )
    if plan is None:
        live = live_1f1b(n, index, m, direction)
        k = install.ring_size(live=live, receives=m, direction=direction, stage=index, num_stages=n)
    else:
        live = plan.min_safe.get((index, direction), 0)
        k = install.ring_size(live=live, receives=m, direction=direction)
    if k <= 0:
        return None
    if plan is not None and install.sharing == "rank":
        return _join_rank_ring(stage, direction, positions, state, install, factory)
    ring = _new_ring(index, direction, live, k, infos[0], positions, state, install, factory)
    ring.bind(index, infos, positions)
    return ring


def _new_ring(
    stage_index: int,
    direction: str,
    live: int,
    k: int,
    first: tuple,
    positions: list[int],
    state: StageState,
    install: Any,
    factory: Any,
    reuse: list | None = None,
    slot_map: dict | None = None,
) -> Ring:
    """K sets shaped like ``first``'s buffers (``reuse``: an earlier ring's sets, kept)."""
    sets = [list(tensors) for tensors in (reuse or [])[:k]]
    while len(sets) < k:  # a slot's tensors are never leaves of a graph: their aliases are
        sets.append([real_buffer(first[j].buffer, factory=factory).detach() for j in positions])
    requires_grad = [bool(first[j].buffer.requires_grad) for j in positions]
    return Ring(
        stage=stage_index,
        direction=direction,
        live=live,
        sets=sets,
        n_microbatches=state.n_microbatches,
        requires_grad=requires_grad,
        slot_map=slot_map,
        guard=install.guard,
        say=_said(state),
    )


@dataclass(eq=False)
class _RankGroup:
    """A rank's stages that share one ring for one direction and boundary ([Note: rank-shared
    rings]); ``ring`` is rebuilt over every member as each stage sets up."""

    plan: Any
    members: dict[int, tuple[Any, list[int]]] = field(default_factory=dict)
    ring: Ring | None = None


def _join_rank_ring(
    stage: Any, direction: str, positions: list[int], state: StageState, install: Any, factory: Any
) -> Ring:
    from pooltk.analysis.sharing import rank_rings

    infos, plan, me = recv_infos(stage, direction), state.decision.plan, stage.stage_index
    key = (direction, tuple(_boundary_key(infos[0][j].buffer, factory) for j in positions))
    groups = install.groups.setdefault(state.decision.schedule_object(), {})
    group = groups.get(key)
    if group is None or me in group.members or group.plan is not plan:
        group = groups[key] = _RankGroup(plan)
    group.members[me] = (stage, positions)
    keys = {(s, direction): key for s in group.members}
    spans = [b for b in plan.spans if (b.stage, b.direction) in keys]

    def size(live: int, receives: int, d: str) -> int:
        return install.ring_size(live=live, receives=receives, direction=d)

    (mine,) = [r for r in rank_rings(plan.program, spans, size, groups=keys) if me in r.stages]
    reuse = [slot.tensors for slot in group.ring.slots] if group.ring is not None else None
    slot_map = dict(mine.slots) if mine.shared else None
    ring = _new_ring(
        min(group.members),
        direction,
        mine.live,
        mine.size,
        infos[0],
        positions,
        state,
        install,
        factory,
        reuse,
        slot_map,
    )
    for member_index, (member, member_positions) in sorted(group.members.items()):
        ring.bind(member_index, recv_infos(member, direction), member_positions)
        if member is not stage:
            state_for(member).rings[direction] = ring
    group.ring = ring
    return ring


def _boundary_key(buf: Any, factory: Any) -> tuple:
    """What stages must share to share a ring: shape, dtype, device, ``requires_grad``."""
    like, device = handoff.template(buf, factory)
    return tuple(like.shape), like.dtype, device, bool(like.requires_grad)


def _said(state: StageState) -> Any:
    """What a ring says: each re-home (the first per direction a WARNING), and once that it saved
    nothing."""

    def say(kind: str, **fields: Any) -> None:
        key = (kind, fields["direction"])
        events.say(state, key, kind, again=kind == "re-homed", **fields)

    return say


def kept_stock(stage: Any, install: Any, reason: str) -> None:
    """Say (once per stage and reason) that ``stage`` keeps torch's buffers, and why."""
    state = state_for(stage)
    state.install = state.install or install
    where = getattr(stage, "stage_index", "?")
    events.say(state, ("stock", reason), "kept-stock", stage=where, reason=reason)


# -- compute: the first one after a setup, then each forward and backward ----------------------


def before_forward(stage: Any, call: Call, *, install: Any) -> None:
    """The stage's first compute after a setup: say its rings, start the release."""
    state = stage_state(stage)
    if state is None or state.phase in (NEW, SET_UP) or _release_due(stage, state, install):
        _first_use(stage, install)


def _release_due(stage: Any, state: StageState, install: Any) -> bool:
    last_with_backward = stage.is_last and stage.has_backward
    return state.pooled and not state.release and install.config.release and last_with_backward


def _first_use(stage: Any, install: Any) -> None:
    """Once per setup ([Note: a stage's life])."""
    state = state_for(stage)
    state.install = state.install or install
    if state.phase == SET_UP and state.pooled:
        _say_pooled(stage, state)
    elif state.phase == NEW and install.layout.per_receive:  # the release is the whole pool
        state.decision = decide_lazy(stage)
        if not state.pooled:
            kept_stock(stage, install, state.reason)
    elif state.phase == NEW:  # set up before install: stock until its next setup
        state.phase = LATE
        if recv_infos(stage, "forward"):
            kept_stock(stage, install, _SET_UP_EARLY)
        return
    state.phase = RUNNING
    if _release_due(stage, state, install):
        release.start(stage, state, install.layout.name)


def _say_pooled(stage: Any, state: StageState) -> None:
    """``stage I pooled (fwd ring K/M, grad ring K/M)``, then shared and handoff lines."""
    m, sizes = state.n_microbatches, []
    for direction in RECV_INFO_ATTRS:
        first = recv_infos(stage, direction).get(0)
        stock = m if first and recv_positions(first) and direction not in state.handoff else 0
        sizes.append(state.rings[direction].size if direction in state.rings else stock)
    index = stage.stage_index
    events.say(
        state,
        ("pooled", m, tuple(sizes)),
        "pooled",
        stage=index,
        forward=sizes[0],
        grad=sizes[1],
        n_microbatches=m,
    )
    for direction, ring in state.rings.items():
        if ring.shared:
            events.say(
                state,
                ("shared", direction, ring.size),
                "shared",
                stage=index,
                direction=direction,
                stages=sorted(ring.members),
                size=ring.size,
                receives=m * len(ring.members),
            )
    for direction in state.handoff:
        events.say(state, ("handoff", direction), "handoff", stage=index, direction=direction)


def after_forward(stage: Any, call: Call, output: Any, *, install: Any) -> Any:
    """Keep the output for the release; in a forward-only step the chunk is done now."""
    state, chunk = stage_state(stage), call.chunk
    if state.release and stage.has_backward:
        state.outputs[chunk] = output
    if stage.has_backward:
        return output
    cached = cached_forward(stage, chunk)
    if state.pooled and install.config.release:
        output = release.forward_only(stage, chunk, cached, output)
    if "forward" in state.rings:
        if cached is not None:
            state.rings["forward"].retire_inputs(chunk, stage.stage_index, cached[1])
        state.rings["forward"].release(chunk, stage.stage_index)
    if state.handoff:
        handoff.drop_handed(stage, state.handoff, chunk, cached[1] if cached is not None else None)
    return output


@contextlib.contextmanager
def naming_reuse(stage: Any, call: Call) -> Iterator[None]:
    """Around a backward: autograd's version error after a bump becomes PoolReuseError."""
    try:
        yield
    except RuntimeError as exc:
        state = stage_state(stage)
        if state is not None and is_version_error(exc):
            index, chunk = stage.stage_index, call.chunk
            named = name_reuse(exc, stage=index, rings=state.rings, microbatch=chunk)
            if named is not None:
                raise named from exc
        raise


def after_backward(stage: Any, call: Call, result: Any) -> Any:
    """A full backward frees the chunk; a split one waits for its weight pass."""
    state = stage_state(stage)
    if state is not None and stage.has_backward:
        if call.arg("full_backward"):
            _done(stage, state, call.chunk, call.arg("loss"))
        elif state.release:  # the weight pass still walks this graph
            state.losses[call.chunk] = call.arg("loss")
    return result


def after_weight(stage: Any, call: Call, result: Any) -> Any:
    state = stage_state(stage)
    if state is not None:
        _done(stage, state, call.chunk, state.losses.pop(call.chunk, None))
    return result


def _done(stage: Any, state: StageState, chunk: int, loss: Any) -> None:
    """The chunk's backward is complete (its weight pass too): its slots, handoffs and kept graph
    go ([Note: slot ownership])."""
    for ring in state.rings.values():
        ring.release(chunk, stage.stage_index)
    if state.handoff:
        handoff.drop_handed(stage, state.handoff, chunk)
    if state.release:
        release.release_chunk(stage, state, chunk, loss)


# -- receives, sends, a local gradient, the reset ------------------------------------------------


def _ring_posting(stage: Any, direction: str) -> Ring | None:
    state = stage_state(stage)
    ring = state.rings.get(direction) if state is not None else None
    return None if direction == "grad" and not stage.has_backward else ring


def before_recv(stage: Any, call: Call, *, direction: str) -> None:
    """Claim the chunk's slot and hand its receive fresh aliases ([Note: the ring])."""
    ring = _ring_posting(stage, direction)
    if ring is not None:
        infos = recv_infos(stage, direction)[call.chunk]
        ring.post(call.chunk, stage.stage_index, infos, training=stage.has_backward)


def after_recv(stage: Any, call: Call, ops: Any, *, direction: str) -> Any:
    ring = _ring_posting(stage, direction)
    if ring is not None:
        ring.note_recvs(call.chunk, stage.stage_index, ops)
    return ops


def after_send(stage: Any, call: Call, ops: Any) -> Any:
    """Remember the forward sends that pass received tensors on ([Note: finished sends])."""
    state = stage_state(stage)
    if state is not None and "forward" in state.rings:
        state.rings["forward"].note_sends(call.chunk, stage.stage_index, ops)
    return ops


def before_local_grad(stage: Any, call: Call) -> None:
    state = stage_state(stage)
    if state is not None and state.handoff.get("grad"):
        handoff.zero_for_none(stage, call, state.handoff["grad"])


def after_reset(stage: Any, call: Call, result: Any) -> Any:
    """A new step: the rings' ownership and counts, the kept outputs and losses start again."""
    state = stage_state(stage)
    if state is not None:
        for ring in state.rings.values():
            ring.reset()
        state.outputs.clear()
        state.losses.clear()
    return result


def give_back_stock(stage: Any, install: Any, why: str) -> bool:
    """Replace a live stage's rings and handoff placeholders by stock buffers (one per chunk)."""
    state = stage_state(stage)
    if state is None:
        return False
    had = bool(state.handoff or state.rings)
    for direction, templates in state.handoff.items():
        for infos in recv_infos(stage, direction).values():
            for j, template in templates.items():
                if getattr(infos[j].buffer, "is_meta", False):
                    infos[j].buffer = handoff.real(template)
    for direction, ring in state.rings.items():
        for infos in recv_infos(stage, direction).values():
            for j in ring.members.get(stage.stage_index, ()):
                if isinstance(infos[j].buffer, torch.Tensor):
                    infos[j].buffer = real_buffer(infos[j].buffer)
    state.rings.clear()
    state.handoff.clear()
    state.phase, state.decision, state.release = NEW, None, False
    state.outputs.clear()
    state.losses.clear()
    if had:
        where = getattr(stage, "stage_index", "?")
        sink = install.events if install is not None else None
        events.emit(sink, events.event("unpooled", stage=where, reason=why))
    return had


# -- the hook table ------------------------------------------------------------------------------


def setup_hooks(target: SetupTarget, install: Any) -> Hooks:
    return Hooks(raw=functools.partial(on_setup, target=target, install=install))


def runtime_hooks(layout: Layout, install: Any) -> dict[str, Hooks]:
    """The hooks of every runtime method this layout needs wrapped ([Note: binding])."""
    table = {
        "get_fwd_recv_ops": Hooks(
            before=functools.partial(before_recv, direction="forward"),
            after=functools.partial(after_recv, direction="forward"),
        ),
        "get_bwd_recv_ops": Hooks(
            before=functools.partial(before_recv, direction="grad"),
            after=functools.partial(after_recv, direction="grad"),
        ),
        "get_fwd_send_ops": Hooks(after=after_send),
        "forward_one_chunk": Hooks(
            before=functools.partial(before_forward, install=install),
            after=functools.partial(after_forward, install=install),
        ),
        "backward_one_chunk": Hooks(around=naming_reuse, after=after_backward),
        "backward_weight_one_chunk": Hooks(around=naming_reuse, after=after_weight),
        "set_local_bwd_input": Hooks(before=before_local_grad),
        "clear_runtime_states": Hooks(after=after_reset),
    }
    return {name: table[name] for name in runtime_names(layout)}


def runtime_names(layout: Layout) -> tuple[str, ...]:
    """The runtime methods the pool wraps on ``layout`` (the lazy layout: compute and reset)."""
    eager = HOT_METHODS + SEND_METHODS + HANDOFF_METHODS
    return (RELEASE_METHODS if layout.per_receive else eager) + OPTIONAL_HOT_METHODS
