"""The trainers as log producers: Automodel's own LLM recipe and torchtitan's trainer, pooled and \
stock, on CPU.

    python tools/integration/producers.py --pp 2 --steps 3 \
        --out reports/integration  # Automodel
    python tools/integration/producers.py --trainer torchtitan \
        --out reports/integration  # torchtitan

What each wrote is read back with ``pooltk logs`` and checked against the run itself.

Runs in the Automodel venv (.venvs/automodel). Generates a tiny model folder, tokenizer and dataset
(producers_assets.py; nothing downloaded, the Hugging Face libraries run offline), then per variant
launches ``torchrun --nproc-per-node PP tools/integration/producers_rank.py`` (Automodel's recipe
``nemo_automodel.recipes.llm.train_ft``, or the user's entry ``pooltk.integrations.automodel``, on a
CPU torch with gloo; see [Note: what the CPU shim changes] there). The recipe writes its own logs:
the text log (rank 0's log lines with its ``[val]`` records, saved as ``train.log`` from torchrun's
output), ``training.jsonl`` and ``validation.jsonl`` (its JSONL metric loggers, in the variant's
``checkpoint_dir``).

Variants (:data:`VARIANTS`): ``stock`` (Automodel's command, its pool off), ``automodel_pool``
(Automodel's command with its own ``pp_recv_buffer_pool``), ``pooltk`` (``python -m
pooltk.integrations.automodel`` with a ``pooltk:`` block), ``stock_logdir`` (stock, with torchrun
keeping per-rank files). Claims checked per variant
(:data:`CLAIMS`), each a row of ``OUT/automodel_recipe/ppPP/claims.csv``:

- ``launch``: torchrun exits 0;
- ``recipe_steps``: the JSONL (read with ``json``, not pooltk) holds exactly steps 0..STEPS-1;
- ``text_steps`` / ``jsonl_steps``: ``pooltk logs FILE --json`` reads each file alone as one run of
  its format with those steps; final loss: the JSONL's last loss exactly, the text log's to its 4
  printed decimals;
- ``text_pool``: the text log's pool columns say what the variant is (:data:`EXPECTED_POOL`);
- ``jsonl_pool``: the JSONL alone carries no pool facts, so its pool columns are empty;
- ``folder``: the variant's folder (the text log and both JSONL files together) reads as one run
  with those steps and the text log's pool columns;
- ``val_steps``: the validation records ``pooltk logs`` reads (``read_logs(folder).steps``, kind
  ``val``) are, from the text log and from ``validation.jsonl`` each, the steps and losses of the
  recipe's ``validation.jsonl`` (read with ``json``; the text's to 4 decimals), and at least one;
- ``losses_equal_stock``: the JSONL's training and validation losses (full precision) equal the
  stock run's, bitwise;
- ``logdir`` (``stock_logdir`` only: launched with ``--log-dir --redirects 3 --tee 3 --role rank``,
  so train.log carries torchrun's ``[rankN]:`` prefixes): torchrun's per-rank file tree reads as one
  run of those steps (rank 1's files hold no record: Automodel logs on rank 0 only).

``stock_relaunch`` is a second stock launch into a folder holding the stock launch's three logs
(copied as written; Automodel appends to its JSONL files, the console is appended to train.log): its
claims (:data:`RELAUNCH_CLAIMS`) are ``launch``, ``recipe_steps`` (the JSONL holds 0..STEPS-1 twice)
and ``relaunch_text`` / ``relaunch_jsonl`` / ``relaunch_folder``: the text log, the JSONL and the
folder each read as two runs of steps 0..STEPS-1 with each launch's final loss.

``--trainer torchtitan`` (run in .venvs/torchtitan) does the same for torchtitan's trainer:
titan_suite.py's launch of ``torchtitan.train`` through ``pooltk.integrations.torchtitan``
(``stock``: ``--pooltk.enable false``; ``pooltk_tight``), PP ``--pp``, in a fresh dump folder. Its
two logs: ``train.log`` (torchrun's ``[rankN]:`` output of torchtitan's text log) and
``dump/structured_logs/*.jsonl`` (torchtitan's structured per-rank JSONL: step spans, no loss).
Claims (:data:`TITAN_CLAIMS`, rows of ``OUT/torchtitan_trainer/ppPP/claims.csv``): ``launch``;
``recipe_steps`` (every rank's ``step_end`` records, read with ``json``, are steps 1..STEPS);
``text_steps`` (one ``torchtitan`` run, steps 1..STEPS, final loss the last stage's logged loss to
torchtitan's 5 printed decimals); ``text_pool`` (:data:`TITAN_EXPECTED_POOL`); ``jsonl_steps`` (the
structured_logs folder: one ``torchtitan_jsonl`` run, steps 1..STEPS, no loss); ``jsonl_pool``
(empty); ``losses_equal_stock``; and once, on the last variant's rows, ``relaunch``: both launches'
structured logs in one folder (what a second launch with the same ``--dump_folder`` leaves; each
file name carries its process's start stamp) read as two runs of steps 1..STEPS.

Exit 1 when any claim fails; ``--logs-only`` re-reads what an earlier run left under ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producers_assets import write_assets, write_recipe  # noqa: E402
from ranks import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

LOG_DIR = "torchrun_logs"
"""``<variant>_torchrun_logs`` beside the variant's folder: torchrun's ``--log-dir`` tree
(``<run id>/attempt_0/<rank>/std{out,err}.log``), kept out of the folder the recipe writes."""


def log_dir(run_dir: Path) -> Path:
    """Where a variant launched with ``--log-dir`` has torchrun keep its per-rank files."""
    return run_dir.with_name(f"{run_dir.name}_{LOG_DIR}")


VARIANTS: dict[str, dict] = {
    "stock": {"entry": "stock", "pool": "stock", "torchrun": []},
    "automodel_pool": {"entry": "stock", "pool": "automodel_pool", "torchrun": []},
    "pooltk": {"entry": "pooltk", "pool": "pooltk", "torchrun": []},
    # stock again, launched the way a job keeps per-rank files: [rankN]: prefixes on the console, a
    # --log-dir tree
    "stock_logdir": {
        "entry": "stock",
        "pool": "stock",
        "torchrun": ["--log-dir", LOG_DIR, "--redirects", "3", "--tee", "3", "--role", "rank"],
    },
    # a second launch into a folder holding stock's logs (copied): Automodel appends to its JSONL
    # files, the console is appended (>>)
    "stock_relaunch": {"entry": "stock", "pool": "stock", "torchrun": [], "launches": 2},
}
"""Variant -> producers_rank.py ``--entry``, its pool keys (producers_assets.POOLS) and torchrun's
own flags (``--log-dir`` goes to :func:`log_dir`)."""

EXPECTED_POOL: dict[str, dict] = {
    # Automodel logs nothing about a pool it did not install, so a stock log is silent (unknown, not
    # False).
    "stock": {"pooled": None, "pool_impl": None, "slack": None},
    "automodel_pool": {"pooled": True, "pool_impl": "automodel", "slack": 2},
    "pooltk": {"pooled": True, "pool_impl": "pooltk", "slack": 2},
    "stock_logdir": {"pooled": None, "pool_impl": None, "slack": None},
    "stock_relaunch": {"pooled": None, "pool_impl": None, "slack": None},
}
"""What ``pooltk logs`` must read as the pool columns of each variant's text log."""

