"""The receive-buffer memory model: bytes per stage and direction, stock vs pooled.

Given a pipeline shape (pp ``N``, microbatches ``M``, schedule), the tensors that cross
each stage boundary and a :class:`~pooltk.config.PoolConfig`, the model gives for every
stage and direction how many receive-buffer sets, and how many bytes, are held by

- ``stock``     stock ``torch.distributed.pipelining``: one set per microbatch,
- ``automodel`` the original single-ring policy (one ``K`` for both directions),
- ``tight``     pooltk's per-direction rings,
- ``live_set``  the most sets ever live at once, walked from the schedule's action order
                (:func:`pooltk.analysis.lifetimes.live_sets`): no pool can hold fewer,
- ``pooled``    whichever of ``automodel`` / ``tight`` the config's policy selects.

[Note: where the numbers come from]
Ring sizes come from :mod:`pooltk.pool.ring` -- the very functions the pool calls when it
allocates -- so the model cannot drift from the pool. Live sets come from
:mod:`pooltk.analysis.lifetimes`, which walks the schedule; nothing here hard-codes an in-flight
depth. Bytes are ``sets x set_bytes`` where a set is every tensor crossing one boundary for
one microbatch. Stage ``i`` receives activations over boundary ``i - 1`` (stage ``i - 1``
-> ``i``) and gradients over boundary ``i`` (stage ``i + 1`` -> ``i``): stage 0 has no
forward receives and the last stage no gradient receives.

Units: ``bytes`` are exact integers; ``gib`` = bytes / 2**30, ``mib`` = bytes / 2**20,
``gb`` = bytes / 1e9. Every column and accessor names its unit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod
from typing import TYPE_CHECKING, Any, Literal

from pooltk._validate import InputError, check_choice, check_int
from pooltk.config import PoolConfig
from pooltk.pool.sizing import live_set_1f1b, ring_sizes, stock_sets

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "BYTES_PER_UNIT",
    "DIRECTIONS",
    "DTYPE_BYTES",
    "VARIANTS",
    "Boundary",
    "LIVE_SOURCES",
    "DirectionMemory",
    "ExpectedBytes",
    "MemoryModel",
    "MemoryModelError",
    "PipelineShape",
    "TensorSpec",
    "UnpoolableScheduleError",
    "canonical_schedule",
    "expected_bytes",
    "compare_configs",
    "harness_boundary",
    "live_sets_for",
    "microbatches_from_batch",
    "middle_stage",
    "model_memory",
    "slack_sweep",
    "to_unit",
]

Direction = Literal["forward", "grad"]
DIRECTIONS: tuple[str, ...] = ("forward", "grad")
"""Receive directions: ``forward`` = activations from the previous stage, ``grad`` = gradients from the next."""

VARIANTS: tuple[str, ...] = ("stock", "automodel", "tight", "live_set", "pooled")
"""What holds the buffers: stock torch, the two ring policies, the live-set minimum, and the config's policy."""

BYTES_PER_UNIT: dict[str, int] = {
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}
"""Binary (``kib``/``mib``/``gib``, powers of 2) and decimal (``kb``/``mb``/``gb``, powers of 10) units."""

DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
"""Bytes per element of every dtype name the model knows (torch's names)."""

_DTYPE_ALIASES: dict[str, str] = {
    "fp64": "float64",
    "double": "float64",
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp8": "float8_e4m3fn",
    "long": "int64",
    "int": "int32",
}

_POOLABLE = {"1f1b"}
_MODELLED = {"1f1b", "gpipe"}
_SCHEDULE_ALIASES = {"1f1b": "1f1b", "schedule1f1b": "1f1b", "gpipe": "gpipe", "schedulegpipe": "gpipe"}


class MemoryModelError(InputError):
    """Bad input to the memory model. The message says what was found, what is required, and the fix.

    An :class:`pooltk._validate.InputError` (so a ``ValueError``) with the fields ``what``,
    ``found``, ``required`` and ``fix``; here the fix is never left out.
    """

    def __init__(self, what: str, *, found: str, required: str, fix: str) -> None:
        super().__init__(what, found=found, required=required, fix=fix)


class UnpoolableScheduleError(MemoryModelError):
    """The schedule has no bounded in-flight depth, so no ring may replace stock allocation."""


def to_unit(n_bytes: float, unit: str) -> float:
    """``n_bytes`` expressed in ``unit`` (one of :data:`BYTES_PER_UNIT`)."""
    check_choice("unit", unit, BYTES_PER_UNIT, fix="use 'gib' (2**30 bytes) or 'gb' (1e9 bytes).", error=MemoryModelError)
    return n_bytes / BYTES_PER_UNIT[unit]


