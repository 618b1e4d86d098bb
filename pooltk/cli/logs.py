"""``pooltk logs PATH...``: read Automodel / torchtitan logs and print one summary row per run.

Each row: format detected, logged steps, the steady window, steady tok/s per physical GPU (with
its basis), MFU with its basis (when a FLOPs basis is given), peak memory and headroom (when a
device capacity is given), and how many lines were skipped. ``--csv FILE`` writes the table,
``--json`` prints summaries and per-file reports as JSON. Unreadable input exits with status 2
and a message naming the file and line.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from typing import Any

from pooltk._validate import InputError, check_output, write_output
from pooltk.cli.errors import check_flag_int, check_flag_positive, fail, flag_of
from pooltk.cli.tables import Column, render

__all__ = ["register", "run"]


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="log files, folders (searched recursively) or .gz files",
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", metavar="FILE", help="write the summary table as CSV to FILE")
    out.add_argument(
        "--json", action="store_true", help="print summaries and per-file reports as JSON"
    )
    parser.add_argument(
        "--format",
        default="auto",
        help="force a format instead of detecting it (see --list-formats)",
    )
    parser.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "python"),
        help="'python' reads every record with the format's Python definition "
        "(slower; for checking)",
    )
    parser.add_argument(
        "--list-formats", action="store_true", help="list the formats read and exit"
    )
    parser.add_argument(
        "--strict", action="store_true", help="fail on the first step line that does not parse"
    )
    _add_run_fact_flags(
        parser.add_argument_group("run facts (override what the logs say; apply to every run)")
    )
    _add_basis_flags(parser.add_argument_group("bases"))


def _add_run_fact_flags(facts: Any) -> None:
    facts.add_argument("--world-size", type=int, help="physical GPUs in the job")
    facts.add_argument("--pp", type=int, help="pipeline-parallel size")
    facts.add_argument("--tp", type=int, help="tensor-parallel size")
    facts.add_argument(
        "--global-batch", type=int, help="global batch size in rows (benchmark logs)"
    )
    facts.add_argument("--seq-len", type=int, help="tokens per row (benchmark logs)")
    facts.add_argument(
        "--warmup-steps",
        type=int,
        help="logged steps to exclude from the steady window (default: the run's own, else 10%%)",
    )


def _add_basis_flags(basis: Any) -> None:
    basis.add_argument(
        "--active-params",
        type=float,
        help="active parameters N for MFU on the 6 x N basis (e.g. 104e9)",
    )
    basis.add_argument(
        "--flops-per-token", type=float, help="FLOPs per token for MFU (instead of --active-params)"
    )
    basis.add_argument(
        "--peak-tflops",
        type=float,
        nargs="+",
        default=[2250.0, 2500.0],
        metavar="TFLOPS",
        help="peak TFLOP/s per GPU; the first is used in the table, all in --json "
        "(default: 2250 2500, GB200)",
    )
    cap = basis.add_mutually_exclusive_group()
    cap.add_argument(
        "--device-capacity-gib", type=float, help="device memory in GiB (2**30 B) for headroom"
    )
    cap.add_argument(
        "--device-capacity-gb", type=float, help="device memory in GB (1e9 B) for headroom"
    )


def _fmt(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def run(args: argparse.Namespace) -> int:
    from pooltk.logs import FORMATS, LogFormatError, read_logs

    if args.list_formats:
        print("\n".join(FORMATS))
        return 0
    if args.format != "auto" and args.format not in FORMATS:
        return fail(
            "logs",
            f"--format: found {args.format!r}; required 'auto' or one of {', '.join(FORMATS)}.",
        )
    try:
        bases = _bases(args)
        csv_path = check_output("--csv", args.csv) if args.csv else None
    except ValueError as err:
        return fail("logs", err)
    try:
        table = read_logs(args.paths, format=args.format, strict=args.strict, engine=args.engine)
    except LogFormatError as err:
        return fail("logs", err)
    summary = _summary(table, args, bases)
    if not summary.runs:  # e.g. a benchmark's JSON summary alone: run facts, no step
        read = ", ".join(f"{f.path} ({f.format})" for f in table.files)
        return fail(
            "logs",
            f"found no step records in the files read ({read}); required a log with steps. "
            "Fix: point at the run's log as well (a summary file only adds facts to it).",
        )
    frame = summary.to_frame()
    frame["skipped_lines"] = frame["run"].map(_skipped(table)).fillna(0).astype(int)
    frame = _with_pool_columns(frame, table)
    if args.json:
        _print_json(summary, frame, table, bases)
        return 0
    if csv_path is not None:
        try:
            write_output("--csv", csv_path, lambda path: frame.to_csv(path, index=False))
        except InputError as err:
            return fail("logs", err, code=1)
        print(f"wrote {len(frame)} run(s) to {args.csv}")
        return 0
    _print_table(summary, frame, table)
    return 0


def _check_run_flags(args: argparse.Namespace) -> None:
    """The run facts and bases as flags, before any log is read: sizes are whole numbers >= 1,
    figures finite numbers > 0 (a size of 0 divided tokens by it)."""
    for name in ("world_size", "pp", "tp", "global_batch", "seq_len"):
        if getattr(args, name) is not None:
            fix = f"e.g. {flag_of(name)} 8, or leave it out if unknown."
            check_flag_int(flag_of(name), getattr(args, name), low=1, fix=fix)
    if args.warmup_steps is not None:
        fix = "how many logged steps to leave out, e.g. --warmup-steps 10."
        check_flag_int("--warmup-steps", args.warmup_steps, low=0, fix=fix)
    examples = {
        "active_params": "104e9",
        "flops_per_token": "6.24e11",
        "device_capacity_gib": "184.31",
        "device_capacity_gb": "186",
    }
    for name, example in examples.items():
        if getattr(args, name) is not None:
            fix = f"e.g. {flag_of(name)} {example}, or leave it out."
            check_flag_positive(flag_of(name), getattr(args, name), fix=fix)
    for tflops in args.peak_tflops:
        check_flag_positive("--peak-tflops", tflops, fix="the device's peak, e.g. 2250.")


def _bases(args: argparse.Namespace) -> dict[str, Any]:
    """The stated bases the flags give: FLOPs per token, peaks, device capacity, run facts."""
    from pooltk.logs import RunInfo
    from pooltk.logs.metrics import DeviceCapacity, FlopsBasis, PeakBasis

    _check_run_flags(args)
    flops = None
    if args.flops_per_token is not None:
        flops = FlopsBasis(
            name=f"{args.flops_per_token:g} FLOPs/token",
            flops_per_token=args.flops_per_token,
            source="--flops-per-token",
        )
    elif args.active_params is not None:
        flops = FlopsBasis.six_n(args.active_params, source="--active-params")
    peaks = [
        PeakBasis.tflops(p, name=f"{p:g} TFLOP/s", source="--peak-tflops") for p in args.peak_tflops
    ]
    capacity = None
    if args.device_capacity_gib is not None:
        capacity = DeviceCapacity.from_gib(args.device_capacity_gib, source="--device-capacity-gib")
    elif args.device_capacity_gb is not None:
        capacity = DeviceCapacity.from_gb(args.device_capacity_gb, source="--device-capacity-gb")
    facts = {
        k: v
        for k, v in (
            ("world_size", args.world_size),
            ("pp", args.pp),
            ("tp", args.tp),
            ("global_batch_size", args.global_batch),
            ("seq_len", args.seq_len),
        )
        if v is not None
    }
    info = RunInfo.from_facts(facts, source="command line") if facts else None
    return {"flops": flops, "peaks": peaks, "capacity": capacity, "run_info": info}


def _summary(table: Any, args: argparse.Namespace, bases: dict[str, Any]) -> Any:
    from pooltk.logs.metrics import summarize

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # basis warnings are shown in the table's notes instead
        return summarize(
            table,
            run_info=bases["run_info"],
            flops=bases["flops"],
            peaks=bases["peaks"],
            capacity=bases["capacity"],
            warmup_steps=args.warmup_steps,
            warn=False,
        )


def _skipped(table: Any) -> dict[str, int]:
    """Lines skipped per run; a file split into runs has its skipped lines shown against each."""
    skipped: dict[str, int] = {}
    for f in table.files:
        for name in {f.run, *f.runs}:
            skipped[name] = skipped.get(name, 0) + f.n_skipped
    return skipped


def _print_json(summary: Any, frame: Any, table: Any, bases: dict[str, Any]) -> None:
    from pooltk.logs import RunInfo
    from pooltk.logs.metrics import mfu_table

    flops, peaks = bases["flops"], bases["peaks"]
    payload: dict[str, Any] = {
        "runs": [],
        "files": [f.to_dict() for f in table.files],
        "unrecognised": table.unrecognised,
        "run_sources": table.run_sources,
    }
    for r, record in zip(summary.runs, frame.to_dict(orient="records"), strict=True):
        row = {
            k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()
        }
        if flops is not None and math.isfinite(r.tok_per_s_per_gpu):
            mfu = mfu_table(r.tok_per_s_per_gpu, flops, peaks)
            row["mfu_by_peak"] = mfu.to_frame().to_dict(orient="records")
        row["run_facts"] = {k: v for k, v in table.runs.get(r.run, RunInfo()).to_dict().items()}
        row["pool_warnings"] = _pool_warnings(table, r.run)
        payload["runs"].append(row)
    print(json.dumps(payload, indent=2, default=str))


_POOL_COLUMNS = ("pooled", "pool_impl", "slack", "layout")


def _with_pool_columns(frame: Any, table: Any) -> Any:
    """The per-run frame with each run's pool columns (missing where the log says nothing), for
    the table's pool label, --json and --csv."""
    import pandas as pd

    steps = table.steps
    if any(c not in steps.columns for c in _POOL_COLUMNS):
        return frame.assign(**{c: None for c in _POOL_COLUMNS})
    first = steps.groupby("run", observed=True, sort=False)[list(_POOL_COLUMNS)].first()
    first.index = first.index.astype(str)
    out = frame.copy()
    for c in _POOL_COLUMNS:
        values = [
            None
            if str(v) == "<NA>"
            else (bool(v) if c == "pooled" else (int(v) if c == "slack" else v))
            for v in out["run"].astype(str).map(first[c].astype(object))
        ]
        out[c] = pd.Series(values, index=out.index, dtype=object)  # an int stays one beside None
    return out


