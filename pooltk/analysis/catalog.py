"""The one schedule catalog and the one spelling of a schedule's name.

:data:`CATALOG` lists every torch schedule pooltk analyses, by torch's name;
:func:`schedule_key` is the one normalisation of a schedule name, class or instance (the pool's
gating, the memory model and the analysis all compare names through it); :data:`ALLOWLIST` is the
set of schedules pooltk pools by name alone (see [Note: gating] in :mod:`pooltk.pool.gating`);
:func:`resolve_schedule` maps a name or class to torch's class, or refuses with the reason.
Needs torch only inside the functions that look schedules up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "ALLOWLIST",
    "CATALOG",
    "CatalogEntry",
    "ScheduleAnalysisError",
    "Style",
    "analysable_schedules",
    "is_single_stage",
    "resolve_schedule",
    "schedule_key",
    "v_schedules",
]

Style = Literal["loop", "v"]

# The schedule names torch's get_schedule_class knows that are NOT analysable, with why.
_REFUSED_BASES: dict[str, str] = {
    "PipelineScheduleSingle": "it is the abstract base of single-stage schedules, not a schedule",
    "PipelineScheduleMulti": (
        "it is the base of multi-stage schedules; its receive order is not a lowered action list"
    ),
    "_PipelineScheduleRuntime": (
        "it runs a custom action list (e.g. loaded from CSV) whose receive order pooltk cannot "
        "vouch for"
    ),
}


class ScheduleAnalysisError(ValueError):
    """A schedule whose receive-buffer lifetimes cannot be derived; the message says why.

    Callers that pool buffers catch it to refuse pooling (keep stock buffers) and report
    the reason.
    """


def _pipelining() -> Any:
    try:
        from torch.distributed.pipelining import schedules
    except ImportError as exc:  # pragma: no cover - torch without distributed
        raise ScheduleAnalysisError(
            f"torch.distributed.pipelining could not be imported ({exc}); "
            "required: a torch build with distributed support (2.11-2.15)."
        ) from exc
    return schedules


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogEntry:
    """What pooltk knows of one torch schedule before building it."""

    stages_per_rank: int
    """Stages per rank pooltk runs it with by default (1 for single-stage schedules)."""
    style: Style
    """Its own stage placement: ``"v"`` for the V schedules, else ``"loop"``."""


CATALOG: dict[str, CatalogEntry] = {
    "1F1B": CatalogEntry(stages_per_rank=1, style="loop"),
    "GPipe": CatalogEntry(stages_per_rank=1, style="loop"),
    "Interleaved1F1B": CatalogEntry(stages_per_rank=2, style="loop"),
    "LoopedBFS": CatalogEntry(stages_per_rank=2, style="loop"),
    "InterleavedZeroBubble": CatalogEntry(stages_per_rank=2, style="loop"),
    "ZBVZeroBubble": CatalogEntry(stages_per_rank=2, style="v"),
    "DualPipeV": CatalogEntry(stages_per_rank=2, style="v"),
}
"""The one schedule catalog: every torch schedule pooltk analyses, by torch's name. A V schedule
runs exactly two stages per rank; the interleaved ones any number (2 by default)."""


def schedule_key(schedule: str | type | object | None) -> str | None:
    """The one spelling of a schedule: lower case, the way torch's ``get_schedule_class`` matches
    names.

    A name is stripped and lower-cased, with ``_`` / ``-`` and a leading ``schedule`` dropped
    (``"1F1B"``, ``"Schedule1F1B"``, ``"schedule_1f1b"`` -> ``"1f1b"``; ``"Interleaved1F1B"`` ->
    ``"interleaved1f1b"``). A schedule class or instance gives its class name the same way
    (``ScheduleGPipe`` -> ``"gpipe"``). ``None`` stays ``None``. Every :data:`CATALOG` name has a
    distinct key.
    """
    if schedule is None:
        return None
    if isinstance(schedule, str):
        name = schedule
    else:
        name = (schedule if isinstance(schedule, type) else type(schedule)).__name__
    key = name.strip().lower().replace("_", "").replace("-", "")
    return key.removeprefix("schedule") or key


ALLOWLIST: frozenset[str] = frozenset({schedule_key("1F1B")})
"""Schedule keys pooltk pools by name alone: torch's ``Schedule1F1B``, the one schedule whose
in-flight depth pooltk proves in closed form ([Note: ring sizes] in :mod:`pooltk.pool.ring`). Others
are pooled only from their analysed action order (``schedule="auto"``)."""


def v_schedules() -> frozenset[str]:
    """Names of the schedules that place stages V-style (exactly two stages per rank)."""
    return frozenset(name for name, entry in CATALOG.items() if entry.style == "v")


def _schedule_map() -> dict[str, type]:
    """torch's name -> class table, read through ``get_schedule_class`` (names as torch spells
    them)."""
    s = _pipelining()
    out: dict[str, type] = {}
    for name in CATALOG:
        try:
            out[name] = s.get_schedule_class(name)
        except ValueError:
            continue  # not shipped by this torch
    return out


def analysable_schedules() -> tuple[str, ...]:
    """torch's names of the schedules this torch ships that pooltk can analyse."""
    return tuple(_schedule_map())