def _positive_int(what: str, value: Any, fix: str) -> int:
    return check_int(what, value, low=1, fix=fix, error=MemoryModelError)


def _is_positive_int(value: Any) -> bool:
    try:
        check_int("size", value, low=1)
    except InputError:
        return False
    return True


def canonical_schedule(name: str) -> str:
    """``"1f1b"`` or ``"gpipe"`` for any spelling of those (``Schedule1F1B``, ``1F1B``, ...).

    Raises :class:`UnpoolableScheduleError` for other schedules: the model covers one stage
    per rank (1F1B pooled, GPipe stock-only).
    """
    key = str(name).strip().lower().replace("_", "").replace("-", "")
    canon = _SCHEDULE_ALIASES.get(key)
    if canon is None:
        raise UnpoolableScheduleError(
            "schedule",
            found=repr(name),
            required="'1f1b' (pooled) or 'gpipe' (modelled stock-only: its in-flight depth is M)",
            fix=(
                "the ring pool is gated to 1F1B, the one schedule with a proven bounded in-flight depth; "
                "for other schedules `pooltk schedules` derives live receive buffers from the action order."
            ),
        )
    return canon


# --------------------------------------------------------------------------- inputs


@dataclass(kw_only=True, slots=True, frozen=True)
class TensorSpec:
    """One tensor that crosses a stage boundary, per microbatch."""

    shape: tuple[int, ...]
    """Its shape for one microbatch, e.g. ``(rows_per_microbatch, seq_len, hidden)``. Every entry >= 1."""
    dtype: str = "bfloat16"
    """torch dtype name (``float32``, ``bfloat16``, ...) or a common alias (``bf16``, ``fp32``)."""
    name: str = ""
    """What the tensor is, for tables and provenance (``hidden_states``)."""

    def __post_init__(self) -> None:
        label = f"TensorSpec{f' {self.name!r}' if self.name else ''}"
        shape = tuple(self.shape) if isinstance(self.shape, (tuple, list)) else None
        if not shape or not all(_is_positive_int(d) for d in shape):
            raise MemoryModelError(
                f"{label}.shape",
                found=repr(self.shape),
                required="a non-empty tuple of integers >= 1",
                fix="give the per-microbatch shape, e.g. (2, 2048, 7168); a zero or negative size is never a buffer.",
            )
        object.__setattr__(self, "shape", shape)
        dtype = str(self.dtype).removeprefix("torch.").strip().lower()
        dtype = _DTYPE_ALIASES.get(dtype, dtype)
        if dtype not in DTYPE_BYTES:
            raise MemoryModelError(
                f"{label}.dtype",
                found=repr(self.dtype),
                required=f"one of {', '.join(DTYPE_BYTES)} (or an alias: {', '.join(_DTYPE_ALIASES)})",
                fix="use torch's dtype name, e.g. 'bfloat16' or 'float32'.",
            )
        object.__setattr__(self, "dtype", dtype)

    @property
    def numel(self) -> int:
        """Elements per microbatch."""
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of one buffer for one microbatch."""
        return self.numel * DTYPE_BYTES[self.dtype]

    def describe(self) -> str:
        """e.g. ``hidden_states bfloat16 (2, 2048, 7168) = 56.0 MiB``."""
        dims = ", ".join(map(str, self.shape))
        head = f"{self.name} " if self.name else ""
        return f"{head}{self.dtype} ({dims}) = {to_unit(self.nbytes, 'mib'):.1f} MiB"


def _tensor_specs(field: str, value: Any, required: str, fix: str) -> tuple[TensorSpec, ...]:
    """``value`` as a non-empty tuple of :class:`TensorSpec`, or a :class:`MemoryModelError` on ``Boundary.<field>``."""
    specs = tuple(value) if isinstance(value, (tuple, list)) else ()
    if not specs or not all(isinstance(t, TensorSpec) for t in specs):
        raise MemoryModelError(f"Boundary.{field}", found=repr(value), required=required, fix=fix)
    return specs


@dataclass(kw_only=True, slots=True, frozen=True)
class Boundary:
    """Every tensor that crosses one stage boundary for one microbatch: one receive-buffer set."""

    activations: tuple[TensorSpec, ...]
    """Forward: what stage ``b`` sends to stage ``b + 1``. At least one tensor."""
    grads: tuple[TensorSpec, ...] | None = None
    """Backward: what stage ``b + 1`` sends back to stage ``b``. ``None``: the gradients have
    the activations' shapes and dtypes (the usual case)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "activations", _tensor_specs(
            "activations", self.activations, "a non-empty tuple of TensorSpec",
            "list the tensors one microbatch sends across the boundary, e.g. (TensorSpec(shape=(2, 2048, 7168)),)."))
        if self.grads is not None:
            object.__setattr__(self, "grads", _tensor_specs(
                "grads", self.grads, "None (same as the activations) or a non-empty tuple of TensorSpec",
                "leave grads=None unless the gradients differ from the activations."))

    @property
    def grad_tensors(self) -> tuple[TensorSpec, ...]:
        """The gradient tensors, defaulting to the activations' specs."""
        return self.activations if self.grads is None else self.grads

    @property
    def forward_bytes(self) -> int:
        """Bytes of one forward (activation) receive-buffer set."""
        return sum(t.nbytes for t in self.activations)

    @property
    def grad_bytes(self) -> int:
        """Bytes of one gradient receive-buffer set."""
        return sum(t.nbytes for t in self.grad_tensors)

    @classmethod
    def hidden_state(cls, *, rows: int, seq_len: int, hidden: int, dtype: str = "bfloat16") -> Boundary:
        """One ``(rows, seq_len, hidden)`` tensor each way: a plain transformer boundary."""
        return cls(activations=(TensorSpec(shape=(rows, seq_len, hidden), dtype=dtype, name="hidden_states"),))

    @classmethod
    def opaque(cls, n_bytes: int, *, name: str = "boundary") -> Boundary:
        """A boundary known only by its bytes per set (modelled as one uint8 tensor each way)."""
        n = _positive_int("Boundary.opaque n_bytes", n_bytes, "give the bytes of one buffer set, >= 1.")
        return cls(activations=(TensorSpec(shape=(n,), dtype="uint8", name=name),))

    def describe(self) -> str:
        """One line listing the tensors and the set size."""
        parts = " + ".join(t.describe() for t in self.activations)
        text = f"{parts} -> {to_unit(self.forward_bytes, 'mib'):.1f} MiB per forward set"
        if self.grads is not None:
            text += f"; grads {to_unit(self.grad_bytes, 'mib'):.1f} MiB per set"
        return text


