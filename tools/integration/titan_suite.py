"""The torchtitan half of the integration suite: the real trainer under torchrun, every variant.

    python tools/integration/titan_suite.py --pp 2 4 --out reports/integration

Runs in the torchtitan venv (.venvs/torchtitan). Generates the tokenizer and dataset once
(titan_assets.py), then per pipeline size and variant launches ``torchrun --nproc-per-node PP
tools/integration/titan_rank.py`` (the user's entry ``pooltk.integrations.torchtitan``,
observed) with torchtitan's llama3 debug model on SDPA (titan_config.py), ``--steps`` steps of 8
microbatches of one 64-token row, ``--debug.seed 42 --debug.deterministic``, gloo on 127.0.0.1.
Each launch's whole torchrun output is saved as ``train.log`` (the trainer's own log, with
torchrun's ``[rankN]:`` prefixes) and read back with ``pooltk logs``.

Writes under ``OUT/torchtitan/``: ``rows.csv`` (the columns of run_suite.py: receive bytes per
stage, losses as logged by torchtitan, kept as float.hex, and a sha256 of every parameter byte
against the stock and the fresh run of the same schedule, and the three-way verdict of
run_suite's [Note: trainer verdicts]) and ``logs.csv`` (what ``pooltk logs`` read from each
train.log: steps, first/last step, pool column, against what the variant is). Exit 1 when a
launch fails, a claim fails (a pooled variant not bitwise equal to fresh with its difference from
stock explained, a fresh run that reused a receive storage), or a log is read wrong.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranks import free_port  # noqa: E402
from run_suite import BASELINE, FRESH, HOOKED, compare, finish, write_rows  # noqa: E402
from titan_assets import write_assets  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

VARIANTS: dict[str, dict] = {
    # name -> schedule (run_suite.BASELINE spelling), pool, and the entry's --pooltk flags
    "stock": dict(schedule="1f1b", pool="stock", flags={"enable": "false"}),
    "fresh": dict(schedule="1f1b", pool="fresh", flags={"enable": "false"}),
    "pooltk_tight": dict(schedule="1f1b", pool="pooltk", flags={"slack": "2", "grad_slack": "1"}),
    "pooltk_live": dict(schedule="1f1b", pool="pooltk", flags={"slack": "0", "grad_slack": "0"}),
    # Automodel's single ring, built by pooltk for A/B: a ring no user chooses, through the harness
    # seam (--rings)
    "pooltk_automodel_policy": dict(
        schedule="1f1b",
        pool="pooltk",
        flags={"slack": "2"},
        rings={"policy": "automodel", "slack": 2},
    ),
    "stock_interleaved": dict(schedule="Interleaved1F1B", pool="stock", flags={"enable": "false"}),
    "fresh_interleaved": dict(schedule="Interleaved1F1B", pool="fresh", flags={"enable": "false"}),
    "pooltk_auto_interleaved": dict(
        schedule="Interleaved1F1B",
        pool="pooltk",
        flags={"slack": "0", "grad_slack": "0", "schedule": "auto"},
    ),
    "stock_gpipe": dict(schedule="gpipe", pool="stock", flags={"enable": "false"}),
    "fresh_gpipe": dict(schedule="gpipe", pool="fresh", flags={"enable": "false"}),
    "pooltk_gated_gpipe": dict(schedule="gpipe", pool="pooltk", flags={"slack": "0"}),
    # every stage but the first hooks its received input's gradient (ranks.hook_received_inputs)
    "stock_input_hook": dict(
        schedule="1f1b", pool="stock", flags={"enable": "false"}, input_hook=True
    ),
    "fresh_input_hook": dict(
        schedule="1f1b", pool="fresh", flags={"enable": "false"}, input_hook=True
    ),
    "pooltk_input_hook": dict(
        schedule="1f1b", pool="pooltk", input_hook=True, flags={"slack": "2", "grad_slack": "1"}
    ),
}
"""Every variant; ``fresh*``: stock with every receive in a new buffer (titan_rank.py ``--fresh``,
the reference besides stock); pooltk_gated_gpipe: GPipe with the default 1f1b gate (pooltk must keep
it stock)."""

TITAN_SCHEDULE = {"1f1b": "1F1B", "Interleaved1F1B": "Interleaved1F1B", "gpipe": "GPipe"}
LOG_COLUMNS = [
    "pp",
    "variant",
    "log",
    "format",
    "n_steps",
    "first_step",
    "last_step",
    "final_loss",
    "pool_read",
    "pool_expected",
    "claim_ok",
]


def with_references(names: list[str]) -> list[str]:
    """``names`` in order, each preceded by the stock and fresh runs it is judged against (when not
    already there)."""
    out: list[str] = []
    for name in names:
        spec = VARIANTS[name]
        refs = (
            HOOKED
            if spec.get("input_hook")
            else (BASELINE[spec["schedule"]], FRESH[spec["schedule"]])
        )
        for n in (*refs, name):
            if n not in out:
                out.append(n)
    return out


def titan_args(
    name: str, pp: int, assets: Path, dump: Path, steps: int, microbatches: int
) -> list[str]:
    """The entry's arguments for one variant (``--pooltk.*`` first, then torchtitan's own)."""
    spec = VARIANTS[name]
    flags = [f"--pooltk.{k}={v}" for k, v in {"device": "cpu", **spec["flags"]}.items()]
    return [
        *flags,
        "--module",
        "tools.integration.titan_config",
        "--config",
        "llama3_cpu_sdpa",
        "--hf_assets_path",
        str(assets / "tokenizer"),
        "--dataloader.dataset_path",
        str(assets / "data"),
        "--parallelism.pipeline_parallel_degree",
        str(pp),
        "--parallelism.pipeline_parallel_schedule",
        TITAN_SCHEDULE[spec["schedule"]],
        "--parallelism.pipeline_parallel_microbatch_size",
        "1",
        "--training.local_batch_size",
        str(microbatches),
        "--training.seq_len",
        "64",
        "--training.steps",
        str(steps),
        "--debug.seed",
        "42",
        "--debug.deterministic",
        "--comm.init_timeout_seconds",
        "120",
        "--dump_folder",
        str(dump),
    ]


def rank_args(name: str, record: Path) -> list[str]:
    """titan_rank.py and its own options for one variant (``--fresh``, ``--input-hook``), before the
    entry's."""
    spec = VARIANTS[name]
    return [
        str(ROOT / "tools/integration/titan_rank.py"),
        "--record",
        str(record),
        *(["--fresh"] if spec["pool"] == "fresh" else []),
        *(["--input-hook"] if spec.get("input_hook") else []),
        *(["--rings", json.dumps(spec["rings"])] if spec.get("rings") else []),
    ]


