"""The stated bases figures are computed on: FLOPs per token, peak FLOP/s, device capacity; and the
figures made from them alone (MFU, headroom, the 1F1B bubble). See [Note: MFU] in
:mod:`pooltk.logs.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from pooltk._validate import check_int
from pooltk.logs.runinfo import RunInfo

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "GB",
    "GIB",
    "Bubble",
    "DeviceCapacity",
    "FlopsBasis",
    "Headroom",
    "MfuFigure",
    "MfuTable",
    "PeakBasis",
    "PerGpuBasisWarning",
    "bubble_1f1b",
    "bubble_table",
    "headroom",
    "mfu",
    "mfu_table",
]

GIB = 2**30
"""Bytes per GiB."""
GB = 10**9
"""Bytes per GB."""


class PerGpuBasisWarning(UserWarning):
    """A log's own per-GPU figure is not per physical GPU (it ignores PP and/or TP)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class FlopsBasis:
    """Model FLOPs per token used for MFU, with where the number comes from."""

    name: str
    """Short label shown next to every MFU figure (e.g. '6 x 104e9 active params')."""
    flops_per_token: float
    """Training FLOPs per token (forward + backward)."""
    source: str = ""
    """Where the basis comes from."""

    @classmethod
    def six_n(cls, active_params: float, *, source: str = "") -> FlopsBasis:
        """The 6 x N rule for N active parameters."""
        if not (active_params > 0 and math.isfinite(active_params)):
            raise ValueError(
                f"FlopsBasis.six_n: found active_params={active_params!r}; "
                "required a positive number of parameters."
            )
        label = f"{active_params / 1e9:g}e9" if active_params >= 1e9 else f"{active_params:g}"
        return cls(
            name=f"6 x {label} active params", flops_per_token=6.0 * active_params, source=source
        )


@dataclass(kw_only=True, slots=True, frozen=True)
class PeakBasis:
    """Peak FLOP/s per GPU used for MFU, with its source."""

    name: str
    """Short label (e.g. 'GB200 2250 TFLOP/s (K3 configs)')."""
    flops_per_s: float
    """Peak FLOP/s of one GPU."""
    source: str = ""
    """Where the number comes from."""

    @classmethod
    def tflops(cls, value: float, *, name: str | None = None, source: str = "") -> PeakBasis:
        """From TFLOP/s."""
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(
                f"PeakBasis.tflops: found {value!r}; "
                "required a positive TFLOP/s figure such as 2250."
            )
        return cls(name=name or f"{value:g} TFLOP/s", flops_per_s=value * 1e12, source=source)


@dataclass(kw_only=True, slots=True, frozen=True)
class DeviceCapacity:
    """Device memory, with its unit made explicit (GiB = 2**30 B, GB = 1e9 B)."""

    gib: float
    source: str = ""
    """Where the figure comes from."""

    @classmethod
    def from_gib(cls, gib: float, *, source: str = "") -> DeviceCapacity:
        """From GiB (2**30 bytes), e.g. what torch reports."""
        if not (gib > 0 and math.isfinite(gib)):
            raise ValueError(f"DeviceCapacity: found {gib!r} GiB; required a positive capacity.")
        return cls(gib=float(gib), source=source)

    @classmethod
    def from_gb(cls, gb: float, *, source: str = "") -> DeviceCapacity:
        """From GB (1e9 bytes), e.g. a datasheet's HBM figure."""
        if not (gb > 0 and math.isfinite(gb)):
            raise ValueError(f"DeviceCapacity: found {gb!r} GB; required a positive capacity.")
        return cls(gib=gb * GB / GIB, source=source)

    @property
    def gb(self) -> float:
        """Capacity in GB (1e9 bytes)."""
        return self.gib * GIB / GB


# --------------------------------------------------------------------------- MFU, headroom, bubble


@dataclass(kw_only=True, slots=True, frozen=True)
class MfuFigure:
    """One MFU figure and the three numbers it is made of."""

    mfu_pct: float
    tok_per_s_per_gpu: float
    """Tokens/s per physical GPU."""
    flops_per_token: float
    """FLOPs per token used."""
    peak_flops_per_s: float
    """Peak FLOP/s per GPU used."""
    flops_basis: str
    peak_basis: str

    @property
    def basis(self) -> str:
        """'tok/s/GPU x FLOPs/token / peak' with the labels."""
        return f"{self.tok_per_s_per_gpu:,.1f} tok/s/GPU x {self.flops_basis} / {self.peak_basis}"


