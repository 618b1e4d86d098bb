"""The checks of one release, run by its throwaway env's python:
``python -m tools.compat_matrix.checks OUT``.

Run with the repository as the working directory and on PYTHONPATH (the matrix does both),
under the env built by :mod:`tools.compat_matrix.envs`; it refuses anywhere else (see
:func:`refusal`). It writes one JSON object to OUT: ``pooltk probe --json``; pytest on
tests/compat and tests/unit; gloo parity (pp4, 8 microbatches, 2 steps; stock vs pooled
tight/live-set/automodel, both frontends, an eval/train switch); negative controls (forward
ring one short, GPipe forced) with the guard off (must diverge) and on (must raise
PoolOverrunError); for a layout that allocates per receive, the peak number of live receive
buffers per stage, measured in the ranks by :mod:`tools.compat_matrix.live_buffers`.
Judging the result is :mod:`tools.compat_matrix.judge`'s job, in the outer process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tools.compat_matrix.live_buffers import LIVE_DIR_ENV
from tools.compat_matrix.spec import COMMAND, MICROBATCHES, PP, REPO, STEPS

ENV_VAR = "POOLTK_COMPAT_ENV"
"""Set by the matrix to the throwaway env it built; the checks run only under that env's python."""
PRELUDE = "tools.compat_matrix.live_buffers"
# Tests that check this tool or its published output, not the release under test.
NOT_RELEASE_TESTS = (
    "tests/compat/test_published_matrix.py",
    "tests/compat/test_compat_matrix_tool.py",
)


def refusal(prefix: str, environ: Mapping[str, str]) -> str | None:
    """Why the checks must not run under the interpreter at ``prefix`` (None when it is the matrix's
    throwaway env)."""
    env = environ.get(ENV_VAR)
    if not env:
        return (
            f"tools.compat_matrix.checks: found ${ENV_VAR} unset (interpreter {prefix}); "
            "required: run under the throwaway venv that the matrix builds for one torch release, "
            "which sets it. "
            f"Fix: {COMMAND} --releases X.Y.Z (add --keep-envs to keep that venv; "
            f"to rerun the checks in a kept venv: {ENV_VAR}=CACHE/envs/torch-X.Y.Z "
            "CACHE/envs/torch-X.Y.Z/bin/python -m tools.compat_matrix.checks OUT.json)."
        )
    if Path(prefix).resolve() != Path(env).resolve():
        return (
            f"tools.compat_matrix.checks: found interpreter prefix {prefix}; required the env "
            f"${ENV_VAR}={env}. Fix: run that env's bin/python, or {COMMAND} --releases X.Y.Z."
        )
    return None


def junit_counts(path: Path) -> dict[str, Any]:
    """passed / failed / errors / skipped and the failure messages of a pytest JUnit XML report."""
    if not path.exists():
        return {
            "passed": 0,
            "failed": 0,
            "errors": 1,
            "skipped": 0,
            "failures": ["pytest wrote no report"],
        }
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    out: dict[str, Any] = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "failures": []}
    for s in suites:
        for case in s.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name')}"
            failure, error = case.find("failure"), case.find("error")
            if failure is not None:
                out["failed"] += 1
                out["failures"].append(f"{name}: {failure.get('message', '')[:300]}")
            elif error is not None:
                out["errors"] += 1
                out["failures"].append(f"{name}: {error.get('message', '')[:300]}")
            elif case.find("skipped") is not None:
                out["skipped"] += 1
            else:
                out["passed"] += 1
    return out


def _pytest(paths: list[str], tmp: Path, name: str, extra: list[str]) -> dict[str, Any]:
    xml = tmp / f"{name}.xml"
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={xml}",
            *extra,
            *paths,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    res = junit_counts(xml)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["exit"] = proc.returncode
    return res


