"""``python -m tools.compat_matrix``: build the torch compatibility matrix (see the package
docstring)."""

from __future__ import annotations

import sys

from tools.compat_matrix.cli import main

if __name__ == "__main__":
    sys.exit(main())
