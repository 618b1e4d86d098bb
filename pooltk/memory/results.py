"""The memory model's results: sets and bytes per (stage, direction), per rank and variant, as
tables and JSON.

Variants (:data:`VARIANTS`) say what holds the buffers:

- ``stock``          stock ``torch.distributed.pipelining`` <= 2.14: one set per microbatch,
                     allocated up front,
- ``stock_lazy``     stock torch >= 2.15 (lazy receive buffers): the live set, but all ``M`` forward
                     on the last stage ([Note: lazy receive buffers] in
                     :mod:`pooltk.analysis.stage_sets`),
- ``lazy_released``  torch >= 2.15 with pooltk's last-stage release: the live set everywhere,
- ``automodel``      the original single-ring policy (one ``K`` for both directions),
- ``tight``          pooltk's per-direction rings,
- ``live_set``       the most sets ever live at once, walked from the schedule's action order: no
                     pool can hold fewer,
- ``pooled``         per stage: the ring the model's policy keeps for the stage alone (1F1B:
                     ``automodel`` or ``tight``; multi-stage schedules:
                     ``install(schedule="auto")``'s ring); per rank: the rank-shared rings under
                     ``sharing="rank"``, the per-stage rings under ``"stage"``.

Rank-level only (:data:`~pooltk.memory.ranks.RANK_VARIANTS`, [Note: bytes per rank] in
:mod:`pooltk.memory.ranks`): ``shared`` (rank-shared rings) and ``rank_live`` (the rank's live set).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_choice
from pooltk.analysis.lifetimes import DIRECTIONS, Direction
from pooltk.config import PoolConfig
from pooltk.memory.errors import MemoryModelError
from pooltk.memory.ranks import RANK_VARIANTS, RingMemory
from pooltk.memory.shape import PipelineShape
from pooltk.memory.tensors import Boundary
from pooltk.memory.units import to_unit, unit_bytes

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["VARIANTS", "VARIANT_LABELS", "DirectionMemory", "ExpectedBytes", "MemoryModel"]

VARIANTS: tuple[str, ...] = (
    "stock",
    "stock_lazy",
    "lazy_released",
    "automodel",
    "tight",
    "live_set",
    "pooled",
)
"""What holds the buffers: stock torch (<= 2.14 and >= 2.15), 2.15 with the last-stage release, the
two ring policies, the live-set minimum, and the model's policy."""