def microbatches_from_batch(
    *, global_batch: int, micro_batch: int, dp: int, local_batch: int | None = None
) -> int:
    """Microbatches per pipeline step, ``M``, from the batch sizes.

    Without ``local_batch``: ``M = global_batch / (dp * micro_batch)`` (no gradient
    accumulation). With it (Automodel's ``local_batch_size``, the batch one data-parallel
    rank runs through the pipeline per step): ``M = local_batch / micro_batch``, and
    ``global_batch`` must be a multiple of ``local_batch * dp``. Raises
    :class:`MemoryModelError` when a size does not divide.
    """
    gbs = _positive_int("global_batch", global_batch, "give the global batch size in rows, e.g. 4096.")
    mbs = _positive_int("micro_batch", micro_batch, "give the rows per pipeline microbatch, e.g. 2.")
    dp = _positive_int("dp", dp, "give the data-parallel size, e.g. 32 (world size / (pp * tp * cp)).")
    if local_batch is None:
        if gbs % (dp * mbs):
            raise MemoryModelError(
                "global_batch / (dp * micro_batch)",
                found=f"{gbs} / ({dp} * {mbs}) = {gbs / (dp * mbs):g}",
                required="a whole number of microbatches",
                fix=f"choose a global batch that is a multiple of dp * micro_batch = {dp * mbs}, or another micro batch.",
            )
        return gbs // (dp * mbs)
    lbs = _positive_int("local_batch", local_batch, "give the per-data-parallel-rank batch, e.g. 128.")
    if gbs % (lbs * dp):
        raise MemoryModelError(
            "global_batch / (local_batch * dp)",
            found=f"{gbs} / ({lbs} * {dp}) = {gbs / (lbs * dp):g}",
            required="a whole number of gradient-accumulation steps",
            fix=f"make the global batch a multiple of local_batch * dp = {lbs * dp}.",
        )
    if lbs % mbs:
        raise MemoryModelError(
            "local_batch / micro_batch",
            found=f"{lbs} / {mbs} = {lbs / mbs:g}",
            required="a whole number of microbatches",
            fix="make the local batch a multiple of the micro batch size.",
        )
    return lbs // mbs


