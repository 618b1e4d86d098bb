"""A named shape with its provenance: what the memory model is fed, and where each number comes from.

Presets of a study, a config file read by :mod:`pooltk.memory.configs`, and explicit command-line
flags all become a :class:`Preset`, so the CLI, the explorer and the fits view take one type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pooltk.config import PoolConfig
from pooltk.memory.model import Boundary, MemoryModel, MemoryModelError, PipelineShape, model_memory

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
    """``published`` (stated in the source), ``derived`` (arithmetic on published facts),
    ``inferred`` (a rule fitted to published figures, unverified where they say nothing) or
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
    """What one microbatch sends across a stage boundary: every boundary's, unless ``boundaries`` says
    otherwise (then the first one's, for one-line summaries)."""
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
    boundaries: tuple[Boundary, ...] | None = None
    """Per boundary (``stages - 1`` of them, boundary ``b`` carries stage ``b`` -> ``b + 1``) when they
    differ along the pipeline; ``None``: ``boundary`` at every boundary."""
    boundary_rule: Callable[[int], tuple[Boundary, ...]] | None = None
    """For boundaries that depend on where the pipeline cuts the model: the boundaries of a pipeline
    of ``n`` stages (so another stage count, e.g. more stages per rank, gets its own); ``None``: fixed."""

    def __post_init__(self) -> None:
        if self.boundaries is not None:
            object.__setattr__(self, "boundaries", tuple(self.boundaries))
            if len(self.boundaries) != self.shape.num_stages - 1 or not all(isinstance(b, Boundary) for b in self.boundaries):
                raise MemoryModelError(
                    f"Preset {self.name!r} boundaries", found=f"{len(self.boundaries)} item(s)",
                    required=f"one Boundary per boundary: stages - 1 = {self.shape.num_stages - 1}",
                    fix="give one Boundary per stage boundary, or leave boundaries out for one boundary everywhere.",
                )

    @property
    def boundary_list(self) -> tuple[Boundary, ...]:
        """Every boundary's tensors, in order (``boundary`` repeated when the preset has one for all)."""
        if self.boundaries is not None:
            return self.boundaries
        return (self.boundary,) * (self.shape.num_stages - 1)

    def boundaries_for(self, shape: PipelineShape) -> tuple[Boundary, ...]:
        """The boundaries of ``shape`` (the preset's own, or another stage count through ``boundary_rule``)."""
        n = shape.num_stages
        if self.boundary_rule is not None and n != self.shape.num_stages:
            return tuple(self.boundary_rule(n))
        if self.boundaries is not None and n != self.shape.num_stages:
            raise MemoryModelError(
                f"preset {self.name!r} at {n} stages", found=f"boundaries for {self.shape.num_stages} stages only",
                required="the preset's own stage count, or a preset whose boundaries follow the stage count",
                fix="keep the preset's pipeline shape, or give the boundary bytes explicitly (boundary MiB per set).",
            )
        return self.boundary_list if self.boundaries is not None else (self.boundary,) * (n - 1)

    @property
    def varies(self) -> bool:
        """True when the boundaries differ along the pipeline."""
        return len(set(self.boundary_list)) > 1

    def model(self, config: PoolConfig | None = None) -> MemoryModel:
        """The memory model of this preset (its own config unless another is given)."""
        return model_memory(self.shape, self.boundary_list, self.config if config is None else config)

    def figure(self, name: str) -> Figure:
        """The figure called ``name``."""
        for f in self.figures:
            if f.name == name:
                return f
        raise KeyError(f"preset {self.name!r} has no figure {name!r}; it has {[f.name for f in self.figures]}")
