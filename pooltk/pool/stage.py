"""What each torch stage method does under the pool: one named function per method.

[Note: a stage's life]
A stage's :class:`StageState` lives in its ``__dict__``. Its phase: ``new`` (first met by a hook);
``set-up`` (a setup ran under pooltk and the gate decided: the first compute logs the rings and
decides the release); ``running``; ``late`` (computing without a setup under this install: set
up before ``install()``, or under an earlier one; stock until its next setup). Every setup (each
eval/train switch) starts again at ``set-up``. The state belongs to one install at a time: what
it said is said again under the next one, into that install's report.

:func:`runtime_hooks` and :func:`setup_hooks` are the hook table: for each torch method, the
functions below that run around it (pooltk.pool.torch_compat.bind makes the wrappers). Each one
passes straight through for a stage the pool does not manage.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from pooltk.pool import events, handoff
from pooltk.pool.errors import INFOS_DIFFER, PoolSetupError, name_reuse
from pooltk.pool.gating import Decision, decide, decide_lazy
from pooltk.pool.release import forward_only, release_chunk, start_release
from pooltk.pool.ring import Ring, RingUse, Slot, live_1f1b
from pooltk.pool.torch_compat import stage_api as api
from pooltk.pool.torch_compat import tensor_counts as tc
from pooltk.pool.torch_compat.bind import Hooks
from pooltk.pool.torch_compat.layouts import Layout, SetupTarget
from pooltk.pool.torch_compat.placeholders import PlaceholderFactory, real_buffer
from pooltk.pool.torch_compat.stage_api import Call, recv_infos, recv_positions

_ATTR = "_pooltk"
NEW, SET_UP, RUNNING, LATE = "new", "set-up", "running", "late"
_SET_UP_EARLY = (
    "found it set up before pooltk.install() (or by a stage subclass's setup that does not call "
    "torch's), so its buffers are torch's until a setup pooltk sees; fix: call pooltk.install() "
    "before the first step, and super() in an overriding setup"
)


@dataclass(slots=True, eq=False)
class StageState:
    """The pool's view of one stage (see [Note: a stage's life])."""

    phase: str = NEW
    decision: Decision | None = None  # the gate's, at the last setup (lazy: the first compute)
    install: Any = None  # the install whose hooks set the stage up: config, harness, events
    n_microbatches: int | None = None
    rings: dict[str, Ring] = field(default_factory=dict)
    handoff: dict[str, dict] = field(default_factory=dict)  # direction -> {position: Template}
    release: bool = False  # a last stage lets kept graphs go after each backward (release.py)
    outputs: dict[int, Any] = field(default_factory=dict)  # chunk -> output, until its backward
    losses: dict[int, Any] = field(default_factory=dict)  # chunk -> split backward's loss
    said: set = field(default_factory=set)  # what was said of this stage (each line once)

    pooled = property(lambda self: self.decision is not None and self.decision.pooled)
    reason = property(lambda self: self.decision.reason if self.decision is not None else "")

    def usage(self, stage: int) -> list[RingUse]:
        """What each ring held during the last step, beside stock and the live set."""
        return [r.usage(stage) for r in self.rings.values()]


def stage_state(stage: Any) -> StageState | None:
    """The pool's state of ``stage``, or None for a stage pooltk has never seen."""
    return getattr(stage, "__dict__", {}).get(_ATTR)


def state_for(stage: Any, install: Any = None) -> StageState:
    """The state of ``stage``, made on first use; under ``install`` where one is given (what an
    earlier install said of the stage is forgotten: each install's report hears every line)."""
    state = stage_state(stage)
    if state is None:
        state = vars(stage)[_ATTR] = StageState()
    if install is not None and state.install is not install:
        state.install, state.said = install, set()
    return state


# -- setup: decide, let torch set up (its buffers placeholders), build the ring -------------------