@dataclass(kw_only=True, slots=True, frozen=True)
class PipelineShape:
    """The pipeline: how many stages, how many microbatches per step, which schedule."""

    pp: int
    """Pipeline-parallel size ``N`` (stages, one per rank)."""
    n_microbatches: int
    """Microbatches per pipeline step ``M``."""
    schedule: str = "1f1b"
    """``"1f1b"`` (poolable) or ``"gpipe"`` (modelled stock-only); any spelling torch uses."""
    global_batch: int | None = None
    """Global batch in rows, when the shape was derived from batch sizes (display only)."""
    micro_batch: int | None = None
    """Rows per microbatch, when known (display only)."""
    dp: int | None = None
    """Data-parallel size, when known (display only)."""

    def __post_init__(self) -> None:
        _positive_int("pp", self.pp, "give the pipeline-parallel size, e.g. 8.")
        _positive_int(
            "n_microbatches", self.n_microbatches, "give the microbatches per step, or derive them with from_batch()."
        )
        canon = canonical_schedule(self.schedule)
        object.__setattr__(self, "schedule", canon)
        if canon == "1f1b" and self.n_microbatches < self.pp:
            raise MemoryModelError(
                "n_microbatches under 1F1B",
                found=f"M={self.n_microbatches} microbatches with pp={self.pp} stages",
                required="M >= pp (torch's Schedule1F1B refuses fewer microbatches than stages)",
                fix=f"use at least {self.pp} microbatches (a larger global batch or a smaller micro batch), or fewer stages.",
            )

    @classmethod
    def from_batch(
        cls,
        *,
        pp: int,
        global_batch: int,
        micro_batch: int,
        dp: int,
        local_batch: int | None = None,
        schedule: str = "1f1b",
    ) -> PipelineShape:
        """The shape whose ``M`` follows from the batch sizes (see :func:`microbatches_from_batch`)."""
        m = microbatches_from_batch(global_batch=global_batch, micro_batch=micro_batch, dp=dp, local_batch=local_batch)
        return cls(pp=pp, n_microbatches=m, schedule=schedule, global_batch=global_batch, micro_batch=micro_batch, dp=dp)

    @property
    def poolable(self) -> bool:
        """Whether the ring pool may replace stock allocation under this schedule."""
        return self.schedule in _POOLABLE

    def describe(self) -> str:
        text = f"pp={self.pp} M={self.n_microbatches} schedule={self.schedule}"
        if self.global_batch is not None:
            text += f" (global batch {self.global_batch} / (dp {self.dp} x micro batch {self.micro_batch}))"
        return text


def middle_stage(pp: int) -> int:
    """The stage the reports call "middle": ``(pp - 1) // 2`` (stage 3 of 8)."""
    return (_positive_int("pp", pp, "give the pipeline-parallel size.") - 1) // 2


# --------------------------------------------------------------------------- results


@dataclass(kw_only=True, slots=True, frozen=True)
class DirectionMemory:
    """Receive-buffer sets and bytes of one stage in one direction."""

    stage: int
    """Stage index ``i`` in ``[0, N)``."""
    direction: str
    """``"forward"`` (activations received) or ``"grad"`` (gradients received)."""
    set_bytes: int
    """Bytes of one buffer set in this direction (0 where the stage has no receives)."""
    stock_sets: int
    """Sets stock torch allocates: ``M`` (0 where there are no receives)."""
    automodel_sets: int
    """Sets of the original single ring ``max(2, min(M, max(1, N - i) + slack))``."""
    tight_sets: int
    """Sets of pooltk's tight ring (forward ``min(M, W + slack)``, grad ``min(M, 1 + grad_slack)``)."""
    live_sets: int
    """Most sets live at once, walked from the schedule (:func:`pooltk.analysis.lifetimes.live_sets`)."""
    pooled_sets: int
    """Sets held under the config's policy (stock, when the schedule cannot be pooled)."""

    def sets(self, variant: str) -> int:
        """Sets held by ``variant`` (one of :data:`VARIANTS`)."""
        return getattr(self, _SETS_FIELD[_variant(variant)])

    def bytes(self, variant: str) -> int:
        """Bytes held by ``variant``."""
        return self.sets(variant) * self.set_bytes

    @property
    def stock_bytes(self) -> int:
        return self.stock_sets * self.set_bytes

    @property
    def pooled_bytes(self) -> int:
        return self.pooled_sets * self.set_bytes

    @property
    def saved_bytes(self) -> int:
        """Stock minus pooled."""
        return self.stock_bytes - self.pooled_bytes


