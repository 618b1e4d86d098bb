"""scripts/integration refuses to build a trainer venv the disk cannot hold, before pip writes
anything.

The script runs from a copy of the repository's scripts in a temporary tree (no venv there, so it
must build one), with ``df`` replaced on PATH by one that reports the free space the test chooses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tree(tmp_path: Path, free_kb: int) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "integration", root / "scripts" / "integration")
    (root / "requirements").mkdir()
    shutil.copy(
        REPO / "requirements" / "constraints.txt", root / "requirements" / "constraints.txt"
    )
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "df").write_text(
        "#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted'\n"
        f"echo 'fake 999999999 1 {free_kb} 1% /'\n"
    )
    (shim / "df").chmod(0o755)
    # python3 must not be reached: a build that started would need it
    (shim / "python3").write_text(
        "#!/bin/sh\necho 'python3 called: a venv build started' >&2\nexit 97\n"
    )
    (shim / "python3").chmod(0o755)
    env = dict(
        os.environ,
        PATH=f"{shim}{os.pathsep}{os.environ['PATH']}",
        PYTHON=str(shim / "python3"),
        PRODUCERS="0",
        POOLTK_VENVS=str(tmp_path / "venvs"),
    )
    return root, env


@pytest.mark.parametrize(("trainer", "need_gb"), [("automodel", 4), ("torchtitan", 7)])
def test_a_venv_build_the_disk_cannot_hold_is_refused_naming_found_required_and_the_fix(
    tmp_path, trainer, need_gb
):
    root, env = _tree(tmp_path, free_kb=2_000_000)  # 2.0 GB
    r = subprocess.run(
        ["bash", "scripts/integration"],
        cwd=root,
        env=dict(env, TRAINERS=trainer, PP="2"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert (
        f"found 2 GB free under {root}/.venvs; "
        f"required about {need_gb} GB to build .venvs/{trainer}" in r.stderr
    )
    assert "Fix: free space" in r.stderr
    assert "python3 called" not in r.stderr
    assert not (root / ".venvs" / trainer).exists()


def test_with_room_the_build_goes_ahead(tmp_path):
    root, env = _tree(tmp_path, free_kb=50_000_000)  # 51 GB
    r = subprocess.run(
        ["bash", "scripts/integration"],
        cwd=root,
        env=dict(env, TRAINERS="automodel", PP="2"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "python3 called: a venv build started" in r.stderr
    assert "required about" not in r.stderr
