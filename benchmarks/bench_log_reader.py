"""Log reader speed vs ``pandas.read_csv`` of the same numbers as CSV, side by side in one run.

For each format, a log of ``--lines`` step lines (default 200,000) is generated from the format
strings with varying values, and the same records are written as CSV (one column per value the
reader extracts, timestamps as text). Each repeat times ``pooltk.logs.read_log_file`` on the log
and ``pandas.read_csv`` on the CSV, alternating, on the same machine and moment. The table shows
the median of the repeats (default 3) of each, wall and this process's CPU seconds (polars' threads
included), and two ratios: ``ratio`` = reader time / read_csv time (goal: at most 1.5), and
``per_byte`` = the same per byte read (the log of a row is two to three times its CSV row).
``--decorate srun+kubectl`` adds each log with every line behind ``kubectl --timestamps`` and
``srun --label`` prefixes.

``--ranks R --steps S`` adds the multi-rank case: one torchtitan file where R ranks each log S
steps behind ``[rankN]:`` (R x S lines, interleaved as they arrive), read and summarised
(``read_logs`` + ``summarize``).

``--stages`` adds the reader's CPU seconds by stage for each file (where the time goes).

Usage: ``.venv/bin/python benchmarks/bench_log_reader.py [--lines N] [--repeats R]
[--formats ...] [--decorate none srun+kubectl] [--ranks R --steps S] [--stages]``
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pooltk.logs import read_log_file, read_logs
from pooltk.logs.metrics import summarize

FORMATS = ("automodel_text", "automodel_jsonl", "torchtitan")
DECORATIONS = ("none", "srun+kubectl")
GOAL_RATIO = 1.5
"""Reader time per read_csv time on the same numbers (the issue's goal: at most this)."""


def _records(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    ts = pd.Timestamp("2026-10-01 00:00:00") + pd.to_timedelta(np.arange(n) * 4, unit="s")
    return pd.DataFrame(
        {
            "timestamp": ts,
            "step": np.arange(1, n + 1),
            "epoch": np.arange(n) // 100_000,
            "loss": np.round(rng.uniform(1.0, 11.0, n), 4),
            "grad_norm": np.round(rng.uniform(0.5, 50.0, n), 4),
            "lr": np.round(rng.uniform(1e-6, 1e-4, n), 7),
            "mem": np.round(rng.uniform(20.0, 180.0, n), 2),
            "tps": np.round(rng.uniform(1e4, 5e5, n), 2),
            "nlt": rng.integers(100_000, 1_000_000, n),
        }
    )


def _line(fmt: str, r: dict, stamp: str, per: float) -> str:
    """One record of ``fmt`` as the framework writes it."""
    if fmt == "automodel_text":
        return (
            f"{stamp} | INFO | root | step {r['step']} | epoch {r['epoch']} | loss "
            f"{r['loss']:.4f} | grad_norm {r['grad_norm']:.4f} | lr {r['lr']:.2e} | mem "
            f"{r['mem']:.2f} GiB | tps {r['tps']:.2f}({per:.2f}/gpu) | num_label_tokens {r['nlt']}"
        )
    if fmt == "automodel_jsonl":
        record = {
            "step": int(r["step"]),
            "epoch": int(r["epoch"]),
            "timestamp": stamp.replace(" ", "T") + ".000Z",
            **{k: float(r[k]) for k in ("loss", "grad_norm", "lr", "mem", "tps")},
            "tps_per_gpu": float(per),
            "mfu": None,
            "num_tokens_per_step": 1048576,
            "num_label_tokens": int(r["nlt"]),
        }
        return json.dumps(record)
    return (
        f"[rank0]:[titan] {stamp},000 - root - INFO - step: {r['step']:2}  loss: "
        f"{r['loss']:8.5f}  grad_norm: {r['grad_norm']:7.4f}  memory: {r['mem']:5.2f}GiB("
        f"{r['mem'] / 1.8728:.2f}%)  tps: {round(r['tps']):,}  tflops: {per:,.2f}  mfu: "
        f"{per / 100:.2f}%"
    )


def _write(fmt: str, rec: pd.DataFrame, folder: Path) -> tuple[Path, Path]:
    """Write the log and the CSV of the same records; returns (log, csv)."""
    stamps = rec["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S").tolist()
    per = np.round(rec["tps"].to_numpy() / 8, 2)
    log = folder / f"{fmt}.{'jsonl' if fmt == 'automodel_jsonl' else 'log'}"
    rows = rec.drop(columns="timestamp").to_dict("records")
    with log.open("w") as f:
        for r, stamp, p in zip(rows, stamps, per):
            f.write(_line(fmt, r, stamp, p) + "\n")
    csv = folder / f"{fmt}.csv"
    rec.assign(timestamp=stamps, per_gpu=per).to_csv(csv, index=False)
    return log, csv


def _decorate(log: Path, how: str) -> Path:
    """A copy of ``log`` with every line behind ``kubectl --timestamps`` and ``srun --label``."""
    if how == "none":
        return log
    out = log.with_name(f"{log.stem}.{how.replace('+', '_')}{log.suffix}")
    with log.open("rb") as src, out.open("wb") as dst:
        for i, line in enumerate(src):
            stamp = b"2026-10-01T00:00:%02d.%09dZ" % (i % 60, i * 7919 % 10**9)
            dst.write(b"%s %3d: " % (stamp, i % 8) + line)
    return out


def _multi_rank(folder: Path, ranks: int, steps: int) -> Path:
    """One torchtitan file: ``ranks`` ranks each logging ``steps`` steps, interleaved."""
    rng = np.random.default_rng(1)
    path = folder / f"titan_{ranks}x{steps}.log"
    with path.open("w") as f:
        for s in range(1, steps + 1):
            ts = (pd.Timestamp("2026-10-01") + pd.Timedelta(seconds=2 * s)).strftime(
                "%Y-%m-%d %H:%M:%S"
            )
            loss = rng.uniform(1, 11)
            f.writelines(
                f"[rank{r}]:[titan] {ts},000 - torchtitan.trainer - INFO - step: {s:2}  loss: "
                f"{loss:8.5f}  grad_norm: {loss / 3:7.4f}  memory: {60 + r % 7:5.2f}GiB("
                f"{(60 + r % 7) / 1.8431:.2f}%)  tps: {9000 + r:,}  tflops: {800 + r % 13:,.2f}  "
                f"mfu: {35 + r % 5:.2f}%\n"
                for r in range(ranks)
            )
    return path


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) of ``fn()``."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


STAGES = (
    ("pooltk.logs.reader", "load", "load"),
    ("pooltk.logs.records", "to_lines", "lines"),
    ("pooltk.logs.reader", "_earliest", "detect"),
    ("pooltk.logs.records", "read_records", "records"),
    ("pooltk.logs.records", "_usual_layout", "  layout"),
    ("pooltk.logs.records", "_read_usual", "  fast"),
    ("pooltk.logs.records", "_leftovers", "  python"),
    ("pooltk.logs.frames", "to_pandas", "table"),
    ("pooltk.logs.decoration", "columns", "  prefixes"),
    ("pooltk.logs.frames", "_times", "  times"),
    ("pooltk.logs.frames", "split_runs", "runs"),
)
"""(module, function, label): the reader's stages whose CPU time ``--stages`` reports (indented:
inside the one above)."""


def _staged(path: Path) -> dict[str, float]:
    """CPU seconds per stage of one ``read_log_file(path)`` (each stage's function wrapped)."""
    spent: dict[str, float] = dict.fromkeys(label.strip() for _, _, label in STAGES)
    saved = []
    for mod_name, fn_name, label in STAGES:
        mod = importlib.import_module(mod_name)
        fn = getattr(mod, fn_name)
        saved.append((mod, fn_name, fn))
        stripped = label.strip()

        def timed(*a, _fn=fn, _label=stripped, **k):  # noqa: ANN002, ANN003
            c0 = time.process_time()
            try:
                return _fn(*a, **k)
            finally:
                spent[_label] = (spent[_label] or 0.0) + time.process_time() - c0

        setattr(mod, fn_name, timed)
    try:
        spent["total"] = _timed(lambda: read_log_file(path))[1]
    finally:
        for mod, fn_name, fn in saved:
            setattr(mod, fn_name, fn)
    return {k: v for k, v in spent.items() if v is not None}


def _compare(fmt: str, how: str, log: Path, csv: Path, lines: int, repeats: int) -> dict:
    """The medians of ``repeats`` alternating reads of the log and of the CSV, and the ratios."""
    reader, read_csv, tables = [], [], []
    for _ in range(repeats):
        reader.append(_timed(lambda: tables.append(read_log_file(log))))
        read_csv.append(_timed(lambda: pd.read_csv(csv)))
        assert len(tables.pop().steps) == lines, "reader lost rows"
    log_mb, csv_mb = log.stat().st_size / 1e6, csv.stat().st_size / 1e6
    row = {"format": fmt, "decoration": how, "lines": lines, "log_MB": log_mb, "csv_MB": csv_mb}
    for k, clock in enumerate(("wall", "cpu")):
        mine = statistics.median(t[k] for t in reader)
        theirs = statistics.median(t[k] for t in read_csv)
        row |= {f"reader_{clock}_s": mine, f"read_csv_{clock}_s": theirs}
        row |= {
            f"{clock}_ratio": mine / theirs,
            f"{clock}_per_byte": mine / theirs * csv_mb / log_mb,
        }
    row["meets_1.5x"] = row["wall_ratio"] <= GOAL_RATIO and row["cpu_ratio"] <= GOAL_RATIO
    return row


def _multi(folder: Path, ranks: int, steps: int) -> dict:
    path = _multi_rank(folder, ranks, steps)
    t0, c0 = time.perf_counter(), time.process_time()
    logs = read_logs([path])
    t_read = time.perf_counter() - t0
    summary = summarize(logs, warn=False)
    assert len(logs.steps) == ranks * steps, "reader lost rows"
    return {
        "ranks": ranks,
        "steps": steps,
        "lines": ranks * steps,
        "MB": path.stat().st_size / 1e6,
        "read_s": t_read,
        "read_and_summarise_s": time.perf_counter() - t0,
        "cpu_s": time.process_time() - c0,
        "runs": len(summary.runs),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    ap.add_argument("--decorate", nargs="+", default=["none"], choices=DECORATIONS)
    ap.add_argument("--ranks", type=int, default=0, help="multi-rank torchtitan: ranks (0: skip)")
    ap.add_argument("--steps", type=int, default=0, help="multi-rank torchtitan: steps per rank")
    ap.add_argument("--stages", action="store_true", help="the reader's CPU s by stage, per file")
    args = ap.parse_args(argv)
    rec = _records(args.lines)
    rows, stages, multi = [], [], None
    with tempfile.TemporaryDirectory() as d:
        for fmt in args.formats:
            plain, csv = _write(fmt, rec, Path(d))
            for how in args.decorate:
                log = _decorate(plain, how)
                rows.append(_compare(fmt, how, log, csv, args.lines, args.repeats))
                if args.stages:
                    stages.append({"format": fmt, "decoration": how, **_staged(log)})
                print(f"{fmt} {how}: done", file=sys.stderr)
        if args.ranks and args.steps:
            multi = _multi(Path(d), args.ranks, args.steps)
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(pd.DataFrame(rows).to_string(index=False, float_format="{:,.3f}".format))
        print(
            f"\nmedians of {args.repeats} runs; ratio = reader s / read_csv s on the same numbers "
            f"(goal <= {GOAL_RATIO:g}); per_byte = ratio x csv_MB / log_MB; cpu = this process's "
            "CPU s (polars' threads included)"
        )
        if stages:
            print("\nreader CPU s by stage (one more read of each file; indented stages inside):")
            print(pd.DataFrame(stages).to_string(index=False, float_format="{:,.3f}".format))
        if multi is not None:
            print("\nmulti-rank torchtitan file, read + summarised:")
            print(pd.DataFrame([multi]).to_string(index=False, float_format="{:,.3f}".format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