def _variant_facts(v: Any, boundary: int, installed: bool) -> dict[str, Any]:
    from pooltk.analysis.lifetimes import DIRECTIONS
    from pooltk.analysis.stage_sets import stock_count
    from pooltk.parity.experiments import Harness
    from pooltk.pool.ring import live_1f1b

    sets = {str(s): [v.recv[s][d]["sets"] for d in DIRECTIONS] for s in sorted(v.recv)}
    # the ring's own storages (K sets); storages copy on conflict re-homed are counted apart
    nbytes = {
        str(s): [v.recv[s][d].get("ring_bytes", v.recv[s][d]["bytes"]) for d in DIRECTIONS]
        for s in sorted(v.recv)
    }
    rehomes = {str(s): [v.recv[s][d].get("rehomes", 0) for d in DIRECTIONS] for s in sorted(v.recv)}
    expect = None  # sets per stage, [forward, grad]
    if v.pooled and installed:
        cfg = Harness(**v.config)
        expect = {
            str(s): [
                cfg.ring_size(
                    live=live_1f1b(PP, s, MICROBATCHES, d),
                    receives=MICROBATCHES,
                    direction=d,
                    stage=s,
                    num_stages=PP,
                )
                for d in DIRECTIONS
            ]
            for s in v.recv
        }
    elif not v.pooled:
        expect = {str(s): [stock_count(PP, s, d, MICROBATCHES) for d in DIRECTIONS] for s in v.recv}
    bytes_exact = alloc_exact = None
    if expect is not None:
        bytes_exact = all(nbytes[s] == [k * boundary for k in ks] for s, ks in expect.items())
        alloc_exact = all(
            v.setup_alloc_bytes[int(s)] == sum(ks) * boundary for s, ks in expect.items()
        )
    return {
        "name": v.name,
        "pooled": v.pooled,
        "frontend": v.frontend,
        "schedule": v.schedule,
        "bitwise_equal": v.bitwise_equal,
        "params_max_abs_diff": v.params_max_abs_diff,
        "losses_max_abs_diff": v.losses_max_abs_diff,
        "sets": sets,
        "bytes": nbytes,
        "rehomes": rehomes,
        "setup_alloc_bytes": {str(s): b for s, b in v.setup_alloc_bytes.items()},
        "rings": {str(s): r for s, r in v.rings.items()},
        "bytes_exact": bytes_exact,
        "alloc_exact": alloc_exact,
        "median_step_ms": round(v.median_step_time_s * 1e3, 2),
    }


def _launch(spec: Any, prelude: str | None = None) -> tuple[Any, float]:
    from pooltk.parity import ParityRankError, ParityTimeoutError, run_parity
    from pooltk.pool.errors import PoolOverrunError

    t0 = time.perf_counter()
    try:
        return run_parity(spec, prelude=prelude), time.perf_counter() - t0
    except PoolOverrunError as exc:
        return {"error": "PoolOverrunError", "message": str(exc)[:600]}, time.perf_counter() - t0
    except (ParityRankError, ParityTimeoutError) as exc:
        return {"error": type(exc).__name__, "message": str(exc)[:1500]}, time.perf_counter() - t0
    except Exception as exc:  # anything else from the harness is a finding too
        return {"error": type(exc).__name__, "message": str(exc)[:1500]}, time.perf_counter() - t0


def _negative(report: Any, schedule: str | None = None) -> dict[str, Any]:
    """Outcome of a negative-control launch (an error, or the pooled variants of ``schedule``)."""
    if isinstance(report, dict):
        return report
    pooled = [
        v
        for v in report.variants
        if v.pooled and (schedule is None or v.schedule.lower() == schedule)
    ]
    return {
        "bitwise_equal": all(v.bitwise_equal for v in pooled),
        "max_abs_diff": max((v.params_max_abs_diff or 0.0) for v in pooled),
        "pooled": any(any(r for r in v.rings.values()) for v in pooled),
        "variants": [v.name for v in pooled],
    }


def _parity(res: dict[str, Any], tmp: Path, installed: bool) -> None:
    """Positive: every policy, both frontends, an eval/train switch; one launch, live buffers
    counted in the ranks."""
    from pooltk.parity.experiments import Harness
    from pooltk.analysis.lifetimes import DIRECTIONS
    from pooltk.parity import ParitySpec, default_variants

    live_dir = tmp / "live"
    live_dir.mkdir()
    os.environ[LIVE_DIR_ENV] = str(live_dir)
    configs = [Harness(slack=2), Harness(slack=0, grad_slack=0), Harness(policy="automodel")]
    variants = (
        default_variants(configs, frontends=("manual",))
        + default_variants([Harness(slack=2)], frontends=("tracing",))
        + default_variants([Harness(slack=1)], eval_between_steps=True)
    )
    spec = ParitySpec(
        pp=PP, microbatches=MICROBATCHES, steps=STEPS, timeout_s=600, variants=variants
    )
    report, secs = _launch(spec, prelude=PRELUDE)
    res["check_seconds"]["parity"] = round(secs, 1)
    if isinstance(report, dict):
        res["parity"] = report
        return
    boundary = report.boundary_bytes
    facts = [_variant_facts(v, boundary, installed) for v in report.variants]
    res["parity"] = {
        "bitwise_equal": report.bitwise_equal,
        "wall_s": round(report.wall_s, 1),
        "boundary_bytes": boundary,
        "variants": facts,
    }
    live = {}
    for r in range(PP):
        p = live_dir / f"rank{r}.json"
        if p.exists():
            live[str(r)] = json.loads(p.read_text())
    res["live_peak"] = live or None
    stock = next(f for f in facts if f["name"] == "stock/1f1b/manual")
    pooled = next(f for f in facts if f["name"].startswith("tight-s2g1/1f1b/manual"))
    if live:
        # Per receive allocation: what stock holds is the peak of live buffers, not what is left
        # after. Variants run one after another, one stage per rank each: the n-th stage built is
        # variant n.
        def peaks(gen: int) -> dict[str, list[int]]:
            return {
                str(s): [
                    live.get(str(s), {}).get("peak", {}).get(f"{gen}/{d}", 0) for d in DIRECTIONS
                ]
                for s in range(PP)
            }

        sets = peaks(0)
        released = {f["name"]: peaks(i) for i, f in enumerate(facts) if f["pooled"]}
        stocks = {f["name"]: peaks(i) for i, f in enumerate(facts) if not f["pooled"]}
        res["bytes"] = {
            "stock_method": "peak live (allocate_buffer to release, measured in the ranks)",
            "stock": {"sets": sets, "total": sum(f + g for f, g in sets.values()) * boundary},
            "pooled": None,
            "released": {
                name: {"sets": p, "total": sum(f + g for f, g in p.values()) * boundary}
                for name, p in released.items()
            },
            "stock_variants": {name: {"sets": p} for name, p in stocks.items()},
        }
    else:
        res["bytes"] = {
            "stock_method": "distinct receive storages held after the step",
            "stock": {"sets": stock["sets"], "total": sum(sum(b) for b in stock["bytes"].values())},
            "pooled": {
                "sets": pooled["sets"],
                "total": sum(sum(b) for b in pooled["bytes"].values()),
            }
            if installed
            else None,
        }


