"""Every storage a replay allocates, when it is freed, and what it holds: the allocation log and its
peak.

[Note: tracking storages]
A dispatch mode sees every aten op's outputs. Each output tensor's untyped storage is logged once
(views and in-place results share a storage already logged) with its bytes, the position in the
log, and the *context* the replay was in (the phase: build, inputs, setup, post, forward, loss,
backward, optimizer, schedule; and the stage, microbatch and step). ``weakref.finalize`` on the
storage logs its free: torch keeps one Python object per live storage, so the callback fires when
the last holder (a tensor, a view, an autograd node's saved variable) lets go. ``torch``'s own
``MemTracker`` refuses a module called more than once a step, which every microbatch does; this
log does not care who allocates.

Tensors on the ``meta`` device are never logged (they have no memory); the replay uses them as
placeholders. Internal kernel workspaces never reach Python and are not logged (on a GPU:
cuBLAS and attention workspaces; see what the estimate does not model in
:mod:`pooltk.memory.replay.estimate`).

What a storage holds (its *category*, :data:`CATEGORIES`) is decided after the fact: it starts
from the phase it was allocated in and is re-labelled when the replay learns more (a storage that
becomes a parameter's ``.grad``, an optimizer state, a receive buffer, a kept loss). So the
categories at the peak are read by sweeping the log once the run is over, with every label final
(:meth:`StorageLog.at`). The peak itself (bytes live at once) is tracked as the run goes.

The same log runs over fake tensors (:class:`FakeTracker`, a ``FakeTensorMode``: no memory is
allocated) and over real CPU tensors (:class:`RealTracker`, a ``TorchDispatchMode``): the test
that the two agree byte for byte per category is what vouches for the fake run.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import _DISPATCH_META_HANDLERS as _META_HANDLERS
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

__all__ = [
    "CATEGORIES",
    "CATEGORY_LABELS",
    "Context",
    "FakeTracker",
    "PeakPoint",
    "RealTracker",
    "StorageLog",
]

CATEGORIES: tuple[str, ...] = (
    "parameters",
    "gradients",
    "optimizer",
    "activations",
    "recv_buffers",
    "kept_outputs",
    "transient",
    "inputs",
)
"""What a storage holds, in the order the figures stack them."""

CATEGORY_LABELS: dict[str, str] = {
    "parameters": "parameters (and module buffers)",
    "gradients": "gradients (.grad)",
    "optimizer": "optimizer states",
    "activations": "activations (allocated in a forward or the loss, still held: saved for "
    "backward)",
    "recv_buffers": "receive buffers",
    "kept_outputs": "the schedule's kept losses and outputs",
    "transient": "transient (allocated in a backward, recompute or optimizer step, still live)",
    "inputs": "the step's batch (stage-0 inputs, last-stage targets)",
}
"""One line per category for tables and legends."""

_PHASE_CATEGORY: dict[str, str] = {
    "build": "parameters",
    "inputs": "inputs",
    "setup": "recv_buffers",
    "post": "recv_buffers",
    "forward": "activations",
    "loss": "activations",
    "backward": "transient",
    "optimizer": "transient",
    "schedule": "transient",
}
"""The category a storage starts with, by the phase it is allocated in (re-labelled later where the
replay learns more)."""

_RECV_OPS = frozenset({torch.ops.c10d.recv_.default, torch.ops.c10d.recv_any_source_.default})
"""The c10d ops that write a receive buffer (their first argument: a list of tensors)."""


@dataclass(slots=True)
class Context:
    """Where the replay is: what an allocation is charged to."""

    phase: str = "build"
    """One of the phases of [Note: tracking storages]."""
    stage: int = -1
    """The stage computing (-1: none)."""
    microbatch: int = -1
    """The microbatch computing (-1: none)."""
    step: int = -1
    """The step (0-based; -1 before the measured steps)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class PeakPoint:
    """Where in the run the most bytes were live at once."""

    bytes: int
    """Bytes live at that moment (every category)."""
    position: int
    """Position in the allocation log."""
    phase: str
    """The phase the replay was in."""
    stage: int
    """The stage computing (-1: none)."""
    microbatch: int
    """The microbatch computing (-1: none)."""
    step: int
    """The step (0-based)."""
    op: str
    """The aten op whose output made the peak."""

    def describe(self) -> str:
        """e.g. ``step 0, backward of microbatch 3 on stage 1 (aten.mm.default)``."""
        what = (
            self.phase if self.microbatch < 0 else f"{self.phase} of microbatch {self.microbatch}"
        )
        where = f" on stage {self.stage}" if self.stage >= 0 else ""
        return f"step {self.step}, {what}{where} ({self.op})"


class _Record:
    __slots__ = ("category", "nbytes", "phase")

    def __init__(self, nbytes: int, category: str, phase: str) -> None:
        self.nbytes = nbytes
        self.category = category
        self.phase = phase


def _device_type(t: torch.Tensor) -> str:
    """A tensor's device type, read without a dispatch (a fake tensor's ``.device`` is an op of its
    mode)."""
    fake = getattr(t, "fake_device", None)
    return (fake if fake is not None else t.device).type


