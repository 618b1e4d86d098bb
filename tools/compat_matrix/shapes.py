"""The per-release layout oracle and shape recorder, from tests/compat/_shapes.py (stdlib only)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType

from tools.compat_matrix.spec import REPO

SHAPES_DIR = REPO / "tests" / "compat"


def shapes_module() -> ModuleType:
    """tests/compat/_shapes.py, the helper the compat tests share (importable before any torch
    exists)."""
    if str(SHAPES_DIR) not in sys.path:
        sys.path.insert(0, str(SHAPES_DIR))
    return importlib.import_module("_shapes")


def expected_family(release: str) -> str | None:
    """The layout family measured for the release line of ``release`` (the test oracle), or None."""
    return shapes_module().expected_family(release)


def record_shape(wheel: Path) -> int:
    """Record a torch wheel's pipelining shape into tests/compat/layouts/torch-RELEASE.json; exit
    status."""
    shapes = shapes_module()
    name = wheel.name
    if not name.startswith("torch-"):
        print(
            f"--record-shape: found {name}; required a torch wheel (torch-VERSION-...whl).",
            file=sys.stderr,
        )
        return 2
    release = name.split("-")[1].split("+")[0]
    shape = {"release": release, **shapes.shape_from_wheel(wheel)}
    path = shapes.LAYOUTS / f"torch-{release}.json"
    path.write_text(json.dumps(shape, indent=1, sort_keys=True) + "\n")
    fam = shapes.expected_family(release)
    print(
        f"wrote {path.relative_to(REPO)} ({', '.join(shape['modules'])}); expected family: "
        f"{fam or 'unknown'}"
    )
    return 0