def _pool_label(run: dict[str, Any]) -> str:
    """A run's pool from its pool columns (:func:`_with_pool_columns`): '<impl> slack N <layout>'
    (installed), 'not pooled (<impl>)' (logged not installed), '-' (the log does not say)."""

    def known(value: Any) -> bool:
        return value is not None and str(value) not in ("nan", "<NA>", "None", "")

    if str(run["pooled"]) == "True":
        label = (
            f"{run['pool_impl']} slack {int(run['slack'])}"  # a float where a run has none
            if known(run["slack"])
            else str(run["pool_impl"])
        )
        return label + (f" {run['layout']}" if known(run["layout"]) else "")
    if str(run["pooled"]) == "False":
        return "not pooled" + (f" ({run['pool_impl']})" if known(run["pool_impl"]) else "")
    return "-"


def _pool_warnings(table: Any, run: str) -> list[dict[str, Any]]:
    """The pool warnings logged in ``run`` (see [Note: pooled runs] in pooltk/logs/runs.py)."""
    info = table.runs.get(run)
    return list(info.extra.get("pool_warnings", [])) if info is not None else []


def _warning_text(w: dict[str, Any]) -> str:
    """One pool warning as a line: where it was logged, and what the ring did."""
    where = f"line {w['line']}" + (f", rank {w['rank']}" if "rank" in w else "")
    what = f"stage {w['stage']} " + {
        "re-homed": f"{w.get('direction')} ring re-homed a slot ({w.get('bytes')} bytes)",
        "saved nothing": f"{w.get('direction')} ring saved nothing "
        f"(held {w.get('held')} sets, stock {w.get('stock')})",
    }.get(w["what"], f"kept graph ({w.get('reason')})")
    return f"pooltk warning ({where}): {what}"