_SETS_FIELD = {v: ("live_sets" if v == "live_set" else f"{v}_sets") for v in VARIANTS}


def _variant(variant: str) -> str:
    return check_choice("variant", variant, VARIANTS, fix="pick a listed variant.", error=MemoryModelError)


@dataclass(kw_only=True, slots=True, frozen=True)
class ExpectedBytes:
    """What a measurement of one stage and direction should find (for the gloo parity check)."""

    stock_sets: int
    """Buffer sets stock torch allocates."""
    pooled_sets: int
    """Buffer sets the pool holds under the config."""
    stock_bytes: int
    """Bytes stock torch allocates."""
    pooled_bytes: int
    """Bytes the pool holds under the config."""


@dataclass(kw_only=True, slots=True, frozen=True)
class MemoryModel:
    """Receive-buffer memory of every stage and direction for one shape and config."""

    shape: PipelineShape
    """The pipeline modelled."""
    config: PoolConfig
    """Slack, grad slack and policy; ``pooled`` follows ``config.policy``."""
    boundaries: tuple[Boundary, ...]
    """Boundary ``b`` (``N - 1`` of them) carries stage ``b`` -> ``b + 1``."""
    rows: tuple[DirectionMemory, ...]
    """One row per (stage, direction), stage-major, forward before grad."""
    pool_active: bool
    """False when the schedule cannot be pooled and the model shows the pool standing down."""
    live_source: str = "schedule"
    """Where ``live_sets`` came from: ``"schedule"`` (walked) or ``"formula"``."""

    def row(self, stage: int, direction: str) -> DirectionMemory:
        """The row of ``stage`` in ``direction``."""
        if direction not in DIRECTIONS or not 0 <= stage < self.shape.pp:
            raise MemoryModelError(
                "row",
                found=f"stage={stage!r} direction={direction!r}",
                required=f"stage in [0, {self.shape.pp - 1}] and direction in {DIRECTIONS}",
                fix="index an existing stage.",
            )
        return self.rows[2 * stage + DIRECTIONS.index(direction)]

    def stage_bytes(self, stage: int, variant: str = "pooled") -> int:
        """Both directions of ``stage`` under ``variant``, in bytes."""
        return self.row(stage, "forward").bytes(variant) + self.row(stage, "grad").bytes(variant)

    def stage_gib(self, stage: int, variant: str = "pooled") -> float:
        """:meth:`stage_bytes` in GiB (2**30)."""
        return to_unit(self.stage_bytes(stage, variant), "gib")

    def saved_bytes(self, stage: int, variant: str = "pooled") -> int:
        """Stock minus ``variant`` on ``stage``, both directions."""
        return self.stage_bytes(stage, "stock") - self.stage_bytes(stage, variant)

    def saved_gib(self, stage: int, variant: str = "pooled") -> float:
        """:meth:`saved_bytes` in GiB (2**30)."""
        return to_unit(self.saved_bytes(stage, variant), "gib")

    def total_bytes(self, variant: str = "pooled") -> int:
        """Sum over all stages and directions (bytes across the whole pipeline, not one GPU)."""
        _variant(variant)
        return sum(r.bytes(variant) for r in self.rows)

    def peak_stage_bytes(self, variant: str = "pooled") -> int:
        """The largest per-stage total: what decides whether the fullest GPU fits."""
        return max(self.stage_bytes(i, variant) for i in range(self.shape.pp))

    def expected_bytes(self) -> dict[tuple[int, str], ExpectedBytes]:
        """``{(stage, direction): ExpectedBytes}`` for every stage and direction."""
        return {
            (r.stage, r.direction): ExpectedBytes(
                stock_sets=r.stock_sets,
                pooled_sets=r.pooled_sets,
                stock_bytes=r.stock_bytes,
                pooled_bytes=r.pooled_bytes,
            )
            for r in self.rows
        }

    def to_frame(self) -> pd.DataFrame:
        """Tidy: one row per (stage, direction, variant) with ``sets``, ``set_bytes``,
        ``bytes``, ``mib``, ``gib`` and ``gb``."""
        import pandas as pd

        records = []
        for r in self.rows:
            for v in VARIANTS:
                b = r.bytes(v)
                records.append(
                    {
                        "stage": r.stage,
                        "direction": r.direction,
                        "variant": v,
                        "sets": r.sets(v),
                        "set_bytes": r.set_bytes,
                        "bytes": b,
                        "mib": b / 2**20,
                        "gib": b / 2**30,
                        "gb": b / 1e9,
                    }
                )
        return pd.DataFrame.from_records(records)

    def per_stage_frame(self, unit: str = "gib") -> pd.DataFrame:
        """Wide: one row per stage with sets per direction (``<variant>_forward_sets``,
        ``<variant>_grad_sets``), both directions' memory per variant in ``unit``
        (``<variant>_<unit>``), and ``saved_<unit>`` (stock - pooled)."""
        import pandas as pd

        to_unit(1, unit)  # validates the unit name
        scale = BYTES_PER_UNIT[unit]
        records = []
        for i in range(self.shape.pp):
            f, g = self.row(i, "forward"), self.row(i, "grad")
            rec: dict[str, Any] = {"stage": i, "forward_set_mib": f.set_bytes / 2**20, "grad_set_mib": g.set_bytes / 2**20}
            for v in VARIANTS:
                rec[f"{v}_forward_sets"] = f.sets(v)
                rec[f"{v}_grad_sets"] = g.sets(v)
                rec[f"{v}_{unit}"] = (f.bytes(v) + g.bytes(v)) / scale
            rec[f"saved_{unit}"] = (f.saved_bytes + g.saved_bytes) / scale
            records.append(rec)
        return pd.DataFrame.from_records(records)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict: inputs, one entry per stage and direction, totals."""
        return {
            "shape": dataclasses.asdict(self.shape),
            "config": self.config.to_dict(),
            "pool_active": self.pool_active,
            "live_source": self.live_source,
            "boundaries": [
                {
                    "activations": [dataclasses.asdict(t) for t in b.activations],
                    "grads": None if b.grads is None else [dataclasses.asdict(t) for t in b.grads],
                    "forward_set_bytes": b.forward_bytes,
                    "grad_set_bytes": b.grad_bytes,
                }
                for b in self.boundaries
            ],
            "rows": [
                {
                    "stage": r.stage,
                    "direction": r.direction,
                    "set_bytes": r.set_bytes,
                    **{f"{v}_sets": r.sets(v) for v in VARIANTS},
                    **{f"{v}_bytes": r.bytes(v) for v in VARIANTS},
                    "saved_bytes": r.saved_bytes,
                }
                for r in self.rows
            ],
            "stages": [
                {
                    "stage": i,
                    **{f"{v}_bytes": self.stage_bytes(i, v) for v in VARIANTS},
                    "saved_bytes": self.saved_bytes(i),
                }
                for i in range(self.shape.pp)
            ],
            "totals": {
                **{f"{v}_bytes": self.total_bytes(v) for v in VARIANTS},
                **{f"peak_stage_{v}_bytes": self.peak_stage_bytes(v) for v in VARIANTS},
            },
        }


# --------------------------------------------------------------------------- the model


LiveSource = Literal["schedule", "formula"]
LIVE_SOURCES: tuple[str, ...] = ("schedule", "formula")
"""Where the live-set column comes from. See [Note: live-set sources]."""


@functools.lru_cache(maxsize=1024)
def _walked_live_sets(schedule: str, pp: int, n_microbatches: int) -> tuple[tuple[int, int], ...]:
    """Per stage (forward, grad) live sets, walked once per (schedule, N, M) and cached."""
    from pooltk.analysis import lifetimes as schedules

    table = schedules.live_sets(schedule, pp=pp, n_microbatches=n_microbatches)
    return tuple((int(table.get((i, "forward"), 0)), int(table.get((i, "grad"), 0))) for i in range(pp))


def _formula_live_sets(schedule: str, pp: int, n_microbatches: int) -> tuple[tuple[int, int], ...]:
    """The closed forms of [Note: live-set sources]."""
    if schedule == "1f1b":
        sets = (live_set_1f1b(pp, i, n_microbatches) for i in range(pp))
        return tuple((s.forward, s.grad) for s in sets)
    return tuple((0 if i == 0 else n_microbatches, 0 if i == pp - 1 else 1) for i in range(pp))


def live_sets_for(shape: PipelineShape, source: LiveSource = "schedule") -> tuple[tuple[int, int], ...]:
    """Per stage ``(forward, grad)`` live sets of ``shape`` from ``source``.

    [Note: live-set sources]
    ``"schedule"`` (the default) walks the schedule's own action order with
    :func:`pooltk.analysis.lifetimes.live_sets`: nothing is assumed about the schedule; the walk is
    cached per (schedule, N, M) but costs ~1 s cold at N=16, M=256 on a laptop-class CPU.
    ``"formula"`` uses the closed forms the walk reproduces -- 1F1B: forward
    ``W = min(M, N - i)`` (0 on stage 0), grad 1 (0 on the last stage)
    (:func:`pooltk.pool.sizing.live_set_1f1b`); GPipe: forward ``M``, grad 1 -- for sweeps over
    thousands of shapes. ``tests/memory`` checks that both sources agree on a grid of shapes.
    """
    if source not in LIVE_SOURCES:
        raise MemoryModelError(
            "live_source", found=repr(source), required=f"one of {', '.join(LIVE_SOURCES)}", fix="use 'schedule' (default)."
        )
    fn = _walked_live_sets if source == "schedule" else _formula_live_sets
    return fn(shape.schedule, shape.pp, shape.n_microbatches)


def _boundaries(boundaries: Boundary | Sequence[Boundary], pp: int) -> tuple[Boundary, ...]:
    if isinstance(boundaries, Boundary):
        return (boundaries,) * (pp - 1)
    found = tuple(boundaries) if isinstance(boundaries, (tuple, list)) else None
    if found is None or len(found) != pp - 1 or not all(isinstance(b, Boundary) for b in found):
        n = "nothing" if found is None else f"{len(found)} item(s)"
        raise MemoryModelError(
            "boundaries",
            found=f"{n} ({type(boundaries).__name__})",
            required=f"one Boundary for every boundary, or a list of pp - 1 = {pp - 1} Boundary objects",
            fix="pass a single Boundary when every stage boundary carries the same tensors.",
        )
    return found


def model_memory(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig | None = None,
    *,
    unpoolable: Literal["error", "stock"] = "error",
    live_source: LiveSource = "schedule",
) -> MemoryModel:
    """Model every stage and direction of ``shape``. See [Note: where the numbers come from].

    Args:
        shape: pp, microbatches and schedule.
        boundaries: one :class:`Boundary` for all ``N - 1`` boundaries, or a list of them.
        config: slack, grad slack and policy (default :class:`PoolConfig()`).
        unpoolable: for a schedule the pool must not touch (GPipe): ``"error"`` raises
            :class:`UnpoolableScheduleError`; ``"stock"`` models the pool standing down
            (every ring column equals stock), as Automodel does when it warns and skips.
        live_source: ``"schedule"`` (walk the action order) or ``"formula"``; see
            [Note: live-set sources].
    """
    if not isinstance(shape, PipelineShape):
        raise MemoryModelError(
            "shape", found=type(shape).__name__, required="a PipelineShape", fix="build PipelineShape(pp=..., n_microbatches=...)."
        )
    config = PoolConfig() if config is None else config
    if unpoolable not in ("error", "stock"):
        raise MemoryModelError("unpoolable", found=repr(unpoolable), required="'error' or 'stock'", fix="use 'error' (default).")
    n, m = shape.pp, shape.n_microbatches
    if not shape.poolable and unpoolable == "error":
        raise UnpoolableScheduleError(
            f"schedule {shape.schedule!r}",
            found="a schedule whose in-flight depth is not bounded below M (every forward buffer stays live until the backwards start)",
            required="'1f1b' for a pooled model",
            fix="use 1f1b, or pass unpoolable='stock' (CLI: --allow-unpoolable) to see stock and live-set bytes with the pool standing down.",
        )
    bounds = _boundaries(boundaries, n)
    live = live_sets_for(shape, live_source)
    am_cfg = dataclasses.replace(config, policy="automodel")
    tight_cfg = dataclasses.replace(config, policy="tight")
    rows: list[DirectionMemory] = []
    for i in range(n):
        stock = stock_sets(n, i, m)
        if shape.poolable:
            am, tight = ring_sizes(n, i, m, am_cfg), ring_sizes(n, i, m, tight_cfg)
        else:
            am = tight = stock
        pooled = am if config.policy == "automodel" else tight
        fwd_bytes = bounds[i - 1].forward_bytes if i > 0 else 0
        grad_bytes = bounds[i].grad_bytes if i < n - 1 else 0
        for d, set_bytes, lv in (("forward", fwd_bytes, live[i][0]), ("grad", grad_bytes, live[i][1])):
            rows.append(
                DirectionMemory(
                    stage=i,
                    direction=d,
                    set_bytes=set_bytes,
                    stock_sets=getattr(stock, d),
                    automodel_sets=getattr(am, d),
                    tight_sets=getattr(tight, d),
                    live_sets=lv,
                    pooled_sets=getattr(pooled, d),
                )
            )
    return MemoryModel(
        shape=shape, config=config, boundaries=bounds, rows=tuple(rows), pool_active=shape.poolable, live_source=live_source
    )


def expected_bytes(
    *,
    pp: int,
    n_microbatches: int,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig,
    schedule: str = "1f1b",
) -> dict[tuple[int, str], ExpectedBytes]:
    """``{(stage, direction): ExpectedBytes(stock, pooled)}``: what a measurement should find.

    One call for the gloo parity check: every stage and direction, including the ones with
    no receives (stage 0 forward, last stage grad: 0 sets, 0 bytes).
    """
    shape = PipelineShape(pp=pp, n_microbatches=n_microbatches, schedule=schedule)
    return model_memory(shape, boundaries, config).expected_bytes()


def harness_boundary(*, rows: int, seq_len: int, hidden: int, dtype: str = "float32") -> Boundary:
    """The parity harness's boundary: one ``(rows, seq_len, hidden)`` tensor each way."""
    return Boundary.hidden_state(rows=rows, seq_len=seq_len, hidden=hidden, dtype=dtype)


