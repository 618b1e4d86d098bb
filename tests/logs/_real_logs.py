"""What the log tests share: the fixtures folder, the value columns compared, the logs to vary."""

from __future__ import annotations

from pathlib import Path

FIX = Path(__file__).resolve().parent / "fixtures"
VALUES = [
    "step",
    "kind",
    "loss",
    "grad_norm",
    "lr",
    "mem_gib",
    "tok_per_s_logged",
    "mfu_pct_logged",
    "num_label_tokens",
    "timestamp",
    "epoch",
]
"""The columns a decorated or re-enveloped log must read to exactly as its plain original."""


def repo_logs() -> list[Path]:
    """The shipped format fixtures to build variants from: text logs and Automodel's
    training.jsonl."""
    return sorted(
        [
            *(p for p in FIX.iterdir() if p.suffix == ".log"),
            FIX / "automodel_run" / "training.jsonl",
        ]
    )


def shared_logs(shared_dir: Path) -> list[Path]:
    """The real logs of ../shared/reference/logs (empty where that folder is missing)."""
    real = shared_dir / "reference" / "logs"
    return (
        sorted(p for p in real.iterdir() if p.suffix in (".log", ".jsonl")) if real.is_dir() else []
    )


def run_of(path: Path) -> str:
    """The run a variant's file names: its stem, less the ``_training`` Automodel's JSONL names
    carry (``cpu_seq512_stock_training.jsonl`` is run ``cpu_seq512_stock``, as its writer names
    it)."""
    return path.stem.removesuffix("_training")
