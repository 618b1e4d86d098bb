"""What the trainer integrations share: lazy trainer imports and their errors."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["TrainerMissingError", "TwoPoolsError", "import_trainer"]


class TrainerMissingError(ImportError):
    """The trainer an integration drives is not importable in this environment."""


class TwoPoolsError(RuntimeError):
    """A second receive-buffer pool was about to be installed on the same torch classes."""


def import_trainer(module: str, *, trainer: str, pip: str) -> ModuleType:
    """Import ``module`` of ``trainer``, or raise :class:`TrainerMissingError` naming ``pip``.

    Integrations call this only when used, never at import time, so ``import
    pooltk.integrations.X`` works in an environment without the trainer.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TrainerMissingError(
            f"{trainer}: found no importable {module!r} ({exc}); required {trainer} in this Python "
            f"environment. Fix: {pip}"
        ) from exc
