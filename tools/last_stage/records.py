"""One record per (model, M, variant, stage, direction) of a pp2 1F1B launch: re-homes and storages.

[Note: what a record counts]
Every figure comes from the launch's own report (:class:`pooltk.parity.launch.ParityReport`):

- ``storages`` / ``storage_bytes``: distinct storages behind the stage's receive buffers at the end
  of the run (:func:`pooltk.parity.worker.measure_recv_storage`): the ring's slots, or stock's M;
- ``rehomes`` / ``rehomed_bytes``: copy-on-conflict events of the run (all steps), from the install
  report's ``re-homed`` events; each allocated a fresh storage for a slot someone else still held;
- ``counted_bytes`` = ``storage_bytes + rehomed_bytes``: every receive storage the run allocated
  (the re-homed storages lived on beside the ring as long as their holders did);
- ``ring_sets``: the ring's size in that direction (pooled), ``peak_live``: the most slots the
  guard saw owned at once;
- ``bitwise_equal``: the pooled variant's parameters, per-microbatch losses and merged outputs equal
  to stock bit for bit over every step (empty for stock, the reference).

Stock and every pooled variant of one (model, M) run in the same launch, so "before" (release off)
and "after" (release on) come from one code version and one process group.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.config import PoolConfig
from pooltk.parity.experiments import Harness
from pooltk.parity.spec import ParitySpec, Variant

__all__ = [
    "FIELDS",
    "MODELS",
    "Record",
    "code_version",
    "measure",
    "read_csv",
    "variants",
    "write_csv",
]

REPO = Path(__file__).resolve().parents[2]

MODELS: dict[str, str | None] = {
    "parity": None,
    "linear3d": "tools.last_stage.prelude_linear3d",
    "linear2d": "tools.last_stage.prelude_linear2d",
}
"""Model name -> the prelude module that builds its last stage (None: the parity model as
shipped)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Record:
    """One stage and direction of one variant of one launch. See [Note: what a record counts]."""

    model: str
    """``parity`` (the harness's ToyModel), ``linear3d`` or ``linear2d``
    (:mod:`tools.last_stage.heads`)."""
    pp: int
    """Stages (= ranks)."""
    schedule: str
    """torch schedule name."""
    microbatches: int
    """M."""
    steps: int
    """Optimizer steps of the launch."""
    variant: str
    """``stock`` or ``pooled``."""
    policy: str
    """Ring policy of a pooled variant (empty for stock)."""
    slack: int | None
    """Forward slack of a pooled variant (None for stock)."""
    release: bool | None
    """``PoolConfig.release`` of a pooled variant (None for stock)."""
    stage: int
    """Stage index (the last is ``pp - 1``)."""
    direction: str
    """``forward`` or ``grad`` (only directions the stage receives in)."""
    rehomes: int
    """Copy-on-conflict re-homes over the whole run."""
    rehomed_bytes: int
    """Bytes those re-homes allocated."""
    ring_sets: int | None
    """Ring size in this direction (None for stock)."""
    storages: int
    """Distinct storages behind the receive buffers at the end of the run."""
    storage_bytes: int
    """Their bytes."""
    counted_bytes: int
    """``storage_bytes + rehomed_bytes``: every receive storage the run allocated."""
    peak_live: int | None
    """Most slots the guard saw owned at once (None for stock)."""
    bitwise_equal: bool | None
    """Pooled: params, losses and outputs bitwise equal to stock over every step (None for
    stock)."""
    hidden: int
    seq_len: int
    rows_per_microbatch: int
    set_bytes: int
    """Bytes of one boundary tensor (one receive-buffer set)."""
    torch: str
    """torch version of the run."""
    code: str
    """pooltk code the run used: the git commit (``+dirty`` when ``pooltk/`` or
    ``tools/last_stage/`` differ from it), or ``POOLTK_CODE_VERSION`` where set (a run from an
    exported tree)."""


FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Record))


def code_version() -> str:
    """``POOLTK_CODE_VERSION`` if set, else the repository's short commit (``+dirty`` if the
    measured code differs)."""
    import subprocess

    given = os.environ.get("POOLTK_CODE_VERSION")
    if given:
        return given
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(REPO), "status", "--porcelain", "--", "pooltk", "tools/last_stage"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def variants(slacks: Sequence[int], *, schedule: str = "1F1B") -> tuple[Variant, ...]:
    """Stock, then for each slack the tight policy with the release on and off (names carry
    both)."""
    out = [Variant(name="stock", schedule=schedule)]
    for slack in slacks:
        for release in (True, False):
            out.append(
                Variant(
                    name=f"tight-s{slack}-{'release' if release else 'norelease'}",
                    schedule=schedule,
                    pooled=True,
                    config=PoolConfig(slack=slack, release=release),
                )
            )
    return tuple(out)


