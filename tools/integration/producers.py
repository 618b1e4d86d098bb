"""NeMo Automodel's own LLM recipe as a log producer: run it pooled and stock, read what it wrote with ``pooltk logs``.

    python tools/integration/producers.py --pp 2 --steps 3 --out reports/integration

Runs in the Automodel venv (.venvs/automodel). Generates a tiny model folder, tokenizer and dataset
(producers_assets.py; nothing downloaded, the Hugging Face libraries run offline), then per variant
launches ``torchrun --nproc-per-node PP tools/integration/producers_rank.py`` (Automodel's recipe
``nemo_automodel.recipes.llm.train_ft``, or the user's entry ``pooltk.integrations.automodel``, on a
CPU torch with gloo; see [Note: what the CPU shim changes] there). The recipe writes its own two
logs: the text log (rank 0's log lines, saved as ``train.log`` from torchrun's output) and
``training.jsonl`` (its JSONL metric logger, in the variant's ``checkpoint_dir``).

Variants (:data:`VARIANTS`): ``stock`` (Automodel's command, its pool off), ``automodel_pool``
(Automodel's command with its own ``pp_recv_buffer_pool``), ``pooltk`` (``python -m
pooltk.integrations.automodel`` with a ``pooltk:`` block). Claims checked per variant
(:data:`CLAIMS`), each a row of ``OUT/automodel_recipe/claims.csv``:

- ``launch``: torchrun exits 0;
- ``recipe_steps``: the JSONL (read with ``json``, not pooltk) holds exactly steps 0..STEPS-1;
- ``text_steps`` / ``jsonl_steps``: ``pooltk logs FILE --json`` reads each file alone as one run of
  its format with those steps; final loss: the JSONL's last loss exactly, the text log's to its 4
  printed decimals;
- ``text_pool``: the text log's pool columns say what the variant is (:data:`EXPECTED_POOL`);
- ``jsonl_pool``: the JSONL alone carries no pool facts, so its pool columns are empty;
- ``folder``: the variant's folder (text log and JSONL together) reads as one run with those steps
  and the text log's pool columns;
- ``losses_equal_stock``: the JSONL's losses (full precision) equal the stock run's, bitwise.

Exit 1 when any claim fails; ``--logs-only`` re-reads what an earlier run left under ``--out``.
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
from producers_assets import write_assets, write_recipe  # noqa: E402
from ranks import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

VARIANTS: dict[str, str] = {"stock": "stock", "automodel_pool": "stock", "pooltk": "pooltk"}
"""Variant -> producers_rank.py ``--entry`` (its pool keys: producers_assets.POOLS)."""

EXPECTED_POOL: dict[str, dict] = {
    # Automodel logs nothing about a pool it did not install, so a stock log is silent (unknown, not False).
    "stock": {"pooled": None, "pool_impl": None, "slack": None},
    "automodel_pool": {"pooled": True, "pool_impl": "automodel", "slack": 2},
    "pooltk": {"pooled": True, "pool_impl": "pooltk", "slack": 2},
}
"""What ``pooltk logs`` must read as the pool columns of each variant's text log."""

NO_POOL = {"pooled": None, "pool_impl": None, "slack": None}
CLAIMS = ("launch", "recipe_steps", "text_steps", "text_pool", "jsonl_steps", "jsonl_pool", "folder",
          "losses_equal_stock")
COLUMNS = ["pp", "variant", "claim", "expected", "found", "ok"]


