"""pooltk: ring-pooled receive buffers for torch.distributed.pipelining.

The public surface imports with torch alone (no pandas, seaborn or Jupyter)::

    import pooltk
    report = pooltk.install(slack=2)          # before stages are set up
    ...
    pooltk.uninstall()

See README.md for the whole toolkit (memory model, parity harness, log analysis).

The names below are loaded on first use, so ``import pooltk.logs`` (and ``pooltk logs``) never
imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "PoolConfig": "pooltk.config",
    **dict.fromkeys(
        ("PoolOverrunError", "PoolReuseError", "PoolSetupError", "PoolWarning"),
        "pooltk.pool.errors",
    ),
    **dict.fromkeys(("StageState", "stage_state"), "pooltk.pool.stage"),
    **dict.fromkeys(
        (
            "InstallReport",
            "install",
            "installed",
            "pool_stage",
            "pooled",
            "probe",
            "stage_rings",
            "uninstall",
            "unpool_stage",
        ),
        "pooltk.pool.install",
    ),
}
"""Public name -> the module that defines it."""

__all__ = sorted(_EXPORTS)

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pooltk' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
