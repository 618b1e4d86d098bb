"""One throwaway venv per release: torch and the test tools from the cached wheels, pooltk from this
tree."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tools.compat_matrix.fetch import pip_env, requirements, wheel_dir
from tools.compat_matrix.host import dir_bytes, run
from tools.compat_matrix.spec import REPO

PTH_NAME = "pooltk-worktree.pth"


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvResult:
    """What building one release's venv gave."""

    seconds: float
    """Wall time of the build."""
    env_bytes: int
    """Bytes of the venv folder."""
    runtime_wheels: list[str]
    """name==version of every nvidia-*, cuda-* and triton distribution installed (the CUDA
    runtime)."""
    python: Path
    """The venv's interpreter."""


def env_dir(cache: Path, release: str) -> Path:
    return cache / "envs" / f"torch-{release}"


def build_env(release: str, cache: Path, env: Path, python: str) -> EnvResult:
    """Create ``env`` afresh with ``python -m venv`` and install the release from the cache only
    (``--no-index``)."""
    t0 = time.perf_counter()
    if env.exists():
        shutil.rmtree(env)
    run([python, "-m", "venv", str(env)], timeout=600)
    py = env / "bin" / "python"
    run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-compile",
            "--no-index",
            "--find-links",
            str(wheel_dir(cache, release)),
            *requirements(release),
        ],
        timeout=3600,
        env=pip_env(),
    )
    # pooltk from this working tree, as a development install: a .pth entry for the repo root
    # (no build backend needed, nothing written into the repo; pooltk needs torch alone).
    site = run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], timeout=120
    ).stdout.strip()
    Path(site, PTH_NAME).write_text(str(REPO) + "\n")
    where = run(
        [str(py), "-c", "import pooltk; print(pooltk.__file__)"], timeout=300, cwd=Path(site)
    ).stdout.strip()
    if Path(where).resolve().parent.parent != REPO:
        raise RuntimeError(f"pooltk in the env resolves to {where}, not this working tree {REPO}")
    listing = json.loads(
        run([str(py), "-m", "pip", "list", "--format", "json"], timeout=120, env=pip_env()).stdout
    )
    runtime = sorted(
        f"{p['name']}=={p['version']}"
        for p in listing
        if p["name"].lower().startswith(("nvidia", "cuda", "triton"))
    )
    return EnvResult(
        seconds=round(time.perf_counter() - t0, 1),
        env_bytes=dir_bytes(env),
        runtime_wheels=runtime,
        python=py,
    )
