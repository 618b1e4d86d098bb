"""Peak resident memory of stock and pooled pipeline ranks, measured in real processes.

One *launch* runs one variant (stock, or pooled with a :class:`~pooltk.config.PoolConfig`) of
a 1F1B pipeline on ``pp`` fresh gloo ranks on 127.0.0.1; each rank reports its own memory as
the kernel sees it. :func:`measure_rss` runs launches stock, pooled, stock, pooled, ... (ABAB)
so that whatever else loads the machine loads both.

[Note: what a rank measures]
- ``baseline_rss``: ``VmRSS`` (``/proc/self/status``) after torch is imported and the process
  group is up, before any stage exists. Then the high-water mark is reset (``5`` written to
  ``/proc/self/clear_refs``; ``hwm_reset`` says whether the kernel allowed it), so import-time
  transients do not count.
- ``hwm_after_setup``: ``VmHWM`` after step 0 (torch sets a stage up, and allocates its receive
  buffers, inside the first step); ``hwm_by_step``: ``VmHWM`` after every step;
  ``maxrss_by_step``: ``getrusage(RUSAGE_SELF).ru_maxrss`` (bytes) after every step, which is not
  reset and so includes the import.
- ``peak_delta`` = final ``VmHWM`` - ``baseline_rss``: what the stage, its buffers, its batch
  and its activations added to the process at their peak.
- ``recv``: the distinct storages behind the stage's receive buffers
  (:func:`pooltk.parity.measure_recv_storage`), per direction: the allocator-side count. torch
  2.13 has no CPU allocator statistics (``torch.cpu`` offers no ``memory_allocated``), so this
  count is the only allocator figure there is on CPU.
- glibc's ``M_MMAP_THRESHOLD`` is fixed (``RssSpec.mmap_threshold``, 1 MiB) in every rank:
  by default glibc raises the threshold after each large free (up to 32 MiB), after which
  freed activations stay in the heap and the high-water mark measures the allocator's
  retention rather than what is live. Fixed, every tensor of 1 MiB or more is its own mapping
  and goes back to the kernel when freed.
- Only the first rank makes the input batch and only the last rank the target, each from its
  own seeded generator, so the batch costs the same in both variants and nowhere else.

Pages of ``torch.empty`` are not resident until written: a receive buffer counts from the
first message received into it. Every buffer of stock torch is written during each step, so
from step 1 on all ``M`` sets are resident; the peak of a two-step run sees them all.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from pooltk._validate import InputError, check_int, check_number
from pooltk.config import PoolConfig

__all__ = [
    "RankMemory",
    "RssLaunch",
    "RssLaunchError",
    "RssSpec",
    "launch_rss",
    "measure_rss",
    "proc_status",
]

_M_MMAP_THRESHOLD = -3  # glibc mallopt parameter number


@dataclass(kw_only=True, slots=True, frozen=True)
class RssSpec:
    """The pipeline one launch trains: a 1F1B stack of residual blocks, float32, one stage per
    rank."""

    pp: int = 4
    """Stages = ranks."""
    microbatches: int = 16
    """Microbatches per step ``M`` (>= pp under 1F1B)."""
    rows_per_microbatch: int = 2
    """Rows in one microbatch."""
    seq_len: int = 65536
    """Tokens per row; the boundary tensor is ``(rows_per_microbatch, seq_len, hidden)`` float32."""
    hidden: int = 64
    """Hidden size (kept small: the point is many large receive buffers, not compute)."""
    layers_per_stage: int = 1
    """Residual blocks per stage."""
    steps: int = 2
    """Optimizer steps; from step 1 on every stock buffer is resident (see [Note: what a rank
    measures])."""
    seed: int = 0
    """Seed of weights, inputs and targets (the same in every variant)."""
    lr: float = 0.05
    """SGD learning rate."""
    timeout_s: float = 600.0
    """Wall-clock bound of one launch; ranks still running then are killed."""
    mmap_threshold: int = 2**20
    """glibc ``M_MMAP_THRESHOLD`` set in every rank, bytes."""

    def __post_init__(self) -> None:
        fix = "use RssSpec's defaults as a starting point."
        check_int("RssSpec.pp", self.pp, low=2, fix=fix, error=InputError)
        check_int(
            "RssSpec.microbatches",
            self.microbatches,
            low=self.pp,
            fix=f"1F1B needs at least pp = {self.pp} microbatches.",
        )
        for name in ("rows_per_microbatch", "seq_len", "hidden", "layers_per_stage", "steps"):
            check_int(f"RssSpec.{name}", getattr(self, name), low=1, fix=fix)
        check_int(
            "RssSpec.mmap_threshold",
            self.mmap_threshold,
            low=0,
            fix="1 MiB (2**20) is what the notes assume.",
        )
        check_number("RssSpec.timeout_s", self.timeout_s, fix="e.g. 600 seconds.")

    @property
    def boundary_bytes(self) -> int:
        """Bytes of one receive buffer set (one float32 boundary tensor)."""
        return self.rows_per_microbatch * self.seq_len * self.hidden * 4

    @property
    def rows(self) -> int:
        """Rows per step (the batch)."""
        return self.rows_per_microbatch * self.microbatches

    def label(self) -> str:
        """e.g. ``pp4 M16 2x65536x64 fp32 (32 MiB/set)``."""
        return (
            f"pp{self.pp} M{self.microbatches} "
            f"{self.rows_per_microbatch}x{self.seq_len}x{self.hidden} fp32 "
            f"({self.boundary_bytes / 2**20:g} MiB/set)"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True, slots=True)
class RankMemory:
    """One rank of one launch. See [Note: what a rank measures]."""

    rank: int
    """Rank = stage index."""
    baseline_rss: int
    """VmRSS before the stage is built, bytes."""
    hwm_reset: bool
    """Whether the high-water mark could be reset after the baseline."""
    hwm_after_setup: int
    """VmHWM after step 0, bytes."""
    hwm_by_step: list[int]
    """VmHWM after each step, bytes."""
    rss_by_step: list[int]
    """VmRSS after each step, bytes."""
    maxrss_by_step: list[int]
    """ru_maxrss after each step, bytes (not reset: includes the import)."""
    recv: dict[str, dict[str, int]]
    """Receive-buffer storages per direction: ``bytes``, ``sets``, ``storages``."""
    losses: list[list[float]]
    """Last rank only: per step, the per-microbatch losses."""
    grad_sq: list[float]
    """Per step, the sum of squared gradients of this rank's parameters."""
    step_times_s: list[float]
    """Wall time of each step."""
    step_end_unix: list[float]
    """Wall-clock end of each step (Unix seconds)."""
    installed: bool | None
    """Pooled launches: whether ``pooltk.install`` pooled; ``None`` for stock."""

    @property
    def peak_delta(self) -> int:
        """Final VmHWM minus the baseline VmRSS, bytes."""
        return self.hwm_by_step[-1] - self.baseline_rss


