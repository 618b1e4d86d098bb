"""RunInfo: the facts about a run that turn logged rates into rates per physical GPU.

Facts come from the logs themselves (benchmark setup lines, torchtitan's mesh line, the JSON
summary, a ``World size: N`` line), from a ``*.meta.json`` sidecar next to a log, and from the
user (notebook parameters, CLI flags), in increasing priority. Every fact remembers where it
came from, so a summary can show its inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
import typing
from typing import Any

from pooltk.logs.errors import LogFormatError

__all__ = ["RunInfo", "read_sidecar", "sidecar_paths"]

_ALIASES = {
    "num_stages": "pp",
    "pp_size": "pp",
    "pipeline_parallel": "pp",
    "n_microbatches": "microbatches",
    "num_microbatches": "microbatches",
    "m": "microbatches",
    "world": "world_size",
    "gbs": "global_batch_size",
    "lbs": "local_batch_size",
    "mbs": "micro_batch_size",
    "seq": "seq_len",
    "sequence_length": "seq_len",
    "hidden_size": "hidden",
    "dp_size": "dp",
    "tp_size": "tp",
    "cp_size": "cp",
}


@dataclass(kw_only=True, slots=True, frozen=True)
class RunInfo:
    """What is known about one run's shape and device; ``None`` where unknown."""

    world_size: int | None = None
    """Physical GPUs (ranks) in the job."""
    pp: int | None = None
    """Pipeline-parallel size N."""
    tp: int | None = None
    """Tensor-parallel size."""
    cp: int | None = None
    """Context-parallel size."""
    dp: int | None = None
    """Data-parallel size (Automodel's DP, which EP shards within)."""
    microbatches: int | None = None
    """Microbatches per step per pipeline, M."""
    global_batch_size: int | None = None
    """Rows per optimizer step, whole job."""
    local_batch_size: int | None = None
    """Rows per step per data-parallel rank."""
    micro_batch_size: int | None = None
    """Rows per microbatch."""
    seq_len: int | None = None
    """Tokens per row."""
    grad_acc_steps: int | None = None
    """Gradient-accumulation steps per optimizer step."""
    warmup_steps: int | None = None
    """Throughput warmup the run itself declares (the benchmark recipe's), not LR warmup."""
    hidden: int | None = None
    """Hidden size of the model (for reference)."""
    peak_flops: float | None = None
    """Peak FLOP/s per GPU the framework used for its own MFU."""
    device_name: str | None = None
    """Device name as the log states it."""
    device_capacity_gib: float | None = None
    """Device memory as the framework measured it, GiB (torchtitan's 'CUDA capacity')."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other facts (torch version, host, command, benchmark summary figures)."""
    sources: dict[str, str] = field(default_factory=dict)
    """Where each fact came from: 'file:line', 'sidecar file', 'user'."""

    @classmethod
    def from_facts(
        cls, facts: dict[str, Any], *, source: str, lines: dict[str, int] | None = None
    ) -> RunInfo:
        """Build from a flat dict of facts (reader meta, sidecar JSON, user values)."""
        values: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for raw_key, value in facts.items():
            key = _ALIASES.get(raw_key, raw_key)
            where = f"{source}:{lines[raw_key]}" if lines and lines.get(raw_key) else source
            if key in _FACTS and value is not None:
                values[key] = _cast(key, value, where)
                sources[key] = where
            else:
                extra[raw_key] = value
                sources[raw_key] = where
        mesh = {k[5:]: v for k, v in facts.items() if k.startswith("mesh_")}
        if mesh:
            _from_mesh(mesh, values, sources, source, lines)
        return cls(**values, extra=extra, sources=sources)

    def merged(self, other: RunInfo) -> RunInfo:
        """These facts, overridden by every fact ``other`` knows."""
        updates: dict[str, Any] = {}
        for f in fields(self):
            if f.name in ("extra", "sources"):
                continue
            value = getattr(other, f.name)
            if value is not None:
                updates[f.name] = value
        extra = {**self.extra, **other.extra}
        sources = {**self.sources, **other.sources}
        return replace(self, **updates, extra=extra, sources=sources)

    def derived_world_size(self) -> tuple[int | None, str]:
        """The world size and how it was obtained (stated, or pp x tp x cp x dp)."""
        if self.world_size is not None:
            return self.world_size, f"world_size ({self.sources.get('world_size', 'given')})"
        if self.dp is not None and self.pp is not None:
            ws = self.dp * self.pp * (self.tp or 1) * (self.cp or 1)
            return (
                ws,
                f"dp x pp x tp x cp = {self.dp} x {self.pp} x {self.tp or 1} x {self.cp or 1}",
            )
        return None, "unknown: give world_size (or dp and pp)"

    def to_dict(self) -> dict[str, Any]:
        """Known facts only, plus their sources."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("extra", "sources") or value is None:
                continue
            out[f.name] = value
        out.update({k: v for k, v in self.extra.items() if not isinstance(v, (dict, list))})
        return out


def _cast(key: str, value: Any, where: str) -> Any:
    """``value`` as the type :class:`RunInfo` declares for ``key``."""
    declared = _TYPES[key]
    if declared == int | None:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(
                f"RunInfo.{key}: found {value!r} from {where}; required an integer. "
                "Fix: correct the source."
            )
        number = float(value)
        if not number.is_integer() or number < 0:
            raise ValueError(
                f"RunInfo.{key}: found {value!r} from {where}; required a non-negative integer."
            )
        return int(number)
    if declared == float | None:
        return float(value)
    return value


_TYPES = typing.get_type_hints(RunInfo)
"""Each fact's declared type (resolved: ``from __future__ import annotations`` leaves text)."""
_FACTS = frozenset(_TYPES) - {"extra", "sources"}
"""The facts :meth:`RunInfo.from_facts` sets; the rest go to ``extra``."""


