"""The pipeline the memory model is asked about: ranks, stages per rank, microbatches, schedule.

The schedule is spelled once (:func:`pooltk.analysis.catalog.schedule_key`). 1F1B is pooled by name
(the pool's allowlist, :data:`pooltk.analysis.catalog.ALLOWLIST`); the multi-stage schedules of
:data:`pooltk.analysis.catalog.CATALOG` are pooled as ``pooltk.install(schedule="auto")`` pools
them, from their own action order; GPipe is modelled stock-only. So the model and the pool's gating
cannot disagree about which schedules are poolable.
"""

from __future__ import annotations

from dataclasses import dataclass

from pooltk.analysis.catalog import ALLOWLIST, CATALOG, schedule_key
from pooltk.memory.errors import MemoryModelError, UnpoolableScheduleError, positive_int

__all__ = [
    "MODELLED",
    "STOCK_ONLY",
    "PipelineShape",
    "microbatches_from_batch",
    "middle_stage",
    "modelled_schedule",
    "schedule_name",
]


_BY_KEY: dict[str, str] = {schedule_key(name): name for name in CATALOG}
"""schedule key -> torch's name, for every schedule of the catalog."""

MODELLED: frozenset[str] = frozenset(_BY_KEY)
"""Schedule keys the model covers: every schedule of :data:`pooltk.analysis.catalog.CATALOG` -- 1F1B
pooled by name, the multi-stage ones pooled from their action order (``schedule="auto"``), GPipe
stock-only (its in-flight depth is M)."""

STOCK_ONLY: frozenset[str] = frozenset({schedule_key("GPipe")})
"""Schedules the model shows with the pool standing down: every forward buffer stays live until the
backwards start."""


def modelled_schedule(name: str) -> str:
    """The :func:`~pooltk.analysis.catalog.schedule_key` of ``name`` if the model covers it
    (``"1f1b"``, ``"interleaved1f1b"``, ``"gpipe"``, ...).

    Raises :class:`UnpoolableScheduleError` for a name outside
    :data:`pooltk.analysis.catalog.CATALOG`.
    """
    key = schedule_key(str(name))
    if key not in MODELLED:
        raise UnpoolableScheduleError(
            "schedule",
            found=repr(name),
            required=f"one of {', '.join(CATALOG)} (any spelling torch's get_schedule_class "
            "accepts)",
            fix="name a torch schedule pooltk analyses; `pooltk schedules` lists what this torch "
            "ships.",
        )
    return key


