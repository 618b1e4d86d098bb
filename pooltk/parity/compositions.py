"""The pool in the compositions real stacks use, on gloo ranks: same bits, and the storages it
holds.

[Note: composition verdicts]
A composition is one way real training code wraps or feeds a pipeline stage (DDP or FSDP2 per stage
module, ``torch.compile``, autocast, ``checkpoint_wrapper``, gradient accumulation, frozen weights,
integer and boolean tensors passed on from stage to stage, a kernel launcher that reads its input's
address). Each runs three times in one launch, on fresh stages built from the same seeds: ``fresh``
(a new buffer per receive, torch 2.15's semantics), ``stock`` and ``pooled`` (``pooltk.install()``
with the default config). A case holds when, on every rank:

1. *bits*: pooled's final parameters, per-step losses and merged outputs are bitwise equal to
   stock's (or to fresh's where stock's own numbers depend on its buffer reuse: ``explained``);
2. *storages*: the receive storages a stage holds at once and the storages it ever received into,
   counted outside pooltk ([Note: counting receive storages] in recv_counter.py) over every step,
   are at most ``tensors per set x (live set + slack)`` per direction: the ring's own size, taken
   from :mod:`pooltk.analysis` (per rank for a rank-shared ring). A pool that re-homes on an
   ordinary pattern fails here even when its bits are right;
3. *no re-homes* where nothing holds a received tensor past its use (``expect_rehomes=False``).

One case has a real holder: in a forward-only step torch waits for every forward send only at the
step's end, so a tensor passed on unchanged is held by its send until then and its slot must be
re-homed ([Note: finished sends] in pooltk/pool/ring.py). It is judged against what torch's fresh
semantics hold there (``judged == "fresh"``).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pooltk._validate import InputError, check_output, write_output

__all__ = ["CASES", "Composition", "CompositionRow", "run_compositions", "rows_frame"]

FEATURES = ("passon", "launcher")
"""Stage-model features: ``passon`` (int64 positions and a bool mask made by the first stage and
passed on unchanged by every stage, used by each), ``launcher`` (the first op reads its input's
``data_ptr()`` in forward and backward, as a Triton launcher does)."""

WRAPS = ("ddp", "fsdp2", "compile:aot_eager", "compile:inductor", "checkpoint")
"""How each stage module is wrapped (at most one)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Composition:
    """One composition (see [Note: composition verdicts])."""

    name: str
    """Label in the record."""
    pp: int
    """Pipeline ranks."""
    dp: int = 1
    """Data-parallel ranks per stage (DDP / FSDP2 groups); the world is ``pp * dp``."""
    schedule: str = "1F1B"
    """torch schedule name (``get_schedule_class``)."""
    stages_per_rank: int = 1
    microbatches: int = 8
    steps: int = 2
    """Schedule steps (each counted; with ``accumulate`` 2, one optimizer step per two)."""
    features: tuple[str, ...] = ()
    """From :data:`FEATURES`."""
    wrap: str | None = None
    """From :data:`WRAPS`."""
    autocast: bool = False
    """Each stage's forward under ``torch.autocast("cpu", dtype=torch.bfloat16)``."""
    frozen: bool = False
    """LoRA-style: every stage's base weights frozen, a trainable low-rank adapter beside them."""
    accumulate: int = 1
    """Schedule steps per optimizer step (gradients accumulate in between)."""
    eval_between: bool = False
    """``schedule.eval`` after every training step (train/eval/train)."""
    eval_only: bool = False
    """Every step is ``schedule.eval`` (an inference or validation job)."""
    eval_mode: str = "grad"
    """How each ``schedule.eval`` runs: ``grad`` (autograd on, as a plain validation loop) or
    ``inference`` (under ``torch.inference_mode()``)."""
    expect_rehomes: bool = False
    """True only where a model really holds a received tensor past its use."""

    @property
    def world(self) -> int:
        return self.pp * self.dp

    @property
    def install_schedule(self) -> str:
        """1F1B is allowlisted; every other schedule is pooled by ``schedule="auto"``."""
        return "1f1b" if self.schedule == "1F1B" else "auto"


