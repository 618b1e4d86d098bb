"""Does it fit, and by how much: per rank (per stage under single-stage schedules) peaks on a device, stock vs the ring policies.

[Note: the fits model]
The memory model knows only receive buffers. Everything else a stage holds at its peak
(weights, optimizer state, activations, workspace) comes from one *reference*: a measured or
published peak of one configuration (e.g. the pooled Kimi-K3 2k run, 139.6 GiB, automodel
policy, slack 2). Assumed: that non-buffer memory is the same on every stage and does not
change with the pool, so

    base         = reference peak - reference variant's receive buffers on the reference stage
    peak(i, v)   = base + receive buffers of variant v on stage i
    margin(i, v) = capacity - peak(i, v)        (>= 0: fits; < 0: OOM by -margin)

A GPU is a rank: under multi-stage schedules ``i`` is a rank and its receive buffers are the
sum over its stages (:meth:`~pooltk.memory.results.MemoryModel.rank_bytes`); under single-stage
schedules rank and stage coincide. The reference stage is the fullest stage of the reference
variant unless given (a log that only rank 0 writes describes stage 0). Every number is exact bytes; GiB = 2**30 bytes.
Where the assumption is wrong (first and last stages hold embeddings and the head; the
allocator's reserved memory, the CUDA context and communication buffers are not in
``max_memory_allocated``), the margins are off by exactly that difference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pooltk.config import PoolConfig
from pooltk.memory.model import VARIANTS, Boundary, MemoryModelError, PipelineShape, model_memory

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "DEVICES",
    "FIT_VARIANTS",
    "GB200",
    "PUBLISHED_PEAK",
    "Device",
    "FitReport",
    "FitRow",
    "ReferencePeak",
    "fit_report",
    "get_device",
    "published_peak",
]

GIB = 2**30

FIT_VARIANTS: tuple[str, ...] = (
    "stock",
    "stock_lazy",
    "lazy_released",
    "automodel",
    "tight",
    "live_set",
)
"""What the fits view compares: stock torch, the original policy, pooltk's tight policy, the live-set floor."""


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
        if not (isinstance(gib, (int, float)) and not isinstance(gib, bool) and gib > 0):
            raise MemoryModelError(
                "capacity",
                found=repr(gib),
                required="a capacity > 0 GiB",
                fix="give a device name (gb200, h100) or a number of GiB, e.g. 79.18.",
            )
        return cls(name=name, capacity_bytes=round(gib * GIB), source=source)


GB200 = Device.from_gib(
    "gb200",
    184.31,
    "torch's CUDA out-of-memory message on a GB200: 'GPU 0 has a total capacity of 184.31 GiB' (the total the caching "
    "allocator runs out against; seen in several public GB200 training and serving logs, 2026). It is the one GB200 "
    "capacity pooltk judges against: the published 139.6 GiB pooled peak + '44 GiB headroom' = 183.6 GiB agrees with "
    "it. Not used: 187.28 GiB, torch's device-properties total_memory as torchtitan's setup line prints it "
    "('CUDA capacity: NVIDIA GB200 with 187.28GiB memory', a public torchtitan log of 2026-05-04), which counts memory "
    "torch cannot allocate; and the datasheet's 186 GB (173.2 GiB).",
)
"""The one GB200 capacity, with its source (see its ``source`` for the two figures it is not)."""