def _negative_controls() -> dict[str, Any]:
    """Guard off: one launch, both controls, must diverge when pooled. Guard on: each must raise
    PoolOverrunError."""
    from pooltk.parity.experiments import Harness
    from pooltk.parity import ParitySpec, default_variants

    short_off = Harness(slack=0, guard=False, forward_shortfall=1)
    gpipe_off = Harness(slack=0, guard=False)
    neg: dict[str, Any] = {}
    report, _ = _launch(
        ParitySpec(
            pp=PP,
            microbatches=MICROBATCHES,
            steps=STEPS,
            timeout_s=600,
            variants=default_variants([short_off], force=True)
            + default_variants([gpipe_off], schedule="GPipe", force=True),
        )
    )
    neg["guard_off_short"] = _negative(report, "1f1b")
    neg["guard_off_gpipe"] = _negative(report, "gpipe")
    for key, cfg, sched in (
        ("guard_on_short", Harness(slack=0, forward_shortfall=1), "1F1B"),
        ("guard_on_gpipe", Harness(slack=0), "GPipe"),
    ):
        report, _ = _launch(
            ParitySpec(
                pp=PP,
                microbatches=MICROBATCHES,
                steps=1,
                timeout_s=600,
                variants=default_variants([cfg], schedule=sched, force=True),
            )
        )
        neg[key] = _negative(report)
    return neg


def run_checks(out_path: Path) -> None:
    """Run every check under this interpreter's torch and write the result to ``out_path``."""
    import platform

    import torch

    import pooltk

    res: dict[str, Any] = {
        "torch_version": torch.__version__,
        "python": platform.python_version(),
        "pooltk_file": pooltk.__file__,
        "check_seconds": {},
    }
    # The parity ranks import PRELUDE from this repository.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *paths])
    with tempfile.TemporaryDirectory(prefix="pooltk-compat-inner-") as t:
        tmp = Path(t)
        t0 = time.perf_counter()
        probe = subprocess.run(
            [sys.executable, "-m", "pooltk", "probe", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
        res["probe"] = (
            json.loads(probe.stdout) if probe.returncode == 0 else {"error": probe.stderr[-2000:]}
        )
        res["probe_exit"] = probe.returncode
        res["check_seconds"]["probe"] = round(time.perf_counter() - t0, 1)
        installed = bool(res["probe"].get("installed"))
        res["alloc_free"] = bool(res["probe"].get("alloc_free"))

        ignore = [arg for path in NOT_RELEASE_TESTS for arg in ("--ignore", path)]
        res["tests"] = {
            "compat": _pytest(["tests/compat"], tmp, "compat", ignore),
            # test_environment_file needs the lab extra; test_slow_marker checks the suite's own
            # pytest set-up (progress output of a nested pytest run), which says nothing about a
            # torch release and did not reproduce its output inside the matrix's checks process;
            # test_ruff checks the source's format and lint (the test extra's ruff), the same on
            # every torch
            "unit": _pytest(
                ["tests/unit"],
                tmp,
                "unit",
                [
                    "--ignore",
                    "tests/unit/test_environment_file.py",
                    "--ignore",
                    "tests/unit/test_slow_marker.py",
                    "--ignore",
                    "tests/unit/test_ruff.py",
                ],
            ),
        }
        res["check_seconds"]["pytest"] = round(
            res["tests"]["compat"]["seconds"] + res["tests"]["unit"]["seconds"], 1
        )

        _parity(res, tmp, installed)
        t0 = time.perf_counter()
        res["negative"] = _negative_controls()
        res["check_seconds"]["negative"] = round(time.perf_counter() - t0, 1)
    out_path.write_text(json.dumps(res, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(
            f"usage: python -m tools.compat_matrix.checks OUT.json (found arguments {args}); "
            f"normally run by {COMMAND}",
            file=sys.stderr,
        )
        return 2
    why = refusal(sys.prefix, os.environ)
    if why:
        print(why, file=sys.stderr)
        return 2
    run_checks(Path(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