def on_setup(stage: Any, call: Call, proceed: Any, *, target: SetupTarget, install: Any) -> Any:
    """A setup method that makes receive buffers ([Note: placeholders without patching])."""
    where, direction = getattr(stage, "stage_index", None), target.direction
    try:
        decision = decide(install_schedule=install.schedule, force=install.force, stage=stage)
    except PoolSetupError as exc:  # raised before the stage was known: named here, text included
        raise PoolSetupError(
            stage=where, direction=direction, cause=exc.cause, what=exc.what
        ) from exc.cause
    state = state_for(stage, install)
    state.phase, state.decision = SET_UP, decision
    state.release = False  # a pooled last stage starts it again at its first compute
    state.rings.pop(direction, None)
    state.handoff.pop(direction, None)
    if not decision.pooled:
        kept_stock(stage, install, decision.reason)
        return proceed()
    state.n_microbatches = call.n_microbatches
    factory = PlaceholderFactory() if target.alloc_free else None
    with factory if factory is not None else contextlib.nullcontext():
        result = proceed()  # on this thread only, for this call
    try:
        if decision.plan is not None and (stage.stage_index, direction) in decision.plan.handoff:
            state.handoff[direction] = handoff.drop_handoff_buffers(stage, direction, factory)
        else:
            _build_ring(stage, direction, state, factory)
    except Exception as exc:  # inside a recognised layout: loud, never a silent fallback
        what = f"building the {direction} ring"
        raise PoolSetupError(stage=where, direction=direction, cause=exc, what=what) from exc
    install.stages.add(stage)  # what uninstall gives stock buffers back to
    return result


@dataclass(eq=False)
class _Members:
    """The stages one ring serves, and its size: one stage, or a rank's stages that share it
    ([Note: rank-shared rings]; their ring is rebuilt over every member as each sets up)."""

    stages: dict[int, tuple[Any, list[int]]]  # index -> (stage, its infos' positions)
    live: int
    size: int
    slot_map: dict | None = None
    plan: Any = None
    ring: Ring | None = None


def _build_ring(stage: Any, direction: str, state: StageState, factory: Any) -> None:
    """The ring a just-set-up direction receives into, bound on its recv infos; buffers it does
    not take are made real (stock). A plan (``"auto"``) may share it across a rank's stages."""
    infos = recv_infos(stage, direction)
    positions = recv_positions(infos[0]) if infos else []
    if any(len(chunk_infos) != len(infos[0]) for chunk_infos in infos.values()):
        raise RuntimeError(INFOS_DIFFER)
    live, k = _live_and_size(stage, direction, state)
    if positions and k > 0:
        buffers = [infos[0][j].buffer for j in positions]  # what every slot's set is shaped like
        if state.decision.plan is not None and state.install.sharing == "rank":
            boundary = tuple(handoff.boundary_key(b, factory) for b in buffers)
            members = _rank_members(stage, direction, positions, boundary, state)
        else:
            members = _Members({stage.stage_index: (stage, positions)}, live, k)
        _make_ring(direction, members, buffers, state, factory)
    for chunk_infos in infos.values():  # placeholders no ring took: what stock torch would make
        for info in chunk_infos:
            if factory is not None and factory.is_placeholder(getattr(info, "buffer", None)):
                info.buffer = real_buffer(info.buffer, factory=factory)


def _live_and_size(stage: Any, direction: str, state: StageState) -> tuple[int, int]:
    """(live set, K) of one direction of this stage: 1F1B's closed form ([Note: ring sizes], slot
    ``c mod K``), or a plan's smallest safe ring from the schedule's action order (slack added)."""
    index, m, plan = stage.stage_index, state.n_microbatches, state.decision.plan
    if plan is None:
        n = stage.num_stages
        live = live_1f1b(n, index, m, direction)
        sized = {"stage": index, "num_stages": n}  # a harness may size a stage its own way
    else:
        live, sized = plan.min_safe.get((index, direction), 0), {}
    return live, state.install.ring_size(live=live, receives=m, direction=direction, **sized)