NO_POOL = {"pooled": None, "pool_impl": None, "slack": None}
CLAIMS = (
    "launch",
    "recipe_steps",
    "text_steps",
    "text_pool",
    "jsonl_steps",
    "jsonl_pool",
    "folder",
    "val_steps",
    "losses_equal_stock",
)
"""Every variant's claims; a variant launched with ``--log-dir`` adds ``logdir``
(:func:`claims_of`)."""


RELAUNCH_CLAIMS = ("launch", "recipe_steps", "relaunch_text", "relaunch_jsonl", "relaunch_folder")
"""A variant launched more than once into one folder: each log reads as one run per launch."""


def claims_of(variant: str) -> tuple[str, ...]:
    """The claims checked for one Automodel variant."""
    if VARIANTS[variant].get("launches", 1) > 1:
        return RELAUNCH_CLAIMS
    return (*CLAIMS, "logdir") if LOG_DIR in VARIANTS[variant]["torchrun"] else CLAIMS


COLUMNS = ["pp", "variant", "claim", "expected", "found", "ok"]

TITAN_EXPECTED_POOL: dict[str, dict] = {
    # the entry logs `pooltk: not installed (reason=--pooltk.enable false ...)`: a stock run reads
    # as not pooled
    "stock": {"pooled": False, "pool_impl": "pooltk", "slack": None},
    "pooltk_tight": {"pooled": True, "pool_impl": "pooltk", "slack": 2},
}
"""torchtitan variants (titan_suite.VARIANTS names) -> the pool columns their train.log must read
as."""

