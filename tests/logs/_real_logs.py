"""What the log tests share: the fixtures folder, the value columns compared, the logs to vary."""

from __future__ import annotations

import os
from pathlib import Path

FIX = Path(__file__).resolve().parent / "fixtures"
REAL = Path(os.environ.get("POOLTK_SHARED", Path(__file__).resolve().parents[2].parent / "shared")) / "reference" / "logs"
"""The real logs of ../shared (POOLTK_SHARED overrides it, as in tests/conftest.py)."""
VALUES = ["step", "kind", "loss", "grad_norm", "lr", "mem_gib", "tok_per_s_logged", "mfu_pct_logged", "num_label_tokens",
          "timestamp", "epoch"]
"""The columns a decorated or re-enveloped log must read to exactly as its plain original."""


def sources(shared_dir: Path) -> list[Path]:
    """The real logs of ../shared where present, else the shipped fixtures."""
    real = shared_dir / "reference" / "logs"
    if real.is_dir():
        return sorted(p for p in real.iterdir() if p.suffix in (".log", ".jsonl"))
    return sorted(p for p in FIX.iterdir() if p.suffix == ".log")


def bases() -> list[Path]:
    """Logs to build variants from without skipping: the real logs where ../shared is present, else the shipped
    format fixtures (text logs and Automodel's training.jsonl)."""
    if REAL.is_dir():
        return sorted(p for p in REAL.iterdir() if p.suffix in (".log", ".jsonl"))
    return sorted([*(p for p in FIX.iterdir() if p.suffix == ".log"), FIX / "automodel_run" / "training.jsonl"])