def _make_ring(
    direction: str, members: _Members, buffers: list, state: StageState, factory: Any
) -> None:
    """K sets shaped like ``buffers`` (an earlier ring's kept), bound on every member."""
    kept = members.ring.slots[: members.size] if members.ring else []
    sets = [list(slot.tensors) for slot in kept]
    while len(sets) < members.size:  # a slot's tensors are never leaves of a graph: its aliases are
        sets.append([real_buffer(b, factory=factory).detach() for b in buffers])
    requires_grad = [bool(b.requires_grad) for b in buffers]
    ring = Ring(
        stage=min(members.stages),
        direction=direction,
        live=members.live,
        n_microbatches=state.n_microbatches,
        slots=[Slot(tensors, list(requires_grad)) for tensors in sets],
        slot_map=members.slot_map,
        guard=state.install.guard,
        say=partial(_ring_said, state),
    )
    for index, (member, member_positions) in sorted(members.stages.items()):
        ring.add_member(index, recv_infos(member, direction), member_positions)
        state_for(member).rings[direction] = ring
    members.ring = ring


def _rank_members(
    stage: Any, direction: str, positions: list[int], boundary: tuple, state: StageState
) -> _Members:
    """This stage joins its rank's stages with the same ``boundary`` tensors on one ring, its
    slots coloured from the schedule's action order ([Note: rank-shared rings])."""
    from pooltk.analysis.sharing import rank_rings

    plan, me, install = state.decision.plan, stage.stage_index, state.install
    key = (direction, boundary)
    groups = install.groups.setdefault(state.decision.schedule_object(), {})
    members = groups.get(key)
    if members is None or me in members.stages or members.plan is not plan:
        members = groups[key] = _Members({}, 0, 0, plan=plan)
    members.stages[me] = (stage, positions)
    keys = {(s, direction): key for s in members.stages}
    spans = [b for b in plan.spans if (b.stage, b.direction) in keys]

    def size(live: int, receives: int, d: str) -> int:
        return install.ring_size(live=live, receives=receives, direction=d)

    (mine,) = [r for r in rank_rings(plan.program, spans, size, groups=keys) if me in r.stages]
    members.live, members.size = mine.live, mine.size
    members.slot_map = dict(mine.slots) if mine.shared else None
    return members


def _ring_said(state: StageState, kind: str, **fields: Any) -> None:
    """What a ring says: each re-home (the first of each stage's direction a WARNING), and once
    that it saved nothing."""
    key = (kind, fields["stage"], fields["direction"])
    events.say(state, kind, key=key, again=kind == "re-homed", **fields)


def kept_stock(stage: Any, install: Any, reason: str) -> None:
    """Say (once per stage and reason) that ``stage`` keeps torch's buffers, and why."""
    state = state_for(stage, install)
    events.say(state, "kept-stock", stage=getattr(stage, "stage_index", "?"), reason=reason)


# -- compute: the first one after a setup, then each forward and backward -------------------------


def before_forward(stage: Any, call: Call, *, install: Any) -> None:
    """The first compute after a setup says the rings; a last stage's release starts once."""
    state = stage_state(stage)
    another = state is None or state.install is not install
    if another or state.phase in (NEW, SET_UP):
        _first_use(stage, install, another=another)
    elif _release_due(stage, state):
        start_release(stage, state, install.layout.name)


def _first_use(stage: Any, install: Any, *, another: bool) -> None:
    """Once per setup, and at the first compute under ``another`` install ([Note: a stage's
    life])."""
    state = state_for(stage, install)
    if state.phase == SET_UP and state.pooled:
        _say_pooled(stage, state)
    elif install.layout.per_receive:  # the release is the whole pool
        state.decision, state.release = decide_lazy(stage), False
        install.stages.add(stage)  # what uninstall gives back
        if not state.pooled:
            kept_stock(stage, install, state.reason)
    elif state.phase == NEW or another:  # set up before this install: stock until its next setup
        state.phase = LATE
        if recv_infos(stage, "forward"):
            kept_stock(stage, install, _SET_UP_EARLY)
        return
    state.phase = RUNNING
    if _release_due(stage, state):
        start_release(stage, state, install.layout.name)