VARIANT_LABELS: dict[str, str] = {
    "stock": "stock",
    "stock_lazy": "stock-lazy",
    "lazy_released": "lazy-released",
    "automodel": "automodel",
    "tight": "tight",
    "live_set": "live set",
    "pooled": "pooled",
    "shared": "rank-shared",
    "rank_live": "rank live",
}
"""Column headers for tables (``stock-lazy``: torch >= 2.15 as shipped; ``lazy-released``: with
pooltk's release)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class DirectionMemory:
    """Receive-buffer sets and bytes of one stage in one direction."""

    stage: int
    """Stage index ``i`` in ``[0, stages)``."""
    direction: Direction
    """``"forward"`` (activations received) or ``"grad"`` (gradients received)."""
    rank: int
    """Rank that runs the stage (the stage itself under single-stage schedules)."""
    handoff: bool
    """True where a same-rank handoff (the V schedules' turn) feeds this direction: no receives, so
    0 sets everywhere but ``stock`` (torch <= 2.14 still allocates ``M`` there)."""
    set_bytes: int
    """Bytes of one buffer set in this direction (0 where the stage has no receives)."""
    stock_sets: int
    """Sets stock torch allocates: ``M`` (0 where there are no receives)."""
    automodel_sets: int
    """Sets of the original single ring ``max(2, min(M, max(1, N - i) + slack))``."""
    tight_sets: int
    """Sets of pooltk's tight ring (forward ``min(M, W + slack)``, grad
    ``min(M, 1 + grad_slack)``)."""
    live_sets: int
    """Most sets live at once, walked from the schedule
    (:func:`pooltk.analysis.lifetimes.live_sets`)."""
    stock_lazy_sets: int
    """Sets stock torch >= 2.15 holds at its peak (lazy receive buffers): the live set, except all
    ``M`` forward on the last stage. See [Note: lazy receive buffers] in
    :mod:`pooltk.analysis.stage_sets`."""
    lazy_released_sets: int
    """Sets torch >= 2.15 holds once pooltk's last-stage release drops what the schedule keeps: the
    live set."""
    pooled_sets: int
    """Sets of the stage's own ring under the model's policy (stock, when the schedule cannot be
    pooled). Under ``sharing="rank"`` a rank's stages may share rings instead: see
    :meth:`MemoryModel.rank_bytes`."""

    def sets(self, variant: str) -> int:
        """Sets held by ``variant`` (one of :data:`VARIANTS`)."""
        return getattr(self, _SETS_FIELD[_variant(variant)])

    def bytes(self, variant: str) -> int:
        """Bytes held by ``variant``."""
        return self.sets(variant) * self.set_bytes

    @property
    def stock_bytes(self) -> int:
        return self.stock_sets * self.set_bytes

    @property
    def pooled_bytes(self) -> int:
        return self.pooled_sets * self.set_bytes

    @property
    def saved_bytes(self) -> int:
        """Stock minus pooled."""
        return self.stock_bytes - self.pooled_bytes


_SETS_FIELD = {v: ("live_sets" if v == "live_set" else f"{v}_sets") for v in VARIANTS}


def _variant(variant: str) -> str:
    return check_choice(
        "variant", variant, VARIANTS, fix="pick a listed variant.", error=MemoryModelError
    )


def _rank_variant(variant: str) -> str:
    return check_choice(
        "variant",
        variant,
        VARIANTS + RANK_VARIANTS,
        fix="pick a listed variant (shared and rank_live exist per rank only).",
        error=MemoryModelError,
    )


@dataclass(kw_only=True, slots=True, frozen=True)
class ExpectedBytes:
    """What a measurement of one stage and direction should find (for the gloo parity check)."""

    stock_sets: int
    """Buffer sets stock torch allocates."""
    pooled_sets: int
    """Buffer sets the pool holds under the config."""
    stock_bytes: int
    """Bytes stock torch allocates."""
    pooled_bytes: int
    """Bytes the pool holds under the config."""


@dataclass(kw_only=True, slots=True, frozen=True)
class MemoryModel:
    """Receive-buffer memory of every stage and direction for one shape and config."""

    shape: PipelineShape
    """The pipeline modelled."""
    config: PoolConfig
    """Slack and grad slack the rings are sized with."""
    policy: str
    """``tight`` or ``automodel``: the ring the per-stage ``pooled`` column keeps."""
    sharing: str
    """``rank`` or ``stage``: whether a rank's ``pooled`` is its rank-shared rings or its stages'
    own."""
    boundaries: tuple[Boundary, ...]
    """Boundary ``b`` (``N - 1`` of them) carries stage ``b`` -> ``b + 1``."""
    rows: tuple[DirectionMemory, ...]
    """One row per (stage, direction), stage-major, forward before grad."""
    rings: tuple[RingMemory, ...]
    """Every rank's rings under rank sharing (:mod:`pooltk.memory.ranks`), by (rank, direction,
    first stage)."""
    pool_active: bool
    """False when the schedule cannot be pooled and the model shows the pool standing down."""
    live_source: str = "schedule"
    """Where ``live_sets`` came from: ``"schedule"`` (walked) or ``"formula"``."""

    def describe(self) -> str:
        """One line such as ``tight slack=2 grad_slack=1`` (``sharing=stage`` added when not per
        rank)."""
        text = f"{self.policy} slack={self.config.slack}" + (
            f" grad_slack={self.config.grad_slack}" if self.policy == "tight" else ""
        )
        return text + (f" sharing={self.sharing}" if self.sharing != "rank" else "")

    def row(self, stage: int, direction: str) -> DirectionMemory:
        """The row of ``stage`` in ``direction``."""
        if direction not in DIRECTIONS or not 0 <= stage < self.shape.num_stages:
            raise MemoryModelError(
                "row",
                found=f"stage={stage!r} direction={direction!r}",
                required=f"stage in [0, {self.shape.num_stages - 1}] and direction in {DIRECTIONS}",
                fix="index an existing stage.",
            )
        return self.rows[2 * stage + DIRECTIONS.index(direction)]

    def stage_bytes(self, stage: int, variant: str = "pooled") -> int:
        """Both directions of ``stage`` under ``variant``, in bytes."""
        return self.row(stage, "forward").bytes(variant) + self.row(stage, "grad").bytes(variant)

    def stage_gib(self, stage: int, variant: str = "pooled") -> float:
        """:meth:`stage_bytes` in GiB (2**30)."""
        return to_unit(self.stage_bytes(stage, variant), "gib")

    def saved_bytes(self, stage: int, variant: str = "pooled") -> int:
        """Stock minus ``variant`` on ``stage``, both directions."""
        return self.stage_bytes(stage, "stock") - self.stage_bytes(stage, variant)

    def saved_gib(self, stage: int, variant: str = "pooled") -> float:
        """:meth:`saved_bytes` in GiB (2**30)."""
        return to_unit(self.saved_bytes(stage, variant), "gib")

    def total_bytes(self, variant: str = "pooled") -> int:
        """Sum over all stages and directions (bytes across the whole pipeline, not one GPU)."""
        _variant(variant)
        return sum(r.bytes(variant) for r in self.rows)

    def peak_stage_bytes(self, variant: str = "pooled") -> int:
        """The largest per-stage total (the fullest GPU under single-stage schedules; see
        :meth:`peak_rank_bytes`)."""
        return max(self.stage_bytes(i, variant) for i in range(self.shape.num_stages))

    # --------------------------------------------------------------- ranks ([Note: bytes per rank])

    def rank_stages(self, rank: int) -> tuple[int, ...]:
        """The stages ``rank`` runs, ascending."""
        if not (isinstance(rank, int) and 0 <= rank < self.shape.pp):
            raise MemoryModelError(
                "rank",
                found=repr(rank),
                required=f"a rank in [0, {self.shape.pp - 1}]",
                fix="index an existing rank.",
            )
        return tuple(sorted({r.stage for r in self.rows if r.rank == rank}))

    def rank_rings(self, rank: int) -> tuple[RingMemory, ...]:
        """The rings ``rank`` keeps under rank sharing."""
        self.rank_stages(rank)
        return tuple(g for g in self.rings if g.rank == rank)

    def rank_bytes(self, rank: int, variant: str = "pooled") -> int:
        """What ``rank`` holds under ``variant`` (:data:`VARIANTS` or :data:`RANK_VARIANTS`), both
        directions.

        Per-stage variants sum the rank's stages; ``shared`` and ``rank_live`` sum its rings;
        ``pooled`` is ``shared`` under ``sharing == "rank"``, else the per-stage rings.
        """
        variant = _rank_variant(variant)
        if variant == "pooled" and self.sharing == "rank" and self.pool_active:
            variant = "shared"
        if variant == "shared":
            return sum(g.bytes for g in self.rank_rings(rank))
        if variant == "rank_live":
            return sum(g.live_bytes for g in self.rank_rings(rank))
        return sum(self.stage_bytes(i, variant) for i in self.rank_stages(rank))

    def peak_rank_bytes(self, variant: str = "pooled") -> int:
        """The largest per-rank total: what decides whether the fullest GPU fits."""
        return max(self.rank_bytes(r, variant) for r in range(self.shape.pp))

    def expected_bytes(self) -> dict[tuple[int, str], ExpectedBytes]:
        """``{(stage, direction): ExpectedBytes}`` for every stage and direction."""
        return {
            (r.stage, r.direction): ExpectedBytes(
                stock_sets=r.stock_sets,
                pooled_sets=r.pooled_sets,
                stock_bytes=r.stock_bytes,
                pooled_bytes=r.pooled_bytes,
            )
            for r in self.rows
        }

    def expected_rank_bytes(self) -> dict[int, ExpectedBytes]:
        """``{rank: ExpectedBytes}``: what a per-rank measurement (distinct storages over the rank's
        stages) should find; ``pooled`` follows ``sharing`` ([Note: bytes per rank] in
        :mod:`pooltk.memory.ranks`)."""
        out = {}
        for rank in range(self.shape.pp):
            stock = sum(
                self.row(i, d).stock_sets for i in self.rank_stages(rank) for d in DIRECTIONS
            )
            shared = self.sharing == "rank" and self.pool_active
            pooled = (
                sum(g.size for g in self.rank_rings(rank))
                if shared
                else sum(
                    self.row(i, d).pooled_sets for i in self.rank_stages(rank) for d in DIRECTIONS
                )
            )
            out[rank] = ExpectedBytes(
                stock_sets=stock,
                pooled_sets=pooled,
                stock_bytes=self.rank_bytes(rank, "stock"),
                pooled_bytes=self.rank_bytes(rank, "pooled"),
            )
        return out

    def to_frame(self) -> pd.DataFrame:
        """Tidy: one row per (stage, direction, variant) with ``sets``, ``set_bytes``,
        ``bytes``, ``mib``, ``gib`` and ``gb``."""
        import pandas as pd

        records = []
        for r in self.rows:
            for v in VARIANTS:
                b = r.bytes(v)
                records.append(
                    {
                        "stage": r.stage,
                        "direction": r.direction,
                        "variant": v,
                        "sets": r.sets(v),
                        "set_bytes": r.set_bytes,
                        "bytes": b,
                        **{unit: to_unit(b, unit) for unit in ("mib", "gib", "gb")},
                    }
                )
        return pd.DataFrame.from_records(records)

    def per_stage_frame(self, unit: str = "gib") -> pd.DataFrame:
        """Wide: one row per stage with sets per direction (``<variant>_forward_sets``,
        ``<variant>_grad_sets``), both directions' memory per variant in ``unit``
        (``<variant>_<unit>``), and ``saved_<unit>`` (stock - pooled)."""
        import pandas as pd

        scale = unit_bytes(unit)
        records = []
        for i in range(self.shape.num_stages):
            f, g = self.row(i, "forward"), self.row(i, "grad")
            rec: dict[str, Any] = {
                "stage": i,
                "rank": f.rank,
                "forward_set_mib": to_unit(f.set_bytes, "mib"),
                "grad_set_mib": to_unit(g.set_bytes, "mib"),
                "handoff": f.handoff or g.handoff,
            }
            for v in VARIANTS:
                rec[f"{v}_forward_sets"] = f.sets(v)
                rec[f"{v}_grad_sets"] = g.sets(v)
                rec[f"{v}_{unit}"] = (f.bytes(v) + g.bytes(v)) / scale
            rec[f"saved_{unit}"] = (f.saved_bytes + g.saved_bytes) / scale
            records.append(rec)
        return pd.DataFrame.from_records(records)

    def per_rank_frame(self, unit: str = "gib") -> pd.DataFrame:
        """Wide: one row per rank with its ``stages``, memory per variant in ``unit``
        (``<variant>_<unit>`` for :data:`VARIANTS` and :data:`RANK_VARIANTS`; ``pooled`` follows
        ``sharing``), ``rings`` and ``shared_slots`` (sets of the rank-shared rings), and
        ``saved_<unit>`` (stock - pooled)."""
        import pandas as pd

        scale = unit_bytes(unit)
        records = []
        for rank in range(self.shape.pp):
            rec: dict[str, Any] = {
                "rank": rank,
                "stages": ",".join(map(str, self.rank_stages(rank))),
            }
            for v in VARIANTS + RANK_VARIANTS:
                rec[f"{v}_{unit}"] = self.rank_bytes(rank, v) / scale
            rings = self.rank_rings(rank)
            rec["rings"] = len(rings)
            rec["shared_slots"] = sum(g.size for g in rings)
            rec[f"saved_{unit}"] = (
                self.rank_bytes(rank, "stock") - self.rank_bytes(rank, "pooled")
            ) / scale
            records.append(rec)
        return pd.DataFrame.from_records(records)

    def boundaries_frame(self) -> pd.DataFrame:
        """One row per boundary ``b`` (stage ``b`` -> ``b + 1``): forward and grad MiB per set and
        the tensors."""
        import pandas as pd

        return pd.DataFrame.from_records(
            [
                {
                    "boundary": b,
                    "from_stage": b,
                    "to_stage": b + 1,
                    "forward_set_mib": to_unit(bd.forward_bytes, "mib"),
                    "grad_set_mib": to_unit(bd.grad_bytes, "mib"),
                    "tensors": " + ".join(t.describe() for t in bd.activations),
                }
                for b, bd in enumerate(self.boundaries)
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict: inputs, one entry per stage and direction, totals."""
        return {
            "shape": dataclasses.asdict(self.shape),
            "config": {**self.config.to_dict(), "policy": self.policy, "sharing": self.sharing},
            "pool_active": self.pool_active,
            "live_source": self.live_source,
            "boundaries": [_boundary_record(b) for b in self.boundaries],
            "rows": [_row_record(r) for r in self.rows],
            "stages": [self._stage_record(i) for i in range(self.shape.num_stages)],
            "ranks": [self._rank_record(rank) for rank in range(self.shape.pp)],
            "rings": [_ring_record(g) for g in self.rings],
            "totals": self._totals(),
        }

    def _stage_record(self, stage: int) -> dict[str, Any]:
        """:meth:`to_dict`'s entry of one stage: bytes per variant, and saved."""
        return {
            "stage": stage,
            **{f"{v}_bytes": self.stage_bytes(stage, v) for v in VARIANTS},
            "saved_bytes": self.saved_bytes(stage),
        }

    def _rank_record(self, rank: int) -> dict[str, Any]:
        """:meth:`to_dict`'s entry of one rank: its stages, bytes per variant, and saved."""
        return {
            "rank": rank,
            "stages": list(self.rank_stages(rank)),
            **{f"{v}_bytes": self.rank_bytes(rank, v) for v in VARIANTS + RANK_VARIANTS},
            "saved_bytes": self.rank_bytes(rank, "stock") - self.rank_bytes(rank, "pooled"),
        }

    def _totals(self) -> dict[str, int]:
        """:meth:`to_dict`'s totals: over stages, and the fullest stage and rank, per variant."""
        return {
            **{f"{v}_bytes": self.total_bytes(v) for v in VARIANTS},
            **{f"peak_stage_{v}_bytes": self.peak_stage_bytes(v) for v in VARIANTS},
            **{f"peak_rank_{v}_bytes": self.peak_rank_bytes(v) for v in VARIANTS + RANK_VARIANTS},
        }