_SUMMARY_COLUMNS = (
    Column("run", align="left"),
    Column("format", align="left"),
    Column("steps", align="left"),
    Column("window", align="left"),
    Column("tok_per_s", "tok/s/GPU", align="left"),
    Column("mfu", "MFU %", align="left"),
    Column("peak", "peak GiB", align="left"),
    Column("headroom", "headroom GiB", align="left"),
    Column("pool", align="left"),
    Column("skipped", align="left"),
)


def _print_table(summary: Any, frame: Any, table: Any) -> None:
    records = [
        _summary_record(r, _pool_label(row), row["skipped_lines"])
        for r, row in zip(summary.runs, frame.to_dict(orient="records"), strict=True)
    ]
    print("\n".join(render(records, _SUMMARY_COLUMNS)))
    print()
    for r in summary.runs:
        print(f"{r.run}: " + "; ".join(_notes(r)))
        for w in _pool_warnings(table, r.run):
            print(f"{r.run}: {_warning_text(w)}")
    for f in table.files:
        for line in _file_lines(f):
            print(f"{f.path}: {line}")
    for u in table.unrecognised:
        print(f"not read: {u}")


def _summary_record(r: Any, pool: str, skipped: int) -> dict[str, str]:
    """One run's row of the summary table, as text."""
    logged_mfu = not math.isnan(r.mfu_logged_pct)
    if r.mfu:
        mfu = _fmt(r.mfu.mfu_pct, ".2f")
    else:
        mfu = _fmt(r.mfu_logged_pct if logged_mfu else None, ".2f") + (
            " (log)" if logged_mfu else ""
        )
    return {
        "run": r.run,
        "format": r.format,
        "steps": f"{r.n_steps} ({r.first_step}..{r.last_step})",
        "window": f"{r.window.first_step}..{r.window.last_step}",
        "tok_per_s": _fmt(r.tok_per_s_per_gpu, ",.1f"),
        "mfu": mfu,
        "peak": _fmt(r.peak_mem_gib, ".2f"),
        "headroom": _fmt(r.headroom.headroom_gib if r.headroom else None, ".1f"),
        "pool": pool,
        "skipped": str(skipped),
    }


