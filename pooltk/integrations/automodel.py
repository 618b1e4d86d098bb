"""pooltk as the implementation of NeMo Automodel's ``pp_recv_buffer_pool``.

Automodel users switch its own pool on in YAML::

    distributed:
      pp_size: 2
      pipeline:
        pp_schedule: 1f1b
        pp_recv_buffer_pool: true          # Automodel's key: pool the receive buffers
        pp_recv_buffer_pool_slack: 2       # Automodel's key: forward ring slack
        pooltk:                            # optional: pooltk implements the pool
          grad_slack: 1
          release: true                    # the last stage lets the schedule's kept graphs go
          schedule: 1f1b                   # 1f1b | auto (every schedule pooltk can analyse)

and launch with ``python -m pooltk.integrations.automodel -c cfg.yaml`` (under ``torchrun``),
which is Automodel's fine-tuning recipe with :func:`apply` run on its config first. Code that
builds ``AutoPipeline`` itself calls :func:`apply` on the config (or :func:`plan` on the
``distributed.pipeline`` mapping, then :func:`enable`) before building.

[Note: one pool per class]
Automodel's pool and pooltk both patch torch's ``PipelineStage`` classes, and Automodel's
cannot be undone in-process. Two pools on one class would nest rings inside rings, so
:func:`enable` refuses (:class:`TwoPoolsError`) when Automodel's pool is already installed,
and :func:`apply` switches Automodel's own flag off in the config it hands back, so
``AutoPipeline.build`` never installs the original next to pooltk. Automodel's pool is
detected by where the class methods come from (its module), not by its private state.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltk._validate import InputError, check_choice, check_int
from pooltk.config import PoolConfig
from pooltk.integrations.common import TwoPoolsError, import_trainer

__all__ = [
    "PIP",
    "POOL_MODULE",
    "PROVEN",
    "AutomodelPoolPlan",
    "apply",
    "enable",
    "original_pool_installed",
    "plan",
]

PROVEN: dict[str, str] = {"nemo-automodel": "0.7.0", "torch": "2.13.0"}
"""The versions this integration was proven on (bitwise parity, scripts/integration)."""

PIP = 'pip install "torch==2.13.0" && pip install "torch==2.13.0" "nemo-automodel==0.7.0"'
"""How to get the trainer (torch pinned first, so the CPU/CUDA build you chose stays)."""

POOL_MODULE = "nemo_automodel.components.distributed.pipelining.recv_buffer_pool"
"""The module of Automodel's own pool (``install_recv_buffer_pool``)."""

IMPLEMENTATIONS: tuple[str, ...] = ("pooltk", "automodel")
SCHEDULES: tuple[str, ...] = ("1f1b", "auto")
_POOLTK_KEYS = ("implementation", "grad_slack", "release", "schedule")
_KEY = "distributed.pipeline"


@dataclass(kw_only=True, slots=True, frozen=True)
class AutomodelPoolPlan:
    """What an Automodel ``distributed.pipeline`` block asks for, translated to pooltk."""

    implementation: str
    """``"pooltk"``, ``"automodel"`` (Automodel's own pool, left to Automodel) or ``"stock"``."""

    config: PoolConfig | None
    """The pooltk config (``pp_recv_buffer_pool_slack`` becomes ``slack``); None unless pooltk."""

    schedule: str | None
    """The schedule pooltk gates on: ``"auto"`` or the block's ``pp_schedule`` (``"1f1b"``
    default)."""

    pipeline: dict[str, Any] = field(default_factory=dict)
    """The block Automodel should see: the ``pooltk`` sub-block removed and, when pooltk
    implements the pool, ``pp_recv_buffer_pool`` set to False (see [Note: one pool per class])."""

    def describe(self) -> str:
        """One line for logs: ``pooltk slack=2 grad_slack=1 schedule=1f1b``."""
        if self.config is None:
            return self.implementation
        return f"pooltk {self.config.describe()} schedule={self.schedule}"