AUTO_SCHEDULES: tuple[tuple[str, int], ...] = (
    ("GPipe", 1),
    ("Interleaved1F1B", 2),
    ("LoopedBFS", 2),
    ("InterleavedZeroBubble", 2),
)
"""(schedule, stages per rank) of the torch schedules ``schedule="auto"`` pools, beside 1F1B."""

FORWARD_ONLY: tuple[Composition, ...] = tuple(
    Composition(
        name=f"{kind}-{mode}-{name.lower()}-pp4",
        pp=4,
        schedule=name,
        stages_per_rank=spr,
        eval_only=kind == "eval",
        eval_between=kind == "train-eval",
        eval_mode=mode,
    )
    for name, spr in (("1F1B", 1), *AUTO_SCHEDULES)
    for kind, mode in (("eval", "grad"), ("eval", "inference"), ("train-eval", "grad"))
)
"""Forward-only steps (issue #36) for 1F1B and every schedule ``auto`` pools: eval steps with
autograd on, under ``inference_mode``, and train/eval/train."""

CASES: tuple[Composition, ...] = (
    Composition(name="1f1b-pp2", pp=2),
    Composition(name="1f1b-pp4", pp=4),
    Composition(name="passon-pp4", pp=4, features=("passon",)),
    # M16: slots are used three times a step, past the warm-up send torch keeps ([Note: finished
    # sends]); at M8 that stale send never met its slot again
    Composition(name="passon-pp4-m16", pp=4, microbatches=16, features=("passon",)),
    Composition(name="launcher-pp4", pp=4, features=("launcher",), microbatches=16),
    Composition(name="launcher-passon-pp2", pp=2, features=("launcher", "passon")),
    Composition(name="ddp-pp2-dp2", pp=2, dp=2, wrap="ddp", features=("passon",)),
    Composition(name="fsdp2-pp2-dp2", pp=2, dp=2, wrap="fsdp2"),
    Composition(
        name="compile-aot_eager-pp2", pp=2, wrap="compile:aot_eager", features=("launcher",)
    ),
    Composition(name="compile-inductor-pp2", pp=2, wrap="compile:inductor"),
    Composition(name="autocast-bf16-pp2", pp=2, autocast=True, features=("passon",)),
    Composition(name="checkpoint-pp4", pp=4, wrap="checkpoint"),
    Composition(name="accumulate-pp2", pp=2, steps=4, accumulate=2),
    Composition(name="frozen-lora-pp4", pp=4, frozen=True, features=("passon",)),
    Composition(name="train-eval-train-pp4", pp=4, eval_between=True, features=("launcher",)),
    Composition(
        name="eval-passon-pp4", pp=4, eval_between=True, features=("passon",), expect_rehomes=True
    ),
    Composition(
        name="interleaved-ddp-pp2-dp2",
        pp=2,
        dp=2,
        schedule="Interleaved1F1B",
        stages_per_rank=2,
        wrap="ddp",
        features=("passon",),
    ),
    Composition(
        name="interleaved-fsdp2-pp2-dp2",
        pp=2,
        dp=2,
        schedule="Interleaved1F1B",
        stages_per_rank=2,
        wrap="fsdp2",
    ),
    Composition(
        name="interleaved-launcher-pp4",
        pp=4,
        schedule="Interleaved1F1B",
        stages_per_rank=2,
        features=("launcher", "passon"),
    ),
    *FORWARD_ONLY,
)
"""The compositions of the record (``python -m pooltk.parity.compositions``)."""

VARIANTS = ("fresh", "stock", "pooled")


