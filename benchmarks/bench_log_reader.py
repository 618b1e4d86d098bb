"""Log reader speed vs ``pandas.read_csv`` of the same numbers as CSV, side by side in one run.

For each format, a log of ``--lines`` step lines (default 1,000,000) is generated from the
format strings with varying values, and the same records are written as CSV (one column per
value the reader extracts, timestamps as text). Each repeat times ``pooltk.logs.read_log_file``
on the log and ``pandas.read_csv`` on the CSV, alternating, on the same machine and moment; the
table shows the best (and median) seconds of each and the throughput ratio
read_csv_time / reader_time (1.0 = as fast as read_csv), and the reader's step lines per second
against the goal of >= 1 M/s for every format, decorated lines included (``--decorate``: each
line behind ``srun --label`` and ``kubectl --timestamps`` prefixes).

``--ranks R --steps S`` adds the multi-rank case: one torchtitan file where R ranks each log S
steps behind ``[rankN]:`` (R x S lines, interleaved as they arrive), read and summarised
(``read_logs`` + ``summarize``); the goal is 512 x 10,000 (about 5 M lines) in <= 10 s on one core.

``--stages`` adds the reader's CPU seconds by stage for each file (where the time goes).

Usage: ``.venv/bin/python benchmarks/bench_log_reader.py [--lines N] [--repeats R] [--formats ...]
[--decorate none srun+kubectl] [--ranks R --steps S] [--stages]``
"""

from __future__ import annotations

import argparse
import json
import math
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
GOAL_RATIO = 2.0
"""Reader CPU seconds per read_csv CPU second on the same numbers (the issue's goal: at most this)."""
GOAL_STARTUP_S = 0.5


def _records(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    secs = np.arange(n) * 4
    ts = pd.Timestamp("2026-10-01 00:00:00") + pd.to_timedelta(secs, unit="s")
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


def _write(fmt: str, rec: pd.DataFrame, folder: Path) -> tuple[Path, Path]:
    """Write the log and the CSV of the same records; returns (log, csv)."""
    ts_text = rec["timestamp"].dt.strftime("%Y-%m-%d %H:%M:%S")
    per = np.round(rec["tps"].to_numpy() / 8, 2)
    cols = [
        rec[c].to_numpy() for c in ("step", "epoch", "loss", "grad_norm", "lr", "mem", "tps", "nlt")
    ]
    step, epoch, loss, gn, lr, mem, tps, nlt = cols
    log = folder / f"{fmt}.{'jsonl' if fmt == 'automodel_jsonl' else 'log'}"
    with log.open("w") as f:
        if fmt == "automodel_text":
            for i in range(len(rec)):
                f.write(
                    f"{ts_text.iat[i]} | INFO | root | step {step[i]} | epoch {epoch[i]} | loss {loss[i]:.4f} | "
                    f"grad_norm {gn[i]:.4f} | lr {lr[i]:.2e} | mem {mem[i]:.2f} GiB | tps {tps[i]:.2f}({per[i]:.2f}/gpu) | "
                    f"num_label_tokens {nlt[i]}\n"
                )
        elif fmt == "automodel_jsonl":
            iso = rec["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%S.000Z")
            for i in range(len(rec)):
                f.write(
                    json.dumps(
                        {
                            "step": int(step[i]),
                            "epoch": int(epoch[i]),
                            "timestamp": iso.iat[i],
                            "loss": float(loss[i]),
                            "grad_norm": float(gn[i]),
                            "lr": float(lr[i]),
                            "mem": float(mem[i]),
                            "tps": float(tps[i]),
                            "tps_per_gpu": float(per[i]),
                            "mfu": None,
                            "num_tokens_per_step": 1048576,
                            "num_label_tokens": int(nlt[i]),
                        }
                    )
                    + "\n"
                )
        else:
            for i in range(len(rec)):
                f.write(
                    f"[rank0]:[titan] {ts_text.iat[i]},000 - root - INFO - step: {step[i]:2}  loss: {loss[i]:8.5f}  "
                    f"grad_norm: {gn[i]:7.4f}  memory: {mem[i]:5.2f}GiB({mem[i] / 1.8728:.2f}%)  tps: {round(tps[i]):,}  "
                    f"tflops: {per[i]:,.2f}  mfu: {per[i] / 100:.2f}%\n"
                )
    csv = folder / f"{fmt}.csv"
    out = rec.copy()
    out["timestamp"] = ts_text
    out["per_gpu"] = per
    out.to_csv(csv, index=False)
    return log, csv


DECORATIONS = ("none", "srun+kubectl")
GOAL_MLINES = 1.0
"""Step lines per second the issue asks of every format (millions)."""


def _decorate(log: Path, how: str) -> Path:
    """A copy of ``log`` with every line behind ``srun --label`` and ``kubectl --timestamps`` prefixes."""
    if how == "none":
        return log
    out = log.with_name(f"{log.stem}.{how.replace('+', '_')}{log.suffix}")
    with log.open("rb") as src, out.open("wb") as dst:
        for i, line in enumerate(src):
            dst.write(
                b"2026-10-01T00:00:%02d.%09dZ %3d: " % (i % 60, i * 7919 % 10**9, i % 8) + line
            )
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
            lines = [
                f"[rank{r}]:[titan] {ts},000 - torchtitan.trainer - INFO - step: {s:2}  loss: {loss:8.5f}  "
                f"grad_norm: {loss / 3:7.4f}  memory: {60 + r % 7:5.2f}GiB({(60 + r % 7) / 1.8431:.2f}%)  tps: {9000 + r:,}  "
                f"tflops: {800 + r % 13:,.2f}  mfu: {35 + r % 5:.2f}%\n"
                for r in range(ranks)
            ]
            f.write("".join(lines))
    return path


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _cpu(fn) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds): on a shared machine the CPU time is the cost on one core."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def _startup() -> float:
    """Best of three wall times of ``python -m pooltk logs --help`` (imports included)."""
    import subprocess

    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pooltk", "logs", "--help"], check=True, capture_output=True
        )
        best = min(best, time.perf_counter() - t0)
    return best


