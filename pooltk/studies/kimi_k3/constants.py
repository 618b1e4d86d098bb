"""The Kimi-K3 on GB200 study's constants: the FLOPs basis, the GB200 peaks and GB200 memory, each with its source.

General types (:class:`~pooltk.logs.metrics.FlopsBasis`, :class:`~pooltk.logs.metrics.PeakBasis`,
:class:`~pooltk.logs.metrics.DeviceCapacity`) live in :mod:`pooltk.logs.metrics`; the values a
study uses live here, so the log readers hold no study's numbers.

[Note: GB200 memory]
Three capacities are in circulation, and headroom depends on which one is meant:

- usable memory as torch reports it: 184.31 GiB (``GPU 0 has a total capacity of 184.31 GiB``
  in GB200 out-of-memory messages; torch's total from the driver). The claims ledger judges
  headroom against this one: the report's 139.6 GiB peak + 44 GiB headroom = 183.6 GiB agrees;
- the datasheet: 186 GB HBM3e per GPU (GB200 NVL72, 13.4 TB over 72 GPUs) = 173.2 GiB, kept as a
  stated alternative (GB vs GiB: the 44 GiB claim does not fit it);
- torchtitan's setup line on a GB200: ``CUDA capacity: NVIDIA GB200 with 187.28GiB memory``
  (device properties' total memory, which counts memory torch cannot allocate).
"""

from __future__ import annotations

from pooltk.logs.metrics import DeviceCapacity, FlopsBasis, PeakBasis

__all__ = [
    "GB200_DATASHEET",
    "GB200_NOMINAL",
    "GB200_TORCHTITAN_CAPACITY",
    "GB200_TORCH_REPORTED",
    "K3_ACTIVE_6N",
    "PEAK_GB200_2250",
    "PEAK_GB200_2500",
]

K3_ACTIVE_6N = FlopsBasis.six_n(
    104e9, source="Automodel PR #3780: 'MFU basis tok/s/GPU x 6 x 104e9 / 2.25e15'"
)
"""The Kimi-K3 report's FLOPs basis: 6 x 104e9 active parameters per token."""
PEAK_GB200_2250 = PeakBasis(
    name="GB200 2250 TFLOP/s (K3 configs)",
    flops_per_s=2.25e15,
    source="kimi_k3_gb200*.yaml benchmark.peak_tflops: 2250; PR #3780 MFU basis",
)
"""GB200 peak as the K3 configs state it."""
PEAK_GB200_2500 = PeakBasis(
    name="GB200 2500 TFLOP/s (other GB200 configs, Automodel table)",
    flops_per_s=2.5e15,
    source="other GB200 configs' peak_tflops: 2500; Automodel's device table GB200 2.5e15",
)
"""GB200 peak as other GB200 configs and Automodel's device table state it."""
GB200_TORCH_REPORTED = DeviceCapacity.from_gib(
    184.31,
    source="torch on GB200: 'GPU 0 has a total capacity of 184.31 GiB' (CUDA out-of-memory messages)",
)
"""GB200 memory as torch reports it usable (see [Note: GB200 memory]); the ledger's default capacity."""
GB200_DATASHEET = DeviceCapacity.from_gb(
    186, source="NVIDIA GB200 NVL72 datasheet: 13.4 TB HBM3e over 72 GPUs = 186 GB per GPU"
)
"""GB200 HBM per GPU as the datasheet states it (GB): the stated alternative."""
GB200_NOMINAL = GB200_DATASHEET
"""The datasheet figure under its earlier name."""
GB200_TORCHTITAN_CAPACITY = DeviceCapacity.from_gib(
    187.28,
    source="torchtitan log on GB200: 'CUDA capacity: NVIDIA GB200 with 187.28GiB memory' (device properties)",
)
"""GB200 memory as torchtitan's setup line prints it (device properties' total)."""
