"""A torch schedule's own action order, per rank, with every receive post in place.

This is the one module that touches ``torch.distributed.pipelining`` internals for the
schedule analysis (:mod:`pooltk.analysis.lifetimes`). It builds a schedule object WITHOUT a
process group, on stand-in stage objects that carry only the attributes the schedule
constructors read, and turns the schedule into a :class:`Program`: for each rank, the
ordered events (receive posts, compute actions, sends) that rank runs in one step.

Two sources, chosen by the kind of schedule:

- multi-stage runtime schedules (``Interleaved1F1B``, ``LoopedBFS``,
  ``InterleavedZeroBubble``, ``ZBVZeroBubble``, ``DualPipeV``): torch lowers the
  compute-only order into ``pipeline_order_with_comms`` with explicit ``RECV_F`` /
  ``RECV_B`` actions (optionally moved late by ``_defer_recv_ops`` when the schedule is
  built with ``defer_pp_recv=True``), and the runtime posts each receive exactly when it
  meets that action. The program is that list, read as is.
- single-stage schedules (``1F1B``, ``GPipe``): there are no comm actions in any IR; the
  receives are posted from inside ``_step_microbatches``. See [Note: recording a
  single-stage step].

[Note: recording a single-stage step]
For ``Schedule1F1B`` and ``ScheduleGPipe`` the receive posts live in the code of
``_step_microbatches``, so the program is taken by running torch's own
``_step_microbatches`` against a recording stand-in stage: ``get_fwd_recv_ops(k)`` /
``get_bwd_recv_ops(k)`` return marker ops, ``forward_one_chunk`` /
``backward_one_chunk`` record the compute, and the step function is re-made from its own
code with recorders in place of the module-level ``_batch_p2p`` / ``_sorted_batch_p2p`` /
``_wait_batch_p2p`` (torch's module is not modified), so an op is "posted" at the moment
torch hands it to a batch. Read
from torch 2.13's ``Schedule1F1B._step_microbatches``, the result for stage ``i`` of
``N`` with ``W = min(M, N - i)`` is:

- warmup: ``RECV_F k`` (waited at once), ``F k`` for ``k < W``;
- steady state: the batch ``[SEND_F pending, RECV_B j]`` posts the grad receive for ``j``
  right before ``B j``; then the batch ``[SEND_B j, RECV_F j+W]`` posts the forward
  receive for ``j + W`` *after* ``B j`` has finished, right before ``F j+W``;
- cooldown: ``RECV_B j`` right before ``B j``.

So on stage ``i`` activation ``k`` lives from its post to ``B k``, and the next post
(``k + W``) comes after ``B k``: at most ``W`` forward buffers are live, and one grad
buffer (``RECV_B j+1`` is posted after ``B j``). GPipe posts ``RECV_F k`` right before
``F k`` for all ``k`` before any backward, so all ``M`` activations are live. The
recording is cross-checked against the compute order of torch's own
``_get_pipeline_order()`` where torch provides one; a disagreement refuses the analysis.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass
from typing import Any

from pooltk._validate import check_int
from pooltk.analysis.catalog import (  # re-exported: programs were the catalog's home before
    CATALOG,
    CatalogEntry,
    ScheduleAnalysisError,
    Style,
    analysable_schedules,
    is_single_stage,
    resolve_schedule,
    v_schedules,
)

__all__ = [
    "CATALOG",
    "COMPUTE_KINDS",
    "CatalogEntry",
    "EVENT_KINDS",
    "Event",
    "Program",
    "ScheduleAnalysisError",
    "ScheduleShape",
    "analysable_schedules",
    "as_shape",
    "is_single_stage",
    "program",
    "program_of",
    "resolve_schedule",
    "v_schedules",
]

# Event kinds a Program may contain. Anything else in a schedule refuses the analysis.
COMPUTE_KINDS: tuple[str, ...] = ("F", "B", "I", "W")
EVENT_KINDS: tuple[str, ...] = COMPUTE_KINDS + ("RECV_F", "RECV_B", "SEND_F", "SEND_B")
# Actions torch's lowering adds that neither post, read nor release a receive buffer.
INERT_KINDS: frozenset[str] = frozenset(
    {"UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_SEND_F", "WAIT_SEND_B", "WAIT_REDUCE_GRAD"}
)
"""Action kinds that neither post, consume nor release a receive buffer: FSDP unshard / reshard /
gradient reduction, and torch 2.15's waits on sends and reductions."""
_BACKWARD_KINDS = frozenset({"RECV_B", "SEND_B", "B", "I", "W"})
"""What a forward-only step skips: eval()'s get_bwd_*_ops return [] and backward_one_chunk returns
at once."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleShape:
    """One schedule at one shape: everything the analysis needs to build its action order.

    Hashable (so analyses are memoised per shape) unless ``schedule_kwargs`` holds an
    unhashable value; then the analysis simply runs uncached.
    """

    schedule: str | type
    """torch's name as ``get_schedule_class`` matches it (case-insensitive), or the class."""
    pp: int
    """Pipeline-parallel ranks."""
    n_microbatches: int
    """Microbatches per step."""
    stages_per_rank: int = 1
    """Stages each rank runs (virtual pipeline size; 2 for the V schedules)."""
    style: Style | None = None
    """Stage placement, ``"loop"`` or ``"v"``; ``None`` for the schedule's own."""
    forward_only: bool = False
    """An eval-style step: no backward, no grad receives, activations released at F."""
    defer_pp_recv: bool = False
    """torch 2.13+'s late receive posting for runtime schedules."""
    schedule_kwargs: tuple[tuple[str, Any], ...] = ()
    """Extra schedule-constructor keywords, as sorted ``(name, value)`` pairs."""