STAGES = (
    ("pooltk.logs.reader", "load", "load"),
    ("pooltk.logs.records", "to_lines", "lines"),
    ("pooltk.logs.reader", "_first_hits", "detect"),
    ("pooltk.logs.records", "read_records", "records"),
    ("pooltk.logs.automodel_text", "fast", "  engine"),
    ("pooltk.logs.automodel_jsonl", "fast", "  engine"),
    ("pooltk.logs.torchtitan", "fast", "  engine"),
    ("pooltk.logs.frames", "to_pandas", "table"),
    ("pooltk.logs.decoration", "columns", "  prefixes"),
    ("pooltk.logs.frames", "_times", "  times"),
    ("pooltk.logs.frames", "split_runs", "runs"),
)
"""(module, function, label): the reader's stages whose CPU time ``--stages`` reports (indented: inside the one above)."""


def _staged(path: Path) -> dict[str, float]:
    """CPU seconds per stage of one ``read_log_file(path)`` (each stage's function wrapped for the call)."""
    import importlib

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
        c0 = time.process_time()
        read_log_file(path)
        spent["total"] = time.process_time() - c0
    finally:
        for mod, fn_name, fn in saved:
            setattr(mod, fn_name, fn)
    return {k: v for k, v in spent.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    ap.add_argument("--decorate", nargs="+", default=list(DECORATIONS), choices=DECORATIONS)
    ap.add_argument(
        "--ranks", type=int, default=0, help="multi-rank torchtitan case: ranks (0: skip)"
    )
    ap.add_argument(
        "--steps", type=int, default=0, help="multi-rank torchtitan case: steps per rank"
    )
    ap.add_argument(
        "--stages",
        action="store_true",
        help="also print the reader's CPU seconds by stage, per file",
    )
    args = ap.parse_args(argv)
    rec = _records(args.lines)
    rows = []
    stages = []
    multi = None
    with tempfile.TemporaryDirectory() as d:
        for fmt in args.formats:
            plain, csv = _write(fmt, rec, Path(d))
            for how in args.decorate:
                log = _decorate(plain, how)
                t_reader, t_csv, c_reader, c_csv = [], [], [], []
                for _ in range(args.repeats):
                    table = None

                    def read(log: Path = log) -> None:
                        nonlocal table
                        table = read_log_file(log)

                    wall, cpu = _cpu(read)
                    t_reader.append(wall)
                    c_reader.append(cpu)
                    wall_csv, cpu_csv = _cpu(lambda path=csv: pd.read_csv(path))
                    t_csv.append(wall_csv)
                    c_csv.append(cpu_csv)
                    assert table is not None and len(table.steps) == args.lines, "reader lost rows"
                rows.append(
                    {
                        "format": fmt,
                        "decoration": how,
                        "lines": args.lines,
                        "log_MB": log.stat().st_size / 1e6,
                        "reader_cpu_s": min(c_reader),
                        "read_csv_cpu_s": min(c_csv),
                        "Mlines_per_cpu_s": args.lines / min(c_reader) / 1e6,
                        "read_csv_Mlines_per_cpu_s": args.lines / min(c_csv) / 1e6,
                        "time_vs_read_csv": min(c_reader) / min(c_csv),
                        "meets_goal": min(c_reader) / min(c_csv) <= GOAL_RATIO,
                        "reader_wall_median_s": statistics.median(t_reader),
                        "read_csv_wall_median_s": statistics.median(t_csv),
                    }
                )
                if args.stages:
                    stages.append({"format": fmt, "decoration": how, **_staged(log)})
                if log != plain:
                    log.unlink()
                print(f"{fmt} {how}: done", file=sys.stderr)
        if args.ranks and args.steps:
            path = _multi_rank(Path(d), args.ranks, args.steps)
            t0, c0 = time.perf_counter(), time.process_time()
            logs = read_logs([path])
            t_read = time.perf_counter() - t0
            summary = summarize(logs, warn=False)
            t_all = time.perf_counter() - t0
            c_all = time.process_time() - c0
            assert len(logs.steps) == args.ranks * args.steps, "reader lost rows"
            multi = {
                "ranks": args.ranks,
                "steps": args.steps,
                "lines": args.ranks * args.steps,
                "MB": path.stat().st_size / 1e6,
                "read_s": t_read,
                "read_and_summarise_s": t_all,
                "cpu_s": c_all,
                "Mlines_per_cpu_s": args.ranks * args.steps / c_all / 1e6,
                "runs": len(summary.runs),
            }
    table = pd.DataFrame(rows)
    with pd.option_context(
        "display.width", 200, "display.max_columns", 20, "display.float_format", "{:,.3f}".format
    ):
        print(table.to_string(index=False))
    print(
        f"\ntime_vs_read_csv = reader CPU s / pandas.read_csv CPU s on the same numbers (goal <= {GOAL_RATIO:g}); "
        "Mlines_per_cpu_s = M step lines per CPU second of this process (polars' threads included)"
    )
    if stages:
        print(
            "\nreader CPU s by stage (one more read of each file; indented stages are inside the one above them):"
        )
        print(pd.DataFrame(stages).to_string(index=False, float_format="{:,.2f}".format))
    print(
        f"\nCLI start-up, python -m pooltk logs --help: best of 3 {_startup():.2f} s wall (goal <= {GOAL_STARTUP_S:g} s)"
    )
    if multi is not None:
        print("\nmulti-rank torchtitan file, read + summarised:")
        print(pd.DataFrame([multi]).to_string(index=False, float_format="{:,.3f}".format))
        est = 512 * 10_000 / (multi["Mlines_per_cpu_s"] * 1e6)
        print(
            f"at this rate 512 x 10,000 lines (5.12 M) would take about {est:,.0f} CPU s (goal <= 10 s; linear extrapolation)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
