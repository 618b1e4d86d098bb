"""One release end to end: fetch, env, checks, cleanup, verdict; a broken step is a row that says
so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tools.compat_matrix.checks import ENV_VAR
from tools.compat_matrix.envs import build_env, env_dir
from tools.compat_matrix.fetch import fetch
from tools.compat_matrix.host import log
from tools.compat_matrix.judge import judge
from tools.compat_matrix.options import Options
from tools.compat_matrix.shapes import expected_family
from tools.compat_matrix.spec import REPO


def checks_env(env: Path) -> dict[str, str]:
    """Environment of the checks process: the repo on PYTHONPATH, no user site, and the env it may
    run in."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO)]
    return dict(
        os.environ,
        PYTHONNOUSERSITE="1",
        PYTHONPATH=os.pathsep.join([str(REPO), *paths]),
        **{ENV_VAR: str(env)},
    )


def run_release(release: str, opts: Options, tmp: Path) -> dict[str, Any]:
    """The judged row of one release."""
    row: dict[str, Any] = {
        "release": release,
        "expected_layout": expected_family(release),
        "timings_s": {},
    }
    env = env_dir(opts.cache_dir, release)
    t_all = time.perf_counter()
    try:
        log(f"{release}: fetch")
        f = fetch(release, opts.cache_dir, opts.find_links, tmp)
        row["timings_s"]["download"] = f.seconds
        row["download"] = {
            "downloaded_bytes": f.downloaded_bytes,
            "cached": f.cached,
            "wheel_dir_bytes": f.wheel_dir_bytes,
        }
        got = (
            "wheels cached"
            if f.cached
            else f"downloaded {f.downloaded_bytes / 1e9:.2f} GB in {f.seconds} s"
        )
        log(f"{release}: env ({got})")
        e = build_env(release, opts.cache_dir, env, opts.python)
        row["timings_s"]["env"] = e.seconds
        row["env_bytes"] = e.env_bytes
        row["runtime_wheels"] = e.runtime_wheels
        log(f"{release}: checks (env {e.env_bytes / 1e9:.2f} GB built in {e.seconds} s)")
        t0 = time.perf_counter()
        out = tmp / f"inner-{release}.json"
        proc = subprocess.run(
            [str(e.python), "-m", "tools.compat_matrix.checks", str(out)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=opts.check_timeout,
            env=checks_env(env),
        )
        row["timings_s"]["checks"] = round(time.perf_counter() - t0, 1)
        if not out.exists():
            raise RuntimeError(
                f"checks under {release} wrote no result (exit {proc.returncode}):\n"
                f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            )
        row.update(json.loads(out.read_text()))
    except (
        Exception
    ) as exc:  # a broken env or check is a row that says so, not a crash of the matrix
        row["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        t0 = time.perf_counter()
        if env.exists() and not opts.keep_envs:
            shutil.rmtree(env, ignore_errors=True)
        row["timings_s"]["cleanup"] = round(time.perf_counter() - t0, 1)
        row["timings_s"]["total"] = round(time.perf_counter() - t_all, 1)
        row["timings_s"]["total_without_download"] = round(
            row["timings_s"]["total"] - row["timings_s"].get("download", 0), 1
        )
        row["env_kept"] = str(env) if opts.keep_envs and env.exists() else None
    row.update(judge(row).row_fields())
    return row
