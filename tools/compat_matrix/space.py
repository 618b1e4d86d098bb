"""How much free disk a matrix run needs, from what the cache already holds and what was measured.

[Note: disk need]
A release costs its wheel folder (only when the cache does not hold it complete) and its venv
(built from those wheels, deleted after its checks unless --keep-envs). Releases run one after
another, so without --keep-envs the peak is every missing wheel folder plus the largest venv; with
it, every venv. The sizes are the newest published measurement of that release (docs/compat/:
``wheel_dir_bytes`` and ``env_bytes``), else the largest measured of any release, so a release
never measured is not under-counted. One GB on top covers pip's temporary unpacking.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tools.compat_matrix.fetch import COMPLETE_STAMP, wheel_dir
from tools.compat_matrix.spec import OUT_DIR

HEADROOM_BYTES = 1_000_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseNeed:
    """The disk one release takes during a run."""

    release: str
    wheel_bytes: int
    """Bytes its wheels will add to the cache (0 when the cache holds them complete)."""
    env_bytes: int
    """Bytes of its venv while its checks run."""
    measured: bool
    """True when both sizes come from a published row of this release."""


def measured_sizes(out_dir: Path = OUT_DIR) -> dict[str, tuple[int, int]]:
    """release -> (wheel folder bytes, venv bytes), from the newest published matrix holding that
    release."""
    sizes: dict[str, tuple[int, int]] = {}
    for path in sorted(out_dir.glob("matrix-*.json")):  # oldest first: newer rows overwrite
        for row in json.loads(path.read_text()).get("releases", []):
            wheels = (row.get("download") or {}).get("wheel_dir_bytes")
            env = row.get("env_bytes")
            if isinstance(wheels, int) and isinstance(env, int):
                sizes[row["release"]] = (wheels, env)
    return sizes


def release_needs(
    releases: tuple[str, ...], cache: Path, out_dir: Path = OUT_DIR
) -> list[ReleaseNeed]:
    sizes = measured_sizes(out_dir)
    worst = (
        max((w for w, _ in sizes.values()), default=3_100_000_000),
        max((e for _, e in sizes.values()), default=5_600_000_000),
    )
    needs = []
    for release in releases:
        wheels, env = sizes.get(release, worst)
        complete = (wheel_dir(cache, release) / COMPLETE_STAMP).exists()
        needs.append(
            ReleaseNeed(
                release=release,
                wheel_bytes=0 if complete else wheels,
                env_bytes=env,
                measured=release in sizes,
            )
        )
    return needs


def required_bytes(needs: list[ReleaseNeed], *, keep_envs: bool) -> int:
    """Peak bytes of the run (see [Note: disk need])."""
    envs = [n.env_bytes for n in needs]
    return (
        sum(n.wheel_bytes for n in needs)
        + (sum(envs) if keep_envs else max(envs, default=0))
        + HEADROOM_BYTES
    )


def shortfall_message(
    free: int, needs: list[ReleaseNeed], *, keep_envs: bool, cache: Path
) -> str | None:
    """None when ``free`` covers the run; else what was found, what is required and why, and the
    fix."""
    need = required_bytes(needs, keep_envs=keep_envs)
    if free >= need:
        return None
    parts = ", ".join(
        f"{n.release}: wheels {n.wheel_bytes / 1e9:.1f} GB"
        f"{' (cached)' if n.wheel_bytes == 0 else ''}"
        f" + env {n.env_bytes / 1e9:.1f} GB"
        f"{'' if n.measured else ' (unmeasured: the largest measured)'}"
        for n in needs
    )
    envs = "every env kept (--keep-envs)" if keep_envs else "one env at a time"
    return (
        f"compat_matrix: found {free / 1e9:.1f} GB free under {cache}; "
        f"required {need / 1e9:.1f} GB ({parts}; {envs}; 1 GB headroom). "
        "Fix: free space on that disk or pass --cache-dir elsewhere."
    )
