"""Wheels for one release: ``pip download`` torch==RELEASE and the test tools into the cache, once.

[Note: pip configuration]
Every pip call of the matrix runs with ``PIP_CONFIG_FILE=os.devnull``, so pip reads no
configuration file at all: not the user's, not a machine-wide one (a machine may cap torch
below the release under test with a global constraint, as this project's machine does), so
each env gets exactly the release asked for. Wheel sources are given explicitly instead: the
release's cache folder, the ``--find-links`` folders, and the index. The project's own pins
(requirements/constraints.txt) apply, minus its torch pin: each env pins its own torch.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tools.compat_matrix.host import dir_bytes, run
from tools.compat_matrix.spec import CONSTRAINTS, TEST_TOOLS


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResult:
    """What fetching one release's wheels did."""

    seconds: float
    """Wall time of the download (0 when the cache was complete)."""
    downloaded_bytes: int
    """Bytes the wheel folder grew by."""
    cached: bool
    """True when the folder was already complete for these requirements and nothing ran."""
    wheel_dir_bytes: int
    """Bytes of the release's wheel folder afterwards."""
    dir: Path
    """The release's wheel folder, CACHE/wheels/torch-RELEASE."""


def pip_env() -> dict[str, str]:
    """The environment of every pip call: no configuration files (see [Note: pip configuration])."""
    return dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")


def requirements(release: str) -> list[str]:
    """What one release's env installs: that exact torch and pooltk's test tools."""
    return [f"torch=={release}", *TEST_TOOLS]


COMPLETE_STAMP = ".complete"
"""File in a release's wheel folder, written once every wheel is there (it holds the requirements'
key)."""


def wheel_dir(cache: Path, release: str) -> Path:
    return cache / "wheels" / f"torch-{release}"


def constraints_without_torch(tmp: Path) -> Path:
    """requirements/constraints.txt without its torch pin (each env pins its own torch), written
    into ``tmp``."""
    lines = [
        ln
        for ln in CONSTRAINTS.read_text().splitlines()
        if not ln.strip().lower().startswith("torch==")
    ]
    path = tmp / "constraints-notorch.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def fetch(release: str, cache: Path, find_links: tuple[Path, ...], tmp: Path) -> FetchResult:
    """Download (or reuse) every wheel the env needs into CACHE/wheels/torch-RELEASE."""
    dest = wheel_dir(cache, release)
    dest.mkdir(parents=True, exist_ok=True)
    reqs = requirements(release)
    constraints = constraints_without_torch(tmp)
    key = hashlib.sha256(("\n".join(reqs) + constraints.read_text()).encode()).hexdigest()[:16]
    stamp = dest / COMPLETE_STAMP
    before = dir_bytes(dest)
    t0 = time.perf_counter()
    if stamp.exists() and stamp.read_text().strip() == key:
        return FetchResult(
            seconds=0.0, downloaded_bytes=0, cached=True, wheel_dir_bytes=before, dir=dest
        )
    links = ["--find-links", str(dest)]
    for d in find_links:
        links += ["--find-links", str(d)]
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            "-d",
            str(dest),
            *links,
            "-c",
            str(constraints),
            *reqs,
        ],
        timeout=3600,
        env=pip_env(),
    )
    stamp.write_text(key + "\n")
    after = dir_bytes(dest)
    return FetchResult(
        seconds=round(time.perf_counter() - t0, 1),
        downloaded_bytes=after - before,
        cached=False,
        wheel_dir_bytes=after,
        dir=dest,
    )
