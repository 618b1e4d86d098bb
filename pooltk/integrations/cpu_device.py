"""A device module for trainers that call CUDA-style device functions on a CPU run.

torchtitan calls ``device_module.get_device_name / get_device_properties(...).total_memory /
reset_peak_memory_stats / empty_cache / memory_stats`` on whatever module its device type
names; ``torch.cpu`` has none of the five, and its ``current_device()`` answers ``"cpu"`` where
CUDA's answers an index (torchtitan passes it to ``barrier(device_ids=[...])``, which takes ints).
:func:`cpu_device_module` returns ``torch.cpu``'s own functions plus those five with what is
true of a CPU: the host's name and physical memory, no cache to empty, no peak to reset, no
allocator statistics (``memory_stats()`` is empty, so torchtitan prints its "unknown" value
``-0.00GiB`` rather than a made-up figure), and ``current_device()`` answering index 0.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from types import ModuleType

__all__ = ["CpuProperties", "cpu_device_module"]


@dataclass(kw_only=True, slots=True, frozen=True)
class CpuProperties:
    """What ``get_device_properties`` answers on a CPU."""

    name: str
    """The host processor (``platform.processor()``, or ``cpu``)."""

    total_memory: int
    """Physical memory in bytes (``SC_PAGE_SIZE * SC_PHYS_PAGES``)."""


def _properties(*_args, **_kwargs) -> CpuProperties:
    return CpuProperties(
        name=platform.processor() or "cpu",
        total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
    )


def cpu_device_module() -> ModuleType:
    """``torch.cpu``'s attributes plus the CUDA-style functions above (a new module object)."""
    import torch

    module = ModuleType(
        "pooltk_cpu_device",
        "torch.cpu plus CUDA-style memory functions (see pooltk.integrations.cpu_device)",
    )
    module.__dict__.update({k: v for k, v in vars(torch.cpu).items() if not k.startswith("__")})
    module.get_device_name = lambda *_a, **_k: _properties().name
    module.get_device_properties = _properties
    module.reset_peak_memory_stats = lambda *_a, **_k: None
    module.empty_cache = lambda *_a, **_k: None
    module.memory_stats = lambda *_a, **_k: {}
    module.current_device = lambda: 0
    return module