TITAN_MICROBATCHES = 8
"""Microbatches a step of the torchtitan runs (one 64-token row each, as titan_suite runs them)."""

TITAN_CLAIMS = (
    "launch",
    "recipe_steps",
    "text_steps",
    "text_pool",
    "jsonl_steps",
    "jsonl_pool",
    "losses_equal_stock",
)


def launch(
    variant: str,
    run_dir: Path,
    assets: Path,
    *,
    pp: int,
    steps: int,
    python: str,
    timeout_s: float,
    again: bool = False,
) -> tuple[int | None, float]:
    """torchrun one variant (stdout and stderr: ``run_dir/train.log``); exit code (None: timed out),
    wall s.

    ``again``: a further launch into the same folder: nothing is removed and train.log is appended
    to.
    """
    for stale in () if again else ("train.log", "training.jsonl", "validation.jsonl"):
        (run_dir / stale).unlink(missing_ok=True)
    spec = VARIANTS[variant]
    cfg = write_recipe(spec["pool"], assets, run_dir, pp=pp, steps=steps)
    shutil.rmtree(log_dir(run_dir), ignore_errors=True)
    flags = [str(log_dir(run_dir)) if f == LOG_DIR else f for f in spec["torchrun"]]
    argv = [
        python,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(pp),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        *flags,
        str(ROOT / "tools/integration/producers_rank.py"),
        "--entry",
        spec["entry"],
        "-c",
        str(cfg),
    ]
    offline = {k: "1" for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE")}
    env = dict(
        os.environ,
        **offline,
        HF_HOME=str(assets / "hf_home"),
        OMP_NUM_THREADS="1",
        PYTHONHASHSEED="0",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    start = time.monotonic()
    with open(run_dir / "train.log", "a" if again else "w") as log:
        try:
            code: int | None = subprocess.run(
                argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            code = None
    return code, time.monotonic() - start


def recipe_record(run_dir: Path, name: str = "training.jsonl") -> list[dict]:
    """The recipe's own JSONL records (``json.loads`` per line; no pooltk)."""
    path = run_dir / name
    return (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    )


_VAL_ROWS = (
    "import json, sys\nfrom pooltk.logs import read_logs\ns = read_logs([sys.argv[1]]).steps\n"
    "v = s[s['kind'] == 'val']\n"
    "print(json.dumps([{'file': str(f).rsplit('/', 1)[-1], 'step': int(t), "
    "'loss': float(x)} for f, t, x in zip(v['source_file'], v['step'], v['loss'])]))"
)


def read_val(python: str, folder: Path) -> dict[str, list] | str:
    """Validation rows ``pooltk.logs.read_logs`` reads in ``folder``: file name ->
    [[step, loss], ...], or an error."""
    proc = subprocess.run(
        [python, "-c", _VAL_ROWS, str(folder)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    if proc.returncode != 0:
        return "error: " + (proc.stderr or proc.stdout).strip()[-400:]
    out: dict[str, list] = {}
    for row in json.loads(proc.stdout):
        out.setdefault(row["file"], []).append([row["step"], row["loss"]])
    return out


def val_claim(found: dict[str, list] | str, truth: list[dict]) -> tuple[dict, str, bool]:
    """Text log and validation.jsonl each read to the recipe's validation steps and losses."""
    exact = [[r["step"], r["val_loss"]] for r in truth]
    expected = {"train.log": [[s, round(x, 4)] for s, x in exact], "validation.jsonl": exact}
    if isinstance(found, str):
        return expected, found, False
    got = {k: found.get(k, []) for k in expected}
    return expected, json.dumps(got), bool(exact) and got == expected


def read(python: str, *paths: Path) -> dict:
    """``pooltk logs PATHS --json`` (run with ``python``): {"runs": [...], "files": [...]} or
    {"error": text}."""
    proc = subprocess.run(
        [python, "-m", "pooltk", "logs", *map(str, paths), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip()[-400:]}
    return json.loads(proc.stdout)


def _one_run(found: dict) -> tuple[dict | None, str]:
    if "error" in found:
        return None, f"error: {found['error']}"
    if len(found["runs"]) != 1:
        return None, f"{len(found['runs'])} runs: " + "; ".join(
            f"{r['run']} {r['format']}" for r in found["runs"]
        )
    return found["runs"][0], ""


def run_claim(found: dict, expected: dict) -> tuple[dict, str, bool]:
    """(expected, found, ok) for one read: exactly one run, whose fields named in ``expected`` are
    those values."""
    run, why = _one_run(found)
    if run is None:
        return expected, why, False
    got = {k: run.get(k) for k in expected}
    return expected, json.dumps(got), got == expected


def steps_claim(
    found: dict, fmt: str | None, steps: int, final_loss: float | None
) -> tuple[dict, str, bool]:
    """One run of ``fmt`` (None: any) with steps 0..steps-1 and ``final_loss`` (None: the truth is
    unknown, fails)."""
    expected = {
        "format": fmt,
        "n_steps": steps,
        "first_step": 0,
        "last_step": steps - 1,
        "final_loss": final_loss,
    }
    if fmt is None:  # a folder's run: whichever file's format names it
        expected.pop("format")
    exp, got, ok = run_claim(found, expected)
    return exp, got, ok and final_loss is not None


def pool_claim(found: dict, expected: dict) -> tuple[dict, str, bool]:
    """The one run's pooled / pool_impl / slack are ``expected``."""
    return run_claim(found, expected)


def judge(
    variant: str,
    pp: int,
    steps: int,
    code: int | None,
    record: list[dict],
    stock_record: list[dict],
    text: dict,
    jsonl: dict,
    folder: dict,
    val: tuple[dict[str, list] | str, list[dict]],
    stock_val: list[dict],
    logdir: dict | None = None,
) -> list[dict]:
    """Every claim of :data:`CLAIMS` for one variant, as claims.csv rows.

    ``record`` / ``stock_record``: training.jsonl's records of this variant and of stock; ``val``:
    the validation rows pooltk read and this variant's validation.jsonl records; ``stock_val``:
    stock's; ``logdir``: what ``pooltk logs`` read from torchrun's ``--log-dir`` tree (None:
    launched without one).
    """
    last = record[-1]["loss"] if record else None
    rows = [("launch", 0, code, code == 0)]
    logged = [r.get("step") for r in record]
    rows.append(("recipe_steps", list(range(steps)), logged, logged == list(range(steps))))
    rows.append(
        (
            "text_steps",
            *steps_claim(text, "automodel_text", steps, None if last is None else round(last, 4)),
        )
    )
    rows.append(("text_pool", *pool_claim(text, EXPECTED_POOL[variant])))
    rows.append(("jsonl_steps", *steps_claim(jsonl, "automodel_jsonl", steps, last)))
    rows.append(("jsonl_pool", *pool_claim(jsonl, NO_POOL)))
    f_steps = steps_claim(folder, None, steps, last)
    f_pool = pool_claim(folder, EXPECTED_POOL[variant])
    rows.append(
        (
            "folder",
            {**f_steps[0], **f_pool[0]},
            f"{f_steps[1]} {f_pool[1]}",
            f_steps[2] and f_pool[2],
        )
    )
    rows.append(("val_steps", *val_claim(*val)))
    val_found, val_truth = val
    losses = [r["loss"].hex() for r in record] + [f"val {r['val_loss'].hex()}" for r in val_truth]
    stock = [r["loss"].hex() for r in stock_record] + [
        f"val {r['val_loss'].hex()}" for r in stock_val
    ]
    rows.append(("losses_equal_stock", stock, losses, bool(stock) and losses == stock))
    if logdir is not None:
        rows.append(
            (
                "logdir",
                *steps_claim(
                    logdir, "automodel_text", steps, None if last is None else round(last, 4)
                ),
            )
        )
    return [
        {
            "pp": pp,
            "variant": variant,
            "claim": c,
            "expected": e if isinstance(e, str) else json.dumps(e),
            "found": f if isinstance(f, str) else json.dumps(f),
            "ok": bool(ok),
        }
        for c, e, f, ok in rows
    ]


def judge_relaunch(
    variant: str,
    pp: int,
    steps: int,
    code: int | None,
    record: list[dict],
    text: dict,
    jsonl: dict,
    folder: dict,
) -> list[dict]:
    """:data:`RELAUNCH_CLAIMS` for a variant launched twice into one folder (``record``: both
    launches' JSONL)."""
    launches = VARIANTS[variant]["launches"]
    logged = [r.get("step") for r in record]
    lasts = (
        [record[(k + 1) * steps - 1]["loss"] for k in range(launches)]
        if len(record) == launches * steps
        else []
    )

    def runs(found: dict, losses: list) -> tuple[list, str, bool]:
        expected = [
            {"n_steps": steps, "first_step": 0, "last_step": steps - 1, "final_loss": x}
            for x in losses
        ]
        if "error" in found:
            return expected, f"error: {found['error']}", False
        got = [
            {k: r.get(k) for k in ("n_steps", "first_step", "last_step", "final_loss")}
            for r in found["runs"]
        ]
        return expected, json.dumps(got), bool(losses) and got == expected

    rows = [
        ("launch", 0, code, code == 0),
        (
            "recipe_steps",
            list(range(steps)) * launches,
            logged,
            logged == list(range(steps)) * launches,
        ),
        ("relaunch_text", *runs(text, [round(x, 4) for x in lasts])),
        ("relaunch_jsonl", *runs(jsonl, lasts)),
        ("relaunch_folder", *runs(folder, lasts)),
    ]
    return [
        {
            "pp": pp,
            "variant": variant,
            "claim": c,
            "expected": e if isinstance(e, str) else json.dumps(e),
            "found": f if isinstance(f, str) else json.dumps(f),
            "ok": bool(ok),
        }
        for c, e, f, ok in rows
    ]


def step_ends(folder: Path) -> dict[int, list[int]]:
    """Every rank's ``step_end`` steps in torchtitan's structured JSONL under ``folder``
    (``json.loads``; no pooltk)."""
    out: dict[int, list[int]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            rec = json.loads(line) if line.strip() else {}
            if rec.get("log_type_name") == "step_end":
                out.setdefault(int(rec["global_rank"]), []).append(rec.get("step"))
    return out


def judge_titan(
    variant: str,
    pp: int,
    steps: int,
    code: int | None,
    ends: dict[int, list[int]],
    losses: list[str],
    stock_losses: list[str],
    text: dict,
    jsonl: dict,
) -> list[dict]:
    """Every claim of :data:`TITAN_CLAIMS` for one torchtitan variant; ``losses``: the last stage's,
    float.hex."""
    want = {r: list(range(1, steps + 1)) for r in range(pp)}
    last = round(float.fromhex(losses[-1]), 5) if losses else None
    rows = [("launch", 0, code, code == 0), ("recipe_steps", want, ends, ends == want)]
    exp, found, ok = run_claim(
        text,
        {
            "format": "torchtitan",
            "n_steps": steps,
            "first_step": 1,
            "last_step": steps,
            "final_loss": last,
        },
    )
    rows.append(("text_steps", exp, found, ok and last is not None))
    rows.append(("text_pool", *pool_claim(text, TITAN_EXPECTED_POOL[variant])))
    rows.append(
        (
            "jsonl_steps",
            *run_claim(
                jsonl,
                {
                    "format": "torchtitan_jsonl",
                    "n_steps": steps,
                    "first_step": 1,
                    "last_step": steps,
                    "final_loss": None,
                },
            ),
        )
    )
    rows.append(("jsonl_pool", *pool_claim(jsonl, NO_POOL)))
    rows.append(
        ("losses_equal_stock", stock_losses, losses, bool(stock_losses) and losses == stock_losses)
    )
    return [
        {
            "pp": pp,
            "variant": variant,
            "claim": c,
            "expected": e if isinstance(e, str) else json.dumps(e),
            "found": f if isinstance(f, str) else json.dumps(f),
            "ok": bool(ok),
        }
        for c, e, f, ok in rows
    ]


def run_titan(args) -> list[dict]:
    """torchtitan's trainer, stock then pooltk_tight, through titan_suite's launch; the claims
    rows."""
    import shutil

    import titan_suite

    out = args.out / "torchtitan_trainer"
    assets = titan_suite.write_assets(out / "assets")
    rows, stock_losses = [], []
    for variant in TITAN_EXPECTED_POOL:
        vdir = out / f"pp{args.pp}" / variant
        if args.logs_only:
            code, recs = 0, titan_suite.collect(variant, args.pp, out)
        else:
            shutil.rmtree(
                vdir / "dump", ignore_errors=True
            )  # one launch's structured logs (see the report)
            code, wall, recs = titan_suite.launch(
                variant,
                args.pp,
                out,
                assets,
                sys.executable,
                args.steps,
                TITAN_MICROBATCHES,
                args.timeout,
            )
            print(
                f"[integration] torchtitan trainer pp{args.pp} {variant}: "
                f"exit {code}, {wall:.1f} s",
                flush=True,
            )
        last = [
            r["losses"]
            for r in recs
            if r.get("ok") and r["losses"] and r["losses"][-1] != (-1.0).hex()
        ]
        losses = last[0] if last else []
        stock_losses = losses if variant == "stock" else stock_losses
        text = read(args.reader_python, vdir / "train.log")
        jsonl = read(args.reader_python, vdir / "dump" / "structured_logs")
        (vdir / "pooltk_logs.json").write_text(
            json.dumps({"train.log": text, "structured_logs": jsonl}, indent=1, default=str)
        )
        rows += judge_titan(
            variant,
            args.pp,
            args.steps,
            code,
            step_ends(vdir / "dump" / "structured_logs"),
            losses,
            stock_losses,
            text,
            jsonl,
        )
    both = out / f"pp{args.pp}" / "relaunch" / "structured_logs"
    shutil.rmtree(both, ignore_errors=True)
    both.mkdir(parents=True)
    for variant in TITAN_EXPECTED_POOL:
        for f in (out / f"pp{args.pp}" / variant / "dump" / "structured_logs").glob("*.jsonl"):
            shutil.copy2(f, both / f.name)
    rows.append(relaunch_claim(read(args.reader_python, both), args.pp, args.steps, variant))
    return rows


def relaunch_claim(found: dict, pp: int, steps: int, variant: str) -> dict:
    """Two launches' structured logs in one folder: two runs, each steps 1..steps."""
    expected = [{"n_steps": steps, "first_step": 1, "last_step": steps}] * 2
    got = (
        found["error"]
        if "error" in found
        else [{k: r.get(k) for k in expected[0]} for r in found["runs"]]
    )
    return {
        "pp": pp,
        "variant": variant,
        "claim": "relaunch",
        "expected": json.dumps(expected),
        "found": got if isinstance(got, str) else json.dumps(got),
        "ok": got == expected,
    }


def run_automodel(args) -> list[dict]:
    """Automodel's recipe, every variant of ``--variants`` (stock first); the claims rows."""
    out = args.out / "automodel_recipe" / f"pp{args.pp}"
    out.mkdir(parents=True, exist_ok=True)
    assets = write_assets(args.out / "automodel_recipe" / "assets")
    rows, codes = [], {}
    for variant in ["stock", *[v for v in args.variants if v != "stock"]]:
        run_dir = out / variant
        run_dir.mkdir(parents=True, exist_ok=True)
        codes[variant] = 0
        launches = VARIANTS[variant].get("launches", 1)
        if (
            launches > 1 and not args.logs_only
        ):  # the first launch is stock's: its three logs, as it wrote them
            for name in ("train.log", "training.jsonl", "validation.jsonl"):
                shutil.copyfile(out / "stock" / name, run_dir / name)
            codes[variant] = codes["stock"]
        first = 1 if launches > 1 else 0  # a relaunch variant's launch 0 is stock's
        for k in [] if args.logs_only else range(first, launches):
            code, wall = launch(
                variant,
                run_dir,
                assets,
                pp=args.pp,
                steps=args.steps,
                python=sys.executable,
                timeout_s=args.timeout,
                again=k > 0,
            )
            codes[variant] = codes[variant] or code
            print(
                f"[integration] automodel recipe pp{args.pp} {variant} launch {k + 1}: "
                f"exit {code}, {wall:.1f} s",
                flush=True,
            )
        text = read(args.reader_python, run_dir / "train.log")
        jsonl = read(args.reader_python, run_dir / "training.jsonl")
        folder = read(args.reader_python, run_dir)
        (run_dir / "pooltk_logs.json").write_text(
            json.dumps(
                {"train.log": text, "training.jsonl": jsonl, "folder": folder},
                indent=1,
                default=str,
            )
        )
        if "relaunch_text" in claims_of(variant):
            rows += judge_relaunch(
                variant,
                args.pp,
                args.steps,
                codes[variant],
                recipe_record(run_dir),
                text,
                jsonl,
                folder,
            )
            continue
        val = (read_val(args.reader_python, run_dir), recipe_record(run_dir, "validation.jsonl"))
        logdir = (
            read(args.reader_python, log_dir(run_dir)) if "logdir" in claims_of(variant) else None
        )
        rows += judge(
            variant,
            args.pp,
            args.steps,
            codes[variant],
            recipe_record(run_dir),
            recipe_record(out / "stock"),
            text,
            jsonl,
            folder,
            val,
            recipe_record(out / "stock", "validation.jsonl"),
            logdir,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--trainer",
        choices=["automodel", "torchtitan"],
        default="automodel",
        help="whose trainer to run (in that trainer's venv)",
    )
    p.add_argument("--pp", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        choices=list(VARIANTS),
        help="Automodel variants (torchtitan: always stock and pooltk_tight)",
    )
    p.add_argument("--timeout", type=float, default=400, help="seconds per launch")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument(
        "--reader-python",
        default=sys.executable,
        help="the Python that runs `pooltk logs` (needs pooltk[logs]); default: this one",
    )
    p.add_argument(
        "--logs-only",
        action="store_true",
        help="launch nothing: re-read the logs already under --out",
    )
    args = p.parse_args(argv)
    if "stock" not in args.variants:
        p.error("--variants must include stock (losses_equal_stock compares against it)")
    rows = run_titan(args) if args.trainer == "torchtitan" else run_automodel(args)
    table = (
        args.out
        / ("torchtitan_trainer" if args.trainer == "torchtitan" else "automodel_recipe")
        / f"pp{args.pp}"
        / "claims.csv"
    )
    table.parent.mkdir(parents=True, exist_ok=True)
    with open(table, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    failed = [r for r in rows if not r["ok"]]
    for r in rows:
        print(
            f"[integration] {'ok  ' if r['ok'] else 'FAIL'} pp{r['pp']} {r['variant']:<15} "
            f"{r['claim']:<19} "
            f"found {r['found'][:160]}" + ("" if r["ok"] else f"  expected {r['expected'][:160]}"),
            flush=True,
        )
    print(
        f"[integration] {args.trainer} producers: {len(rows) - len(failed)}/{len(rows)} "
        f"claims hold; table {table}",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