def mfu(tok_per_s_per_gpu: float, flops: FlopsBasis, peak: PeakBasis) -> MfuFigure:
    """MFU = tok/s per physical GPU x FLOPs per token / peak FLOP/s, in %."""
    value = 100.0 * tok_per_s_per_gpu * flops.flops_per_token / peak.flops_per_s
    return MfuFigure(
        mfu_pct=value,
        tok_per_s_per_gpu=tok_per_s_per_gpu,
        flops_per_token=flops.flops_per_token,
        peak_flops_per_s=peak.flops_per_s,
        flops_basis=flops.name,
        peak_basis=peak.name,
    )


@dataclass(kw_only=True, slots=True, frozen=True)
class MfuTable:
    """MFU of one rate on one FLOPs basis against several peaks."""

    figures: tuple[MfuFigure, ...]

    def to_frame(self) -> pd.DataFrame:
        """One row per peak."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "mfu_pct": f.mfu_pct,
                    "tok_per_s_per_gpu": f.tok_per_s_per_gpu,
                    "flops_per_token": f.flops_per_token,
                    "peak_tflops": f.peak_flops_per_s / 1e12,
                    "flops_basis": f.flops_basis,
                    "peak_basis": f.peak_basis,
                }
                for f in self.figures
            ]
        )


def mfu_table(tok_per_s_per_gpu: float, flops: FlopsBasis, peaks: Sequence[PeakBasis]) -> MfuTable:
    """MFU against each peak (a study's peaks, e.g. pooltk.studies.kimi_k3's two GB200
    figures)."""
    return MfuTable(figures=tuple(mfu(tok_per_s_per_gpu, flops, p) for p in peaks))


@dataclass(kw_only=True, slots=True, frozen=True)
class Headroom:
    """Peak memory against a device capacity, in GiB and GB."""

    peak_gib: float
    """Peak memory, GiB (2**30 B)."""
    capacity_gib: float
    """Device capacity, GiB."""
    capacity_source: str
    """Where the capacity comes from."""

    @property
    def headroom_gib(self) -> float:
        """Capacity minus peak, GiB."""
        return self.capacity_gib - self.peak_gib

    @property
    def headroom_gb(self) -> float:
        """Capacity minus peak, GB (1e9 B)."""
        return self.headroom_gib * GIB / GB

    @property
    def capacity_gb(self) -> float:
        """Capacity, GB."""
        return self.capacity_gib * GIB / GB

    def to_frame(self) -> pd.DataFrame:
        """One row with both units."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "peak_gib": self.peak_gib,
                    "capacity_gib": self.capacity_gib,
                    "capacity_gb": self.capacity_gb,
                    "headroom_gib": self.headroom_gib,
                    "headroom_gb": self.headroom_gb,
                    "capacity_source": self.capacity_source,
                }
            ]
        )


def headroom(peak_gib: float, capacity: DeviceCapacity) -> Headroom:
    """Headroom of a peak (GiB) against a capacity (give it with DeviceCapacity.from_gib /
    from_gb)."""
    return Headroom(
        peak_gib=float(peak_gib), capacity_gib=capacity.gib, capacity_source=capacity.source
    )


@dataclass(kw_only=True, slots=True, frozen=True)
class Bubble:
    """The 1F1B pipeline bubble: idle fraction of a step, (N - 1) / (M + N - 1)."""

    pp: int
    """Pipeline stages N."""
    microbatches: int
    """Microbatches per step M."""

    @property
    def fraction(self) -> float:
        """(N - 1) / (M + N - 1)."""
        return (self.pp - 1) / (self.microbatches + self.pp - 1)

    @property
    def formula(self) -> str:
        """The arithmetic, spelled out."""
        return (
            f"({self.pp} - 1) / ({self.microbatches} + {self.pp} - 1) "
            f"= {self.pp - 1}/{self.microbatches + self.pp - 1}"
        )

    def to_frame(self) -> pd.DataFrame:
        """One row."""
        import pandas as pd

        return pd.DataFrame(
            [{**asdict(self), "bubble_pct": 100 * self.fraction, "formula": self.formula}]
        )


def bubble_table(runs: Mapping[str, RunInfo]) -> pd.DataFrame:
    """The 1F1B bubble of every run whose facts state pp and microbatches (one row each)."""
    import pandas as pd

    rows = [
        bubble_1f1b(i.pp, i.microbatches).to_frame().assign(run=r)
        for r, i in runs.items()
        if i.pp and i.microbatches
    ]
    columns = ["run", "pp", "microbatches", "bubble_pct", "formula"]
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)


def bubble_1f1b(pp: int, microbatches: int) -> Bubble:
    """The 1F1B bubble for N = ``pp`` stages and M = ``microbatches``."""
    check_int("bubble_1f1b: pp", pp, low=1, fix="pass the number of pipeline stages (e.g. 8)")
    check_int(
        "bubble_1f1b: microbatches",
        microbatches,
        low=1,
        fix="pass the microbatches per step (e.g. 64)",
    )
    return Bubble(pp=pp, microbatches=microbatches)
