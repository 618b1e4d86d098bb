"""Measured vs modelled: the saving the pool makes in a process's resident memory, per stage.

:func:`pooltk.parity.rss.measure_rss` trains stock and pooled 1F1B pipelines on real gloo
ranks and records each rank's peak resident memory (see [Note: what a rank measures] there).
This module turns those launches into a tidy table (:func:`launches_frame`, one row per
launch and rank; what ``data/validation/memory_measured_<date>.csv`` holds) and compares the
measured saving with the memory model's (:func:`measured_vs_modelled`). It lives beside the
harness that measures (it was ``pooltk.memory.measured``), so ``pooltk.memory`` stays below
``pooltk.parity`` and imports nothing of it; the shipped CSV is still ``pooltk.memory``'s package
data, next to the model's other data.

[Note: measured saving]
For one shape and stage: ``measured_saving = median(stock peak_delta) - median(pooled
peak_delta)`` over the repetitions, where ``peak_delta`` is the rank's final high-water mark
minus its resident memory before the stage was built. Both variants build the same stage,
batch and activations; only the receive buffers differ, so the saving should equal the
model's ``stock - pooled`` receive-buffer bytes of that stage. ``relative_difference`` is
``measured / modelled - 1`` and the goal is ``|relative_difference| <= 5 %``
(:data:`GOAL`). ``counted_saving`` is the same difference over the distinct storages
behind the stage's receive buffers (the allocator-side count), which must equal the model
exactly.

[Note: the claims of a measurement]
``pooltk memory --measure`` calls :func:`check_measurement` on what it measured and writes ``--csv``
only when every claim holds (the comparison is printed either way, the broken claims on stderr, exit
1), so a file it wrote holds them; ``python -m pooltk.parity.measured --check CSV`` re-checks a
written file. Claims: ``covers_the_shapes`` (the shapes asked for, each with stock and pooled
launches of one pooled config, every launch with every stage once), ``peaks_start_at_the_baseline``
(every rank's high-water mark was reset), ``pooled_launches_installed``, ``counted_equals_modelled``
(to the byte, every stage), ``every_stage_within_goal`` and ``last_stage_within_goal``
(``|relative_difference| <= GOAL``; the last stage named apart: it is where the last-stage release
shows).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from pooltk._validate import InputError
from pooltk.config import PoolConfig
from pooltk.memory.model import MemoryModelError, PipelineShape, harness_boundary, model_memory

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from pooltk.parity.rss import RssLaunch, RssSpec

__all__ = [
    "CLAIMS",
    "DEFAULT_SHAPES",
    "GOAL",
    "MEASURED_CSV",
    "RAW_COLUMNS",
    "check_measurable",
    "check_measurement",
    "default_specs",
    "format_comparison",
    "launches_frame",
    "measured_vs_modelled",
    "read_csv",
    "read_measured",
    "refusal",
    "shipped_measurement",
    "write_measured",
]

GOAL = 0.05
"""Largest accepted ``|measured / modelled - 1|`` of the per-stage saving."""

MEASURED_CSV = "memory_measured_2026-12-01.csv"
"""The shipped measurement (package data, a link to ``data/validation/``)."""

DEFAULT_SHAPES: tuple[tuple[int, int], ...] = ((8, 131072), (16, 65536), (32, 32768))
"""``(microbatches, seq_len)`` at pp4, 2 rows, hidden 64, float32: 64, 32 and 16 MiB per set,
so stock holds 1 GiB of receive buffers on each middle stage in all three."""

RAW_COLUMNS: tuple[str, ...] = (
    "shape",
    "pp",
    "microbatches",
    "rows_per_microbatch",
    "seq_len",
    "hidden",
    "layers_per_stage",
    "steps",
    "set_bytes",
    "variant",
    "policy",
    "slack",
    "grad_slack",
    "rep",
    "launch",
    "stage",
    "baseline_rss_bytes",
    "hwm_after_setup_bytes",
    "peak_hwm_bytes",
    "peak_delta_bytes",
    "maxrss_bytes",
    "recv_forward_bytes",
    "recv_grad_bytes",
    "recv_forward_sets",
    "recv_grad_sets",
    "hwm_reset",
    "installed",
    "wall_s",
    "torch",
    "cpus",
)
"""Columns of the raw measurement CSV, one row per launch and rank (see
data/validation/README.md)."""


def default_specs(*, steps: int = 2) -> list[RssSpec]:
    """The three shapes of :data:`DEFAULT_SHAPES` as launch specs."""
    from pooltk.parity.rss import RssSpec

    return [RssSpec(microbatches=m, seq_len=s, steps=steps) for m, s in DEFAULT_SHAPES]


def launches_frame(launches: Sequence[RssLaunch]) -> pd.DataFrame:
    """One row per launch and rank with :data:`RAW_COLUMNS`; ``rep`` counts launches of a shape and
    variant."""
    import pandas as pd
    import torch

    seen: dict[tuple[str, str], int] = {}
    rows = []
    for order, launch in enumerate(launches):
        s, cfg = launch.spec, launch.config
        rep = seen[(s.label(), launch.variant)] = seen.get((s.label(), launch.variant), -1) + 1
        for r in launch.ranks:
            rows.append(
                {
                    "shape": s.label(),
                    "pp": s.pp,
                    "microbatches": s.microbatches,
                    "rows_per_microbatch": s.rows_per_microbatch,
                    "seq_len": s.seq_len,
                    "hidden": s.hidden,
                    "layers_per_stage": s.layers_per_stage,
                    "steps": s.steps,
                    "set_bytes": s.boundary_bytes,
                    "variant": launch.variant,
                    "policy": getattr(cfg, "policy", "tight") if cfg else "",  # a PoolConfig: tight
                    "slack": cfg.slack if cfg else "",
                    "grad_slack": cfg.grad_slack if cfg else "",
                    "rep": rep,
                    "launch": order,
                    "stage": r.rank,
                    "baseline_rss_bytes": r.baseline_rss,
                    "hwm_after_setup_bytes": r.hwm_after_setup,
                    "peak_hwm_bytes": r.hwm_by_step[-1],
                    "peak_delta_bytes": r.peak_delta,
                    "maxrss_bytes": r.maxrss_by_step[-1],
                    "recv_forward_bytes": r.recv["forward"]["bytes"],
                    "recv_grad_bytes": r.recv["grad"]["bytes"],
                    "recv_forward_sets": r.recv["forward"]["sets"],
                    "recv_grad_sets": r.recv["grad"]["sets"],
                    "hwm_reset": r.hwm_reset,
                    "installed": "" if r.installed is None else r.installed,
                    "wall_s": round(launch.wall_s, 2),
                    "torch": torch.__version__,
                    "cpus": os.cpu_count(),
                }
            )
    return pd.DataFrame.from_records(rows, columns=list(RAW_COLUMNS))


def write_measured(frame: pd.DataFrame, path: Any) -> None:
    """Write the raw table as CSV."""
    frame.to_csv(path, index=False)


def read_csv(source: Any, *, what: str, required: str, error: type[InputError]) -> pd.DataFrame:
    """``source`` (a path or file object) read as CSV, else ``error`` saying why not: no such file,
    a folder, unreadable, empty, not text or not CSV (never pandas' or the OS's traceback)."""
    import pandas as pd

    try:
        return pd.read_csv(source)
    except FileNotFoundError:
        why = "no such file"
    except IsADirectoryError:
        why = "a folder"
    except OSError as exc:
        why = f"unreadable ({exc.strerror or exc})"
    except pd.errors.EmptyDataError:
        why = "empty"
    except UnicodeDecodeError:
        why = "not UTF-8 text"
    except pd.errors.ParserError as exc:
        why = f"not a CSV ({str(exc).strip()})"
    raise error(
        what, found=f"{source}: {why}", required=required, fix="give the path of such a file."
    )


def read_measured(source: Any) -> pd.DataFrame:
    """The raw table from a CSV path or file object; a clear error when columns are missing."""
    frame = read_csv(
        source,
        what="measurement CSV",
        required="a CSV written by `pooltk memory --measure --csv PATH`",
        error=MemoryModelError,
    )
    missing = [c for c in RAW_COLUMNS if c not in frame.columns]
    if missing:
        raise MemoryModelError(
            "measurement CSV",
            found=f"no column(s) {', '.join(missing)}",
            required=f"the columns {', '.join(RAW_COLUMNS)}",
            fix="write it with `pooltk memory --measure --csv PATH`.",
        )
    return frame


def shipped_measurement() -> pd.DataFrame:
    """The measurement shipped with pooltk (:data:`MEASURED_CSV`), read as package data."""
    text = (
        resources.files("pooltk.memory").joinpath("data", MEASURED_CSV).read_text(encoding="utf-8")
    )
    return read_measured(io.StringIO(text))


def _config_of(rows: pd.DataFrame) -> tuple[PoolConfig, str]:
    """The pooled launches' config and ring policy (the memory model's inputs)."""
    pooled = rows[rows.variant == "pooled"]
    if pooled.empty:
        raise MemoryModelError(
            "measurement",
            found=f"no pooled launch for shape {rows.shape.iloc[0]!r}",
            required="stock and pooled launches of every shape",
            fix="rerun `pooltk memory --measure`.",
        )
    first = pooled.iloc[0]
    return PoolConfig(slack=int(first.slack), grad_slack=int(first.grad_slack)), str(first.policy)


def _model(
    pp: int,
    microbatches: int,
    rows: int,
    seq_len: int,
    hidden: int,
    config: PoolConfig,
    policy: str,
) -> Any:
    """The memory model of one measured shape: the harness's float32 boundary each way."""
    shape = PipelineShape(pp=pp, n_microbatches=microbatches)
    boundary = harness_boundary(rows=rows, seq_len=seq_len, hidden=hidden)
    return model_memory(shape, boundary, config, policy=policy)