_SHAPE_FIELDS = frozenset(
    ("pp", "n_microbatches", "stages_per_rank", "style", "forward_only", "defer_pp_recv")
)


def as_shape(schedule: str | type | ScheduleShape, /, **keywords: Any) -> ScheduleShape:
    """A :class:`ScheduleShape` from a shape, or from a schedule plus its fields as keywords.

    Keywords that name a field (``pp``, ``n_microbatches``, ``stages_per_rank``, ``style``,
    ``forward_only``, ``defer_pp_recv``) set it; any other keyword goes to the schedule's
    constructor. A shape passed as is takes no keywords.
    """
    if isinstance(schedule, ScheduleShape):
        if keywords:
            raise TypeError(
                f"as_shape: a ScheduleShape takes no further keywords; found {sorted(keywords)}."
            )
        return schedule
    fields = {k: v for k, v in keywords.items() if k in _SHAPE_FIELDS}
    extra = tuple(sorted((k, v) for k, v in keywords.items() if k not in _SHAPE_FIELDS))
    missing = sorted({"pp", "n_microbatches"} - set(fields))
    if missing:
        raise TypeError(
            f"{getattr(schedule, '__name__', schedule)}: missing shape keyword(s) {missing}; "
            "required pp= and n_microbatches=."
        )
    return ScheduleShape(schedule=schedule, schedule_kwargs=extra, **fields)


@dataclass(frozen=True, slots=True)
class Event:
    """One thing a rank does, at one position of its action order."""

    step: int
    """Position in the rank's action order (sub-actions of OVERLAP_F_B share one step)."""
    kind: str
    """One of :data:`EVENT_KINDS`."""
    stage: int
    """Pipeline stage the event belongs to (for RECV_*: the receiving stage)."""
    microbatch: int
    """Microbatch index."""


@dataclass(frozen=True, slots=True)
class Program:
    """Every rank's ordered events for one step of a schedule."""

    schedule: str
    """Canonical torch name (``"1F1B"``, ``"Interleaved1F1B"``, ...)."""
    pp: int
    """Pipeline-parallel ranks."""
    stages_per_rank: int
    """Stages each rank runs (virtual pipeline size)."""
    n_microbatches: int
    """Microbatches per step."""
    forward_only: bool
    """True for an eval-style step (no backward, no grad receives)."""
    defer_pp_recv: bool
    """True when torch's ``_defer_recv_ops`` moved each receive late."""
    stage_to_rank: dict[int, int]
    """Which rank runs each stage."""
    events: dict[int, tuple[Event, ...]]
    """Per rank, the events in execution order."""
    source: str
    """Where the order came from (recorded ``_step_microbatches`` or
    ``pipeline_order_with_comms``)."""

    @property
    def num_stages(self) -> int:
        return len(self.stage_to_rank)


# --------------------------------------------------------------------------- stand-in stages


class _StandInStage:
    """The attributes schedule constructors read, and nothing that allocates or communicates."""

    def __init__(self, stage_index: int, num_stages: int, group_rank: int, group_size: int) -> None:
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_rank = group_rank
        self.group_size = group_size
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = None
        self.stage_index_to_group_rank: dict[int, int] = {}
        self.has_backward = True


@dataclass(frozen=True, slots=True)
class _Op:
    kind: str
    stage: int
    microbatch: int