def _boundary_record(b: Boundary) -> dict[str, Any]:
    """:meth:`MemoryModel.to_dict`'s entry of one boundary: its tensors and bytes per set."""
    return {
        "activations": [dataclasses.asdict(t) for t in b.activations],
        "grads": None if b.grads is None else [dataclasses.asdict(t) for t in b.grads],
        "forward_set_bytes": b.forward_bytes,
        "grad_set_bytes": b.grad_bytes,
    }


def _row_record(r: DirectionMemory) -> dict[str, Any]:
    """:meth:`MemoryModel.to_dict`'s entry of one stage and direction: sets and bytes per
    variant."""
    return {
        "stage": r.stage,
        "rank": r.rank,
        "handoff": r.handoff,
        "direction": r.direction,
        "set_bytes": r.set_bytes,
        **{f"{v}_sets": r.sets(v) for v in VARIANTS},
        **{f"{v}_bytes": r.bytes(v) for v in VARIANTS},
        "saved_bytes": r.saved_bytes,
    }


_RING_FIELDS = ("rank", "direction", "live", "receives", "size", "shared", "set_bytes")
"""The fields of a :class:`~pooltk.memory.ranks.RingMemory` its record copies as they are."""


def _ring_record(g: RingMemory) -> dict[str, Any]:
    """:meth:`MemoryModel.to_dict`'s entry of one ring: its fields, stages, tensors and bytes."""
    return {
        **{k: getattr(g, k) for k in _RING_FIELDS},
        "stages": list(g.stages),
        "tensors": [{"shape": list(sh), "dtype": dt} for sh, dt in g.tensors],
        "bytes": g.bytes,
    }