def _from_mesh(
    mesh: dict[str, Any],
    values: dict[str, Any],
    sources: dict[str, str],
    source: str,
    lines: dict[str, int] | None,
) -> None:
    """torchtitan's 'pp=1, dp_replicate=1, dp_shard=8, cp=1, tp=1, ep=1' -> pp, dp, cp, tp,
    world."""
    where = f"{source}:{lines.get('mesh_pp', 0)}" if lines else source
    pp, tp, cp = mesh.get("pp", 1), mesh.get("tp", 1), mesh.get("cp", 1)
    dp = mesh.get("dp_replicate", 1) * mesh.get("dp_shard", 1)
    for key, value in (("pp", pp), ("tp", tp), ("cp", cp), ("dp", dp)):
        values.setdefault(key, value)
        sources.setdefault(key, where)
    # ep shards inside dp_shard x cp in torchtitan, so it does not multiply the world size
    values.setdefault("world_size", pp * tp * cp * dp)
    sources.setdefault("world_size", f"{where} (pp x dp_replicate x dp_shard x cp x tp)")


def sidecar_paths(log_path: Path, run: str) -> list[Path]:
    """Where a ``*.meta.json`` sidecar for ``log_path`` may be: next to it, by file stem or run
    name."""
    name = log_path.name
    for suffix in (".gz", ".jsonl", ".json", ".log", ".txt", ".out"):
        name = name.removesuffix(suffix)
    candidates = [log_path.with_name(f"{name}.meta.json"), log_path.with_name(f"{run}.meta.json")]
    return list(dict.fromkeys(candidates))


def read_sidecar(path: Path) -> RunInfo:
    """A sidecar's facts; a malformed sidecar is a :class:`LogFormatError` naming it."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as err:
        raise LogFormatError(
            str(path),
            err.lineno,
            found=f"invalid JSON ({err.msg})",
            required="a JSON object of run facts",
            fix="rewrite the sidecar (it is written by the command that produced the log)",
        ) from None
    if not isinstance(obj, dict):
        raise LogFormatError(
            str(path),
            1,
            found=f"a JSON {type(obj).__name__}",
            required="a JSON object of run facts",
            fix="rewrite the sidecar as one object",
        )
    try:
        return RunInfo.from_facts(obj, source=f"sidecar {path.name}")
    except ValueError as err:
        raise LogFormatError(
            str(path), 0, found=str(err), required="integer shape facts", fix="correct the sidecar"
        ) from None