def _release_due(stage: Any, state: StageState) -> bool:
    due = state.pooled and not state.release and stage.is_last and stage.has_backward
    return due and state.install is not None and state.install.config.release


def _say_pooled(stage: Any, state: StageState) -> None:
    """``stage I pooled (fwd ring K/M, grad ring K/M)``, then shared and handoff lines."""
    m, index, sizes = state.n_microbatches, stage.stage_index, []
    for direction in api.RECV_INFO_ATTRS:
        first = recv_infos(stage, direction).get(0)
        stock = m if first and recv_positions(first) and direction not in state.handoff else 0
        sizes.append(state.rings[direction].size if direction in state.rings else stock)
    events.say(state, "pooled", stage=index, forward=sizes[0], grad=sizes[1], n_microbatches=m)
    for ring in state.rings.values():
        if ring.shared:
            use = ring.usage(index)
            events.say(state, "shared", **use.to_dict(), receives=use.stock)
    for direction in state.handoff:
        events.say(state, "handoff", stage=index, direction=direction)


def after_forward(stage: Any, call: Call, output: Any, *, install: Any) -> Any:
    """Keep the output for the release; in a forward-only step the chunk is done now."""
    state, chunk = stage_state(stage), call.chunk
    if state is None:
        return output
    if not stage.has_backward:
        return _forward_only_done(stage, state, chunk, output, install)
    if state.release:
        state.outputs[chunk] = output
    return output


def _forward_only_done(stage: Any, state: StageState, chunk: int, output: Any, install: Any) -> Any:
    """A forward-only step's chunk: its kept graph goes ([Note: forward-only steps]), its inputs
    rest again, its slot and what a handoff gave it are free."""
    cached = api.cached_forward(stage, chunk)
    if state.pooled and install.config.release:
        output = forward_only(stage, chunk, cached, output)
    ring = state.rings.get("forward")
    if ring is not None and cached is not None:
        ring.retire_inputs((stage.stage_index, chunk), cached[1])
    if ring is not None:
        ring.release((stage.stage_index, chunk))
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
        if state is not None and tc.is_version_error(exc):
            named = name_reuse(
                exc, stage=stage.stage_index, rings=state.rings, microbatch=call.chunk
            )
            if named is not None:
                raise named from exc
        raise


def after_backward(stage: Any, call: Call, result: Any) -> Any:
    """A full backward is done with its chunk; a split one waits for its weight pass."""
    state = stage_state(stage)
    if state is not None and stage.has_backward:
        if call.full_backward:
            _backward_finished(stage, state, call.chunk, call.loss)
        elif state.release:  # the weight pass still walks this graph
            state.losses[call.chunk] = call.loss
    return result


def after_weight(stage: Any, call: Call, result: Any) -> Any:
    state = stage_state(stage)
    if state is not None:
        _backward_finished(stage, state, call.chunk, state.losses.pop(call.chunk, None))
    return result


def _backward_finished(stage: Any, state: StageState, chunk: int, loss: Any) -> None:
    """The chunk's backward is complete: its slots ([Note: slot ownership]), what a handoff gave
    it and its kept graph go."""
    for ring in state.rings.values():
        ring.release((stage.stage_index, chunk))
    if state.handoff:
        handoff.drop_handed(stage, state.handoff, chunk)
    if state.release:
        release_chunk(stage, state, chunk, loss)


# -- receives, sends, a local gradient, the reset, giving stock back ------------------------------


