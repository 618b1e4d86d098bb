"""Fits or not: the whole-stage estimate plus a stated overhead, against one device capacity that names its source.

[Note: an honest verdict]
A rank fits when ``estimate + overhead <= capacity``, where

- ``estimate`` is the replay's peak of the rank ([Note: the whole-stage estimate]): every tensor
  storage torch's operators allocate, as ``torch.cuda.max_memory_allocated`` would count them;
- ``overhead`` is what a GPU process holds outside those tensors (:class:`Overhead`): the CUDA
  context, NCCL's communicator buffers, and the caching allocator's rounding and fragmentation
  (reserved but not allocated). The default states each part with its source and leaves the
  allocator's share at 0, because it depends on the run; :func:`calibrated_overhead` (or
  :func:`overhead_from_log`) takes it from the user's own run: the peak a log reports for the
  same configuration, minus the estimate;
- ``capacity`` is one :class:`~pooltk.memory.fits.Device` (GB200: 184.31 GiB, the total torch's
  allocator reports when it runs out; :data:`pooltk.memory.fits.GB200`).

Every verdict says what is and is not modelled (:data:`pooltk.memory.replay.estimate.NOT_MODELLED`).
No verdict borrows another model's peak: a reference peak counts only when the user gives it
(a log, a number), and then only through the overhead it calibrates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk.memory.errors import MemoryModelError
from pooltk.memory.fits import Device, get_device, verdict
from pooltk.memory.replay.estimate import VARIANT_TITLES, MemoryEstimate

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "DEFAULT_OVERHEAD",
    "FitsVerdict",
    "Overhead",
    "RankVerdict",
    "calibrated_overhead",
    "fits_verdict",
    "overhead_from_log",
]

GIB = 2**30
MIB = 2**20


@dataclass(kw_only=True, slots=True, frozen=True)
class Overhead:
    """GPU memory a training process holds outside the tensors the estimate counts. See [Note: an honest verdict]."""

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
        """e.g. ``2.29 GiB = CUDA context 0.39 + NCCL 1.49 + allocator 0.41``."""
        return (
            f"{self.total_bytes / GIB:.2f} GiB = CUDA context {self.cuda_context_bytes / GIB:.2f} + NCCL "
            f"{self.nccl_bytes / GIB:.2f} + allocator {self.allocator_bytes / GIB:.2f} ({self.source})"
        )


DEFAULT_OVERHEAD = Overhead(
    cuda_context_bytes=400 * MIB,
    nccl_bytes=round(1.6e9),
    allocator_bytes=0,
    source="CUDA context about 400 MB with CUDA >= 11.7's lazy module loading (pytorch/pytorch#109888, a PyTorch "
    "maintainer); one NCCL communicator after an all-reduce about 1.6 GB (NVIDIA/nccl#864; more communicators, "
    "all-to-all and more channels use more: NVIDIA/nccl#986, #1685); the allocator's rounding and fragmentation "
    "depend on the run and are 0 here until calibrated from a run log",
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
    """The overhead with its allocator share taken from a run's logged peak of the same configuration.

    ``basis`` says which peak the log reports: ``max_reserved`` (torchtitan's ``memory:`` column; the
    allocator share is ``logged - estimate``) or ``max_allocated`` (Automodel's ``mem``; the allocator's
    share is not in it, so the default is kept and the difference is the estimate's error, reported
    in the source). A reserved peak below the estimate means the estimate is high for this run: the
    share is 0 and the source says by how much.
    """
    if basis not in ("max_reserved", "max_allocated"):
        raise MemoryModelError(
            "basis",
            found=repr(basis),
            required="'max_reserved' or 'max_allocated'",
            fix="say which peak the log reports (torchtitan: max_reserved; Automodel: max_allocated).",
        )
    diff = int(logged_peak_bytes) - int(estimate_peak_bytes)
    if basis == "max_allocated":
        note = (
            f"; allocator share not in an allocated peak: kept at {base.allocator_bytes / GIB:.2f} GiB (the log's "
            f"{logged_peak_bytes / GIB:.2f} GiB allocated is {diff / GIB:+.2f} GiB from the estimate)"
        )
        return Overhead(
            cuda_context_bytes=base.cuda_context_bytes,
            nccl_bytes=base.nccl_bytes,
            allocator_bytes=base.allocator_bytes,
            source=base.source + note + f"; {source}",
        )
    share = max(0, diff)
    note = (
        f"allocator share {share / GIB:.2f} GiB = the log's max reserved {logged_peak_bytes / GIB:.2f} GiB - the "
        f"estimate {estimate_peak_bytes / GIB:.2f} GiB"
        + ("" if diff >= 0 else " (the estimate is higher: share 0)")
    )
    return Overhead(
        cuda_context_bytes=base.cuda_context_bytes,
        nccl_bytes=base.nccl_bytes,
        allocator_bytes=share,
        source=f"{base.source.split('; the allocator')[0]}; {note} ({source})",
    )


def overhead_from_log(
    path: str, estimate: MemoryEstimate, *, variant: str | None = None
) -> Overhead:
    """:func:`calibrated_overhead` from a run log (Automodel or torchtitan, read by :mod:`pooltk.logs`).

    The log's peak is its largest ``mem_gib`` (rank 0's, as these trainers log it); it is compared with
    the estimate of the rank holding stage 0 under ``variant`` (default: ``pooled`` if replayed, else ``stock``).
    """
    from pooltk.logs import read_logs

    table = read_logs(path).steps
    mem = table["mem_gib"].dropna() if "mem_gib" in table else None
    if mem is None or mem.empty:
        raise MemoryModelError(
            "run log",
            found=f"{path}: no peak memory column (mem_gib) in its steps",
            required="a log whose steps report peak memory",
            fix="give an Automodel or torchtitan training log.",
        )
    basis = str(table.loc[mem.idxmax(), "mem_basis"])
    chosen = variant or ("pooled" if "pooled" in estimate.variants else "stock")
    rep = estimate.replay(0, chosen)
    return calibrated_overhead(
        logged_peak_bytes=round(float(mem.max()) * GIB),
        basis=basis,
        estimate_peak_bytes=rep.peak.bytes,
        source=f"{path}, rank 0, {chosen}",
    )


@dataclass(kw_only=True, slots=True, frozen=True)
class RankVerdict:
    """One rank under one variant on one device."""

    rank: int
    """The rank (one GPU: all its stages)."""
    variant: str
    """The replayed variant."""
    estimate_bytes: int
    """The replay's peak."""
    overhead_bytes: int
    """The stated overhead."""
    capacity_bytes: int
    """The device's capacity."""

    @property
    def needed_bytes(self) -> int:
        """``estimate + overhead``."""
        return self.estimate_bytes + self.overhead_bytes

    @property
    def margin_bytes(self) -> int:
        """``capacity - needed``: free when >= 0, the shortfall when < 0."""
        return self.capacity_bytes - self.needed_bytes

    @property
    def fits(self) -> bool:
        """Whether the rank fits."""
        return self.margin_bytes >= 0

    @property
    def text(self) -> str:
        """``fits, 12.3 GiB free`` / ``OOM by 56 MiB``."""
        return verdict(self.margin_bytes)