def check_measurable(spec: RssSpec, config: PoolConfig) -> None:
    """Refuse, before any launch, a shape whose saving resident memory cannot show: a buffer set
    under glibc's mmap threshold stays in the heap when freed ([Note: what a rank measures] in
    :mod:`pooltk.parity.rss`), and a stage the model saves nothing on has no ratio to judge."""
    where = spec.label()
    if spec.boundary_bytes < spec.mmap_threshold:
        raise MemoryModelError(
            "measured shape",
            found=f"{where}: buffer sets of {spec.boundary_bytes:,} bytes, under glibc's mmap "
            f"threshold of {spec.mmap_threshold:,}",
            required="sets of at least the threshold (smaller ones stay in the heap when freed, "
            "so resident memory does not show the saving)",
            fix="raise --seq-len, --hidden or --micro-batch (the shipped shapes' sets are 32 MiB).",
        )
    dims = (spec.pp, spec.microbatches, spec.rows_per_microbatch, spec.seq_len, spec.hidden)
    model = _model(*dims, config, "tight")
    idle = [stage for stage in range(spec.pp) if model.saved_bytes(stage, "pooled") <= 0]
    if idle:
        raise MemoryModelError(
            "measured shape",
            found=f"{where}: the model saves nothing on stage(s) "
            f"{', '.join(map(str, idle))} (their rings hold every microbatch)",
            required="a modelled saving on every stage, to compare the measured one with",
            fix="raise --microbatches (16 in the shipped shapes), or lower --slack / --grad-slack.",
        )


