"""The integration suite: real trainers, every pool variant, compared with stock (stdlib only).

Usage (from scripts/integration, which builds the venvs first)::

    python tools/integration/run_suite.py --trainer automodel --pp 2 4 --out reports/integration

Per trainer and pipeline size it runs the launches of ``LAUNCHES`` (variants that install a
pool that cannot be undone, or that are expected to fail, come last in a launch), then writes
``rows.csv``: one row per (variant, stage) with receive bytes, bitwise parity with the stock
run of the same schedule, step-time ratio and outcome. Exit status 1 when any claim fails:
a pooled variant not bitwise equal to stock, a forced-GPipe control that does not behave as
recorded, or a launch that did not finish.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ranks import launch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

LAUNCHES: dict[str, list[list[str]]] = {
    "automodel": [
        ["stock", "pooltk_tight", "pooltk_live", "pooltk_automodel_policy", "stock_interleaved",
         "pooltk_auto_interleaved", "stock_gpipe", "stock_alias_eval", "pooltk_alias_eval", "automodel_pool_s2"],
        ["automodel_pool_s0", "automodel_pool_gpipe_forced"],
        ["automodel_pool_alias_eval"],
        ["pooltk_gpipe_forced"],
    ],
}
BASELINE = {"1f1b": "stock", "Interleaved1F1B": "stock_interleaved", "gpipe": "stock_gpipe"}
EVAL_BASELINE = "stock_alias_eval"
"""The stock run of the forward-only step whose last stage returns a view of its input."""
EXPECT = {
    # variant -> what a correct run shows (the claims the suite checks)
    "automodel_pool_gpipe_forced": "diverges",     # the original, forced outside its gate: silent
    "pooltk_gpipe_forced": "PoolOverrunError",     # pooltk's guard stops it
    "automodel_pool_alias_eval": "eval_diverges",  # the original hands out outputs it then overwrites
}
COLUMNS = ["trainer", "trainer_version", "torch", "pp", "microbatches", "steps", "variant", "schedule",
           "pool_impl", "stage", "recv_forward_bytes", "recv_grad_bytes", "recv_bytes", "stock_recv_bytes",
           "losses_equal_stock", "params_equal_stock", "step_time_ratio", "outcome", "claim_ok", "eval_equal_stock",
           "ring_sets", "rehomes"]


def _records(out: Path) -> list[dict]:
    rows = []
    for f in sorted(out.glob("launch*/records.jsonl")):
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return rows


def _steady(times: list[float]) -> float:
    return statistics.median(times[1:] if len(times) > 1 else times)


def compare(records: list[dict], *, trainer: str, version: str, steps: int, microbatches: int) -> list[dict]:
    by = {(r["pp"], r["variant"], r["rank"]): r for r in records}
    rows = []
    for (pp, variant, rank), r in sorted(by.items()):
        base = by.get((pp, BASELINE.get(r.get("schedule", ""), "stock"), rank))
        if not r.get("ok"):
            stages = {"?": {}}
        else:
            stages = r["recv"]
        for stage, recv in stages.items():
            row = {"trainer": trainer, "trainer_version": version, "torch": r.get("torch", ""), "pp": pp,
                   "microbatches": microbatches, "steps": steps, "variant": variant,
                   "schedule": r.get("schedule", ""), "pool_impl": r.get("pool", ""), "stage": stage}
            if r.get("ok") and base and base.get("ok"):
                fwd, grad = recv.get("forward", {}).get("bytes", 0), recv.get("grad", {}).get("bytes", 0)
                b = base["recv"].get(stage, {})
                row.update(recv_forward_bytes=fwd, recv_grad_bytes=grad, recv_bytes=fwd + grad,
                           stock_recv_bytes=b.get("forward", {}).get("bytes", 0) + b.get("grad", {}).get("bytes", 0),
                           losses_equal_stock=r["losses"] == base["losses"],
                           params_equal_stock=r["params_sha256"] == base["params_sha256"],
                           step_time_ratio=round(_steady(r["step_s"]) / _steady(base["step_s"]), 3),
                           outcome="ok")
                rings = r.get("rings", {}).get(stage, {})
                if rings:  # pooled: sets per ring and copy-on-conflict re-homes over the run (all directions)
                    row["ring_sets"] = " ".join(f"{d}:{v['size']}" for d, v in sorted(rings.items()))
                    row["rehomes"] = sum(v.get("rehomes") or 0 for v in rings.values())
                eval_base = by.get((pp, EVAL_BASELINE, rank))
                if r.get("eval_sha256") and eval_base and eval_base.get("eval_sha256"):
                    row["eval_equal_stock"] = r["eval_sha256"] == eval_base["eval_sha256"]
            else:
                row.update(outcome=r.get("error_type", "no baseline"), losses_equal_stock="", params_equal_stock="")
            expected = EXPECT.get(variant, "bitwise")
            if expected == "bitwise":
                row["claim_ok"] = (row["outcome"] == "ok" and row["losses_equal_stock"] and row["params_equal_stock"]
                                   and row.get("eval_equal_stock") is not False)
            elif expected in ("diverges", "eval_diverges"):
                row["claim_ok"] = row["outcome"] == "ok"  # judged per variant below (any rank differs)
            else:
                row["claim_ok"] = None  # judged per variant below (some rank raised it)
            rows.append(row)
    # per-variant claims that span ranks
    for variant, expected in EXPECT.items():
        for pp in {r["pp"] for r in rows}:
            mine = [r for r in rows if r["variant"] == variant and r["pp"] == pp]
            if expected == "diverges":
                ok = bool(mine) and all(r["outcome"] == "ok" for r in mine) and \
                    any(r["params_equal_stock"] is False or r["losses_equal_stock"] is False for r in mine)
            elif expected == "eval_diverges":
                ok = bool(mine) and all(r["outcome"] == "ok" for r in mine) and \
                    any(r.get("eval_equal_stock") is False for r in mine)
            else:
                ok = any(r["outcome"] == expected for r in mine)
            for r in mine:
                r["claim_ok"] = ok
    return rows


def run_trainer(trainer: str, pps: list[int], out: Path, python: str, steps: int, microbatches: int,
                timeout_s: float) -> tuple[list[dict], list[str]]:
    problems: list[str] = []
    for pp in pps:
        for i, variants in enumerate(LAUNCHES[trainer]):
            ldir = out / f"pp{pp}" / f"launch{i}"
            ldir.mkdir(parents=True, exist_ok=True)
            (ldir / "records.jsonl").unlink(missing_ok=True)
            argv = [str(ROOT / "tools/integration" / f"{trainer}_rank.py"), "--pp", str(pp),
                    "--variants", ",".join(variants), "--out", str(ldir / "records.jsonl"),
                    "--steps", str(steps), "--microbatches", str(microbatches)]
            codes, wall = launch(argv, world=pp, timeout_s=timeout_s, log_dir=ldir, python=python)
            expect_fail = any(EXPECT.get(v) == "PoolOverrunError" for v in variants)
            print(f"[integration] {trainer} pp{pp} launch{i} ({','.join(variants)}): exit {codes}, {wall:.1f} s",
                  flush=True)
            if None in codes:
                problems.append(f"{trainer} pp{pp} launch{i}: timed out after {timeout_s:.0f} s (see {ldir})")
            elif any(codes) and not expect_fail:
                problems.append(f"{trainer} pp{pp} launch{i}: rank exit codes {codes} (see {ldir}/rank*.log)")
    records = []
    for pp in pps:
        records += _records(out / f"pp{pp}")
    return records, problems


def write_rows(out: Path, rows: list[dict], trainer: str) -> list[str]:
    """Write ``out/rows.csv`` (the suite's table); return one problem per (pp, variant) whose claim failed."""
    with open(out / "rows.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k, "") for k in COLUMNS})
    failed = sorted({(r["pp"], r["variant"]) for r in rows if r["claim_ok"] is not True})
    return [f"{trainer} pp{pp} {variant}: claim failed (see {out / 'rows.csv'})" for pp, variant in failed]


def finish(problems: list[str]) -> int:
    """Print every problem and return the suite's exit status (1 when there is any)."""
    for line in problems:
        print(f"[integration] FAIL {line}", file=sys.stderr)
    return 1 if problems else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainer", choices=sorted(LAUNCHES), required=True)
    p.add_argument("--python", required=True, help="the trainer venv's python")
    p.add_argument("--version", required=True, help="the trainer's version (for the table)")
    p.add_argument("--pp", type=int, nargs="+", default=[2])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    out = args.out / args.trainer
    records, problems = run_trainer(args.trainer, args.pp, out, args.python, args.steps, args.microbatches,
                                    args.timeout)
    rows = compare(records, trainer=args.trainer, version=args.version, steps=args.steps,
                   microbatches=args.microbatches)
    problems += write_rows(out, rows, args.trainer)
    print(f"[integration] {args.trainer}: {len(rows)} rows -> {out / 'rows.csv'}")
    return finish(problems)


if __name__ == "__main__":
    sys.exit(main())
