"""What the matrix measures and where it reads and writes in the repository."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMAND = "python -m tools.compat_matrix"
DEFAULT_RELEASES: tuple[str, ...] = ("2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0")
# pooltk's test tools installed beside torch in every env.
TEST_TOOLS: tuple[str, ...] = ("numpy", "pytest", "pytest-timeout", "hypothesis", "setuptools")
CONSTRAINTS = REPO / "requirements" / "constraints.txt"
DOC = REPO / "docs" / "torch-compat.md"
OUT_DIR = REPO / "docs" / "compat"
BEGIN, END = "<!-- compat-matrix:begin -->", "<!-- compat-matrix:end -->"

# The parity shape every release runs (small: the launch, not the steps, is the cost here).
PP, MICROBATCHES, STEPS = 4, 8, 2