@dataclass(kw_only=True, slots=True)
class CompositionRow:
    """One stage (or, with ``stage`` None, one rank) of one case: the verdict and the storages."""

    case: str
    rank: int
    stage: int | None
    """None: the rank's row (every stage of the rank together; what a rank-shared ring is judged
    on)."""
    direction: str
    verdict: str
    """``equal``, ``explained`` (pooled == fresh, stock differs), ``different`` or ``error``."""
    tensors: int
    """Tensors one microbatch receives in this direction."""
    judged: str
    """``ring``: ``bound`` is ``tensors x (live set + slack)``, the most storages the ring may hold,
    at once and within any one step, with no re-home; ``fresh`` (a case whose model really holds
    what it received): ``bound`` is what torch's own fresh-buffer semantics held at once."""
    bound: int
    stock_peak: int
    stock_distinct: int
    fresh_peak: int
    pooled_peak: int
    pooled_distinct: int
    rehomes: int
    """Copy-on-conflict re-homes of the pooled run on this stage (from its report)."""
    within_bound: bool
    evidence: str
    """What shows the composition ran as described (wrapper class, compiled graphs, address reads,
    dtypes)."""
    detail: str = ""


# ---------------------------------------------------------------------------------------
# Launch
# ---------------------------------------------------------------------------------------


def run_compositions(
    cases: tuple[Composition, ...] = CASES, *, timeout_s: float = 900.0
) -> list[CompositionRow]:
    """Run ``cases`` (grouped into one launch per world size) and return every row."""
    rows: list[CompositionRow] = []
    by_world: dict[int, list[Composition]] = {}
    for c in cases:
        by_world.setdefault(c.world, []).append(c)
    for world, group in sorted(by_world.items()):
        rows.extend(_launch(tuple(group), world, timeout_s))
    return rows


def _launch(cases: tuple[Composition, ...], world: int, timeout_s: float) -> list[CompositionRow]:
    from pooltk.parity.rank import launch_ranks

    ranks = launch_ranks(
        "compositions",
        [asdict(c) for c in cases],
        world=world,
        timeout_s=timeout_s,
        grace_s=5.0,
        fork=False,
        env={"TORCHINDUCTOR_COMPILE_THREADS": "1"},
    )
    if ranks.missing:
        cause = ranks.cause()
        why = "timed out" if ranks.launch.timed_out else f"exit codes {ranks.launch.codes}"
        if cause is None:
            first = ranks.missing[0]
            raise RuntimeError(
                f"compositions: ranks {ranks.missing} wrote no results ({why}); rank {first} "
                f"printed:\n{ranks.tails[first]}"
            )
        raise RuntimeError(
            f"compositions: {cause['running']} failed on rank {cause['rank']} ({why}): "
            f"{cause['type']}: {cause['message']}\n{cause['traceback'][-4000:]}"
        )
    return [CompositionRow(**row) for rank_rows in ranks.results for row in rank_rows]


def rows_frame(rows: list[CompositionRow]):  # -> pandas.DataFrame
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in rows])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pooltk.parity.compositions",
        description="Run the composition suite on gloo ranks and write its record.",
    )
    p.add_argument("--cases", nargs="*", default=None, help="case names (default: all of CASES)")
    p.add_argument("--csv", type=Path, default=None, help="write the rows here")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per launch")
    args = p.parse_args(argv)
    names = {c.name for c in CASES}
    unknown = sorted(set(args.cases or ()) - names)
    if unknown:
        p.error(f"--cases: found {unknown}; required names from {sorted(names)}")
    try:
        if args.csv is not None:
            check_output("--csv", args.csv)
    except InputError as exc:
        p.error(str(exc))
    cases = tuple(c for c in CASES if args.cases is None or c.name in args.cases)
    t0 = time.perf_counter()
    rows = run_compositions(cases, timeout_s=args.timeout)
    frame = rows_frame(rows)
    with_rank = int(frame["stage"].isna().sum())
    print(frame.to_string(index=False))
    if args.csv is not None:
        try:
            write_output("--csv", args.csv, lambda path: frame.to_csv(path, index=False))
        except InputError as exc:
            print(f"{p.prog}: error: {exc}", file=sys.stderr)
            return 1
    bad = frame[(frame["verdict"].isin(["different", "error"])) | (~frame["within_bound"])]
    print(
        f"\n{len(cases)} cases, {len(frame)} rows ({with_rank} per-rank), {len(bad)} failing; "
        f"{time.perf_counter() - t0:.0f} s"
    )
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