def _flag(what: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(
            what,
            found=repr(value),
            required="true or false",
            fix=f"write `{what.rsplit('.', 1)[-1]}: true` or `false` in the YAML.",
        )
    return value


def plan(pipeline: Mapping[str, Any] | None) -> AutomodelPoolPlan:
    """Translate one ``distributed.pipeline`` mapping (plain values, as in the YAML).

    ``pp_recv_buffer_pool`` false (Automodel's default) means stock buffers whatever the
    ``pooltk`` block says; true with no ``pooltk`` block leaves Automodel's own pool in charge;
    true with a ``pooltk`` block makes pooltk the implementation (``implementation: automodel``
    in the block hands it back to Automodel).

    Raises:
        InputError: a key with a bad value or an unknown key in the ``pooltk`` block
            (found / required / fix).
    """
    block = dict(pipeline or {})
    extra = block.pop("pooltk", None)
    on = _flag(f"{_KEY}.pp_recv_buffer_pool", block.get("pp_recv_buffer_pool", False))
    slack = check_int(
        f"{_KEY}.pp_recv_buffer_pool_slack",
        block.get("pp_recv_buffer_pool_slack", 2),
        low=0,
        fix="use 0 for the live-set limit or a small positive integer such as 2.",
    )
    if extra is None:
        return AutomodelPoolPlan(
            implementation="automodel" if on else "stock",
            config=None,
            schedule=None,
            pipeline=block,
        )
    implementation, grad_slack, release, schedule = _pooltk_options(extra)
    if not on:
        return AutomodelPoolPlan(implementation="stock", config=None, schedule=None, pipeline=block)
    if implementation == "automodel":
        return AutomodelPoolPlan(
            implementation="automodel", config=None, schedule=None, pipeline=block
        )
    if block.get("pp_schedule_csv") is not None:
        raise InputError(
            f"{_KEY}.pp_schedule_csv",
            found=repr(block["pp_schedule_csv"]),
            required="a named schedule when pooltk implements the pool",
            fix="use pp_schedule (e.g. 1f1b), or set pp_recv_buffer_pool: false for a CSV "
            "schedule.",
        )
    config = PoolConfig(slack=slack, grad_slack=grad_slack, release=release)
    gate = "auto" if schedule == "auto" else str(block.get("pp_schedule") or "1f1b").lower()
    block["pp_recv_buffer_pool"] = False
    return AutomodelPoolPlan(implementation="pooltk", config=config, schedule=gate, pipeline=block)


def _pooltk_options(extra: Any) -> tuple[str, int, bool, str]:
    """The ``pooltk`` block's (implementation, grad_slack, release, schedule), checked, with their
    defaults.

    Raises:
        InputError: not a mapping, an unknown key, or a bad value (found / required / fix).
    """
    if not isinstance(extra, Mapping):
        raise InputError(
            f"{_KEY}.pooltk",
            found=repr(extra),
            required="a mapping of pooltk options",
            fix="write the options indented under `pooltk:` (grad_slack, release, schedule).",
        )
    unknown = sorted(set(extra) - set(_POOLTK_KEYS))
    if unknown:
        raise InputError(
            f"{_KEY}.pooltk",
            found=f"unknown key(s) {', '.join(map(repr, unknown))}",
            required="only " + ", ".join(_POOLTK_KEYS),
            fix="remove the key or correct its spelling.",
        )
    implementation = check_choice(
        f"{_KEY}.pooltk.implementation",
        extra.get("implementation", "pooltk"),
        IMPLEMENTATIONS,
        fix="use 'pooltk', or drop the pooltk block for Automodel's pool.",
    )
    grad_slack = check_int(
        f"{_KEY}.pooltk.grad_slack",
        extra.get("grad_slack", 1),
        low=0,
        fix="use 0 for the live-set limit or 1 (the default).",
    )
    release = _flag(f"{_KEY}.pooltk.release", extra.get("release", True))
    schedule = extra.get("schedule", "1f1b")
    check_choice(
        f"{_KEY}.pooltk.schedule",
        schedule,
        SCHEDULES,
        fix="use '1f1b' (pool 1F1B only, like Automodel) or 'auto' (every schedule pooltk can "
        "analyse).",
    )
    return implementation, grad_slack, release, schedule


def original_pool_installed() -> bool:
    """True when Automodel's own pool has patched torch's stage classes in this process."""
    if POOL_MODULE not in sys.modules:
        return False
    try:
        from torch.distributed.pipelining import stage as stage_mod
    except ImportError:  # pragma: no cover - torch without pipelining
        return False
    for cls in (
        getattr(stage_mod, "PipelineStage", None),
        getattr(stage_mod, "_PipelineStageBase", None),
    ):
        for name in (
            "_setup_forward_recv_info",
            "_setup_backward_recv_info",
            "_prepare_forward_infra",
            "_prepare_backward_infra",
        ):
            method = getattr(cls, name, None) if cls is not None else None
            if getattr(method, "__module__", None) == POOL_MODULE:
                return True
    return False


def _refuse_if_original() -> None:
    if original_pool_installed():
        raise TwoPoolsError(
            "two receive-buffer pools: found Automodel's own pool "
            f"({POOL_MODULE}.install_recv_buffer_pool) already installed on torch's PipelineStage "
            "classes; required at most one pool per class, and Automodel's cannot be undone in "
            "this process. Fix: use pooltk through a `pooltk:` block under distributed.pipeline "
            "(pooltk.integrations.automodel.apply turns Automodel's own flag off), or drop the "
            "pooltk block to keep Automodel's pool; never both in one process."
        )


def enable(choice: AutomodelPoolPlan) -> Any:
    """Install pooltk as ``choice`` says (process-wide, before ``AutoPipeline.build``).

    Returns pooltk's ``InstallReport``, or None when the plan is not pooltk's.

    Raises:
        TwoPoolsError: Automodel's own pool is already installed (see [Note: one pool per class]).
    """
    if choice.implementation != "pooltk":
        return None
    _refuse_if_original()
    import pooltk

    return pooltk.install(choice.config, schedule=choice.schedule)


def _pipeline_of(cfg: Any) -> Mapping[str, Any] | None:
    if hasattr(cfg, "set_by_dotted") and hasattr(cfg, "get"):  # Automodel's ConfigNode
        node = cfg.get(_KEY)
        return node.to_dict() if hasattr(node, "to_dict") else node
    if isinstance(cfg, Mapping):
        return (cfg.get("distributed") or {}).get("pipeline")
    raise InputError(
        "config",
        found=type(cfg).__name__,
        required="Automodel's ConfigNode or a dict loaded from its YAML",
        fix="pass the config your recipe loads (parse_args_and_load_config) or the YAML as a dict.",
    )


def apply(cfg: Any) -> tuple[AutomodelPoolPlan, Any]:
    """Read ``distributed.pipeline`` of an Automodel config, install pooltk if asked, fix the
    config.

    ``cfg`` is Automodel's ``ConfigNode`` or the YAML as a dict; it is changed in place to
    the block Automodel must see (:attr:`AutomodelPoolPlan.pipeline`), so Automodel's own
    ``PipelineConfig`` never meets the ``pooltk`` key. Returns the plan and pooltk's install
    report (None when pooltk is not the implementation).
    """
    choice = plan(_pipeline_of(cfg))
    report = enable(choice)
    if hasattr(cfg, "set_by_dotted"):
        node = cfg.get(_KEY)
        if node is not None:
            node.__dict__.pop("pooltk", None)
            for key, value in choice.pipeline.items():
                if key.startswith("pp_recv_buffer_pool"):
                    cfg.set_by_dotted(f"{_KEY}.{key}", value)
    elif (
        isinstance(cfg, dict)
        and isinstance(cfg.get("distributed"), dict)
        and isinstance(cfg["distributed"].get("pipeline"), dict)
    ):
        cfg["distributed"]["pipeline"] = dict(choice.pipeline)
    return choice, report


def main(argv: list[str] | None = None) -> None:
    """Automodel's LLM fine-tuning recipe with :func:`apply` run on its config first."""
    loader = import_trainer(
        "nemo_automodel.components.config._arg_parser", trainer="nemo-automodel", pip=PIP
    )
    recipe = import_trainer(
        "nemo_automodel.recipes.llm.train_ft", trainer="nemo-automodel", pip=PIP
    )
    log_utils = import_trainer(
        "nemo_automodel.components.loggers.log_utils", trainer="nemo-automodel", pip=PIP
    )
    cfg = loader.parse_args_and_load_config(None, argv)
    # Automodel sets its logging up only in the recipe's setup(), after pooltk installs: set up its
    # format and rank-0 filter first, so pooltk's install line lands in the trainer's log (setup()
    # does it again).
    log_utils.setup_logging()
    apply(cfg)
    trainer = recipe.TrainFinetuneRecipeForNextTokenPrediction(cfg)
    trainer.setup()
    trainer.run_train_validation_loop()


if __name__ == "__main__":  # pragma: no cover - exercised under torchrun
    main()
