"""What a parity run does: the shape, the variants, and how long it may take."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pooltk._validate import check_int, check_number
from pooltk.config import PoolConfig
from pooltk.parity.experiments import Harness

__all__ = [
    "BUFFERS",
    "FRONTENDS",
    "ParitySpec",
    "Variant",
    "as_harness",
    "default_variants",
    "with_fresh",
]

Frontend = Literal["manual", "tracing"]
FRONTENDS: tuple[str, ...] = ("manual", "tracing")
BUFFERS: tuple[str, ...] = ("stock", "fresh")


@dataclass(kw_only=True, slots=True, frozen=True)
class Variant:
    """One training run inside a parity launch (stock, or pooled with a config)."""

    name: str
    """Label in reports, e.g. ``stock/manual`` or ``tight-s2/manual``."""
    frontend: Frontend = "manual"
    """``manual`` (``PipelineStage`` over a stage module) or ``tracing`` (``pipeline()`` +
    ``build_stage``)."""
    schedule: str = "1f1b"
    """torch schedule name as ``get_schedule_class`` takes it (``1F1B``, ``GPipe``)."""
    pooled: bool = False
    """False: stock torch (the reference). True: pooltk installed with ``config``."""
    config: Harness | None = None
    """What the pooled variant pools with (a PoolConfig given is taken as the Harness a user's
    config builds)."""
    force: bool = False
    """Pool even if the schedule is not allowlisted (negative controls)."""
    eval_between_steps: bool = False
    """Run ``schedule.eval`` after every train step (reruns stage setup twice per step)."""
    stages_per_rank: int = 1
    """Stages per rank for multi-stage schedules (Interleaved1F1B, ZBVZeroBubble, ...); the
    stage-to-rank placement is the schedule's own (``loop``, or ``v`` for V schedules)."""
    install_schedule: str | None = None
    """Schedule name given to ``pooltk.install`` (default: ``schedule``); ``"auto"`` pools
    any schedule pooltk can analyse."""
    scope: str = "process"
    """``process``: ``pooltk.install`` before the stages are built; ``stage``:
    ``pooltk.pool_stage`` on each stage object after it is built (the per-stage form)."""
    bodies: tuple[str, ...] = ()
    """Fuzz stage bodies, one per global stage (:data:`pooltk.parity.models.BODIES`); empty: the toy
    model."""
    aux: str | None = None
    """Fuzz models only: a float64 second boundary tensor, ``pass`` (aliased on) or ``mix``; None:
    none."""
    microbatches: int | None = None
    """Microbatches for this variant (default: the spec's)."""
    eval_only: bool = False
    """Run forward-only steps (``schedule.eval``) instead of training steps."""
    buffers: str = "stock"
    """Unpooled variants only: ``stock`` (torch's own buffers, reused every step) or ``fresh``
    (every receive lands in a newly allocated buffer, torch 2.15's semantics:
    :func:`pooltk.parity.fresh.fresh_stage`). A fresh variant is compared with the stock one."""
    compare_to: str = "stock"
    """Pooled variants only: the unpooled variant (same run key) they are compared with,
    ``stock`` or ``fresh``. In a launch with ``fresh``, put the reference last among the
    unpooled variants of its run key (the launcher compares losses with the last one)."""

    def __post_init__(self) -> None:
        if isinstance(self.config, PoolConfig):
            object.__setattr__(self, "config", as_harness(self.config))

    @property
    def run_key(self) -> tuple:
        """Variants with equal keys must produce identical numbers when the pool is correct."""
        return (
            self.frontend,
            self.schedule.lower(),
            self.eval_between_steps,
            self.stages_per_rank,
            self.bodies,
            self.aux,
            self.microbatches,
            self.eval_only,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"] = self.config.to_dict() if self.config else None
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Variant":
        d = dict(d)
        d["config"] = Harness(**d["config"]) if d.get("config") else None
        return Variant(**d)


@dataclass(kw_only=True, slots=True, frozen=True)
class ParitySpec:
    """A parity launch: one process group, several variants run one after another."""

    pp: int = 4
    """Pipeline stages = ranks (one stage per rank)."""
    microbatches: int = 16
    steps: int = 3
    """Optimizer steps per variant."""
    hidden: int = 64
    seq_len: int = 8
    """Tokens per row; the boundary tensor is (rows_per_microbatch, seq_len, hidden) float32."""
    rows_per_microbatch: int = 2
    layers_per_stage: int = 2
    lr: float = 0.05
    seed: int = 0
    timeout_s: float = 120.0
    """Wall-clock bound for the whole launch; ranks still running then are killed."""
    variants: tuple[Variant, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for name in (
            "pp",
            "microbatches",
            "steps",
            "hidden",
            "seq_len",
            "rows_per_microbatch",
            "layers_per_stage",
        ):
            value = getattr(self, name)
            low = 2 if name == "pp" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(
                    f"ParitySpec.{name}: found {value!r}; required an integer >= {low}."
                )
        check_int("ParitySpec.seed", self.seed, error=ValueError)
        check_number("ParitySpec.lr", self.lr, zero=True, error=ValueError)
        if not self.variants:
            raise ValueError(
                "ParitySpec.variants: found none; required at least one. Fix: use "
                "default_variants(...)."
            )
        if isinstance(self.variants, Variant) or not all(
            isinstance(v, Variant) for v in self.variants
        ):
            raise ValueError(
                f"ParitySpec.variants: found {self.variants!r}; required a tuple of Variant. "
                "Fix: variants=(Variant(...), ...), e.g. default_variants(...)."
            )
        for v in self.variants:
            self._check_shape(v)
        names = [v.name for v in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(f"ParitySpec.variants: names must be unique, found {names}.")
        for v in self.variants:
            self._check_fields(v)
        check_number("ParitySpec.timeout_s", self.timeout_s, error=ValueError)

    def _check_shape(self, v: Variant) -> None:
        """``v``'s stages per rank suit its schedule, and 1F1B has a microbatch per stage."""
        if not isinstance(v.schedule, str):
            raise ValueError(
                f"Variant {v.name}: schedule found {v.schedule!r}; required a torch schedule name "
                "(str), e.g. '1F1B'."
            )
        check_int(f"Variant {v.name}: stages_per_rank", v.stages_per_rank, low=1, error=ValueError)
        if v.microbatches is not None:
            check_int(f"Variant {v.name}: microbatches", v.microbatches, low=1, error=ValueError)
        _check_stage_kind(v)
        m = v.microbatches or self.microbatches
        if v.schedule.lower() == "1f1b" and m < self.pp:  # one stage per rank (checked above)
            raise ValueError(
                f"Variant {v.name}: 1F1B needs microbatches >= pp; found {m} < "
                f"{self.pp}. Fix: --microbatches {self.pp} or more."
            )

    def _check_fields(self, v: Variant) -> None:
        """``v``'s bodies, frontend, scope, config and buffers."""
        _check_model(v)
        if v.bodies and (v.frontend != "manual" or len(v.bodies) != self.pp * v.stages_per_rank):
            raise ValueError(
                f"Variant {v.name}: bodies found {len(v.bodies)} for frontend {v.frontend!r}; "
                f"required one per stage ({self.pp * v.stages_per_rank}) with frontend='manual'."
            )
        if v.frontend not in FRONTENDS:
            raise ValueError(
                f"Variant {v.name}: frontend found {v.frontend!r}; required one of {FRONTENDS}."
            )
        if v.scope not in ("process", "stage"):
            raise ValueError(
                f"Variant {v.name}: scope found {v.scope!r}; required 'process' or 'stage'."
            )
        _check_pool(v)

    @property
    def rows(self) -> int:
        return self.rows_per_microbatch * self.microbatches

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["variants"] = [v.to_dict() for v in self.variants]
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "ParitySpec":
        d = dict(d)
        d["variants"] = tuple(Variant.from_dict(v) for v in d["variants"])
        return ParitySpec(**d)


def as_harness(config: Harness | PoolConfig) -> Harness:
    """A PoolConfig as the Harness it builds; a Harness as it is."""
    if isinstance(config, PoolConfig):
        return Harness(slack=config.slack, grad_slack=config.grad_slack, release=config.release)
    return config


def _config_label(config: Harness) -> str:
    label = config.policy
    if config.policy == "measure":
        return label
    label += f"-s{config.slack}"
    if config.policy == "tight":
        label += f"g{config.grad_slack}"
    if not config.guard:
        label += "-noguard"
    if config.forward_shortfall:
        label += f"-short{config.forward_shortfall}"
    return label


def _check_model(v: Variant) -> None:
    """``v``'s fuzz bodies are names of :data:`pooltk.parity.models.BODIES` (a tuple, not one name's
    letters) and its aux one of :data:`~pooltk.parity.models.AUX_MODES` or None (each rank failed
    on a name it did not know)."""
    from pooltk.parity.models import AUX_MODES, BODIES

    bodies = v.bodies
    if not isinstance(bodies, (tuple, list)) or set(bodies) - set(BODIES):  # a list: from JSON
        raise ValueError(
            f"Variant {v.name}: bodies found {bodies!r}; required a tuple of names of "
            f"pooltk.parity.models.BODIES, one per stage. Fix: e.g. bodies=({BODIES[0]!r}, ...)."
        )
    if v.aux is not None and v.aux not in AUX_MODES:
        raise ValueError(
            f"Variant {v.name}: aux found {v.aux!r}; required None or one of {AUX_MODES}."
        )


def _check_pool(v: Variant) -> None:
    """``v``'s config, the shortfall it may build, and its buffers and reference."""
    if v.config is not None and not isinstance(v.config, Harness):
        raise ValueError(
            f"Variant {v.name}: config found {v.config!r}; required a PoolConfig or a Harness."
        )
    if v.pooled and v.config is None:
        raise ValueError(f"Variant {v.name}: pooled=True needs a PoolConfig.")
    if v.pooled and v.config.forward_shortfall and not v.force:  # each rank's install refused it
        raise ValueError(
            f"Variant {v.name}: found forward_shortfall={v.config.forward_shortfall} without "
            "force=True; required force=True to build a ring below the live set. Fix: "
            "force=True, or forward_shortfall=0."
        )
    for attr in ("buffers", "compare_to"):
        if getattr(v, attr) not in BUFFERS:
            raise ValueError(
                f"Variant {v.name}: {attr} found {getattr(v, attr)!r}; required one of {BUFFERS}."
            )
    if v.pooled and v.buffers != "stock":
        raise ValueError(
            f"Variant {v.name}: buffers found {v.buffers!r} on a pooled variant; required "
            "'stock' (fresh is an unpooled reference). Fix: a separate "
            "Variant(buffers='fresh')."
        )


def _check_stage_kind(v: Variant) -> None:
    """A multi-stage schedule needs ``stages_per_rank >= 2``, a single-stage one exactly 1 (else a
    rank fails in torch)."""
    from torch.distributed.pipelining.schedules import get_schedule_class

    from pooltk.analysis.catalog import is_single_stage, schedule_key, v_schedules

    try:
        cls = get_schedule_class(v.schedule)
    except ValueError:
        return  # an unknown name: the rank's own error names it
    single = is_single_stage(cls)
    v_shape = schedule_key(cls) in {schedule_key(name) for name in v_schedules()}
    if single != (v.stages_per_rank == 1) or (v_shape and v.stages_per_rank != 2):
        need = (
            "1 (it runs one stage per rank)"
            if single
            else "exactly 2 (it runs two stages per rank, in a V)"
            if v_shape
            else ">= 2 (it runs several stages per rank)"
        )
        raise ValueError(
            f"Variant {v.name}: stages_per_rank found {v.stages_per_rank} for {cls.__name__}; "
            f"required {need}. Fix: stages_per_rank={1 if single else 2}."
        )


def default_variants(
    configs: list[Harness | PoolConfig] | tuple[Harness | PoolConfig, ...] | None = None,
    *,
    frontends: tuple[str, ...] = ("manual",),
    schedule: str = "1f1b",
    force: bool = False,
    eval_between_steps: bool = False,
    stages_per_rank: int = 1,
    install_schedule: str | None = None,
) -> tuple[Variant, ...]:
    """A stock reference plus one pooled variant per config, for each frontend (one frontend or
    config alone is taken as one, not iterated)."""
    check_int("default_variants stages_per_rank", stages_per_rank, low=1)
    frontends = (frontends,) if isinstance(frontends, str) else frontends
    configs = (configs,) if isinstance(configs, (Harness, PoolConfig)) else configs
    out: list[Variant] = []
    sched = schedule.lower() + (f"x{stages_per_rank}" if stages_per_rank > 1 else "")
    suffix = "+eval" if eval_between_steps else ""
    for fe in frontends:
        common: dict[str, Any] = dict(
            frontend=fe,
            schedule=schedule,
            eval_between_steps=eval_between_steps,
            stages_per_rank=stages_per_rank,
        )
        out.append(Variant(name=f"stock/{sched}/{fe}{suffix}", **common))
        for cfg in map(as_harness, configs or (Harness(),)):
            out.append(
                Variant(
                    name=f"{_config_label(cfg)}/{sched}/{fe}{suffix}",
                    pooled=True,
                    config=cfg,
                    force=force,
                    install_schedule=install_schedule,
                    **common,
                )
            )
    return tuple(out)


def with_fresh(variants: tuple[Variant, ...]) -> tuple[Variant, ...]:
    """``variants`` with a ``fresh`` reference added before each stock one (named ``fresh/...``).

    Placed before its stock variant so the launcher's loss comparison (last unpooled variant of
    a run key) stays with stock; pooled variants keep ``compare_to="stock"``.
    """
    from dataclasses import replace

    out: list[Variant] = []
    for v in variants:
        if not v.pooled and v.buffers == "stock":
            rest = v.name.split("/", 1)[1] if v.name.startswith("stock/") else v.name
            out.append(replace(v, name=f"fresh/{rest}", buffers="fresh"))
        out.append(v)
    return tuple(out)
