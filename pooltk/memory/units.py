"""Units and dtypes of the memory model: bytes per unit, bytes per element.

Units: ``bytes`` are exact integers; ``gib`` = bytes / 2**30, ``mib`` = bytes / 2**20,
``gb`` = bytes / 1e9. Every column and accessor names its unit.
"""

from __future__ import annotations

from pooltk._validate import check_choice
from pooltk.memory.errors import MemoryModelError

__all__ = ["BYTES_PER_UNIT", "DTYPE_ALIASES", "DTYPE_BYTES", "to_unit", "unit_bytes"]

BYTES_PER_UNIT: dict[str, int] = {
    "bytes": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
}
"""Binary (``kib``/``mib``/``gib``, powers of 2) and decimal (``kb``/``mb``/``gb``, powers of 10)
units."""

DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "bfloat16": 2,
    "float16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}
"""Bytes per element of every dtype name the model knows (torch's names)."""

DTYPE_ALIASES: dict[str, str] = {
    "fp64": "float64",
    "double": "float64",
    "fp32": "float32",
    "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp8": "float8_e4m3fn",
    "long": "int64",
    "int": "int32",
}


def unit_bytes(unit: str) -> int:
    """Bytes in one ``unit`` (one of :data:`BYTES_PER_UNIT`)."""
    check_choice(
        "unit",
        unit,
        BYTES_PER_UNIT,
        fix="use 'gib' (2**30 bytes) or 'gb' (1e9 bytes).",
        error=MemoryModelError,
    )
    return BYTES_PER_UNIT[unit]


def to_unit(n_bytes: float, unit: str) -> float:
    """``n_bytes`` expressed in ``unit`` (one of :data:`BYTES_PER_UNIT`)."""
    return n_bytes / unit_bytes(unit)