def measured_vs_modelled(raw: pd.DataFrame, *, goal: float = GOAL) -> pd.DataFrame:
    """Per shape and stage: modelled, counted and measured saving; see [Note: measured saving].

    Columns: ``shape``, ``stage``, ``reps`` (pairs), ``modelled_stock_mib``,
    ``modelled_pooled_mib``, ``modelled_saving_mib``, ``counted_saving_mib``,
    ``measured_stock_peak_mib``, ``measured_pooled_peak_mib`` (medians of ``peak_delta``),
    ``measured_saving_mib``, ``saving_min_mib`` / ``saving_max_mib`` (over pairs of the same
    repetition), ``relative_difference``, ``within_goal``.
    """
    import pandas as pd

    records = []
    for shape_label, rows in raw.groupby("shape", sort=False):
        first = rows.iloc[0]
        config, policy = _config_of(rows)
        dims = (
            first.pp,
            first.microbatches,
            first.rows_per_microbatch,
            first.seq_len,
            first.hidden,
        )
        model = _model(*map(int, dims), config, policy)
        for key, stage_rows in rows.groupby("stage"):
            records.append(_stage_record(shape_label, int(key), stage_rows, model, goal))
    return pd.DataFrame.from_records(records)


def _stage_record(shape: str, stage: int, rows: pd.DataFrame, model: Any, goal: float) -> dict:
    """One stage's row of :func:`measured_vs_modelled`: medians over its repetitions."""
    by = {v: rows[rows.variant == v].set_index("rep") for v in ("stock", "pooled")}
    stock_med = float(by["stock"].peak_delta_bytes.median())
    pooled_med = float(by["pooled"].peak_delta_bytes.median())
    pairs = (by["stock"].peak_delta_bytes - by["pooled"].peak_delta_bytes).dropna()
    counted = {v: float((by[v].recv_forward_bytes + by[v].recv_grad_bytes).median()) for v in by}
    modelled = model.saved_bytes(stage, "pooled")
    measured = stock_med - pooled_med
    rel = measured / modelled - 1 if modelled else float("nan")
    return {
        "shape": shape,
        "stage": stage,
        "reps": int(len(pairs)),
        "modelled_stock_mib": model.stage_bytes(stage, "stock") / 2**20,
        "modelled_pooled_mib": model.stage_bytes(stage, "pooled") / 2**20,
        "modelled_saving_mib": modelled / 2**20,
        "counted_saving_mib": (counted["stock"] - counted["pooled"]) / 2**20,
        "measured_stock_peak_mib": stock_med / 2**20,
        "measured_pooled_peak_mib": pooled_med / 2**20,
        "measured_saving_mib": measured / 2**20,
        "saving_min_mib": float(pairs.min()) / 2**20 if len(pairs) else float("nan"),
        "saving_max_mib": float(pairs.max()) / 2**20 if len(pairs) else float("nan"),
        "relative_difference": rel,
        "within_goal": bool(abs(rel) <= goal),
    }