@dataclass(kw_only=True, slots=True, frozen=True)
class FitsVerdict:
    """Every replayed rank and variant against one device. See [Note: an honest verdict]."""

    device: Device
    """The capacity and its source."""
    overhead: Overhead
    """What is added to every estimate, and why."""
    rows: tuple[RankVerdict, ...]
    """One per (rank, variant), as the estimate lists its replays."""
    not_modelled: tuple[str, ...]
    """What the estimate leaves out."""

    def worst(self, variant: str) -> RankVerdict:
        """The rank with the least margin under ``variant``."""
        rows = [r for r in self.rows if r.variant == variant]
        if not rows:
            raise MemoryModelError(
                "variant",
                found=repr(variant),
                required=f"one of {sorted({r.variant for r in self.rows})}",
                fix="ask for a replayed variant.",
            )
        return min(rows, key=lambda r: r.margin_bytes)

    def summary(self) -> dict[str, str]:
        """Per variant: ``rank R: fits, ... free`` on its fullest rank."""
        out = {}
        for v in dict.fromkeys(r.variant for r in self.rows):
            w = self.worst(v)
            out[v] = (
                f"rank {w.rank}: {w.text} (estimate {w.estimate_bytes / GIB:.2f} GiB + overhead {w.overhead_bytes / GIB:.2f} GiB)"
            )
        return out

    def lines(self) -> list[str]:
        """The verdict as text: the device, the overhead, each variant's fullest rank, what is not modelled."""
        out = [
            f"fits on {self.device.name}: {self.device.gib:.2f} GiB ({self.device.source})",
            f"  overhead added to every estimate: {self.overhead.describe()}",
        ]
        out += [
            f"  {VARIANT_TITLES.get(v, v):38} fullest {text}" for v, text in self.summary().items()
        ]
        out += ["  not modelled: " + "; ".join(self.not_modelled)]
        return out

    def to_frame(self) -> pd.DataFrame:
        """One row per (rank, variant): ``estimate_gib``, ``overhead_gib``, ``needed_gib``, ``capacity_gib``,
        ``margin_gib``, ``fits``, ``verdict``."""
        import pandas as pd

        return pd.DataFrame.from_records(
            [
                {
                    "rank": r.rank,
                    "variant": r.variant,
                    "estimate_gib": r.estimate_bytes / GIB,
                    "overhead_gib": r.overhead_bytes / GIB,
                    "needed_gib": r.needed_bytes / GIB,
                    "capacity_gib": r.capacity_bytes / GIB,
                    "margin_gib": r.margin_bytes / GIB,
                    "fits": r.fits,
                    "verdict": r.text,
                }
                for r in self.rows
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "device": {
                "name": self.device.name,
                "capacity_bytes": self.device.capacity_bytes,
                "source": self.device.source,
            },
            "overhead": {
                "cuda_context_bytes": self.overhead.cuda_context_bytes,
                "nccl_bytes": self.overhead.nccl_bytes,
                "allocator_bytes": self.overhead.allocator_bytes,
                "source": self.overhead.source,
            },
            "rows": [
                {
                    "rank": r.rank,
                    "variant": r.variant,
                    "estimate_bytes": r.estimate_bytes,
                    "needed_bytes": r.needed_bytes,
                    "margin_bytes": r.margin_bytes,
                    "fits": r.fits,
                    "verdict": r.text,
                }
                for r in self.rows
            ],
            "not_modelled": list(self.not_modelled),
        }


def fits_verdict(
    estimate: MemoryEstimate,
    device: Device | str | float | None = "gb200",
    *,
    overhead: Overhead = DEFAULT_OVERHEAD,
    variants: Sequence[str] | None = None,
) -> FitsVerdict:
    """Every replayed rank and variant of ``estimate`` on ``device``. See [Note: an honest verdict]."""
    if not isinstance(estimate, MemoryEstimate):
        raise MemoryModelError(
            "estimate",
            found=type(estimate).__name__,
            required="a MemoryEstimate (estimate_memory(...))",
            fix="replay the stages first: pooltk.memory.replay.estimate.estimate_memory(...).",
        )
    dev = get_device(device)
    chosen = set(variants) if variants is not None else None
    rows = tuple(
        RankVerdict(
            rank=r.rank,
            variant=r.variant,
            estimate_bytes=r.peak.bytes,
            overhead_bytes=overhead.total_bytes,
            capacity_bytes=dev.capacity_bytes,
        )
        for r in estimate.replays
        if chosen is None or r.variant in chosen
    )
    return FitsVerdict(device=dev, overhead=overhead, rows=rows, not_modelled=estimate.not_modelled)
