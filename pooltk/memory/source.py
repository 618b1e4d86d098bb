"""A named shape with its provenance: what the memory model is fed, and where each number comes
from.

Presets of a study, a config file read by :mod:`pooltk.memory.configs`, and explicit command-line
flags all become a :class:`Preset`, so the CLI, the explorer and the fits view take one type.

[Note: no calibration carried]
A preset's calibration (a tensor fitted to its own published figures, e.g. Kimi-K3's 360 MiB
``calibrated_remainder``) and its published figures (a peak, an OOM margin) describe one model
at one shape. So :meth:`Preset.resized`:

- ``rows`` / ``seq_len`` resize every ``(rows, seq, width)`` tensor (the last three dimensions);
  a tensor that is not hidden-sized (:data:`HIDDEN_SIZED`) keeps its bytes per token: the same
  model at another micro batch;
- ``hidden`` or ``dtype`` make it another model: hidden-sized tensors take the new width and
  dtype, and every other tensor (a calibration) is **dropped**; a boundary left with nothing
  hidden-sized is an error;
- ``pp`` / ``microbatches`` change the pipeline (boundaries that follow the stage count are
  re-derived by the preset's rule);
- any change drops the published figures (no fits view borrows another run's peak) and says
  so in ``assumption``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from pooltk._validate import check_choice, check_int
from pooltk.config import PoolConfig
from pooltk.memory.model import (
    POLICIES,
    Boundary,
    MemoryModel,
    MemoryModelError,
    PipelineShape,
    TensorSpec,
    model_memory,
)
from pooltk.memory.tensors import dtype_name

__all__ = ["HIDDEN_SIZED", "Figure", "Preset"]

HIDDEN_SIZED: frozenset[str] = frozenset({"hidden_states", "attn_res_states"})
"""Boundary tensor names whose last dimension is the model's hidden size (a widths preset stacks
``attn_res_states``)."""


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
    """A named shape: pipeline, boundary tensors, the pool config of the published run,
    provenance."""

    name: str
    """CLI / widget name."""
    title: str
    """One line for tables."""
    shape: PipelineShape
    """pp, microbatches (derived from the batch sizes), schedule."""
    boundary: Boundary
    """What one microbatch sends across a stage boundary: every boundary's, unless ``boundaries``
    says otherwise (then the first one's, for one-line summaries)."""
    config: PoolConfig
    """The pool config the published figures refer to (slack, grad slack)."""
    policy: str = "tight"
    """The ring the published run kept: ``tight`` (pooltk's) or ``automodel`` (Automodel's single
    ring); see :data:`pooltk.memory.model.POLICIES`."""
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
    """Per boundary (``stages - 1`` of them, boundary ``b`` carries stage ``b`` -> ``b + 1``) when
    they differ along the pipeline; ``None``: ``boundary`` at every boundary."""
    boundary_rule: Callable[[int], tuple[Boundary, ...]] | None = None
    """For boundaries that depend on where the pipeline cuts the model: the boundaries of a pipeline
    of ``n`` stages (so another stage count, e.g. more stages per rank, gets its own); ``None``:
    fixed."""

    def __post_init__(self) -> None:
        check_choice(
            f"Preset {self.name!r} policy",
            self.policy,
            POLICIES,
            fix=f"use one of {POLICIES}.",
            error=MemoryModelError,
        )
        if self.boundaries is not None:
            object.__setattr__(self, "boundaries", tuple(self.boundaries))
            if len(self.boundaries) != self.shape.num_stages - 1 or not all(
                isinstance(b, Boundary) for b in self.boundaries
            ):
                raise MemoryModelError(
                    f"Preset {self.name!r} boundaries",
                    found=f"{len(self.boundaries)} item(s)",
                    required=f"one Boundary per boundary: stages - 1 = {self.shape.num_stages - 1}",
                    fix="give one Boundary per stage boundary, or leave boundaries out for one "
                    "boundary everywhere.",
                )

    @property
    def boundary_list(self) -> tuple[Boundary, ...]:
        """Every boundary's tensors, in order (``boundary`` repeated when the preset has one for
        all)."""
        if self.boundaries is not None:
            return self.boundaries
        return (self.boundary,) * (self.shape.num_stages - 1)

    def boundaries_for(self, shape: PipelineShape) -> tuple[Boundary, ...]:
        """The boundaries of ``shape`` (the preset's own, or another stage count through
        ``boundary_rule``)."""
        n = shape.num_stages
        if self.boundary_rule is not None and n != self.shape.num_stages:
            return tuple(self.boundary_rule(n))
        if self.boundaries is not None and n != self.shape.num_stages:
            raise MemoryModelError(
                f"preset {self.name!r} at {n} stages",
                found=f"boundaries for {self.shape.num_stages} stages only",
                required="the preset's own stage count, or a preset whose boundaries follow the "
                "stage count",
                fix="keep the preset's pipeline shape, or give the boundary bytes explicitly "
                "(boundary MiB per set).",
            )
        return self.boundary_list if self.boundaries is not None else (self.boundary,) * (n - 1)

    @property
    def varies(self) -> bool:
        """True when the boundaries differ along the pipeline."""
        return len(set(self.boundary_list)) > 1

    def model(self, config: PoolConfig | None = None, *, policy: str | None = None) -> MemoryModel:
        """The memory model of this preset (its own config and policy unless others are given)."""
        return model_memory(
            self.shape,
            self.boundary_list,
            self.config if config is None else config,
            policy=self.policy if policy is None else policy,
        )

    def resized(
        self,
        *,
        pp: int | None = None,
        microbatches: int | None = None,
        rows: int | None = None,
        seq_len: int | None = None,
        hidden: int | None = None,
        dtype: str | None = None,
    ) -> Preset:
        """This preset with some dimensions overridden (``None`` keeps one; no change returns the
        preset itself), carrying nothing that described only the original run. See [Note: no
        calibration carried]."""
        asked = {
            "pp": pp,
            "microbatches": microbatches,
            "rows": rows,
            "seq_len": seq_len,
            "hidden": hidden,
            "dtype": dtype,
        }
        for name in ("rows", "seq_len", "hidden"):  # pp and microbatches: PipelineShape's checks
            if asked[name] is not None:
                check_int(name, asked[name], low=1, error=MemoryModelError)  # 0 is never "keep"
        if dtype is not None:
            asked["dtype"] = dtype = dtype_name(dtype)  # named before any tensor is built
        changes = self._changes(asked)
        if not changes:
            return self
        shape = self._resized_shape(changes)
        resizer = _Resizer(
            preset=self.name,
            rows=rows,
            seq_len=seq_len,
            hidden=hidden,
            dtype=dtype,
            other_model="hidden" in changes or "dtype" in changes,
        )
        bounds = tuple(resizer.boundary(b) for b in self.boundaries_for(shape))
        what = ", ".join(f"{k} {v}" for k, v in changes.items())
        note = resizer.note(what)  # before the replace: it lists what bounds dropped
        return replace(
            self,
            name=f"{self.name} ({what})",
            title=f"{self.title} -- resized: {what}",
            shape=shape,
            boundary=bounds[0] if bounds else resizer.boundary(self.boundary),
            boundaries=bounds if len(set(bounds)) > 1 else None,
            boundary_rule=resizer.rule(self.boundary_rule),
            seq_len=changes.get("seq_len", self.seq_len),
            hidden=changes.get("hidden", self.hidden),
            assumption=self.assumption + note,
            figures=(),
            sources=self.sources + (f"resized: {what}",),
        )

    def _changes(self, asked: dict[str, object]) -> dict[str, object]:
        """The asked dimensions that differ from this preset's own (``None``: not asked)."""
        own = {
            "pp": self.shape.pp,
            "microbatches": self.shape.n_microbatches,
            "seq_len": self.seq_len,
            "hidden": self.hidden,
            **self._own_rows_and_dtype(),
        }
        return {k: v for k, v in asked.items() if v is not None and own.get(k) != v}

    def _resized_shape(self, changes: dict[str, object]) -> PipelineShape:
        """The pipeline with ``changes``' ``pp`` and ``microbatches``; the batch sizes that gave
        the old ``M`` are dropped."""
        return replace(
            self.shape,
            pp=changes.get("pp", self.shape.pp),
            n_microbatches=changes.get("microbatches", self.shape.n_microbatches),
            global_batch=None,
            micro_batch=None,
            dp=None,
        )

    def _own_rows_and_dtype(self) -> dict[str, object]:
        """``rows`` and ``dtype`` of the first hidden-sized ``(rows, seq, width)`` tensor: asking
        for them is no change."""
        t = next(
            (t for t in self.boundary.activations if t.name in HIDDEN_SIZED and len(t.shape) >= 3),
            None,
        )
        return {} if t is None else {"rows": t.shape[-3], "dtype": t.dtype}

    def figure(self, name: str) -> Figure:
        """The figure called ``name``."""
        for f in self.figures:
            if f.name == name:
                return f
        raise KeyError(
            f"preset {self.name!r} has no figure {name!r}; it has {[f.name for f in self.figures]}"
        )


@dataclass(kw_only=True, slots=True)
class _Resizer:
    """One :meth:`Preset.resized` call's tensor rule ([Note: no calibration carried]); it
    remembers the tensors it dropped as another model's calibration."""

    preset: str
    rows: int | None
    seq_len: int | None
    hidden: int | None
    dtype: str | None
    other_model: bool
    """A new hidden size or dtype: another model, whose boundaries drop calibrations."""
    dropped: list[str] = field(default_factory=list)

    def tensor(self, t: TensorSpec) -> TensorSpec | None:
        """``t`` resized, or ``None`` when it is a calibration another model does not carry."""
        dims = list(t.shape)
        if len(dims) >= 3:
            dims[-3] = self.rows or dims[-3]
            dims[-2] = self.seq_len or dims[-2]
        if t.name in HIDDEN_SIZED:
            if self.hidden and len(dims) >= 3:
                dims[-1] = self.hidden
            return TensorSpec(shape=tuple(dims), dtype=self.dtype or t.dtype, name=t.name)
        if self.other_model:
            self.dropped.append(t.name or "unnamed")
            return None
        return TensorSpec(shape=tuple(dims), dtype=t.dtype, name=t.name)

    def _kept(self, tensors: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
        """``tensors`` resized, without the dropped ones."""
        return tuple(x for x in (self.tensor(t) for t in tensors) if x is not None)

    def boundary(self, b: Boundary) -> Boundary:
        """``b`` with every tensor resized; an error when nothing hidden-sized is left."""
        acts = self._kept(b.activations)
        if not acts:
            raise MemoryModelError(
                f"preset {self.preset!r} resized",
                found=f"no hidden-sized tensor in {b.describe()}",
                required="a boundary whose tensors are the hidden state (so a new hidden size "
                "applies)",
                fix="give the boundary bytes explicitly (MiB per set), or start from a config "
                "file.",
            )
        grads = None
        if b.grads is not None:
            grads = self._kept(b.grads) or None
        return Boundary(activations=acts, grads=grads)

    def rule(
        self, rule: Callable[[int], tuple[Boundary, ...]] | None
    ) -> Callable[[int], tuple[Boundary, ...]] | None:
        """A preset's ``boundary_rule`` whose boundaries come out resized (``None`` stays
        ``None``)."""
        if rule is None:
            return None

        def resized_rule(n: int) -> tuple[Boundary, ...]:
            return tuple(self.boundary(b) for b in rule(n))

        return resized_rule

    def note(self, what: str) -> str:
        """What the resized preset's ``assumption`` gains: what changed, and what was dropped."""
        note = (
            f" Resized ({what}) from {self.preset}: its published figures describe its own run and "
            "are not carried"
        )
        if self.dropped:
            return note + (
                f"; dropped as another model's calibration: {', '.join(sorted(set(self.dropped)))}."
            )
        return note + "."