def launch(
    name: str,
    pp: int,
    out: Path,
    assets: Path,
    python: str,
    steps: int,
    microbatches: int,
    timeout_s: float,
) -> tuple[int | None, float, list[dict]]:
    """torchrun one variant; returns exit code (None: timed out), wall seconds and the rank
    records."""
    vdir = out / f"pp{pp}" / name
    vdir.mkdir(parents=True, exist_ok=True)
    record = vdir / "records.jsonl"
    record.unlink(missing_ok=True)
    torchrun = [
        python,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(pp),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "--role",
        "rank",
        "--tee",
        "3",
    ]
    argv = [
        *torchrun,
        *rank_args(name, record),
        *titan_args(name, pp, assets, vdir / "dump", steps, microbatches),
    ]
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        OMP_NUM_THREADS="1",
        PYTHONHASHSEED="0",
    )
    start = time.monotonic()
    with open(vdir / "train.log", "w") as log:
        try:
            code: int | None = subprocess.run(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    return code, time.monotonic() - start, collect(name, pp, out)


def collect(name: str, pp: int, out: Path) -> list[dict]:
    """The rank records of one variant's launch (records.jsonl), in run_suite's shape."""
    record = out / f"pp{pp}" / name / "records.jsonl"
    spec = VARIANTS[name]
    records = []
    for line in record.read_text().splitlines() if record.exists() else []:
        r = json.loads(line)
        logged = r.pop("logged", [])
        times = [b["t"] - a["t"] for a, b in zip(logged, logged[1:])]
        r.update(
            pp=pp,
            variant=name,
            schedule=spec["schedule"],
            pool=spec["pool"],
            input_hook=spec.get("input_hook", False),
            losses=[x["loss"] for x in logged],
            logged_steps=[x["step"] for x in logged],
            step_s=times or [1.0],
        )
        records.append(r)
    return records


def read_log(python: str, log: Path) -> dict:
    """What ``pooltk logs`` reads from one launch's log: its one run's steps and pool columns.

    Steps, first/last step and final loss come from ``pooltk logs LOG --json``; the command's
    table is saved next to the log (``pooltk_logs.txt``). The pool columns (``pooled``,
    ``pool_impl``, ``slack``, ``layout``) are in the table but not in ``--json``/``--csv`` (pooltk
    0.1.0), so they are taken from the same reader, ``pooltk.logs.read_logs``.
    """
    proc = subprocess.run(
        [python, "-m", "pooltk", "logs", str(log), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout)[-500:]}
    runs = json.loads(proc.stdout)["runs"]
    if len(runs) != 1:
        return {"error": f"{len(runs)} runs found in one launch's log"}
    text = subprocess.run(
        [python, "-m", "pooltk", "logs", str(log)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    (log.parent / "pooltk_logs.txt").write_text(text.stdout + text.stderr)
    from pooltk.logs import read_logs

    pool = read_logs([str(log)]).steps[["pooled", "pool_impl", "slack", "layout"]].iloc[0].to_dict()
    return {**runs[0], **{k: (None if str(v) in ("<NA>", "nan") else v) for k, v in pool.items()}}


def pool_read(run: dict) -> str:
    """The pool fields ``pooltk logs`` read, as one text (empty: the log says nothing)."""
    keys = ("pooled", "pool_impl", "slack", "layout")
    return " ".join(f"{k}={run[k]}" for k in keys if run.get(k) not in (None, ""))


def log_row(pp: int, name: str, log: Path, run: dict, steps: int, last_loss: str | None) -> dict:
    """One logs.csv row; ``last_loss``: the last stage's final loss as torchtitan logged it
    (float.hex)."""
    spec = VARIANTS[name]
    # Gated GPipe: installed, but every stage that reported kept stock, so the run reads as not
    # pooled.
    pooled_expected = spec["pool"] == "pooltk" and name != "pooltk_gated_gpipe"
    if pooled_expected:
        expected = f"pooled=True pool_impl=pooltk slack={spec['flags'].get('slack', '2')}"
    elif spec["pool"] == "pooltk":
        expected = "pooled=False pool_impl=pooltk"
    else:
        expected = "pooled=False"
    read = pool_read(run) if "error" not in run else f"error: {run['error']}"
    loss_ok = last_loss is not None and run.get("final_loss") == round(float.fromhex(last_loss), 5)
    ok = (
        "error" not in run
        and run.get("n_steps") == steps
        and run.get("first_step") == 1
        and run.get("last_step") == steps
        and read.startswith(expected)
        and loss_ok
    )
    return {
        "pp": pp,
        "variant": name,
        "log": str(log.relative_to(ROOT)) if log.is_relative_to(ROOT) else str(log),
        "format": run.get("format", ""),
        "n_steps": run.get("n_steps", ""),
        "first_step": run.get("first_step", ""),
        "last_step": run.get("last_step", ""),
        "final_loss": run.get("final_loss", ""),
        "pool_read": read,
        "pool_expected": expected,
        "claim_ok": ok,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pp", type=int, nargs="+", default=[2])
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        choices=list(VARIANTS),
        help="variants to run; the stock and fresh runs each is judged against are added before it",
    )
    p.add_argument("--version", default="0.3.0")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--logs-only",
        action="store_true",
        help="launch nothing: compare the records and re-read the train.log files "
        "already under --out",
    )
    args = p.parse_args()
    out = args.out / "torchtitan"
    out.mkdir(parents=True, exist_ok=True)
    assets = write_assets(out / "assets")
    problems, records, logs = [], [], []
    for pp in args.pp:
        for name in with_references(args.variants):
            if args.logs_only:
                code, wall, recs = 0, 0.0, collect(name, pp, out)
            else:
                code, wall, recs = launch(
                    name,
                    pp,
                    out,
                    assets,
                    sys.executable,
                    args.steps,
                    args.microbatches,
                    args.timeout,
                )
                print(
                    f"[integration] torchtitan pp{pp} {name}: exit {code}, {wall:.1f} s", flush=True
                )
            if code != 0:
                problems.append(
                    f"torchtitan pp{pp} {name}: exit {code} "
                    f"(see {out / f'pp{pp}' / name / 'train.log'})"
                )
            records += recs
            log = out / f"pp{pp}" / name / "train.log"
            last = [
                r["losses"][-1]
                for r in recs
                if r.get("ok") and r["losses"] and r["losses"][-1] != (-1.0).hex()
            ]
            logs.append(
                log_row(
                    pp,
                    name,
                    log,
                    read_log(sys.executable, log),
                    args.steps,
                    last[0] if last else None,
                )
            )
    rows = compare(
        records,
        trainer="torchtitan",
        version=args.version,
        steps=args.steps,
        microbatches=args.microbatches,
    )
    problems += write_rows(out, rows, "torchtitan")
    with open(out / "logs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=LOG_COLUMNS)
        w.writeheader()
        w.writerows(logs)
    for row in logs:
        if not row["claim_ok"]:
            problems.append(
                f"torchtitan pp{row['pp']} {row['variant']}: "
                f"pooltk logs read {row['n_steps']} steps, "
                f"pool {row['pool_read']!r}; expected {args.steps} steps, {row['pool_expected']!r}"
            )
    print(
        f"[integration] torchtitan: {len(rows)} rows -> {out / 'rows.csv'}, "
        f"{len(logs)} logs -> {out / 'logs.csv'}"
    )
    return finish(problems)


if __name__ == "__main__":
    sys.exit(main())