def schedule_name(key: str) -> str:
    """torch's name (``"Interleaved1F1B"``) of a modelled schedule key."""
    return _BY_KEY[modelled_schedule(key)]


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
    gbs = positive_int(
        "global_batch", global_batch, "give the global batch size in rows, e.g. 4096."
    )
    mbs = positive_int("micro_batch", micro_batch, "give the rows per pipeline microbatch, e.g. 2.")
    dp = positive_int(
        "dp", dp, "give the data-parallel size, e.g. 32 (world size / (pp * tp * cp))."
    )
    if local_batch is None:
        if gbs % (dp * mbs):
            raise MemoryModelError(
                "global_batch / (dp * micro_batch)",
                found=f"{gbs} / ({dp} * {mbs}) = {gbs / (dp * mbs):g}",
                required="a whole number of microbatches",
                fix=f"choose a global batch that is a multiple of dp * micro_batch = {dp * mbs}, "
                "or another micro batch.",
            )
        return gbs // (dp * mbs)
    lbs = positive_int(
        "local_batch", local_batch, "give the per-data-parallel-rank batch, e.g. 128."
    )
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
    """Pipeline-parallel size: ranks (one stage each under single-stage schedules, so ``N``
    stages)."""
    n_microbatches: int
    """Microbatches per pipeline step ``M``."""
    schedule: str = "1f1b"
    """Any schedule of :data:`pooltk.analysis.catalog.CATALOG`, any spelling torch uses: ``"1f1b"``
    (pooled), multi-stage ones such as ``"interleaved1f1b"`` (pooled as ``schedule="auto"`` pools
    them), ``"gpipe"`` (stock-only)."""
    stages_per_rank: int | None = None
    """Stages each rank runs (virtual pipeline size). ``None``: the schedule's own (1 for
    single-stage schedules, 2 for the others); single-stage schedules take 1 only, the V schedules 2
    only."""
    global_batch: int | None = None
    """Global batch in rows, when the shape was derived from batch sizes (display only)."""
    micro_batch: int | None = None
    """Rows per microbatch, when known (display only)."""
    dp: int | None = None
    """Data-parallel size, when known (display only)."""

    def __post_init__(self) -> None:
        positive_int("pp", self.pp, "give the pipeline-parallel size, e.g. 8.")
        positive_int(
            "n_microbatches",
            self.n_microbatches,
            "give the microbatches per step, or derive them with from_batch().",
        )
        canon = modelled_schedule(self.schedule)
        object.__setattr__(self, "schedule", canon)
        entry = CATALOG[_BY_KEY[canon]]
        vpp = entry.stages_per_rank if self.stages_per_rank is None else self.stages_per_rank
        positive_int(
            "stages_per_rank", vpp, "give the stages each rank runs, e.g. 2 for Interleaved1F1B."
        )
        fixed = 1 if entry.stages_per_rank == 1 else 2 if entry.style == "v" else None
        if fixed is not None and vpp != fixed:
            kind = "a single-stage schedule" if fixed == 1 else "a V schedule: two stages per rank"
            raise MemoryModelError(
                "stages_per_rank",
                found=f"{vpp} under {_BY_KEY[canon]}",
                required=f"{fixed} ({kind})",
                fix="leave it out, or use a multi-stage schedule such as Interleaved1F1B for "
                f"{vpp} stages per rank.",
            )
        object.__setattr__(self, "stages_per_rank", vpp)
        if canon == "1f1b" and self.n_microbatches < self.pp:
            raise MemoryModelError(
                "n_microbatches under 1F1B",
                found=f"M={self.n_microbatches} microbatches with pp={self.pp} stages",
                required="M >= pp (torch's Schedule1F1B refuses fewer microbatches than stages)",
                fix=f"use at least {self.pp} microbatches (a larger global batch or a smaller "
                "micro batch), or fewer stages.",
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
        stages_per_rank: int | None = None,
    ) -> PipelineShape:
        """The shape whose ``M`` follows from the batch sizes (see
        :func:`microbatches_from_batch`)."""
        m = microbatches_from_batch(
            global_batch=global_batch, micro_batch=micro_batch, dp=dp, local_batch=local_batch
        )
        return cls(
            pp=pp,
            n_microbatches=m,
            schedule=schedule,
            stages_per_rank=stages_per_rank,
            global_batch=global_batch,
            micro_batch=micro_batch,
            dp=dp,
        )

    @property
    def poolable(self) -> bool:
        """Whether the ring pool may replace stock allocation under this schedule (1F1B by name,
        multi-stage schedules with ``schedule="auto"``; never GPipe)."""
        return self.schedule not in STOCK_ONLY

    @property
    def multi_stage(self) -> bool:
        """True for schedules whose ranks run several stages (rings come from the analysed action
        order)."""
        return CATALOG[_BY_KEY[self.schedule]].stages_per_rank > 1

    @property
    def pool_mode(self) -> str:
        """How pooltk pools this schedule: ``"allowlist"`` (1F1B), ``"auto"``
        (``install(schedule="auto")``) or ``"stock"``."""
        if self.schedule in ALLOWLIST:
            return "allowlist"
        return "auto" if self.poolable else "stock"

    @property
    def num_stages(self) -> int:
        """Pipeline stages: ``pp x stages_per_rank``."""
        return self.pp * int(self.stages_per_rank or 1)

    @property
    def schedule_name(self) -> str:
        """torch's name of the schedule (``"Interleaved1F1B"``)."""
        return _BY_KEY[self.schedule]

    def describe(self) -> str:
        text = f"pp={self.pp} M={self.n_microbatches} schedule={self.schedule}"
        if self.multi_stage:
            text += f" vpp={self.stages_per_rank} ({self.num_stages} stages)"
        if self.global_batch is not None:
            text += (
                f" (global batch {self.global_batch} / (dp {self.dp} x micro batch "
                f"{self.micro_batch}))"
            )
        return text


def middle_stage(pp: int) -> int:
    """The stage the reports call "middle": ``(pp - 1) // 2`` (stage 3 of 8)."""
    return (positive_int("pp", pp, "give the pipeline-parallel size.") - 1) // 2