def launch(variant: str, run_dir: Path, assets: Path, *, pp: int, steps: int, python: str,
           timeout_s: float) -> tuple[int | None, float]:
    """torchrun one variant (its stdout and stderr are ``run_dir/train.log``); returns exit code (None: timed out), wall s."""
    for stale in ("train.log", "training.jsonl"):
        (run_dir / stale).unlink(missing_ok=True)
    cfg = write_recipe(variant, assets, run_dir, pp=pp, steps=steps)
    argv = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(pp), "--master-addr", "127.0.0.1",
            "--master-port", str(free_port()), str(ROOT / "tools/integration/producers_rank.py"),
            "--entry", VARIANTS[variant], "-c", str(cfg)]
    offline = {k: "1" for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
    env = dict(os.environ, **offline, HF_HOME=str(assets / "hf_home"), OMP_NUM_THREADS="1", PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    start = time.monotonic()
    with open(run_dir / "train.log", "w") as log:
        try:
            code: int | None = subprocess.run(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            code = None
    return code, time.monotonic() - start


def recipe_record(run_dir: Path) -> list[dict]:
    """The recipe's own JSONL records (``json.loads`` per line; no pooltk)."""
    path = run_dir / "training.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def read(python: str, *paths: Path) -> dict:
    """``pooltk logs PATHS --json`` (run with ``python``): {"runs": [...], "files": [...]} or {"error": text}."""
    proc = subprocess.run([python, "-m", "pooltk", "logs", *map(str, paths), "--json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip()[-400:]}
    return json.loads(proc.stdout)


def _one_run(found: dict) -> tuple[dict | None, str]:
    if "error" in found:
        return None, f"error: {found['error']}"
    if len(found["runs"]) != 1:
        return None, f"{len(found['runs'])} runs: " + "; ".join(f"{r['run']} {r['format']}" for r in found["runs"])
    return found["runs"][0], ""


def _steps(run: dict) -> dict:
    return {k: run.get(k) for k in ("format", "n_steps", "first_step", "last_step", "final_loss")}


def _pool(run: dict) -> dict:
    return {k: run.get(k) for k in NO_POOL}


def steps_claim(found: dict, fmt: str, steps: int, final_loss: float | None) -> tuple[dict, str, bool]:
    """(expected, found, ok) for one read: one run of ``fmt`` (None: any) with steps 0..steps-1 and ``final_loss``."""
    expected = {"format": fmt, "n_steps": steps, "first_step": 0, "last_step": steps - 1, "final_loss": final_loss}
    if fmt is None:  # a folder's run: whichever file's format names it
        expected.pop("format")
    run, why = _one_run(found)
    if run is None:
        return expected, why, False
    got = {k: v for k, v in _steps(run).items() if k in expected}
    return expected, json.dumps(got), got == expected and final_loss is not None


def pool_claim(found: dict, expected: dict) -> tuple[dict, str, bool]:
    """(expected, found, ok): the one run's pooled / pool_impl / slack are ``expected``."""
    run, why = _one_run(found)
    if run is None:
        return expected, why, False
    got = _pool(run)
    return expected, json.dumps(got), got == expected


def judge(variant: str, pp: int, steps: int, code: int | None, record: list[dict], stock_record: list[dict],
          text: dict, jsonl: dict, folder: dict) -> list[dict]:
    """Every claim of :data:`CLAIMS` for one variant, as claims.csv rows."""
    last = record[-1]["loss"] if record else None
    rows = [("launch", 0, code, code == 0)]
    logged = [r.get("step") for r in record]
    rows.append(("recipe_steps", list(range(steps)), logged, logged == list(range(steps))))
    rows.append(("text_steps", *steps_claim(text, "automodel_text", steps, None if last is None else round(last, 4))))
    rows.append(("text_pool", *pool_claim(text, EXPECTED_POOL[variant])))
    rows.append(("jsonl_steps", *steps_claim(jsonl, "automodel_jsonl", steps, last)))
    rows.append(("jsonl_pool", *pool_claim(jsonl, NO_POOL)))
    f_steps = steps_claim(folder, None, steps, last)
    f_pool = pool_claim(folder, EXPECTED_POOL[variant])
    rows.append(("folder", {**f_steps[0], **f_pool[0]}, f"{f_steps[1]} {f_pool[1]}", f_steps[2] and f_pool[2]))
    losses = [r["loss"].hex() for r in record]
    stock = [r["loss"].hex() for r in stock_record]
    rows.append(("losses_equal_stock", stock, losses, bool(stock) and losses == stock))
    return [{"pp": pp, "variant": variant, "claim": c, "expected": e if isinstance(e, str) else json.dumps(e),
             "found": f if isinstance(f, str) else json.dumps(f), "ok": bool(ok)} for c, e, f, ok in rows]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--timeout", type=float, default=400, help="seconds per launch")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reader-python", default=sys.executable,
                   help="the Python that runs `pooltk logs` (needs pooltk[logs]); default: this one")
    p.add_argument("--logs-only", action="store_true", help="launch nothing: re-read the logs already under --out")
    args = p.parse_args(argv)
    if "stock" not in args.variants:
        p.error("--variants must include stock (losses_equal_stock compares against it)")
    out = args.out / "automodel_recipe" / f"pp{args.pp}"
    out.mkdir(parents=True, exist_ok=True)
    assets = write_assets(args.out / "automodel_recipe" / "assets")
    rows, codes = [], {}
    for variant in ["stock", *[v for v in args.variants if v != "stock"]]:
        run_dir = out / variant
        run_dir.mkdir(parents=True, exist_ok=True)
        if args.logs_only:
            codes[variant] = 0
        else:
            codes[variant], wall = launch(variant, run_dir, assets, pp=args.pp, steps=args.steps,
                                          python=sys.executable, timeout_s=args.timeout)
            print(f"[integration] automodel recipe pp{args.pp} {variant}: exit {codes[variant]}, {wall:.1f} s",
                  flush=True)
        text = read(args.reader_python, run_dir / "train.log")
        jsonl = read(args.reader_python, run_dir / "training.jsonl")
        folder = read(args.reader_python, run_dir)
        (run_dir / "pooltk_logs.json").write_text(json.dumps({"train.log": text, "training.jsonl": jsonl,
                                                              "folder": folder}, indent=1, default=str))
        rows += judge(variant, args.pp, args.steps, codes[variant], recipe_record(run_dir),
                      recipe_record(out / "stock"), text, jsonl, folder)
    with open(out / "claims.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    failed = [r for r in rows if not r["ok"]]
    for r in rows:
        print(f"[integration] {'ok  ' if r['ok'] else 'FAIL'} pp{r['pp']} {r['variant']:<15} {r['claim']:<19} "
              f"found {r['found'][:160]}" + ("" if r["ok"] else f"  expected {r['expected'][:160]}"), flush=True)
    print(f"[integration] automodel recipe: {len(rows) - len(failed)}/{len(rows)} claims hold; "
          f"table {out / 'claims.csv'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