class StorageLog:
    """The allocation log: records, their alloc and free positions, the running total and the
    peak."""

    def __init__(self) -> None:
        self.context = Context()
        self.records: list[_Record] = []
        self.events: list[int] = []  # record index, or ~index for its free
        self.live: dict[int, int] = {}  # storage key -> record index
        self.current = 0
        self.measuring = False
        self.measure_start = 0
        self.peak: PeakPoint | None = None
        self._peak_bytes = -1
        self.skip_phase: str | None = None
        self.skipped: list[weakref.ref] = []

    # ------------------------------------------------------------------ logging

    def _free(self, key: int, index: int) -> None:
        if self.live.get(key) == index:
            del self.live[key]
        self.current -= self.records[index].nbytes
        self.events.append(~index)

    def log_outputs(self, func: Any, out: Any) -> None:
        """Log every storage among ``out`` not seen before (see [Note: tracking storages])."""
        if isinstance(out, torch.Tensor):
            outs: Any = (out,)
        elif isinstance(out, (tuple, list)) and all(
            isinstance(t, torch.Tensor) or t is None for t in out
        ):
            outs = out
        else:
            outs = tree_flatten(out)[0]
        for t in outs:
            if not isinstance(t, torch.Tensor) or _device_type(t) == "meta":
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in self.live:
                continue
            if self.skip_phase is not None and self.context.phase == self.skip_phase:
                self.skipped.append(weakref.ref(storage))
                continue
            n = storage.nbytes()
            ctx = self.context
            index = len(self.records)
            self.records.append(_Record(n, _PHASE_CATEGORY[ctx.phase], ctx.phase))
            self.events.append(index)
            self.live[key] = index
            weakref.finalize(storage, self._free, key, index)
            self.current += n
            if self.measuring and self.current > self._peak_bytes:
                self._peak_bytes = self.current
                self.peak = PeakPoint(
                    bytes=self.current,
                    position=len(self.events),
                    phase=ctx.phase,
                    stage=ctx.stage,
                    microbatch=ctx.microbatch,
                    step=ctx.step,
                    op=str(func),
                )

    def log_op(self, func: Any, args: Any, out: Any) -> None:
        """Log ``func``'s outputs; a receive's target buffers are re-labelled receive buffers,
        whoever allocated them."""
        if func is not torch.ops.prim.device.default:
            self.log_outputs(func, out)
        if func in _RECV_OPS:
            self.label(args[0], "recv_buffers")

    def label(self, tensors: Any, category: str) -> int:
        """Re-label the storages of ``tensors`` (any nesting) as ``category``; returns how many were
        found."""
        found = 0
        for t in tree_flatten(tensors)[0]:
            if isinstance(t, torch.Tensor) and _device_type(t) != "meta":
                index = self.live.get(t.untyped_storage()._cdata)
                if index is not None:
                    self.records[index].category = category
                    found += 1
        return found

    def start_measuring(self) -> None:
        """From now on the peak is tracked (what was live before counts towards it)."""
        self.measuring = True
        self.measure_start = len(self.events)
        self._peak_bytes = self.current - 1

    # ------------------------------------------------------------------ reading

    def position(self) -> int:
        """The current position in the log (a mark for :meth:`at`)."""
        return len(self.events)

    def at(self, position: int) -> dict[str, int]:
        """Bytes per category live just after ``position`` events, with the final labels."""
        return self.sweep([position])[0]

    def sweep(self, positions: list[int]) -> list[dict[str, int]]:
        """:meth:`at` for many ascending positions in one pass."""
        totals = dict.fromkeys(CATEGORIES, 0)
        out: list[dict[str, int]] = []
        records, events = self.records, self.events
        i = 0
        for p in positions:
            while i < p:
                e = events[i]
                if e >= 0:
                    totals[records[e].category] += records[e].nbytes
                else:
                    totals[records[~e].category] -= records[~e].nbytes
                i += 1
            out.append(dict(totals))
        return out


class FakeTracker(FakeTensorMode):
    """A ``FakeTensorMode`` that logs every storage it makes (no memory is allocated)."""

    def __init__(self, log: StorageLog) -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.log = log
        self.depth = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # Attribute queries (device, sizes): answered as the fake mode would, at once, from torch's
        # table.
        handler = _META_HANDLERS.get(func)
        if handler is not None:
            return handler(args)
        # Only ops the program calls are logged: a fake mode re-dispatches a decomposition's inner
        # ops to itself (until its cache knows the op), which a real run never allocates.
        self.depth += 1
        try:
            out = super().__torch_dispatch__(func, types, args, kwargs)
        finally:
            self.depth -= 1
        if self.depth == 0:
            self.log.log_op(func, args, out)
        return out


class RealTracker(TorchDispatchMode):
    """A dispatch mode that logs every storage real CPU tensors allocate (the replay's check at
    small widths)."""

    def __init__(self, log: StorageLog) -> None:
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.log.log_op(func, args, out)
        return out