CLAIMS: dict[str, str] = {
    "covers_the_shapes": "the shapes asked for, each with stock and pooled launches (one pooled "
    "config), every launch with stages 0 .. pp - 1 once",
    "peaks_start_at_the_baseline": "hwm_reset True on every rank (the high-water mark reset after "
    "the baseline)",
    "pooled_launches_installed": "installed True on every rank of a pooled launch",
    "counted_equals_modelled": "counted saving = modelled saving, to the byte, on every stage",
    "every_stage_within_goal": f"|measured / modelled - 1| <= {GOAL:.0%} (GOAL) on every stage "
    "before the last",
    "last_stage_within_goal": f"|measured / modelled - 1| <= {GOAL:.0%} (GOAL) on the last stage "
    "of every shape",
}
"""Claim name -> what it requires. See [Note: the claims of a measurement]."""


def is_true(value: Any) -> bool:
    # a frame holds bools, a CSV read back the text, stock's `installed` empty
    return str(value) == "True"


def claim_lines(claims: dict[str, str], found: dict[str, list[str]]) -> list[str]:
    """One line per broken claim, in ``claims``' order:
    ``name: found ... (and N more); required ...``."""
    out = []
    for name, required in claims.items():
        if found.get(name):
            more = f" (and {len(found[name]) - 1} more)" if len(found[name]) > 1 else ""
            out.append(f"{name}: found {found[name][0]}{more}; required {required}")
    return out


