"""Receive storages counted outside the pool: what each receive op of a stage lands in, by weak
reference.

[Note: counting receive storages]
The proof that a pool saves memory must not ask the pool. :class:`RecvCounter` binds after-hooks on
a stage *object*'s ``get_fwd_recv_ops`` / ``get_bwd_recv_ops`` (over whatever the class has,
pooltk's wrappers included; pooltk.pool.torch_compat.bind) and looks at the ``P2POp`` objects torch
builds: for every receive op, the untyped storage of its tensor. A storage is *live* from the first
receive into it until it is freed, seen by ``weakref.finalize`` on the storage (torch keeps a
storage's Python object for as long as the storage lives, so the finalizer runs exactly when the
last holder lets go). Per direction it records the most storages live at once (``peak``: sampled at
every receive, the only moment the count can rise), the storages received into within each step
(``step_distinct``, its largest over the steps in ``max_step_distinct``: a ring that re-homes shows
as churn there, a ring that does not receives into the same K sets every step) and every storage
ever received into (``distinct``; a storage freed and a new one at the same address count twice).
Steps are marked by :meth:`start_step`. Stock torch holds M sets per direction, a ring K, a fresh
buffer per receive as many as are alive.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

from pooltk.pool.torch_compat.bind import Hooks, bind

__all__ = ["DirectionCount", "RecvCounter"]

_METHODS = {"forward": "get_fwd_recv_ops", "grad": "get_bwd_recv_ops"}


@dataclass(slots=True)
class DirectionCount:
    """Receive storages of one direction (see [Note: counting receive storages])."""

    receives: int = 0
    """Receive ops seen (one per tensor received)."""
    tensors: int = 0
    """Most tensors one receive call posted: the tensors of one set."""
    live: int = 0
    """Storages received into that are alive now."""
    peak: int = 0
    """Most storages alive at once over the run."""
    step_peak: int = 0
    """Most storages alive at once in the current step."""
    distinct: int = 0
    """Storages ever received into over the run (a re-homed or fresh buffer counts anew)."""
    step_distinct: int = 0
    """Storages received into in the current step."""
    max_step_distinct: int = 0
    """The most storages received into within one step, over the steps so far."""
    nbytes: int = 0
    """Bytes of the storages alive at the peak."""
    _live_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "receives": self.receives,
            "tensors": self.tensors,
            "peak": self.peak,
            "last_step_peak": self.step_peak,
            "distinct": self.distinct,
            "max_step_distinct": self.max_step_distinct,
            "peak_bytes": self.nbytes,
        }


@dataclass(slots=True)
class RecvCounter:
    """Counts the receive storages of the stages it watches, per direction, together (a rank's
    view).

    Watch one stage for per-stage counts, every stage of a rank for per-rank counts (a storage
    shared by two stages, as in a rank-shared ring, is one storage).
    """

    counts: dict[str, DirectionCount] = field(
        default_factory=lambda: {d: DirectionCount() for d in _METHODS}
    )
    _live: dict[int, list] = field(default_factory=dict)
    """storage ``_cdata`` -> [direction, finalizer, step it was last received into] for storages
    alive now."""
    _step: int = 0
    _bindings: list = field(default_factory=list)

    def watch(self, stage: Any) -> None:
        """Count every receive ``stage`` posts from now on (until :meth:`close`)."""
        hooks = {name: Hooks(after=self._counting(d)) for d, name in _METHODS.items()}
        self._bindings.append(bind(stage, hooks, tag=f"pooltk-recv-counter-{id(self)}"))

    def _counting(self, direction: str) -> Any:
        def after(stage: Any, call: Any, ops: Any) -> Any:
            n = 0
            for op in ops or ():
                tensor = getattr(op, "tensor", None)
                if tensor is not None and "recv" in getattr(
                    getattr(op, "op", None), "__name__", ""
                ):
                    self._saw(direction, tensor)
                    n += 1
            self.counts[direction].tensors = max(self.counts[direction].tensors, n)
            return ops

        return after

    def start_step(self) -> None:
        """A new step: the per-step peak starts from what is alive now."""
        self._step += 1
        for c in self.counts.values():
            c.step_peak, c.step_distinct = c.live, 0

    def _saw(self, direction: str, tensor: Any) -> None:
        c = self.counts[direction]
        c.receives += 1
        storage = tensor.untyped_storage()
        key = storage._cdata
        entry = self._live.get(key)
        if entry is None:
            nbytes = storage.nbytes()
            entry = self._live[key] = [
                direction,
                weakref.finalize(storage, self._freed, key, direction, nbytes),
                -1,
            ]
            c.live += 1
            c._live_bytes += nbytes
            c.distinct += 1
        if entry[2] != self._step:
            entry[2] = self._step
            c.step_distinct += 1
            c.max_step_distinct = max(c.max_step_distinct, c.step_distinct)
        if c.live > c.peak:
            c.peak, c.nbytes = c.live, c._live_bytes
        c.step_peak = max(c.step_peak, c.live)

    def _freed(self, key: int, direction: str, nbytes: int) -> None:
        self._live.pop(key, None)
        c = self.counts[direction]
        c.live -= 1
        c._live_bytes -= nbytes

    def close(self) -> None:
        """Stop counting: unbind from every stage, stop the finalizers (the counts stay)."""
        for binding in reversed(self._bindings):
            binding.undo()
        self._bindings.clear()
        for _, fin, _ in self._live.values():
            fin.detach()
        self._live.clear()

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {d: c.as_dict() for d, c in self.counts.items()}
