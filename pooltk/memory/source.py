"""A named shape with its provenance: what the memory model is fed, and where each number comes from.

Presets of a study, a config file read by :mod:`pooltk.memory.configs`, and explicit command-line
flags all become a :class:`Preset`, so the CLI, the explorer and the fits view take one type.
"""

from __future__ import annotations

from dataclasses import dataclass

from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, MemoryModel, PipelineShape, model_memory

__all__ = ["Figure", "Preset"]


@dataclass(kw_only=True, slots=True, frozen=True)
class Figure:
    """One number attached to a preset, with what kind of number it is and where it comes from."""

    name: str
    """Short key, e.g. ``stock_middle_stage_gib``."""
    value: float
    """The number."""
    unit: str
    """Its unit (``gib``, ``mib``, ``sets``, ...)."""
    kind: str
    """``published`` (stated in the source), ``derived`` (arithmetic on published facts) or
    ``assumed`` (a choice this project made to fill a gap)."""
    source: str
    """Where it comes from, or how it was derived."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Preset:
    """A named shape: pipeline, boundary tensors, the pool config of the published run, provenance."""

    name: str
    """CLI / widget name."""
    title: str
    """One line for tables."""
    shape: PipelineShape
    """pp, microbatches (derived from the batch sizes), schedule."""
    boundary: Boundary
    """What one microbatch sends across every stage boundary."""
    config: PoolConfig
    """The pool config the published figures refer to."""
    seq_len: int
    """Tokens per row."""
    hidden: int
    """Model hidden size."""
    assumption: str
    """The assumption that produces this preset's bytes, in one paragraph."""
    figures: tuple[Figure, ...]
    """Published, derived and assumed numbers, each with its source."""
    sources: tuple[str, ...]
    """Everything the preset is built from."""

    def model(self, config: PoolConfig | None = None) -> MemoryModel:
        """The memory model of this preset (its own config unless another is given)."""
        return model_memory(self.shape, self.boundary, self.config if config is None else config)

    def figure(self, name: str) -> Figure:
        """The figure called ``name``."""
        for f in self.figures:
            if f.name == name:
                return f
        raise KeyError(f"preset {self.name!r} has no figure {name!r}; it has {[f.name for f in self.figures]}")