def _coverage(raw: pd.DataFrame, shapes: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """What breaks ``covers_the_shapes``, and the shapes complete enough to compare with the
    model."""
    found, comparable = [], []
    held = list(dict.fromkeys(raw["shape"]))
    if not held:
        found.append("no rows")
    if shapes is not None:
        found += [f"shape {s!r} missing" for s in shapes if s not in held]
        found += [f"shape {s!r} not asked for" for s in held if s not in shapes]
    for shape in held:
        rows = raw[raw["shape"] == shape]
        variants = set(rows["variant"])
        if variants != {"stock", "pooled"}:
            found.append(f"{shape}: variants {sorted(variants)}")
            continue
        configs = {
            tuple(map(str, c))
            for c in rows[rows.variant == "pooled"][["policy", "slack", "grad_slack"]].values
        }
        if len(configs) > 1:
            found.append(f"{shape}: pooled configs {sorted(configs)}")
        want = list(range(int(rows["pp"].iloc[0])))
        bad = [
            int(launch) for launch, part in rows.groupby("launch") if sorted(part["stage"]) != want
        ]
        if bad:
            found.append(f"{shape}: launch(es) {bad} without stages {want} once each")
        if len(configs) == 1 and not bad:
            comparable.append(shape)
    return found, comparable


def check_measurement(
    raw: pd.DataFrame, *, shapes: Sequence[str] | None, goal: float = GOAL
) -> list[str]:
    """The broken claims of a raw measurement, one line each (``name: found ...; required ...``).

    ``shapes``: the shape labels asked for (``RssSpec.label()``); None checks the shapes the table
    holds. See [Note: the claims of a measurement].
    """
    missing = [c for c in RAW_COLUMNS if c not in raw.columns]
    if missing:
        return [
            f"covers_the_shapes: found no column(s) {', '.join(missing)}; required the columns "
            f"{', '.join(RAW_COLUMNS)}"
        ]
    cover, comparable = _coverage(raw, shapes)
    found: dict[str, list[str]] = {name: [] for name in CLAIMS}
    found["covers_the_shapes"] = cover
    found["peaks_start_at_the_baseline"] = [
        f"{r.shape} launch {r.launch} stage {r.stage}: hwm_reset {r.hwm_reset}"
        for r in raw.itertuples()
        if not is_true(r.hwm_reset)
    ]
    found["pooled_launches_installed"] = [
        f"{r.shape} launch {r.launch} stage {r.stage}: installed {r.installed}"
        for r in raw.itertuples()
        if r.variant == "pooled" and not is_true(r.installed)
    ]
    if comparable:
        table = measured_vs_modelled(raw[raw["shape"].isin(comparable)], goal=goal)
        last = table.groupby("shape", sort=False)["stage"].transform("max")
        for r, is_last in zip(table.itertuples(), table["stage"] == last):
            where = f"{r.shape} stage {r.stage}"
            if r.counted_saving_mib != r.modelled_saving_mib:
                found["counted_equals_modelled"].append(
                    f"{where}: counted {r.counted_saving_mib:.4f} MiB, modelled "
                    f"{r.modelled_saving_mib:.4f}"
                )
            if not abs(r.relative_difference) <= goal:
                found["last_stage_within_goal" if is_last else "every_stage_within_goal"].append(
                    f"{where}: measured {r.measured_saving_mib:.1f} MiB of "
                    f"{r.modelled_saving_mib:.1f} modelled ({r.relative_difference:+.2%}, goal "
                    f"{goal:.0%})"
                )
    return claim_lines(CLAIMS, found)


def refusal(broken: Sequence[str], *, what: str, unwritten: Any = None) -> str:
    """The error a writer prints when ``broken`` claims keep it from writing ``unwritten``."""
    tail = f"; nothing written to {unwritten}" if unwritten else ""
    return "\n".join(
        [
            f"{what} breaks {len(broken)} claim(s){tail}:",
            *(f"  {b}" for b in broken),
            "Fix: find the cause in the stages named ([Note: the claims of a measurement] in "
            "pooltk/parity/measured.py); a record holds every claim.",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m pooltk.parity.measured --check CSV``: check a written measurement; 0 holds, 1
    breaks, 2 unreadable."""
    import argparse
    import sys

    p = argparse.ArgumentParser(prog="python -m pooltk.parity.measured", description=main.__doc__)
    p.add_argument(
        "--check",
        metavar="CSV",
        required=True,
        help="a CSV written by pooltk memory --measure --csv",
    )
    p.add_argument(
        "--any-shapes",
        action="store_true",
        help="check the shapes the file holds (default: it must "
        "hold the three of DEFAULT_SHAPES, as pooltk memory --measure measures them)",
    )
    a = p.parse_args(argv)
    try:
        raw = read_measured(a.check)
    except MemoryModelError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    shapes = None if a.any_shapes else [s.label() for s in default_specs()]
    broken = check_measurement(raw, shapes=shapes)
    if broken:
        print(
            f"{p.prog}: error: " + refusal(broken, what=f"{a.check} ({len(raw)} rows)"),
            file=sys.stderr,
        )
        return 1
    print(f"{a.check}: {len(raw)} rows hold every claim")
    return 0


def format_comparison(table: pd.DataFrame) -> str:
    """The comparison as the text table ``pooltk memory --measure`` prints (MiB = 2**20 bytes)."""
    lines = [
        f"{'shape':44} {'stage':>5} {'modelled':>9} {'counted':>9} {'measured':>9} "
        f"{'min..max':>15} {'diff':>7}  goal"
    ]
    for r in table.itertuples():
        lines.append(
            f"{r.shape:44} {r.stage:>5} {r.modelled_saving_mib:9.1f} {r.counted_saving_mib:9.1f} "
            f"{r.measured_saving_mib:9.1f} {f'{r.saving_min_mib:.1f}..{r.saving_max_mib:.1f}':>15} "
            f"{r.relative_difference:+7.2%}  {'within 5%' if r.within_goal else 'MISSED'}"
        )
    lines.append(
        "saving per stage in MiB (2**20 B): modelled = model stock - pooled receive buffers; "
        "counted = distinct receive storages; measured = median stock - median pooled peak "
        "resident growth (VmHWM - VmRSS before setup)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