class _RecordingStage(_StandInStage):
    """A single stage that records what torch's ``_step_microbatches`` asks of it."""

    def __init__(
        self, stage_index: int, num_stages: int, has_backward: bool, log: list[tuple[str, int, int]]
    ) -> None:
        super().__init__(stage_index, num_stages, stage_index, num_stages)
        self.has_backward = has_backward
        self._log = log
        self.output_chunks: list[Any] = []

    # ops are markers; they are "posted" when torch hands them to a batch (see _recording_step)
    def get_fwd_recv_ops(self, k: int) -> list[_Op]:
        return [] if self.is_first else [_Op("RECV_F", self.stage_index, k)]

    def get_bwd_recv_ops(self, k: int) -> list[_Op]:
        return (
            [] if (self.is_last or not self.has_backward) else [_Op("RECV_B", self.stage_index, k)]
        )

    def get_fwd_send_ops(self, k: int) -> list[_Op]:
        return [] if self.is_last else [_Op("SEND_F", self.stage_index, k)]

    def get_bwd_send_ops(self, k: int) -> list[_Op]:
        return (
            [] if (self.is_first or not self.has_backward) else [_Op("SEND_B", self.stage_index, k)]
        )

    def forward_one_chunk(self, k: int, *args: Any, **kwargs: Any) -> None:
        self._log.append(("F", self.stage_index, k))

    def backward_one_chunk(
        self, k: int, *args: Any, full_backward: bool = True, **kwargs: Any
    ) -> None:
        if self.has_backward:
            self._log.append(("B" if full_backward else "I", self.stage_index, k))

    def backward_weight_one_chunk(self, k: int, *args: Any, **kwargs: Any) -> None:
        if self.has_backward:
            self._log.append(("W", self.stage_index, k))

    def perform_reduce_grad(self, *args: Any, **kwargs: Any) -> None:
        return None

    def release_fwd_send_outputs(
        self, k: int
    ) -> None:  # torch 2.15: a sent activation let go early
        return None

    def clear_runtime_states(self) -> None:
        return None


def _recording_step(sched: Any, log: list[tuple[str, int, int]]) -> Any:
    """torch's ``_step_microbatches`` for ``sched``, bound, reading recorders for its batch helpers.

    The function is re-made from its own code with a copy of its module globals in which
    ``_batch_p2p`` / ``_sorted_batch_p2p`` / ``_wait_batch_p2p`` record instead of
    communicating; torch's module itself is never modified, so a pipeline running in
    another thread is unaffected.
    """
    fn = type(sched)._step_microbatches
    names = ("_batch_p2p", "_sorted_batch_p2p", "_wait_batch_p2p")
    missing = [n for n in names if n not in fn.__globals__]
    if missing:
        raise ScheduleAnalysisError(
            f"this torch's {fn.__module__} lacks {', '.join(missing)}; pooltk cannot record where "
            "single-stage schedules post receives. Required: torch 2.11-2.15."
        )

    def post(ops: list[Any]) -> None:
        for op in ops:
            if not isinstance(op, _Op):
                raise ScheduleAnalysisError(
                    f"unexpected P2P op {op!r} while recording a single-stage step."
                )
            log.append((op.kind, op.stage, op.microbatch))

    def batch_p2p(ops: list[Any], desc: str | None = None) -> list[Any]:
        post(ops)
        return []

    def sorted_batch_p2p(ops: list[Any], desc: str | None = None) -> dict[int, list[Any]]:
        post(ops)
        return {}

    def wait(work: Any) -> None:
        return None

    scope = {
        **fn.__globals__,
        "_batch_p2p": batch_p2p,
        "_sorted_batch_p2p": sorted_batch_p2p,
        "_wait_batch_p2p": wait,
    }
    copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return types.MethodType(copy, sched)


def _dummy_loss(*args: Any, **kwargs: Any) -> None:  # never called: loss hooks are stubbed
    return None


def _construct(
    cls: type, stage_arg: Any, n_microbatches: int, forward_only: bool, kwargs: dict[str, Any]
) -> Any:
    try:
        return cls(
            stage_arg, n_microbatches, loss_fn=None if forward_only else _dummy_loss, **kwargs
        )
    except (ValueError, TypeError, AssertionError, RuntimeError) as exc:
        raise ScheduleAnalysisError(
            f"torch refused to build {cls.__name__} for this shape: {exc}"
        ) from exc