def _notes(r: Any) -> list[str]:
    """The bases of one run's figures, and its warnings."""
    notes = [f"tok/s/GPU: {r.tok_per_s_per_gpu_basis}", f"window: {r.window.rule}"]
    if r.mfu:
        notes.append(f"MFU basis: {r.mfu.basis}")
    elif not math.isnan(r.mfu_logged_pct):
        notes.append(
            "MFU: as logged, on the framework's own basis (give --active-params for a stated basis)"
        )
    if r.mem_basis:
        notes.append(f"memory: peak {r.mem_basis}")
    if r.headroom:
        notes.append(
            f"headroom against {r.headroom.capacity_gib:.2f} GiB = {r.headroom.capacity_gb:.2f} GB"
        )
    return notes + list(r.warnings)


def _file_lines(f: Any) -> list[str]:
    """What reading one file changed or left out: decorations, runs, folded rows, cut records."""
    lines = []
    if f.decorations:
        decorations = ", ".join(f.decorations)
        lines.append(f"line decorations removed: {decorations} ({f.n_decorated} line(s))")
    if len(f.runs) > 1:
        lines.append(f"{len(f.runs)} runs ({', '.join(f.runs)}): " + "; ".join(f.run_boundaries))
    if f.n_folded:
        lines.append(
            f"{f.n_folded} copies of a row printed by several ranks folded (their clocks may "
            "differ by the nodes' skew)"
        )
    if f.n_truncated:
        lines.append(
            f"{f.n_truncated} record(s) cut short (truncated: the job was killed mid-write, or "
            "the copy is incomplete): counted, never read as values"
        )
    if f.n_skipped:
        reasons = ", ".join(f"{k} x{v}" for k, v in f.skipped_by_reason.items())
        lines.append(f"skipped {f.n_skipped} record(s): {reasons}")
    return lines
