"""The pipeline the memory model is asked about: stages, microbatches, schedule.

The schedule is spelled once (:func:`pooltk.analysis.catalog.schedule_key`) and pooled when it is on
the pool's allowlist (:data:`pooltk.analysis.catalog.ALLOWLIST`), so the model and the pool's gating
cannot disagree about which schedules are poolable.
"""

from __future__ import annotations

from dataclasses import dataclass

from pooltk.analysis.catalog import ALLOWLIST, schedule_key
from pooltk.memory.errors import MemoryModelError, UnpoolableScheduleError, positive_int

__all__ = ["MODELLED", "PipelineShape", "microbatches_from_batch", "middle_stage", "modelled_schedule"]


MODELLED: frozenset[str] = ALLOWLIST | {schedule_key("GPipe")}
"""Schedule keys the model covers: the pool's allowlist (pooled) and GPipe (stock-only: its in-flight depth is M)."""


def modelled_schedule(name: str) -> str:
    """The :func:`~pooltk.analysis.catalog.schedule_key` of ``name`` if the model covers it (``"1f1b"``, ``"gpipe"``).

    Raises :class:`UnpoolableScheduleError` for other schedules: the model covers one stage
    per rank (1F1B pooled, GPipe stock-only).
    """
    key = schedule_key(str(name))
    if key not in MODELLED:
        raise UnpoolableScheduleError(
            "schedule",
            found=repr(name),
            required="'1f1b' (pooled) or 'gpipe' (modelled stock-only: its in-flight depth is M)",
            fix=(
                "the ring pool is gated to 1F1B, the one schedule with a proven bounded in-flight depth; "
                "for other schedules `pooltk schedules` derives live receive buffers from the action order."
            ),
        )
    return key


def microbatches_from_batch(
    *, global_batch: int, micro_batch: int, dp: int, local_batch: int | None = None
) -> int:
    """Microbatches per pipeline step, ``M``, from the batch sizes.

    Without ``local_batch``: ``M = global_batch / (dp * micro_batch)`` (no gradient
    accumulation). With it (Automodel's ``local_batch_size``, the batch one data-parallel
    rank runs through the pipeline per step): ``M = local_batch / micro_batch``, and
    ``global_batch`` must be a multiple of ``local_batch * dp``. Raises
    :class:`MemoryModelError` when a size does not divide.
    """
    gbs = positive_int("global_batch", global_batch, "give the global batch size in rows, e.g. 4096.")
    mbs = positive_int("micro_batch", micro_batch, "give the rows per pipeline microbatch, e.g. 2.")
    dp = positive_int("dp", dp, "give the data-parallel size, e.g. 32 (world size / (pp * tp * cp)).")
    if local_batch is None:
        if gbs % (dp * mbs):
            raise MemoryModelError(
                "global_batch / (dp * micro_batch)",
                found=f"{gbs} / ({dp} * {mbs}) = {gbs / (dp * mbs):g}",
                required="a whole number of microbatches",
                fix=f"choose a global batch that is a multiple of dp * micro_batch = {dp * mbs}, or another micro batch.",
            )
        return gbs // (dp * mbs)
    lbs = positive_int("local_batch", local_batch, "give the per-data-parallel-rank batch, e.g. 128.")
    if gbs % (lbs * dp):
        raise MemoryModelError(
            "global_batch / (local_batch * dp)",
            found=f"{gbs} / ({lbs} * {dp}) = {gbs / (lbs * dp):g}",
            required="a whole number of gradient-accumulation steps",
            fix=f"make the global batch a multiple of local_batch * dp = {lbs * dp}.",
        )
    if lbs % mbs:
        raise MemoryModelError(
            "local_batch / micro_batch",
            found=f"{lbs} / {mbs} = {lbs / mbs:g}",
            required="a whole number of microbatches",
            fix="make the local batch a multiple of the micro batch size.",
        )
    return lbs // mbs


@dataclass(kw_only=True, slots=True, frozen=True)
class PipelineShape:
    """The pipeline: how many stages, how many microbatches per step, which schedule."""

    pp: int
    """Pipeline-parallel size ``N`` (stages, one per rank)."""
    n_microbatches: int
    """Microbatches per pipeline step ``M``."""
    schedule: str = "1f1b"
    """``"1f1b"`` (poolable) or ``"gpipe"`` (modelled stock-only); any spelling torch uses."""
    global_batch: int | None = None
    """Global batch in rows, when the shape was derived from batch sizes (display only)."""
    micro_batch: int | None = None
    """Rows per microbatch, when known (display only)."""
    dp: int | None = None
    """Data-parallel size, when known (display only)."""

    def __post_init__(self) -> None:
        positive_int("pp", self.pp, "give the pipeline-parallel size, e.g. 8.")
        positive_int(
            "n_microbatches", self.n_microbatches, "give the microbatches per step, or derive them with from_batch()."
        )
        canon = modelled_schedule(self.schedule)
        object.__setattr__(self, "schedule", canon)
        if canon == "1f1b" and self.n_microbatches < self.pp:
            raise MemoryModelError(
                "n_microbatches under 1F1B",
                found=f"M={self.n_microbatches} microbatches with pp={self.pp} stages",
                required="M >= pp (torch's Schedule1F1B refuses fewer microbatches than stages)",
                fix=f"use at least {self.pp} microbatches (a larger global batch or a smaller micro batch), or fewer stages.",
            )

    @classmethod
    def from_batch(
        cls,
        *,
        pp: int,
        global_batch: int,
        micro_batch: int,
        dp: int,
        local_batch: int | None = None,
        schedule: str = "1f1b",
    ) -> PipelineShape:
        """The shape whose ``M`` follows from the batch sizes (see :func:`microbatches_from_batch`)."""
        m = microbatches_from_batch(global_batch=global_batch, micro_batch=micro_batch, dp=dp, local_batch=local_batch)
        return cls(pp=pp, n_microbatches=m, schedule=schedule, global_batch=global_batch, micro_batch=micro_batch, dp=dp)

    @property
    def poolable(self) -> bool:
        """Whether the ring pool may replace stock allocation under this schedule."""
        return self.schedule in ALLOWLIST

    def describe(self) -> str:
        text = f"pp={self.pp} M={self.n_microbatches} schedule={self.schedule}"
        if self.global_batch is not None:
            text += f" (global batch {self.global_batch} / (dp {self.dp} x micro batch {self.micro_batch}))"
        return text


def middle_stage(pp: int) -> int:
    """The stage the reports call "middle": ``(pp - 1) // 2`` (stage 3 of 8)."""
    return (positive_int("pp", pp, "give the pipeline-parallel size.") - 1) // 2