def is_single_stage(cls: type) -> bool:
    """True for single-stage schedules (one stage per rank, receives posted from code)."""
    s = _pipelining()
    return issubclass(cls, s.PipelineScheduleSingle)


def resolve_schedule(schedule: str | type) -> tuple[str, type]:
    """Map a torch schedule name (case-insensitive) or class to (canonical name, class).

    Raises:
        ScheduleAnalysisError: unknown names, base classes, custom runtime (CSV) schedules,
            and subclasses that replace the step logic the analysis relies on.
    """
    if isinstance(schedule, str):
        return _resolve_name(schedule)
    if not isinstance(schedule, type):
        raise ScheduleAnalysisError(
            f"schedule: found {schedule!r} ({type(schedule).__name__}); required a torch schedule "
            "name or class."
        )
    for name, cls in _schedule_map().items():
        if schedule is cls:
            return name, cls
    return schedule.__qualname__, _analysable_class(schedule)


def _resolve_name(schedule: str) -> tuple[str, type]:
    """A name torch's ``get_schedule_class`` knows, in any case; a base class's is refused."""
    known = _schedule_map()
    keyed = {schedule_key(k): k for k in known}
    if schedule_key(schedule) in keyed:
        name = keyed[schedule_key(schedule)]
        return name, known[name]
    for base, why in _REFUSED_BASES.items():
        if schedule_key(schedule) == schedule_key(base):
            raise ScheduleAnalysisError(f"schedule {schedule!r} cannot be analysed: {why}.")
    raise ScheduleAnalysisError(
        f"schedule: found {schedule!r}; required one of {', '.join(known)} (case-insensitive). "
        "Fix: pass a schedule name torch's get_schedule_class knows."
    )


def _analysable_class(schedule: type) -> type:
    """``schedule``, a class outside the catalog: a runtime or single-stage subclass that keeps
    torch's step; anything else is refused."""
    s, known, label = _pipelining(), _schedule_map(), schedule.__qualname__
    for base, why in _REFUSED_BASES.items():
        base_cls = getattr(s, base, None)
        if base_cls is not None and schedule is base_cls:
            raise ScheduleAnalysisError(f"schedule {label} cannot be analysed: {why}.")
    runtime = getattr(s, "_PipelineScheduleRuntime", None)
    if runtime is not None and issubclass(schedule, runtime):
        if schedule._step_microbatches is not runtime._step_microbatches:
            raise ScheduleAnalysisError(
                f"schedule {label} overrides _step_microbatches, so its receives need not follow "
                "pipeline_order_with_comms; pooltk refuses to pool it."
            )
        return schedule
    for name, cls in known.items():
        if issubclass(schedule, cls) and is_single_stage(cls):
            if schedule._step_microbatches is not cls._step_microbatches:
                raise ScheduleAnalysisError(
                    f"schedule {label} subclasses {name} but overrides _step_microbatches; "
                    "its receive order is unknown, so pooltk refuses to pool it."
                )
            return schedule
    raise ScheduleAnalysisError(
        f"schedule {label} is not one pooltk can analyse: required one of {', '.join(known)}, "
        "or a _PipelineScheduleRuntime subclass that builds its order in __init__ (not loaded from "
        "CSV)."
    )