def _single_stage_program(name: str, cls: type, shape: ScheduleShape) -> Program:
    """Record torch's ``_step_microbatches`` once per stage. See [Note: recording a single-stage
    step]."""
    pp, n_microbatches, forward_only = shape.pp, shape.n_microbatches, shape.forward_only
    kwargs = dict(shape.schedule_kwargs)
    events: dict[int, tuple[Event, ...]] = {}
    sched: Any = None
    for stage_index in range(pp):
        log: list[tuple[str, int, int]] = []
        stage = _RecordingStage(stage_index, pp, not forward_only, log)
        if sched is None:  # torch builds every rank's IR in __init__: build once, swap the stage
            sched = _construct(cls, stage, n_microbatches, forward_only, kwargs)
        sched._stage = stage
        sched._has_backward = not forward_only
        # Loss plumbing and stage initialisation need real tensors; none of it posts receives.
        sched._initialize_stage = lambda *a, **k: None
        sched._maybe_compute_loss = lambda *a, **k: None
        sched._maybe_get_loss = lambda *a, **k: None
        sched._update_losses = lambda *a, **k: None
        params = inspect.signature(sched._step_microbatches).parameters
        call_kwargs: dict[str, Any] = {"return_outputs": False}
        if "loss_kwargs" in params:
            call_kwargs["loss_kwargs"] = None
        try:
            _recording_step(sched, log)(
                [()] * n_microbatches, [{}] * n_microbatches, None, None, **call_kwargs
            )
        except ScheduleAnalysisError:
            raise
        except Exception as exc:  # an attribute or call the stand-in does not provide
            raise ScheduleAnalysisError(
                f"recording {name}._step_microbatches on a stand-in stage failed "
                f"({type(exc).__name__}: {exc}); this torch's single-stage step uses something "
                "pooltk does not model, so it refuses to analyse it."
            ) from exc
        events[stage_index] = tuple(Event(t, kind, st, mb) for t, (kind, st, mb) in enumerate(log))
        _check_against_torch_order(name, sched, stage_index, events[stage_index], forward_only)
    return Program(
        schedule=name,
        pp=pp,
        stages_per_rank=1,
        n_microbatches=n_microbatches,
        forward_only=forward_only,
        defer_pp_recv=False,
        stage_to_rank={i: i for i in range(pp)},
        events=events,
        source=f"recorded {cls.__name__}._step_microbatches",
    )


def _check_against_torch_order(
    name: str, sched: Any, rank: int, events: tuple[Event, ...], forward_only: bool
) -> None:
    """The recorded F/B sequence must follow torch's own IR for the rank, where torch has one.

    Only the sequence of compute kinds is compared, not microbatch labels: torch 2.13's
    ``Schedule1F1B._get_pipeline_order`` (a visualisation aid) labels the last rank's
    forwards 1..M instead of 0..M-1, while ``_step_microbatches`` (what runs) does 0..M-1.
    """
    order = getattr(sched, "pipeline_order", None)
    if forward_only or not isinstance(order, dict) or rank not in order:
        return
    theirs = [
        a.computation_type.value
        for a in order[rank]
        if a is not None and a.computation_type.value in COMPUTE_KINDS
    ]
    ours = [e.kind for e in events if e.kind in COMPUTE_KINDS]
    if theirs != ours:
        raise ScheduleAnalysisError(
            f"{name}: the compute order recorded from _step_microbatches on rank {rank} "
            f"({''.join(ours)}) differs from torch's _get_pipeline_order ({''.join(theirs)}); the "
            "derivation is not verified on this torch, so pooltk refuses to analyse it."
        )


def _runtime_program(name: str, cls: type, shape: ScheduleShape, style: Style) -> Program:
    """Read ``pipeline_order_with_comms`` of a runtime schedule built on stand-in stages (``style``
    resolved)."""
    from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping

    num_stages = shape.pp * shape.stages_per_rank
    try:
        mapping = generate_stage_to_rank_mapping(shape.pp, num_stages, style=style)
    except ValueError as exc:
        raise ScheduleAnalysisError(f"{name}: {exc}") from exc
    stages = [
        _StandInStage(i, num_stages, 0, shape.pp) for i in range(num_stages) if mapping[i] == 0
    ]
    kwargs = dict(shape.schedule_kwargs)
    if shape.defer_pp_recv:
        if "defer_pp_recv" not in inspect.signature(cls.__init__).parameters:
            raise ScheduleAnalysisError(
                f"defer_pp_recv=True: {cls.__name__} on this torch does not accept it (torch 2.13+ "
                "runtime schedules do). Fix: drop defer_pp_recv, or use torch >= 2.13."
            )
        kwargs["defer_pp_recv"] = True
    sched = _construct(cls, stages, shape.n_microbatches, shape.forward_only, kwargs)
    order = getattr(sched, "pipeline_order_with_comms", None)
    if not isinstance(order, dict) or not order:
        raise ScheduleAnalysisError(
            f"{name}: no pipeline_order_with_comms after construction; a runtime schedule without "
            "a lowered action list (e.g. one meant to load a CSV) cannot be analysed."
        )
    events = {
        rank: rank_events(name, rank, actions, forward_only=shape.forward_only)
        for rank, actions in order.items()
    }
    return Program(
        schedule=name,
        pp=shape.pp,
        stages_per_rank=shape.stages_per_rank,
        n_microbatches=shape.n_microbatches,
        forward_only=shape.forward_only,
        defer_pp_recv=shape.defer_pp_recv,
        stage_to_rank=dict(getattr(sched, "stage_index_to_group_rank", mapping)),
        events=events,
        source="pipeline_order_with_comms"
        + (" after _defer_recv_ops" if shape.defer_pp_recv else ""),
    )