def slack_sweep(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    slacks: Iterable[int],
    config: PoolConfig | None = None,
    *,
    vary: Literal["slack", "grad_slack", "both"] = "slack",
    live_source: LiveSource = "schedule",
) -> pd.DataFrame:
    """Pooled bytes per stage for each slack: columns ``stage``, ``slack``, ``pooled_bytes``,
    ``pooled_gib``, ``stock_gib``, ``saved_gib``. ``vary`` picks which slack moves."""
    import pandas as pd

    config = PoolConfig() if config is None else config
    if vary not in ("slack", "grad_slack", "both"):
        raise MemoryModelError("vary", found=repr(vary), required="'slack', 'grad_slack' or 'both'", fix="use 'slack' (default).")
    records = []
    for s in slacks:
        changes: dict[str, int] = {"slack": {"slack": s}, "grad_slack": {"grad_slack": s}, "both": {"slack": s, "grad_slack": s}}[vary]
        result = model_memory(shape, boundaries, dataclasses.replace(config, **changes), live_source=live_source)
        for i in range(shape.pp):
            pooled = result.stage_bytes(i, "pooled")
            stock = result.stage_bytes(i, "stock")
            records.append(
                {
                    "stage": i,
                    "slack": s,
                    "pooled_bytes": pooled,
                    "pooled_gib": pooled / 2**30,
                    "stock_gib": stock / 2**30,
                    "saved_gib": (stock - pooled) / 2**30,
                }
            )
    return pd.DataFrame.from_records(records)


