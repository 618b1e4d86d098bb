"""The integration suite: real trainers, every pool variant, judged against stock and fresh.

Usage (from scripts/integration, which builds the venvs first)::

    python tools/integration/run_suite.py --trainer automodel --pp 2 4 --out reports/integration

Per trainer and pipeline size it runs the launches of ``LAUNCHES`` (variants that install a
pool that cannot be undone, or that are expected to fail, come last in a launch), then writes
``rows.csv``: one row per (variant, stage) with receive bytes, bitwise parity with the stock
run and with the fresh run of the same schedule (``fresh``: stock with every receive in a new
buffer, ``pooltk.parity.fresh``), the three-way verdict, step-time ratio and outcome. Exit status
1 when any claim fails (see [Note: trainer verdicts]) or a launch did not finish.

[Note: trainer verdicts]
The verdicts of ``pooltk.parity.summary`` ([Note: three-way verdicts]), per row (variant,
stage), from the rank's losses (float bit patterns), a sha256 of its parameter bytes and, for
``*_alias_eval``, a sha256 of the merged output of its forward-only step:

- ``equal``: equal to stock bitwise; ``explained``: equal to fresh while stock differs from
  fresh (stock's numbers depend on buffer reuse; the reason: hooks piling up on a stock buffer,
  measured, else a kept tensor); ``silent``: differs from fresh with no error;
- a variant that raised is judged as one case on every rank: ``loud`` when some rank's error
  names pooltk (its peers then stop on the broken group), else ``unnamed``; ``invalid`` when
  the stock or fresh run it is judged against did not run.

The references (``stock*``, ``fresh*``) get no verdict; a fresh row carries ``stock_equal_fresh``
and its claim is that every receive landed in a new storage (``posts`` = ``post_storages`` > 0).
Claims per (pp, variant): a pooled variant equals fresh bitwise with verdict ``equal`` or
``explained`` on every stage; the negative controls of ``EXPECT`` are ``silent`` (Automodel's
pool outside its gate, caught by the judge) or ``loud`` with ``PoolOverrunError`` (pooltk's
guard).
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

from pooltk.analysis.lifetimes import DIRECTIONS  # noqa: E402
from pooltk.parity.summary import HOOKS_REASON, KEPT_REASON, VERDICTS, names_pooltk  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

LAUNCHES: dict[str, list[list[str]]] = {
    "automodel": [
        [
            "stock",
            "fresh",
            "pooltk_tight",
            "pooltk_live",
            "pooltk_automodel_policy",
            "stock_interleaved",
            "fresh_interleaved",
            "pooltk_auto_interleaved",
            "stock_gpipe",
            "fresh_gpipe",
            "stock_alias_eval",
            "fresh_alias_eval",
            "pooltk_alias_eval",
            "stock_input_hook",
            "fresh_input_hook",
            "pooltk_input_hook",
            "automodel_pool_s2",
        ],
        ["automodel_pool_s0", "automodel_pool_gpipe_forced"],
        ["automodel_pool_alias_eval"],
        ["pooltk_gpipe_forced"],
    ],
}
BASELINE = {"1f1b": "stock", "Interleaved1F1B": "stock_interleaved", "gpipe": "stock_gpipe"}
FRESH = {"1f1b": "fresh", "Interleaved1F1B": "fresh_interleaved", "gpipe": "fresh_gpipe"}
"""The fresh run of each schedule: stock torch with every receive in a newly allocated buffer."""
HOOKED = ("stock_input_hook", "fresh_input_hook")
"""The stock and fresh runs of the model that hooks its received input (records with
``input_hook``)."""
EVAL_BASELINE = "stock_alias_eval"
"""The stock run of the forward-only step whose last stage returns a view of its input."""
EVAL_FRESH = "fresh_alias_eval"
"""The same step with fresh buffers."""
REFERENCES = frozenset([*BASELINE.values(), *FRESH.values(), *HOOKED, EVAL_BASELINE, EVAL_FRESH])
"""Variants that are judged against, not judged (no verdict)."""
EXPECT = {
    # variant -> what a correct run shows (the claims the suite checks); every other variant:
    # "bitwise"
    # the original, forced outside its gate: differs from fresh
    "automodel_pool_gpipe_forced": "silent",
    "pooltk_gpipe_forced": "PoolOverrunError",  # pooltk's guard stops it: loud
    "automodel_pool_alias_eval": "silent",  # the original hands out outputs it then overwrites
}
COLUMNS = [
    "trainer",
    "trainer_version",
    "torch",
    "pp",
    "microbatches",
    "steps",
    "variant",
    "schedule",
    "pool_impl",
    "stage",
    "recv_forward_bytes",
    "recv_grad_bytes",
    "recv_bytes",
    "stock_recv_bytes",
    "losses_equal_stock",
    "params_equal_stock",
    "step_time_ratio",
    "outcome",
    "claim_ok",
    "eval_equal_stock",
    "ring_sets",
    "rehomes",
    "equal_stock",
    "equal_fresh",
    "stock_equal_fresh",
    "verdict",
    "reason",
    "posts",
    "post_storages",
    "rank_recv_bytes",
    "stock_rank_recv_bytes",
]


def _records(out: Path) -> list[dict]:
    rows = []
    for f in sorted(out.glob("launch*/records.jsonl")):
        rows += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return rows


def _bytes(recv: dict) -> int:
    """Receive bytes of one measurement (``measure_*recv_storage``), both directions."""
    return sum(recv.get(d, {}).get("bytes", 0) for d in DIRECTIONS)


def _steady(times: list[float]) -> float:
    return statistics.median(times[1:] if len(times) > 1 else times)


def _refs(
    by: dict, pp: int, r: dict, rank: int
) -> tuple[dict | None, dict | None, dict | None, dict | None]:
    """The stock and fresh runs ``r`` is judged against: (train stock, train fresh, eval stock, eval
    fresh)."""
    schedule = r.get("schedule", "")
    stock, fresh = (
        HOOKED
        if r.get("input_hook")
        else (BASELINE.get(schedule, "stock"), FRESH.get(schedule, "fresh"))
    )
    return (
        by.get((pp, stock, rank)),
        by.get((pp, fresh, rank)),
        by.get((pp, EVAL_BASELINE, rank)),
        by.get((pp, EVAL_FRESH, rank)),
    )


def equal(r: dict | None, base: dict | None, eval_base: dict | None) -> dict | None:
    """``r`` against one reference, bitwise: {losses, params[, eval]}; None when either did not run.

    ``eval`` is compared when ``r`` carries an eval digest (its last stage's forward-only step);
    then a reference without one is not a comparison (None), never a pass.
    """
    if not (r and r.get("ok") and base and base.get("ok")):
        return None
    out = {
        "losses": r["losses"] == base["losses"],
        "params": r["params_sha256"] == base["params_sha256"],
    }
    if r.get("eval_sha256"):
        if not (eval_base and eval_base.get("ok") and eval_base.get("eval_sha256")):
            return None
        out["eval"] = r["eval_sha256"] == eval_base["eval_sha256"]
    return out


def _all(parts: dict | None) -> bool | None:
    return None if parts is None else all(parts.values())


def _most_hooks(records: list[dict]) -> int:
    return max(
        (n for r in records for per in r.get("hooks", {}).values() for n in per.values()), default=0
    )


def reuse_reason(stocks: list[dict], freshes: list[dict], steps: int) -> str:
    """Why stock's numbers depend on buffer reuse, in pooltk.parity.summary's words.

    Per case, over every rank of the stock and fresh runs: hooks piling up are measured (the
    most gradient hooks on one stock receive buffer at the end against a fresh one; a stage
    without hooks differs through the gradients its peers send); else a kept tensor, unnamed.
    """
    hooks, fresh_hooks = _most_hooks(stocks), _most_hooks(freshes)
    if hooks > max(1, fresh_hooks):
        return (
            f"{HOOKS_REASON}: {hooks} hooks on one stock buffer after {steps} steps, "
            f"{fresh_hooks} on a fresh one"
        )
    return KEPT_REASON + " (what it was, pooltk cannot name from the run)"


def _differs(parts: dict) -> str:
    return ", ".join(f"{k} {'equal' if v else 'differ'}" for k, v in parts.items())


def judge(r: dict, stage: str, refs: tuple, steps: int) -> dict:
    """One row's three-way comparison and verdict (see [Note: trainer verdicts]); errors are judged
    per case."""
    stock, fresh, eval_stock, eval_fresh = refs
    vs_stock, vs_fresh = equal(r, stock, eval_stock), equal(r, fresh, eval_fresh)
    stock_fresh = equal(fresh, stock, None)  # the two references' training runs
    if stock_fresh is not None and r.get(
        "eval_sha256"
    ):  # and, where r is judged on it, their eval step
        digests = [
            ref.get("eval_sha256") if ref and ref.get("ok") else None
            for ref in (eval_fresh, eval_stock)
        ]
        stock_fresh = None if None in digests else {**stock_fresh, "eval": digests[0] == digests[1]}
    out = {
        "equal_stock": _all(vs_stock),
        "equal_fresh": _all(vs_fresh),
        "stock_equal_fresh": _all(stock_fresh),
    }
    if r["variant"] in REFERENCES:
        return {**out, "verdict": "", "reason": ""}
    if vs_stock is None or vs_fresh is None or stock_fresh is None:
        missing = [
            n for n, ref in (("stock", stock), ("fresh", fresh)) if not (ref and ref.get("ok"))
        ]
        return {
            **out,
            "verdict": "invalid",
            "reason": f"no {' or '.join(missing) or 'eval'} reference ran",
        }
    if out["equal_stock"]:
        return {**out, "verdict": "equal", "reason": ""}
    if out["equal_fresh"] and not out["stock_equal_fresh"]:
        return {
            **out,
            "verdict": "explained",
            "reason": "",
        }  # the reason is the case's: see claim()
    context = (
        "stock and fresh agree" if out["stock_equal_fresh"] else "stock differs from fresh too"
    )
    return {
        **out,
        "verdict": "silent",
        "reason": f"differs from fresh ({_differs(vs_fresh)}); {context}",
    }


def judge_failed(mine: list[dict]) -> tuple[str, str]:
    """The verdict of a case some rank of which raised, and why: loud when some rank's error names
    pooltk."""
    failed = sorted((r for r in mine if not r.get("ok")), key=lambda r: r["rank"])
    named = [r for r in failed if names_pooltk(r.get("error_type", ""), r.get("error", ""))]
    first = (named or failed)[0]
    why = f"rank {first['rank']}: {first.get('error_type', '?')}: {first.get('error', '')[:160]}"
    return ("loud" if named else "unnamed"), why


def compare(
    records: list[dict], *, trainer: str, version: str, steps: int, microbatches: int
) -> list[dict]:
    by = {(r["pp"], r["variant"], r["rank"]): r for r in records}
    rows = []
    for (pp, variant, rank), r in sorted(by.items()):
        refs = _refs(by, pp, r, rank)
        base = refs[0]
        if not r.get("ok"):
            stages = {"?": {}}
        else:
            stages = r["recv"]
        for stage, recv in stages.items():
            row = {
                "trainer": trainer,
                "trainer_version": version,
                "torch": r.get("torch", ""),
                "pp": pp,
                "microbatches": microbatches,
                "steps": steps,
                "variant": variant,
                "schedule": r.get("schedule", ""),
                "pool_impl": r.get("pool", ""),
                "stage": stage,
            }
            if r.get("ok") and base and base.get("ok"):
                fwd, grad = (
                    recv.get("forward", {}).get("bytes", 0),
                    recv.get("grad", {}).get("bytes", 0),
                )
                row.update(
                    recv_forward_bytes=fwd,
                    recv_grad_bytes=grad,
                    recv_bytes=fwd + grad,
                    stock_recv_bytes=_bytes(base["recv"].get(stage, {})),
                    losses_equal_stock=r["losses"] == base["losses"],
                    params_equal_stock=r["params_sha256"] == base["params_sha256"],
                    step_time_ratio=round(_steady(r["step_s"]) / _steady(base["step_s"]), 3),
                    outcome="ok",
                )
                if (
                    "rank_recv" in r and "rank_recv" in base
                ):  # the rank's stages together, each storage once
                    row.update(
                        rank_recv_bytes=_bytes(r["rank_recv"]),
                        stock_rank_recv_bytes=_bytes(base["rank_recv"]),
                    )
                rings = r.get("rings", {}).get(stage, {})
                # pooled: sets per ring and copy-on-conflict re-homes over the run (all directions)
                if rings:
                    row["ring_sets"] = " ".join(
                        f"{d}:{v['size']}" for d, v in sorted(rings.items())
                    )
                    row["rehomes"] = sum(v.get("rehomes") or 0 for v in rings.values())
                eval_base = by.get((pp, EVAL_BASELINE, rank))
                if r.get("eval_sha256") and eval_base and eval_base.get("eval_sha256"):
                    row["eval_equal_stock"] = r["eval_sha256"] == eval_base["eval_sha256"]
                fresh = r.get("fresh", {}).get(stage)
                if fresh:
                    row.update(posts=fresh["posts"], post_storages=fresh["post_storages"])
            else:
                row.update(
                    outcome=r.get("error_type", "no baseline")
                    if not r.get("ok")
                    else "no baseline",
                    losses_equal_stock="",
                    params_equal_stock="",
                )
            row.update(
                judge(r, stage, refs, steps)
                if r.get("ok")
                else {
                    "equal_stock": None,
                    "equal_fresh": None,
                    "stock_equal_fresh": None,
                    "verdict": "",
                    "reason": "",
                }
            )  # a case that raised is judged as a whole: see claim()
            if r.get("pool") == "fresh":
                fresh = r.get("fresh", {}).get(stage) or {}
                row["reason"] = (
                    f"fresh_stage: layout {fresh.get('layout')!r}, bound={fresh.get('bound')}"
                    if fresh
                    else ""
                )
            rows.append(row)
    return claim(rows, by, steps)


def claim(rows: list[dict], by: dict, steps: int) -> list[dict]:
    """Per (pp, variant): a failed case's verdict, an explained case's reason, every row's
    ``claim_ok``.

    See [Note: trainer verdicts].
    """
    cases: dict[tuple, list[dict]] = {}
    for row in rows:
        cases.setdefault((row["pp"], row["variant"]), []).append(row)
    for (pp, variant), mine in cases.items():
        records = [r for (p, v, _), r in by.items() if p == pp and v == variant]
        if any(row["verdict"] == "explained" for row in mine):
            refs = [_refs(by, pp, r, r["rank"]) for r in records]
            why = reuse_reason([x[0] for x in refs if x[0]], [x[1] for x in refs if x[1]], steps)
            for row in mine:
                if row["verdict"] == "explained":
                    row["reason"] = why
        ran = all(r["outcome"] == "ok" for r in mine)
        if not ran:
            refs_ok = all(
                (ref or {}).get("ok") for r in records for ref in _refs(by, pp, r, r["rank"])[:2]
            )
            failed = [r for r in records if not r.get("ok")]
            if failed and refs_ok and variant not in REFERENCES:
                verdict, why = judge_failed(records)
            else:  # a reference itself failed, or this case has nothing to be judged against
                verdict = "invalid"
                why = (
                    judge_failed(records)[1] if failed else "a stock or fresh reference did not run"
                )
            for row in mine:
                row.update(verdict=verdict, reason=why)
        expected = EXPECT.get(variant, "bitwise")
        if variant in REFERENCES:
            ok = ran and all(row["stock_equal_fresh"] is not None for row in mine)
            if any(r.get("pool") == "fresh" for r in records):
                ok = ok and all(_fresh_ok(r) for r in records)
        elif expected == "bitwise":
            ok = ran and all(
                row["verdict"] in ("equal", "explained") and row["equal_fresh"] is True
                for row in mine
            )
        elif expected == "silent":
            ok = ran and any(row["verdict"] == "silent" for row in mine)
        else:  # an error class some rank must raise, which names pooltk
            ok = any(row["outcome"] == expected for row in mine) and all(
                row["verdict"] == "loud" for row in mine
            )
        for row in mine:
            row["claim_ok"] = ok
    return rows


def _fresh_ok(record: dict) -> bool:
    """Every stage of a fresh run had its receives in new storages (or torch is lazy: stock is
    fresh)."""
    stages = record.get("fresh") or {}
    if not stages or set(stages) != set(record.get("recv", {})):
        return False
    return all(
        (f["bound"] and f["posts"] > 0 and f["post_storages"] == f["posts"])
        or (not f["bound"] and f["layout"] == "lazy")
        for f in stages.values()
    )


def run_trainer(
    trainer: str,
    pps: list[int],
    out: Path,
    python: str,
    steps: int,
    microbatches: int,
    timeout_s: float,
) -> tuple[list[dict], list[str]]:
    problems: list[str] = []
    for pp in pps:
        for i, variants in enumerate(LAUNCHES[trainer]):
            ldir = out / f"pp{pp}" / f"launch{i}"
            ldir.mkdir(parents=True, exist_ok=True)
            (ldir / "records.jsonl").unlink(missing_ok=True)
            argv = [
                str(ROOT / "tools/integration" / f"{trainer}_rank.py"),
                "--pp",
                str(pp),
                "--variants",
                ",".join(variants),
                "--out",
                str(ldir / "records.jsonl"),
                "--steps",
                str(steps),
                "--microbatches",
                str(microbatches),
            ]
            codes, wall = launch(argv, world=pp, timeout_s=timeout_s, log_dir=ldir, python=python)
            expect_fail = any(EXPECT.get(v) == "PoolOverrunError" for v in variants)
            print(
                f"[integration] {trainer} pp{pp} launch{i} ({','.join(variants)}): "
                f"exit {codes}, {wall:.1f} s",
                flush=True,
            )
            if None in codes:
                problems.append(
                    f"{trainer} pp{pp} launch{i}: timed out after {timeout_s:.0f} s (see {ldir})"
                )
            elif any(codes) and not expect_fail:
                problems.append(
                    f"{trainer} pp{pp} launch{i}: rank exit codes {codes} (see {ldir}/rank*.log)"
                )
    records = []
    for pp in pps:
        records += _records(out / f"pp{pp}")
    return records, problems


def write_rows(out: Path, rows: list[dict], trainer: str) -> list[str]:
    """Write ``out/rows.csv`` (the suite's table); return one problem per (pp, variant) whose claim
    failed."""
    with open(out / "rows.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k, "") for k in COLUMNS})
    unknown = sorted({r.get("verdict") for r in rows} - {"", None, *VERDICTS})
    if unknown:
        raise ValueError(
            f"run_suite: verdicts {unknown} are not pooltk.parity.summary.VERDICTS {VERDICTS}"
        )
    failed = sorted({(r["pp"], r["variant"]) for r in rows if r["claim_ok"] is not True})
    return [
        f"{trainer} pp{pp} {variant}: claim failed (see {out / 'rows.csv'})"
        for pp, variant in failed
    ]


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
    records, problems = run_trainer(
        args.trainer, args.pp, out, args.python, args.steps, args.microbatches, args.timeout
    )
    rows = compare(
        records,
        trainer=args.trainer,
        version=args.version,
        steps=args.steps,
        microbatches=args.microbatches,
    )
    problems += write_rows(out, rows, args.trainer)
    print(f"[integration] {args.trainer}: {len(rows)} rows -> {out / 'rows.csv'}")
    return finish(problems)


if __name__ == "__main__":
    sys.exit(main())
