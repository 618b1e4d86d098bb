"""Fixtures for the compat tests: fake torch pipelining modules shaped like each real release."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _shapes import MODULES, build_fake_modules  # noqa: E402


@pytest.fixture
def fake_torch(monkeypatch) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """``fake_torch(shape)`` swaps torch.distributed.pipelining's stage modules for fakes of
    ``shape``.

    Modules absent from the shape are made unimportable (as on a release without them).
    Everything is restored after the test; the real torch underneath is untouched.
    """
    import torch.distributed.pipelining as pkg

    import pooltk

    pooltk.uninstall()

    def use(shape: dict[str, Any]) -> dict[str, Any]:
        mods = build_fake_modules(shape)
        for name in MODULES:
            key = f"{pkg.__name__}.{name}"
            if name in mods:
                monkeypatch.setitem(sys.modules, key, mods[name])
                monkeypatch.setattr(pkg, name, mods[name], raising=False)
            else:
                monkeypatch.setitem(sys.modules, key, None)  # import now raises ImportError
                monkeypatch.delattr(pkg, name, raising=False)
        return mods

    yield use
    pooltk.uninstall()
