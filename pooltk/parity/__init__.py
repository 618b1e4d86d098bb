"""The CPU gloo parity harness: stock vs pooled on real multi-process pipeline stages.

``run_parity(ParitySpec(...))`` spawns one gloo rank per stage on 127.0.0.1 and returns
a :class:`ParityReport`; ``python -m pooltk.parity`` runs the same under ``torchrun``.
"""

from pooltk.parity.launch import (
    ParityRankError,
    ParityReport,
    ParityTimeoutError,
    VariantResult,
    gather_report,
    run_parity,
)
from pooltk.parity.summary import format_report
from pooltk.parity.spec import ParitySpec, Variant, default_variants
from pooltk.parity.worker import measure_recv_storage

__all__ = [
    "ParityRankError",
    "ParityReport",
    "ParitySpec",
    "ParityTimeoutError",
    "Variant",
    "VariantResult",
    "default_variants",
    "format_report",
    "gather_report",
    "measure_recv_storage",
    "run_parity",
]