def compare_configs(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    configs: Mapping[str, PoolConfig],
    *,
    stage: int,
    baseline: str | None = None,
) -> pd.DataFrame:
    """One row per named config on ``stage``: ``label``, ``policy``, ``slack``, ``grad_slack``,
    ``forward_sets``, ``grad_sets``, ``stock_gib``, ``pooled_gib``, ``saved_gib`` and
    ``saved_beyond_baseline_gib`` (extra saving over the config named ``baseline``, default the first)."""
    import pandas as pd

    if not configs:
        raise MemoryModelError("configs", found="none", required="at least one named PoolConfig", fix="pass {'label': PoolConfig(...)}.")
    baseline = next(iter(configs)) if baseline is None else baseline
    if baseline not in configs:
        raise MemoryModelError("baseline", found=repr(baseline), required=f"one of {list(configs)}", fix="name one of the configs.")
    models = {label: model_memory(shape, boundaries, cfg) for label, cfg in configs.items()}
    base_saved = models[baseline].saved_bytes(stage)
    records = []
    for label, m in models.items():
        cfg = m.config
        records.append(
            {
                "label": label,
                "policy": cfg.policy,
                "slack": cfg.slack,
                "grad_slack": cfg.grad_slack if cfg.policy == "tight" else None,
                "forward_sets": m.row(stage, "forward").pooled_sets,
                "grad_sets": m.row(stage, "grad").pooled_sets,
                "stock_gib": m.stage_gib(stage, "stock"),
                "pooled_gib": m.stage_gib(stage, "pooled"),
                "saved_gib": m.saved_gib(stage),
                "saved_beyond_baseline_gib": (m.saved_bytes(stage) - base_saved) / 2**30,
            }
        )
    return pd.DataFrame.from_records(records)