def _receiving_ring(stage: Any, direction: str) -> Ring | None:
    """The ring this direction's receives post into now (None: stock, or no gradients)."""
    state = stage_state(stage)
    if state is None or (direction == "grad" and not stage.has_backward):
        return None
    return state.rings.get(direction)


def before_recv(stage: Any, call: Call, *, direction: str) -> None:
    """Claim the chunk's slot and hand its receive fresh aliases ([Note: the ring])."""
    ring = _receiving_ring(stage, direction)
    if ring is not None:
        infos = recv_infos(stage, direction)[call.chunk]
        ring.post((stage.stage_index, call.chunk), infos, training=stage.has_backward)


def after_recv(stage: Any, call: Call, ops: Any, *, direction: str) -> Any:
    ring = _receiving_ring(stage, direction)
    if ring is not None:
        ring.note_recvs((stage.stage_index, call.chunk), ops)
    return ops


def after_send(stage: Any, call: Call, ops: Any) -> Any:
    """Remember the sends that pass received tensors on ([Note: finished sends])."""
    ring = _receiving_ring(stage, "forward")
    if ring is not None:
        ring.note_sends((stage.stage_index, call.chunk), ops)
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
    """A live stage's rings and handoff placeholders become stock buffers (one per chunk); a chunk
    that received and has not read yet keeps its slot's storage, now its own."""
    state = stage_state(stage)
    if state is None:
        return False
    had = bool(state.handoff or state.rings)
    for direction, templates in state.handoff.items():
        for infos in recv_infos(stage, direction).values():
            for j, (like, device) in templates.items():
                if getattr(infos[j].buffer, "is_meta", False):
                    infos[j].buffer = real_buffer(like, device=device)
    for direction, ring in state.rings.items():
        for chunk, infos in recv_infos(stage, direction).items():
            unread = ring.unread((stage.stage_index, chunk))  # mid-step: it keeps its data
            for j in ring.members.get(stage.stage_index, ()):
                buffer = infos[j].buffer
                if isinstance(buffer, torch.Tensor) and not any(buffer is t for t in unread):
                    infos[j].buffer = real_buffer(buffer)
    state.phase, state.decision, state.release = NEW, None, False
    for kept in (state.rings, state.handoff, state.outputs, state.losses):
        kept.clear()
    if had:
        said = events.event("unpooled", stage=getattr(stage, "stage_index", "?"), reason=why)
        events.emit(install.events if install is not None else None, said)
    return had


# -- the hook table: which function runs around which torch method ([Note: binding]) --------------


def setup_hooks(target: SetupTarget, install: Any) -> Hooks:
    return Hooks(raw=partial(on_setup, target=target, install=install))


def runtime_hooks(layout: Layout, install: Any) -> dict[str, Hooks]:
    def recv(direction: str) -> Hooks:
        return Hooks(
            before=partial(before_recv, direction=direction),
            after=partial(after_recv, direction=direction),
        )

    table = {
        api.POST_FORWARD_RECV: recv("forward"),
        api.POST_GRAD_RECV: recv("grad"),
        api.POST_FORWARD_SEND: Hooks(after=after_send),
        api.FORWARD: Hooks(
            before=partial(before_forward, install=install),
            after=partial(after_forward, install=install),
        ),
        api.BACKWARD: Hooks(around=naming_reuse, after=after_backward),
        api.BACKWARD_WEIGHT: Hooks(around=naming_reuse, after=after_weight),
        api.LOCAL_GRAD: Hooks(before=before_local_grad),
        api.RESET: Hooks(after=after_reset),
    }
    return {name: table[name] for name in runtime_names(layout)}


def runtime_names(layout: Layout) -> tuple[str, ...]:
    """The runtime methods the pool wraps on ``layout`` (the lazy layout: compute and reset)."""
    eager = api.HOT_METHODS + api.SEND_METHODS + api.HANDOFF_METHODS
    return (api.RELEASE_METHODS if layout.per_receive else eager) + api.OPTIONAL_HOT_METHODS