def _with_repo_on_path() -> dict[str, str | None]:
    """Put the repository on the ranks' PYTHONPATH (the preludes live in ``tools``); returns what to
    restore."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([old] if old else []))
    return {"PYTHONPATH": old}


def _restore(env: dict[str, str | None]) -> None:
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def measure(
    model: str,
    microbatches: int,
    *,
    slacks: Sequence[int] = (0, 2),
    steps: int = 3,
    pp: int = 2,
    hidden: int = 64,
    seq_len: int = 8,
    rows_per_microbatch: int = 2,
    timeout_s: float = 300.0,
) -> list[Record]:
    """One launch of ``model`` at ``microbatches``: stock and every pooled variant, one record per
    stage and direction."""
    import torch

    from pooltk.parity import run_parity

    if model not in MODELS:
        raise ValueError(
            f"tools.last_stage: model found {model!r}; required one of {sorted(MODELS)}."
        )
    spec = ParitySpec(
        pp=pp,
        microbatches=microbatches,
        steps=steps,
        hidden=hidden,
        seq_len=seq_len,
        rows_per_microbatch=rows_per_microbatch,
        layers_per_stage=1,
        variants=variants(slacks),
        timeout_s=timeout_s,
    )
    env = _with_repo_on_path()
    try:
        report = run_parity(spec, prelude=MODELS[model])
    finally:
        _restore(env)
    return list(
        records_of(report, model=model, torch_version=torch.__version__, code=code_version())
    )


def records_of(report: Any, *, model: str, torch_version: str, code: str) -> Iterable[Record]:
    """The records of a :class:`~pooltk.parity.launch.ParityReport` (see
    [Note: what a record counts])."""
    spec = report.spec
    by_name = {v.name: v for v in spec.variants}
    for res in report.variants:
        v = by_name[res.name]
        cfg: Harness | None = v.config  # a Variant takes the PoolConfig of variants() as a Harness
        for stage in sorted(res.recv):
            for direction in DIRECTIONS:
                m = res.recv[stage][direction]
                if not m["storages"] and not m.get("rehomes"):
                    continue  # the stage receives nothing in this direction
                rehomed = int(m.get("rehomed_bytes", 0))
                yield Record(
                    model=model,
                    pp=spec.pp,
                    schedule=v.schedule,
                    microbatches=spec.microbatches,
                    steps=spec.steps,
                    variant="pooled" if v.pooled else "stock",
                    policy=cfg.policy if cfg else "",
                    slack=cfg.slack if cfg else None,
                    release=cfg.release if cfg else None,
                    stage=stage,
                    direction=direction,
                    rehomes=int(m.get("rehomes", 0)),
                    rehomed_bytes=rehomed,
                    ring_sets=res.rings.get(stage, {}).get(direction) if v.pooled else None,
                    storages=int(m["storages"]),
                    storage_bytes=int(m.get("ring_bytes", m["bytes"])),
                    counted_bytes=int(m["bytes"]) + rehomed,
                    peak_live=res.peak_live.get(stage, {}).get(direction) if v.pooled else None,
                    bitwise_equal=res.bitwise_equal,
                    hidden=spec.hidden,
                    seq_len=spec.seq_len,
                    rows_per_microbatch=spec.rows_per_microbatch,
                    set_bytes=report.boundary_bytes,
                    torch=torch_version,
                    code=code,
                )


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def write_csv(records: Iterable[Record], path: str | Path) -> None:
    """Write ``records`` (``None`` as an empty cell, booleans as ``True`` / ``False``)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        for r in records:
            w.writerow([_cell(getattr(r, k)) for k in FIELDS])


_INT = {
    "pp",
    "microbatches",
    "steps",
    "slack",
    "stage",
    "rehomes",
    "rehomed_bytes",
    "ring_sets",
    "storages",
    "storage_bytes",
    "counted_bytes",
    "peak_live",
    "hidden",
    "seq_len",
    "rows_per_microbatch",
    "set_bytes",
}
_BOOL = {"release", "bitwise_equal"}


def _parse(key: str, text: str) -> Any:
    if text == "":
        return None
    if key in _INT:
        try:
            return int(text)
        except ValueError:
            raise ValueError(
                f"tools.last_stage: column {key} found {text!r}; required a whole number or empty."
            ) from None
    if key in _BOOL:
        if text not in ("True", "False"):
            raise ValueError(
                f"tools.last_stage: column {key} found {text!r}; required True, False or empty."
            )
        return text == "True"
    return text


def read_csv(path: str | Path) -> list[Record]:
    """Records written by :func:`write_csv`; a missing file, a missing or extra column or a bad cell
    is an error naming it."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise ValueError(
            f"tools.last_stage: {path}: found no such file; required a CSV written by "
            "python -m tools.last_stage --csv PATH."
        ) from None
    if rows and set(rows[0]) != set(FIELDS):
        raise ValueError(
            f"tools.last_stage: {path}: columns found {sorted(rows[0])}; "
            f"required {sorted(FIELDS)}. "
            "Fix: regenerate it with python -m tools.last_stage --csv ..."
        )
    return [Record(**{k: _parse(k, row[k]) for k in FIELDS}) for row in rows]
