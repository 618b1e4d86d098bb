"""What one matrix run was asked to do, resolved from flags, environment and defaults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CACHE_ENV = "POOLTK_COMPAT_CACHE"
FIND_LINKS_ENV = "POOLTK_COMPAT_FIND_LINKS"


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """One matrix run."""

    releases: tuple[str, ...]
    """Exact torch releases (X.Y.Z), run one after another."""
    cache_dir: Path
    """Absolute folder outside the repository: wheels under wheels/, venvs under envs/."""
    find_links: tuple[Path, ...]
    """Extra local wheel folders for ``pip download`` (beside the cache and the index)."""
    keep_envs: bool
    """Keep each venv under CACHE/envs after its checks (default: delete it)."""
    python: str
    """Interpreter that creates the venvs."""
    check_timeout: float
    """Seconds one release's checks may take."""
    publish: bool
    """Write docs/compat/matrix-DATE.json and the table in docs/torch-compat.md."""
    argv: tuple[str, ...]
    """The arguments as given, recorded in the published document's ``command``."""