DEVICES: MappingProxyType = MappingProxyType(
    {
        d.name: d
        for d in (
            GB200,
            Device(
                name="gb200-184.31",
                capacity_bytes=GB200.capacity_bytes,
                source="the same capacity as gb200 under its earlier name (kept until callers name gb200)",
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
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return Device(
                name=props.name,
                capacity_bytes=int(props.total_memory),
                source="torch.cuda.get_device_properties(0).total_memory on this machine",
            )
        raise MemoryModelError(
            "capacity",
            found="no GPU on this machine (torch.cuda.is_available() is False)",
            required="a device to compare against",
            fix=f"name one of {', '.join(DEVICES)} or give a GiB figure.",
        )
    if isinstance(spec, str):
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
    return Device.from_gib(f"{spec:g} GiB", spec, "given as a number")


@dataclass(kw_only=True, slots=True, frozen=True)
class ReferencePeak:
    """A measured or published peak of one configuration: what anchors everything that is not a receive buffer."""

    peak_bytes: int
    """The peak, bytes (e.g. 139.6 GiB)."""
    variant: str = "pooled"
    """Which variant the peak was measured under: ``stock``, ``automodel``, ``tight`` or ``pooled`` (``config``'s policy)."""
    config: PoolConfig = dataclasses.field(default_factory=lambda: PoolConfig(slack=2))
    """The pool config of the reference run."""
    policy: str = "automodel"
    """The ring policy of the reference run (:data:`pooltk.memory.model.POLICIES`)."""
    sharing: str = "rank"
    """Whether the reference run's rank shared its rings (``rank``) or kept them per stage (``stage``)."""
    stage: int | None = None
    """The stage the peak describes; ``None``: the fullest stage of the reference variant."""
    weights_bytes: int | None = None
    """Per-GPU memory that no configuration can shed (weights), when known: a capacity below it is an error."""
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
        if self.weights_bytes is not None and not (
            isinstance(self.weights_bytes, int) and 0 < self.weights_bytes <= self.peak_bytes
        ):
            raise MemoryModelError(
                "weights",
                found=repr(self.weights_bytes),
                required="> 0 and not above the reference peak",
                fix="give the per-GPU weight bytes, or leave them out.",
            )

    @classmethod
    def from_gib(cls, gib: float, **kwargs: Any) -> ReferencePeak:
        """From GiB (2**30 bytes)."""
        if not (isinstance(gib, (int, float)) and not isinstance(gib, bool) and gib > 0):
            raise MemoryModelError(
                "reference peak",
                found=repr(gib),
                required="a peak > 0 GiB",
                fix="give the measured or published peak in GiB, e.g. 139.6.",
            )
        return cls(peak_bytes=round(gib * GIB), **kwargs)


@dataclass(kw_only=True, slots=True, frozen=True)
class FitRow:
    """One stage under one variant on one device."""

    stage: int
    """Stage index under single-stage schedules; under multi-stage ones the rank (one GPU, all its stages)."""
    variant: str
    """One of :data:`FIT_VARIANTS`."""
    recv_bytes: int
    """Receive buffers of this variant on this stage (both directions)."""
    peak_bytes: int
    """``base + recv_bytes``: the modelled peak."""
    capacity_bytes: int
    """The device's capacity."""

    @property
    def margin_bytes(self) -> int:
        """``capacity - peak``: headroom when >= 0, the OOM shortfall when < 0."""
        return self.capacity_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        """Whether the peak is within the capacity."""
        return self.margin_bytes >= 0


@dataclass(kw_only=True, slots=True)
class FitReport:
    """Every stage and variant on one device, anchored to one reference. See [Note: the fits model]."""

    device: Device
    """The device compared against."""
    reference: ReferencePeak
    """The anchoring peak."""
    reference_stage: int
    """The stage the reference describes (resolved)."""
    base_bytes: int
    """Non-buffer memory per stage implied by the reference."""
    rows: tuple[FitRow, ...]
    """One row per (stage, variant)."""
    config: PoolConfig
    """The pool config of the variants shown."""
    policy: str = "tight"
    """The ring policy of the ``pooled`` variant shown."""
    sharing: str = "rank"
    """The ring sharing of the ``pooled`` variant shown."""
    per: str = "stage"
    """What a row's ``stage`` is: ``"stage"`` (single-stage schedules) or ``"rank"`` (multi-stage ones)."""
    variants: tuple[str, ...] = FIT_VARIANTS
    """The variants of the rows: :data:`FIT_VARIANTS`, plus the rank-shared rings (``shared``) per rank."""

    def to_records(self) -> list[dict[str, Any]]:
        """One plain dict per (stage, variant): the columns of :meth:`to_frame` (no pandas needed)."""
        return [
            {
                "stage": r.stage,
                "variant": r.variant,
                "recv_gib": r.recv_bytes / GIB,
                "peak_gib": r.peak_bytes / GIB,
                "capacity_gib": r.capacity_bytes / GIB,
                "margin_gib": r.margin_bytes / GIB,
                "margin_mib": r.margin_bytes / 2**20,
                "fits": r.fits,
                "verdict": verdict(r.margin_bytes),
            }
            for r in self.rows
        ]

    def to_frame(self) -> pd.DataFrame:
        """Tidy: ``stage``, ``variant``, ``recv_gib``, ``peak_gib``, ``capacity_gib``, ``margin_gib``,
        ``margin_mib``, ``fits``, ``verdict`` (e.g. ``fits, 44.7 GiB free`` / ``OOM by 56 MiB``)."""
        import pandas as pd

        return pd.DataFrame.from_records(self.to_records())

    def worst(self, variant: str) -> FitRow:
        """The stage with the least margin under ``variant``."""
        return min((r for r in self.rows if r.variant == variant), key=lambda r: r.margin_bytes)

    def summary(self) -> dict[str, str]:
        """Per variant, the verdict on its fullest stage."""
        return {
            v: f"{self.per} {self.worst(v).stage}: {verdict(self.worst(v).margin_bytes)}"
            for v in self.variants
        }


def verdict(margin_bytes: int) -> str:
    """``fits, 44.71 GiB free`` or ``OOM by 56 MiB`` (MiB below 1 GiB, else GiB)."""
    size = abs(margin_bytes)
    text = f"{size / 2**20:.0f} MiB" if size < GIB else f"{size / GIB:.2f} GiB"
    return f"fits, {text} free" if margin_bytes >= 0 else f"OOM by {text}"


def fit_report(
    shape: PipelineShape,
    boundary: Boundary | list[Boundary],
    config: PoolConfig,
    device: Device | str | float | None,
    reference: ReferencePeak,
    *,
    policy: str = "tight",
    sharing: str = "rank",
    reference_shape: PipelineShape | None = None,
    reference_boundary: Boundary | list[Boundary] | None = None,
) -> FitReport:
    """Per stage and variant, the modelled peak on ``device`` and its margin. See [Note: the fits model].

    ``reference_shape`` / ``reference_boundary`` describe the run the reference peak was taken
    from when it differs from the shape being asked about (default: the same shape). ``policy`` and
    ``sharing`` are the ``pooled`` variant's, as in :func:`~pooltk.memory.model.model_memory`.
    """
    dev = get_device(device)
    ref_model = model_memory(
        reference_shape or shape,
        reference_boundary or boundary,
        reference.config,
        policy=reference.policy,
        sharing=reference.sharing,
    )
    n_ref = ref_model.shape.pp
    if reference.stage is None:
        ref_stage = max(range(n_ref), key=lambda i: ref_model.rank_bytes(i, reference.variant))
    else:
        if not (isinstance(reference.stage, int) and 0 <= reference.stage < n_ref):
            raise MemoryModelError(
                "reference stage",
                found=repr(reference.stage),
                required=f"a stage (rank) in 0..{n_ref - 1}",
                fix="give the stage the reference peak was logged on (rank 0 logs stage 0).",
            )
        ref_stage = reference.stage
    ref_recv = ref_model.rank_bytes(ref_stage, reference.variant)
    base = reference.peak_bytes - ref_recv
    if base < 0:
        raise MemoryModelError(
            "reference peak",
            found=f"{reference.peak_bytes / GIB:.2f} GiB, below its own receive buffers "
            f"({ref_recv / GIB:.2f} GiB on stage {ref_stage}, {reference.variant})",
            required="a peak that includes the receive buffers",
            fix="check the peak's unit (GiB) and the reference config.",
        )
    floor = reference.weights_bytes
    if floor is not None and dev.capacity_bytes <= floor:
        raise MemoryModelError(
            "capacity",
            found=f"{dev.name}: {dev.gib:.2f} GiB",
            required=f"more than the model's weights per GPU "
            f"({floor / GIB:.2f} GiB): no receive-buffer policy can make up for that",
            fix="choose a larger device, or shard the weights further (more pipeline or expert parallelism).",
        )
    model = model_memory(shape, boundary, config, policy=policy, sharing=sharing)
    variants = FIT_VARIANTS + (("shared",) if model.shape.multi_stage else ())
    rows = tuple(
        FitRow(
            stage=i,
            variant=v,
            recv_bytes=model.rank_bytes(i, v),
            peak_bytes=base + model.rank_bytes(i, v),
            capacity_bytes=dev.capacity_bytes,
        )
        for i in range(shape.pp)
        for v in variants
    )
    return FitReport(
        device=dev,
        reference=reference,
        reference_stage=ref_stage,
        base_bytes=base,
        rows=rows,
        config=config,
        policy=policy,
        sharing=sharing,
        per="rank" if model.shape.multi_stage else "stage",
        variants=variants,
    )


PUBLISHED_PEAK = "peak_memory_pooled_gib"
"""The name of the figure a preset's published pooled peak goes by (the fits view's default anchor)."""


def published_peak(preset: Any) -> Any:
    """The :class:`~pooltk.memory.source.Figure` of ``preset``'s published pooled peak, or ``None`` if it has none.

    Its value is in GiB and describes ``preset.config`` and ``preset.policy`` (the published run's slack
    and policy).
    """
    return next((f for f in preset.figures if f.name == PUBLISHED_PEAK), None)
