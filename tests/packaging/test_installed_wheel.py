"""An installed wheel works away from the repository: no module reads a path inside the checkout.

The wheel is built from this tree and installed (without dependencies) into a fresh venv in a
temporary folder; that venv sees the project's own environment only through a ``.pth`` line
(torch, pandas, ...), which Python adds to ``sys.path`` without running the editable finder
that points back at the checkout. Every command then runs with the temporary folder as its
working directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy of what the wheel is made of, so nothing (build/, *.egg-info) is written
    # into the checkout and no stale build/lib from an earlier build can end up in the wheel.
    src = tmp / "src"
    src.mkdir()
    for name in ("pooltk", "data"):
        shutil.copytree(ROOT / name, src / name, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    wheels = tmp / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = wheels.glob("pooltk-*.whl")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    site = Path(subprocess.run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "project-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--no-deps", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp / "elsewhere"
    work.mkdir()
    return {"wheel": wheel, "python": env / "bin" / "python", "bin": env / "bin", "work": work, "site": site}


def _run(installed: dict[str, Path], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(installed["bin"] / "pooltk"), *args], capture_output=True, text=True, timeout=300,
                          cwd=installed["work"], env=env)


def test_the_wheel_ships_the_package_data_as_files_not_links(installed: dict[str, Path]) -> None:
    with zipfile.ZipFile(installed["wheel"]) as zf:
        names = set(zf.namelist())
        for data in ("pooltk/studies/kimi_k3/data/kimi_k3_gb200.csv", "pooltk/analysis/data/schedules_gloo_2026-11-30.csv"):
            assert data in names, sorted(n for n in names if "data" in n)
            assert zf.read(data).startswith(b"id,") or zf.read(data).startswith(b"schedule,")


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: dict[str, Path]) -> None:
    out = subprocess.run([str(installed["python"]), "-c", "import pooltk; print(pooltk.__file__)"],
                         capture_output=True, text=True, timeout=120, cwd=installed["work"])
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()).is_relative_to(installed["site"]), out.stdout


def test_probe_runs_from_the_installed_wheel(installed: dict[str, Path]) -> None:
    out = _run(installed, "probe")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch" in out.stdout and "layout" in out.stdout


def test_memory_preset_runs_from_the_installed_wheel(installed: dict[str, Path]) -> None:
    out = _run(installed, "memory", "--preset", "kimi-k3-gb200-2k-calibrated")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "stock" in out.stdout.lower()


def test_logs_read_shipped_runs_from_the_installed_wheel(installed: dict[str, Path]) -> None:
    runs = sorted((ROOT / "data" / "cpu_runs").glob("*.jsonl"))
    assert runs, "data/cpu_runs holds the shipped CPU run logs"
    out = _run(installed, "logs", str(runs[0]))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "step" in out.stdout.lower()


def test_the_claims_ledger_reads_its_published_figures_from_the_installed_wheel(installed: dict[str, Path]) -> None:
    program = ("from pooltk.studies.kimi_k3.claims import load_published; from pooltk.nb.schedules import "
               "validation_summary; print(len(load_published().frame), len(validation_summary()))")
    out = subprocess.run([str(installed["python"]), "-c", program], capture_output=True, text=True, timeout=120,
                         cwd=installed["work"])
    assert out.returncode == 0, out.stderr[-2000:]
    published, validated = map(int, out.stdout.split())
    assert published > 10 and validated > 10