@dataclass(kw_only=True, slots=True)
class RssLaunch:
    """One launch: a variant on every rank."""

    spec: RssSpec
    """The pipeline."""
    variant: str
    """``stock`` or ``pooled``."""
    config: PoolConfig | None
    """The pool config of a pooled launch."""
    ranks: list[RankMemory]
    """One record per rank, by rank."""
    wall_s: float
    """Seconds from launch to the last rank's result."""


class RssLaunchError(RuntimeError):
    """A measurement launch failed or ran out of time; the message carries the failing rank's
    output."""


def proc_status() -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` of this process in bytes (empty where ``/proc`` is absent)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _fix_mmap_threshold(n_bytes: int) -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(_M_MMAP_THRESHOLD, n_bytes)
    except (OSError, AttributeError):  # not glibc: leave the allocator as it is
        pass


def rank_body(rank: int, world: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A resident-memory rank's job ([Note: one rank entry]): build a stage, train, measure."""
    spec = RssSpec(**payload["spec"])
    config = PoolConfig(**payload["config"]) if payload["config"] else None
    _fix_mmap_threshold(spec.mmap_threshold)
    import resource

    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    import pooltk
    from pooltk.parity import measure_recv_storage
    from pooltk.parity.models import make_stage_module

    dist.barrier()
    baseline = proc_status().get("VmRSS", 0)
    reset = _reset_hwm()
    installed = pooltk.install(config).installed if config is not None else None
    module = make_stage_module(
        hidden=spec.hidden, layers_per_stage=spec.layers_per_stage, stage_index=rank, seed=spec.seed
    )
    stage = PipelineStage(module, rank, world, torch.device("cpu"))
    loss_fn = torch.nn.functional.mse_loss
    schedule = Schedule1F1B(stage, n_microbatches=spec.microbatches, loss_fn=loss_fn)
    opt = torch.optim.SGD(list(module.parameters()), lr=spec.lr)
    shape = (spec.rows, spec.seq_len, spec.hidden)
    series = "hwm_by_step rss_by_step maxrss_by_step losses grad_sq step_times_s step_end_unix"
    rec: dict[str, Any] = {k: [] for k in series.split()}
    for step in range(spec.steps):
        opt.zero_grad(set_to_none=True)
        seed = spec.seed * 7919 + 2 * step  # the input's; the target's is the next
        losses: list[torch.Tensor] = []
        args = (_randn(shape, seed),) if stage.is_first else ()
        # the target outlives the step, until the next one's is made: as the measurements were taken
        target = _randn(shape, seed + 1) if stage.is_last else None
        kwargs = {"target": target, "losses": losses} if stage.is_last else {}
        t0 = time.perf_counter()
        schedule.step(*args, **kwargs)
        rec["step_times_s"].append(time.perf_counter() - t0)
        rec["step_end_unix"].append(time.time())
        status = proc_status()
        rec["hwm_by_step"].append(status.get("VmHWM", 0))
        rec["rss_by_step"].append(status.get("VmRSS", 0))
        rec["maxrss_by_step"].append(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
        grads = (p.grad for p in module.parameters() if p.grad is not None)
        rec["grad_sq"].append(float(sum((g.double() ** 2).sum() for g in grads)))
        opt.step()
        if stage.is_last:
            rec["losses"].append([float(v.detach()) for v in losses])
        del args, kwargs, losses
    rec.update(
        rank=rank,
        baseline_rss=baseline,
        hwm_reset=reset,
        hwm_after_setup=rec["hwm_by_step"][0],
        recv=measure_recv_storage(stage),
        installed=installed,
    )
    dist.barrier()
    if config is not None:
        pooltk.uninstall()
    return rec


def _randn(shape: tuple[int, ...], seed: int) -> Any:
    import torch

    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def launch_rss(
    spec: RssSpec, config: PoolConfig | None = None, *, grace_s: float = 3.0
) -> RssLaunch:
    """One launch of ``spec`` on ``spec.pp`` fresh processes: stock when ``config`` is None, else
    pooled.

    Ranks are separate interpreters (each imports torch itself, so no rank inherits another
    variant's memory) started through the one rank entry ([Note: one rank entry]); on failure
    or past ``spec.timeout_s`` every rank is killed.
    """
    from pooltk.parity.rank import launch_ranks

    t0 = time.perf_counter()
    payload = {"spec": spec.to_dict(), "config": config.to_dict() if config else None}
    ranks = launch_ranks(
        "rss", payload, world=spec.pp, timeout_s=spec.timeout_s, grace_s=grace_s, fork=False
    )
    if ranks.missing:
        cause = ranks.cause()
        bad = cause["rank"] if cause is not None else ranks.missing[0]
        text = cause["traceback"][-3000:] if cause is not None else ranks.tails[bad][-3000:]
        why = f"ran past timeout_s={spec.timeout_s:g}s" if ranks.launch.timed_out else "failed"
        raise RssLaunchError(
            f"memory launch {spec.label()} ({'pooled' if config else 'stock'}) {why}; "
            f"ranks {ranks.missing} wrote no result; rank {bad} printed:\n{text}"
        )
    return RssLaunch(
        spec=spec,
        variant="pooled" if config else "stock",
        config=config,
        ranks=[RankMemory(**{k: r[k] for k in RankMemory.__slots__}) for r in ranks.results],
        wall_s=time.perf_counter() - t0,
    )


def measure_rss(
    specs: list[RssSpec] | tuple[RssSpec, ...],
    config: PoolConfig | None = None,
    *,
    reps: int = 2,
    progress: Any = None,
) -> list[RssLaunch]:
    """For each spec, ``reps`` x (stock launch, pooled launch), interleaved ABAB. Returns every
    launch in order."""
    check_int("reps", reps, low=1, fix="give the number of stock/pooled pairs per shape, e.g. 2.")
    config = config or PoolConfig()
    launches = []
    for spec in specs:
        for rep in range(reps):
            for cfg in (None, config):
                if progress:
                    progress(
                        f"{spec.label()}: rep {rep + 1}/{reps}, {'pooled' if cfg else 'stock'}"
                    )
                launches.append(launch_rss(spec, cfg))
    return launches
