"""Does it fit: one verdict per rank and variant, tensor peak plus overhead against one capacity.

[Note: one verdict]
A rank fits when ``tensor peak + overhead <= capacity``; its margin is ``capacity - tensor peak -
overhead`` (>= 0: headroom; < 0: OOM by that much). One record holds every answer
(:class:`Verdict`, one :class:`VerdictRow` per rank and variant), made by one of two builders
that differ only in where the tensor peak comes from (the verdict's ``basis``):

- :func:`of_estimate`: the whole-stage replay's peak of each rank and variant
  ([Note: the whole-stage estimate]), handed in as an object: this module imports neither the
  replay nor the log reader (a run log's peak reaches it as a number, :func:`calibrated_overhead`);
- :func:`anchored`: the receive-buffer model anchored on a reference peak ([Note: the fits model]).

The capacity is one :class:`Device` (GB200: :data:`GB200`, 184.31 GiB). The overhead is an
:class:`Overhead` stated with its sources ([Note: an honest verdict]), or ``None`` for a view of
the tensors alone (``pooltk memory --capacity``, which knows receive buffers only).

[Note: the fits model]
The memory model knows only receive buffers. Everything else a stage holds at its peak
(weights, optimizer state, activations, workspace) comes from one *reference*: a measured or
published peak of one configuration (e.g. the pooled Kimi-K3 2k run, 139.6 GiB, automodel
policy, slack 2). Assumed: that non-buffer memory is the same on every stage and does not
change with the pool, so

    base         = reference peak - reference variant's receive buffers on the reference stage
    peak(i, v)   = base + receive buffers of variant v on stage i

A GPU is a rank: under multi-stage schedules ``i`` is a rank and its receive buffers are the
sum over its stages (:meth:`~pooltk.memory.results.MemoryModel.rank_bytes`); under single-stage
schedules rank and stage coincide. The reference stage is the fullest stage of the reference
variant unless given (a log that only rank 0 writes describes stage 0). Where the assumption is
wrong (first and last stages hold embeddings and the head), the margins are off by exactly
that difference; the whole-stage replay models it.

[Note: an honest verdict]
The overhead is what a GPU process holds outside the tensors torch's operators allocate: the
CUDA context, NCCL's communicator buffers, and the caching allocator's rounding and
fragmentation (reserved but not allocated). :data:`DEFAULT_OVERHEAD` states each part with its
source and leaves the allocator's share at 0, because it depends on the run;
:func:`calibrated_overhead` takes it from the user's own run: the peak a log reports for the same
configuration, minus the estimate. No verdict borrows another model's peak: a reference peak
counts only when it is the source's own at its own shape, or the user gives it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_number
from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.model import VARIANTS, MemoryModel, model_memory
from pooltk.memory.units import unit_bytes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from pooltk.memory.shape import PipelineShape
    from pooltk.memory.tensors import Boundary

__all__ = [
    "ANCHORED_NOT_MODELLED",
    "DEFAULT_OVERHEAD",
    "DEVICES",
    "FIT_VARIANTS",
    "GB200",
    "PUBLISHED_PEAK",
    "Device",
    "Overhead",
    "ReferencePeak",
    "Verdict",
    "VerdictRow",
    "anchored",
    "calibrated_overhead",
    "get_device",
    "margin_text",
    "of_estimate",
    "published_peak",
]

GIB = 2**30
MIB = 2**20

FIT_VARIANTS: tuple[str, ...] = (
    "stock",
    "stock_lazy",
    "lazy_released",
    "automodel",
    "tight",
    "live_set",
)
"""What an anchored verdict compares, in drawing order: stock torch (<= 2.14, >= 2.15, 2.15 with
pooltk's release), the original ring policy, pooltk's tight policy, the live-set floor."""

ANCHORED_NOT_MODELLED: tuple[str, ...] = (
    "everything but receive buffers: taken from the reference peak and assumed the same on every "
    "stage (1F1B keeps min(M, N - i) microbatches of activations on stage i, and the first and "
    "last stages hold the embedding and head: the whole-stage replay models that)",
)
"""What an anchored verdict leaves out ([Note: the fits model])."""

PUBLISHED_PEAK = "peak_memory_pooled_gib"
"""The name of a preset's published pooled peak (what ``pooltk memory --capacity`` anchors on)."""


def _positive_gib(what: str, gib: Any, required: str, fix: str) -> float:
    return check_number(what, gib, required=required, fix=fix, error=MemoryModelError)


# --------------------------------------------------------------------------- the capacity


@dataclass(kw_only=True, slots=True, frozen=True)
class Device:
    """One accelerator's memory as torch reports it (``total_memory``)."""

    name: str
    """Key used on the command line and in the explorer (``gb200``, ``h100``)."""
    capacity_bytes: int
    """Usable capacity in bytes."""
    source: str
    """Where the figure comes from."""

    @property
    def gib(self) -> float:
        """Capacity in GiB (2**30 bytes)."""
        return self.capacity_bytes / GIB

    @classmethod
    def from_gib(cls, name: str, gib: float, source: str) -> Device:
        """From a GiB figure (what torch and torchtitan print)."""
        fix = "give a device name (gb200, h100) or a number of GiB, e.g. 79.18."
        gib = _positive_gib("capacity", gib, "a finite capacity > 0 GiB", fix)
        return cls(name=name, capacity_bytes=round(gib * GIB), source=source)


GB200 = Device.from_gib(
    "gb200",
    184.31,
    "torch's CUDA out-of-memory message on a GB200: 'GPU 0 has a total capacity of 184.31 GiB' "
    "(the total the caching allocator runs out against; seen in several public GB200 training "
    "and serving logs, 2026). It is the one GB200 capacity pooltk judges against: the published "
    "139.6 GiB pooled peak + '44 GiB headroom' = 183.6 GiB agrees with it. Not used: 187.28 GiB, "
    "torch's device-properties total_memory as torchtitan's setup line prints it ('CUDA capacity: "
    "NVIDIA GB200 with 187.28GiB memory', a public torchtitan log of 2026-05-04), which counts "
    "memory torch cannot allocate; and the datasheet's 186 GB (173.2 GiB).",
)
"""The one GB200 capacity, with its source (see its ``source`` for the two figures it is not)."""

DEVICES: MappingProxyType = MappingProxyType(
    {
        d.name: d
        for d in (
            GB200,
            dataclasses.replace(
                GB200,
                name="gb200-184.31",
                source="the same capacity as gb200 under its earlier name (kept until callers "
                "name gb200)",
            ),
            Device.from_gib(
                "b200",
                178.35,
                "torch total_memory in public torchtitan logs on B200: 'CUDA capacity: NVIDIA "
                "B200 with 178.35GiB memory' (2026-05-19)",
            ),
            Device.from_gib(
                "h100",
                79.18,
                "torch total_memory in public torchtitan logs on H100: 'CUDA capacity: NVIDIA "
                "H100 80GB HBM3 with 79.18GiB memory' (2026-01)",
            ),
        )
    }
)
"""Known devices by name; see each one's ``source``."""


def get_device(spec: str | float | int | Device | None = None) -> Device:
    """A :class:`Device` from a name in :data:`DEVICES`, a number of GiB, ``"auto"`` or ``None``.

    ``"auto"`` / ``None``: the capacity torch reports for ``cuda:0`` on this machine; an error
    naming the capacity when there is no GPU (the CLI names its ``--capacity``).
    """
    if isinstance(spec, Device):
        return spec
    if spec is None or (isinstance(spec, str) and spec.strip().lower() == "auto"):
        return _this_gpu()
    if not isinstance(spec, str):
        return Device.from_gib(f"{spec:g} GiB", spec, "given as a number")
    key = spec.strip().lower()
    if key in DEVICES:
        return DEVICES[key]
    try:
        value = float(key.removesuffix("gib"))
    except ValueError:
        raise MemoryModelError(
            "capacity",
            found=repr(spec),
            required=f"one of {', '.join(DEVICES)}, 'auto', or a number of GiB",
            fix="e.g. gb200, or 79.18 for 79.18 GiB.",
        ) from None
    return Device.from_gib(f"{value:g} GiB", value, "given on the command line")


def _this_gpu() -> Device:
    import torch

    if not torch.cuda.is_available():
        raise MemoryModelError(
            "capacity",
            found="no GPU on this machine (torch.cuda.is_available() is False)",
            required="a device to compare against",
            fix=f"name one of {', '.join(DEVICES)} or give a GiB figure.",
        )
    props = torch.cuda.get_device_properties(0)
    return Device(
        name=props.name,
        capacity_bytes=int(props.total_memory),
        source="torch.cuda.get_device_properties(0).total_memory on this machine",
    )


# --------------------------------------------------------------------------- the overhead


@dataclass(kw_only=True, slots=True, frozen=True)
class Overhead:
    """GPU memory a process holds outside the tensors counted. See [Note: an honest verdict]."""

    cuda_context_bytes: int
    """The CUDA context (driver, loaded kernels)."""
    nccl_bytes: int
    """NCCL's communicator buffers."""
    allocator_bytes: int
    """The caching allocator's reserved-but-unallocated memory (rounding, fragmentation)."""
    source: str
    """Where each part comes from."""

    def __post_init__(self) -> None:
        for name in ("cuda_context_bytes", "nccl_bytes", "allocator_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise MemoryModelError(
                    f"Overhead.{name}",
                    found=repr(value),
                    required="bytes >= 0",
                    fix="give a whole number of bytes, e.g. 400 * 2**20.",
                )

    @property
    def total_bytes(self) -> int:
        """All three parts."""
        return self.cuda_context_bytes + self.nccl_bytes + self.allocator_bytes

    def describe(self) -> str:
        """e.g. ``2.29 GiB = CUDA context 0.39 + NCCL 1.49 + allocator 0.41 (sources)``."""
        return (
            f"{self.total_bytes / GIB:.2f} GiB = CUDA context {self.cuda_context_bytes / GIB:.2f} "
            f"+ NCCL {self.nccl_bytes / GIB:.2f} + allocator {self.allocator_bytes / GIB:.2f} "
            f"({self.source})"
        )


DEFAULT_OVERHEAD = Overhead(
    cuda_context_bytes=400 * MIB,
    nccl_bytes=round(1.6e9),
    allocator_bytes=0,
    source="CUDA context about 400 MB with CUDA >= 11.7's lazy module loading "
    "(pytorch/pytorch#109888, a PyTorch maintainer); one NCCL communicator after an all-reduce "
    "about 1.6 GB (NVIDIA/nccl#864; more communicators, all-to-all and more channels use more: "
    "NVIDIA/nccl#986, #1685); the allocator's rounding and fragmentation depend on the run and "
    "are 0 here until calibrated from a run log",
)
"""The stated default overhead ([Note: an honest verdict])."""


def calibrated_overhead(
    *,
    logged_peak_bytes: int,
    basis: str,
    estimate_peak_bytes: int,
    source: str,
    base: Overhead = DEFAULT_OVERHEAD,
) -> Overhead:
    """The overhead with its allocator share from a run's logged peak of the same configuration.

    ``basis`` says which peak the log reports: ``max_reserved`` (torchtitan's ``memory:`` column;
    the allocator share is ``logged - estimate``) or ``max_allocated`` (Automodel's ``mem``; the
    allocator's share is not in it, so ``base``'s is kept and the difference is the estimate's
    error, reported in the source). A reserved peak below the estimate means the estimate is high
    for this run: the share is 0 and the source says by how much.
    """
    if basis not in ("max_reserved", "max_allocated"):
        raise MemoryModelError(
            "basis",
            found=repr(basis),
            required="'max_reserved' or 'max_allocated'",
            fix="say which peak the log reports (torchtitan: max_reserved; Automodel: "
            "max_allocated).",
        )
    diff = int(logged_peak_bytes) - int(estimate_peak_bytes)
    if basis == "max_allocated":
        note = (
            f"; allocator share not in an allocated peak: kept at {base.allocator_bytes / GIB:.2f} "
            f"GiB (the log's {logged_peak_bytes / GIB:.2f} GiB allocated is {diff / GIB:+.2f} GiB "
            f"from the estimate); {source}"
        )
        return dataclasses.replace(base, source=base.source + note)
    note = (
        f"allocator share {max(0, diff) / GIB:.2f} GiB = the log's max reserved "
        f"{logged_peak_bytes / GIB:.2f} GiB - the estimate {estimate_peak_bytes / GIB:.2f} GiB"
        + ("" if diff >= 0 else " (the estimate is higher: share 0)")
    )
    return dataclasses.replace(
        base,
        allocator_bytes=max(0, diff),
        source=f"{base.source.split('; the allocator')[0]}; {note} ({source})",
    )


# --------------------------------------------------------------------------- the verdict


def margin_text(margin_bytes: int) -> str:
    """``fits, 44.71 GiB free`` or ``OOM by 56 MiB`` (MiB below 1 GiB, else GiB)."""
    size = abs(margin_bytes)
    text = f"{size / MIB:.0f} MiB" if size < GIB else f"{size / GIB:.2f} GiB"
    return f"fits, {text} free" if margin_bytes >= 0 else f"OOM by {text}"


@dataclass(kw_only=True, slots=True, frozen=True)
class VerdictRow:
    """One rank under one variant on one device. See [Note: one verdict]."""

    rank: int
    """The rank (one GPU, all its stages); under single-stage schedules also its stage."""
    variant: str
    """The replayed or modelled variant."""
    tensor_bytes: int
    """The tensor peak: the replay's, or the anchored model's (base + receive buffers)."""
    recv_bytes: int
    """Receive buffers in that peak (the replay's at its peak; the model's for the variant)."""
    overhead_bytes: int
    """What is added for memory outside the tensors (0 for a view of the tensors alone)."""
    capacity_bytes: int
    """The device's capacity."""

    @property
    def needed_bytes(self) -> int:
        """``tensor peak + overhead``."""
        return self.tensor_bytes + self.overhead_bytes

    @property
    def margin_bytes(self) -> int:
        """``capacity - needed``: headroom when >= 0, the OOM shortfall when < 0."""
        return self.capacity_bytes - self.needed_bytes

    @property
    def fits(self) -> bool:
        """Whether the rank fits."""
        return self.margin_bytes >= 0

    @property
    def text(self) -> str:
        """``fits, 12.3 GiB free`` / ``OOM by 56 MiB``."""
        return margin_text(self.margin_bytes)


@dataclass(kw_only=True, slots=True, frozen=True)
class Verdict:
    """Every rank and variant against one device. See [Note: one verdict]."""

    device: Device
    """The capacity and its source."""
    overhead: Overhead | None
    """What is added to every tensor peak, and why; ``None``: the tensors alone."""
    rows: tuple[VerdictRow, ...]
    """One per (rank, variant)."""
    basis: str
    """What the tensor peaks stand on: the replay, or the reference peak they are anchored on."""
    not_modelled: tuple[str, ...]
    """What the tensor peaks leave out."""
    per: str = "rank"
    """What a row's ``rank`` is called in text: ``rank``, or ``stage`` (one stage per rank)."""
    reference: ReferencePeak | None = None
    """The anchoring peak (:func:`anchored` only)."""
    reference_stage: int | None = None
    """The stage (rank) the reference describes, resolved (:func:`anchored` only)."""
    base_bytes: int | None = None
    """Non-buffer memory per stage implied by the reference (:func:`anchored` only)."""

    @property
    def variants(self) -> tuple[str, ...]:
        """The rows' variants, in order."""
        return tuple(dict.fromkeys(r.variant for r in self.rows))

    def worst(self, variant: str) -> VerdictRow:
        """The rank with the least margin under ``variant``."""
        rows = [r for r in self.rows if r.variant == variant]
        if not rows:
            raise MemoryModelError(
                "variant",
                found=repr(variant),
                required=f"one of {list(self.variants)}",
                fix="ask for a variant the verdict holds.",
            )
        return min(rows, key=lambda r: r.margin_bytes)

    def summary(self) -> dict[str, str]:
        """Per variant, its fullest rank: ``rank 1: fits, ... free`` (and the sum, given an
        overhead)."""
        out = {}
        for v in self.variants:
            w = self.worst(v)
            out[v] = f"{self.per} {w.rank}: {w.text}"
            if self.overhead is not None:
                out[v] += (
                    f" (estimate {w.tensor_bytes / GIB:.2f} GiB + overhead "
                    f"{w.overhead_bytes / GIB:.2f} GiB)"
                )
        return out

    def lines(self, titles: Mapping[str, str] = MappingProxyType({})) -> list[str]:
        """As text: the device, the overhead, each variant's fullest rank (``titles`` name the
        variants), what is not modelled."""
        over = self.overhead.describe() if self.overhead is not None else "none (tensors alone)"
        out = [
            f"fits on {self.device.name}: {self.device.gib:.2f} GiB ({self.device.source})",
            f"  overhead added to every estimate: {over}",
        ]
        out += [f"  {titles.get(v, v):38} fullest {text}" for v, text in self.summary().items()]
        return out + ["  not modelled: " + "; ".join(self.not_modelled)]

    def to_records(self, unit: str = "gib") -> list[dict[str, Any]]:
        """One plain dict per row (no pandas needed): sizes in ``unit`` (one of
        :data:`~pooltk.memory.units.BYTES_PER_UNIT`) under ``<size>_<unit>``; GiB by default, the
        columns of :meth:`to_frame` (``tensor_gib``), or with ``unit="bytes"`` exact integers, the
        rows of :meth:`to_dict` (``tensor_bytes``)."""
        per_unit = unit_bytes(unit)

        def size(n_bytes: int) -> float:
            return n_bytes if unit == "bytes" else n_bytes / per_unit

        sizes = ("tensor", "recv", "overhead", "needed", "capacity", "margin")
        return [
            {
                "rank": r.rank,
                "variant": r.variant,
                **{f"{f}_{unit}": size(getattr(r, f"{f}_bytes")) for f in sizes},
                "fits": r.fits,
                "verdict": r.text,
            }
            for r in self.rows
        ]

    def to_frame(self) -> pd.DataFrame:
        """One row per (rank, variant), the columns of :meth:`to_records`."""
        import pandas as pd

        return pd.DataFrame.from_records(self.to_records())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict, in bytes."""
        return {
            "device": dataclasses.asdict(self.device),
            "overhead": None if self.overhead is None else dataclasses.asdict(self.overhead),
            "basis": self.basis,
            "per": self.per,
            "reference": None if self.reference is None else dataclasses.asdict(self.reference),
            "reference_stage": self.reference_stage,
            "base_bytes": self.base_bytes,
            "rows": self.to_records("bytes"),
            "not_modelled": list(self.not_modelled),
        }


# --------------------------------------------------------------------------- builder 1: a replay


def of_estimate(
    estimate: Any,
    device: Device | str | float | None = "gb200",
    *,
    overhead: Overhead = DEFAULT_OVERHEAD,
    variants: Sequence[str] | None = None,
) -> Verdict:
    """Every replayed rank and variant of ``estimate`` (a
    :class:`~pooltk.memory.replay.estimate.MemoryEstimate`) on ``device``.

    See [Note: one verdict].
    """
    if not hasattr(estimate, "replays") or not hasattr(estimate, "not_modelled"):
        raise MemoryModelError(
            "estimate",
            found=type(estimate).__name__,
            required="a MemoryEstimate (estimate_memory(...))",
            fix="replay the stages first: pooltk.memory.replay.estimate.estimate_memory(...).",
        )
    dev = get_device(device)
    rows = tuple(
        VerdictRow(
            rank=r.rank,
            variant=r.variant,
            tensor_bytes=r.peak.bytes,
            recv_bytes=r.at_peak.get("recv_buffers", 0),
            overhead_bytes=overhead.total_bytes,
            capacity_bytes=dev.capacity_bytes,
        )
        for r in estimate.replays
        if variants is None or r.variant in variants
    )
    return Verdict(
        device=dev,
        overhead=overhead,
        rows=rows,
        basis="the whole-stage replay: each rank's tensor peak under each variant",
        not_modelled=tuple(estimate.not_modelled),
    )


# --------------------------------------------------------------------------- builder 2: an anchor


@dataclass(kw_only=True, slots=True, frozen=True)
class ReferencePeak:
    """A measured or published peak of one configuration: what anchors everything that is not a
    receive buffer ([Note: the fits model])."""

    peak_bytes: int
    """The peak, bytes (e.g. 139.6 GiB)."""
    variant: str = "pooled"
    """Which variant the peak was measured under: ``stock``, ``automodel``, ``tight`` or
    ``pooled`` (``config``'s policy)."""
    config: PoolConfig = dataclasses.field(default_factory=lambda: PoolConfig(slack=2))
    """The pool config of the reference run."""
    policy: str = "automodel"
    """The ring policy of the reference run (:data:`pooltk.memory.model.POLICIES`)."""
    sharing: str = "rank"
    """Whether the reference run's rank shared its rings (``rank``) or kept one per stage."""
    stage: int | None = None
    """The stage the peak describes; ``None``: the fullest stage of the reference variant."""
    weights_bytes: int | None = None
    """Per-GPU memory no configuration can shed (weights), when known: a capacity below it is
    an error."""
    source: str = ""
    """Where the peak comes from."""

    def __post_init__(self) -> None:
        if not (isinstance(self.peak_bytes, int) and self.peak_bytes > 0):
            raise MemoryModelError(
                "reference peak",
                found=repr(self.peak_bytes),
                required="a peak > 0 bytes",
                fix="give the measured or published peak, e.g. 139.6 GiB.",
            )
        if self.variant not in VARIANTS:
            raise MemoryModelError(
                "reference variant",
                found=repr(self.variant),
                required=f"one of {', '.join(VARIANTS)}",
                fix="say which variant the reference peak was measured under.",
            )
        weights = self.weights_bytes
        if weights is not None and not (
            isinstance(weights, int) and 0 < weights <= self.peak_bytes
        ):
            raise MemoryModelError(
                "weights",
                found=repr(weights),
                required="> 0 and not above the reference peak",
                fix="give the per-GPU weight bytes, or leave them out.",
            )

    @classmethod
    def from_gib(cls, gib: float, **kwargs: Any) -> ReferencePeak:
        """From GiB (2**30 bytes)."""
        fix = "give the measured or published peak in GiB, e.g. 139.6."
        gib = _positive_gib("reference peak", gib, "a finite peak > 0 GiB", fix)
        return cls(peak_bytes=round(gib * GIB), **kwargs)


def published_peak(preset: Any) -> Any:
    """The :class:`~pooltk.memory.source.Figure` of ``preset``'s published pooled peak, or ``None``.

    Its value is in GiB and describes ``preset.config`` and ``preset.policy`` (the published
    run's slack and policy).
    """
    return next((f for f in preset.figures if f.name == PUBLISHED_PEAK), None)


def anchored(
    model: MemoryModel,
    device: Device | str | float | None,
    reference: ReferencePeak,
    *,
    overhead: Overhead | None = DEFAULT_OVERHEAD,
    reference_shape: PipelineShape | None = None,
    reference_boundaries: Sequence[Boundary] | None = None,
    variants: Sequence[str] | None = None,
) -> Verdict:
    """Per rank (stage) and variant of ``model``, its receive buffers on top of the non-buffer
    memory ``reference`` implies, on ``device``. See [Note: the fits model].

    ``reference_shape`` / ``reference_boundaries`` describe the run the reference peak was taken
    from when it differs from ``model``'s. ``variants`` default to :data:`FIT_VARIANTS`, and the
    rank-shared rings (``shared``) under a multi-stage schedule.
    """
    dev = get_device(device)
    run = (reference_shape or model.shape, list(reference_boundaries or model.boundaries))
    stage, base = _base(reference, *run)
    _check_weights(dev, reference)
    multi = model.shape.multi_stage
    shown = variants or FIT_VARIANTS + (("shared",) if multi else ())
    over = 0 if overhead is None else overhead.total_bytes
    rows = tuple(
        VerdictRow(
            rank=i,
            variant=v,
            tensor_bytes=base + model.rank_bytes(i, v),
            recv_bytes=model.rank_bytes(i, v),
            overhead_bytes=over,
            capacity_bytes=dev.capacity_bytes,
        )
        for i in range(model.shape.pp)
        for v in shown
    )
    return Verdict(
        device=dev,
        overhead=overhead,
        rows=rows,
        basis=f"anchored on {reference.peak_bytes / GIB:.2f} GiB, a {reference.variant} peak on "
        f"stage {stage} ({reference.source or 'no source given'}); receive buffers modelled",
        not_modelled=ANCHORED_NOT_MODELLED,
        per="rank" if multi else "stage",
        reference=reference,
        reference_stage=stage,
        base_bytes=base,
    )


def _base(
    reference: ReferencePeak, shape: PipelineShape, boundaries: list[Boundary]
) -> tuple[int, int]:
    """(the reference stage, the non-buffer memory its peak implies) on the reference run's
    receive buffers: ``shape`` and ``boundaries`` under the reference's config and policy."""
    kw = {"policy": reference.policy, "sharing": reference.sharing}
    ref_model = model_memory(shape, boundaries, reference.config, **kw)
    n = ref_model.shape.pp
    stage = reference.stage
    if stage is None:
        stage = max(range(n), key=lambda i: ref_model.rank_bytes(i, reference.variant))
    elif not (isinstance(stage, int) and 0 <= stage < n):
        raise MemoryModelError(
            "reference stage",
            found=repr(stage),
            required=f"a stage (rank) in 0..{n - 1}",
            fix="give the stage the reference peak was logged on (rank 0 logs stage 0).",
        )
    recv = ref_model.rank_bytes(stage, reference.variant)
    if reference.peak_bytes < recv:
        raise MemoryModelError(
            "reference peak",
            found=f"{reference.peak_bytes / GIB:.2f} GiB, below its own receive buffers "
            f"({recv / GIB:.2f} GiB on stage {stage}, {reference.variant})",
            required="a peak that includes the receive buffers",
            fix="check the peak's unit (GiB) and the reference config.",
        )
    return stage, reference.peak_bytes - recv


def _check_weights(dev: Device, reference: ReferencePeak) -> None:
    floor = reference.weights_bytes
    if floor is not None and dev.capacity_bytes <= floor:
        raise MemoryModelError(
            "capacity",
            found=f"{dev.name}: {dev.gib:.2f} GiB",
            required=f"more than the model's weights per GPU ({floor / GIB:.2f} GiB): no "
            "receive-buffer policy can make up for that",
            fix="choose a larger device, or shard the weights further (more pipeline or expert "
            "parallelism).",
        )