def rank_events(name: str, rank: int, actions: list, *, forward_only: bool) -> tuple[Event, ...]:
    """One rank's lowered actions as events: an overlap's sub-actions in turn, inert kinds dropped,
    and in a forward-only step the backward's.

    Raises:
        ScheduleAnalysisError: an action of a kind pooltk does not model, or without a microbatch.
    """
    out: list[Event] = []
    for t, action in enumerate(actions):
        if action is None:
            continue
        for a in action.sub_actions if getattr(action, "sub_actions", None) else (action,):
            kind = a.computation_type.value
            if kind in INERT_KINDS:
                continue
            if kind not in EVENT_KINDS:
                raise ScheduleAnalysisError(
                    f"{name}: rank {rank} step {t} has action {a!r} of kind {kind!r}, which pooltk "
                    "does not model (known: "
                    f"{', '.join(EVENT_KINDS + tuple(sorted(INERT_KINDS)))})."
                )
            if a.microbatch_index is None:
                raise ScheduleAnalysisError(
                    f"{name}: rank {rank} step {t}: action {a!r} has no microbatch."
                )
            if not (forward_only and kind in _BACKWARD_KINDS):
                out.append(Event(t, kind, a.stage_index, a.microbatch_index))
    return tuple(out)


def program(schedule: str | type | ScheduleShape, /, **shape: Any) -> Program:
    """Build ``schedule`` on stand-in stages and return every rank's ordered events.

    Args:
        schedule: a :class:`ScheduleShape`, or torch's name (case-insensitive) or class with
            the shape's fields as keywords (``pp=``, ``n_microbatches=``, optional
            ``stages_per_rank=``, ``style=``, ``forward_only=``, ``defer_pp_recv=``); any other
            keyword is passed to the schedule constructor. See :func:`as_shape`.

    Raises:
        ScheduleAnalysisError: the schedule or shape cannot be analysed (the message says why).
    """
    return program_of(as_shape(schedule, **shape))


def program_of(shape: ScheduleShape) -> Program:
    """:func:`program` for a :class:`ScheduleShape`."""
    name, cls = resolve_schedule(shape.schedule)
    pp, n_microbatches, stages_per_rank = shape.pp, shape.n_microbatches, shape.stages_per_rank
    style, defer_pp_recv = shape.style, shape.defer_pp_recv
    for label, value in (
        ("pp", pp),
        ("n_microbatches", n_microbatches),
        ("stages_per_rank", stages_per_rank),
    ):
        check_int(label, value, low=1, error=ScheduleAnalysisError)
    own_style: Style = CATALOG[name].style if name in CATALOG else "loop"
    if style is None:
        style = own_style
    if style not in ("loop", "v"):
        raise ScheduleAnalysisError(
            f"style: found {style!r}; required 'loop' or 'v' (or None for the schedule's own)."
        )
    if style != own_style and name in CATALOG and CATALOG[name].stages_per_rank > 1:
        raise ScheduleAnalysisError(
            f"style: found {style!r}; {name} places stages {own_style!r}-style. Fix: pass "
            f"style={own_style!r} or None."
        )
    if is_single_stage(cls):
        if stages_per_rank != 1:
            raise ScheduleAnalysisError(
                f"stages_per_rank: found {stages_per_rank}; {name} runs one stage per rank. Fix: "
                "pass 1, or pick a multi-stage schedule such as Interleaved1F1B."
            )
        if defer_pp_recv:
            raise ScheduleAnalysisError(
                f"defer_pp_recv=True: {name} is a single-stage schedule with no lowered receive "
                "actions to defer (it already posts each receive right before the compute that "
                "needs it). Fix: drop defer_pp_recv."
            )
        return _single_stage_program(name, cls, shape)
    return _runtime_program(name, cls, shape, style)
