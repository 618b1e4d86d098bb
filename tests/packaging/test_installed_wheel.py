"""An installed wheel works away from the repository, in the two installs pooltk promises.

- ``pip install pooltk`` (the torch-only install): the wheel in a fresh venv that sees torch, what
  torch itself needs, PyYAML and numpy (torch's stage shape inference needs it), nothing else (no
  pandas, seaborn, Jupyter). A pooled pipeline, the analysis and ``pooltk memory`` (presets, YAML
  configs, the fits answer) run there; what needs the lab stack says so and how to get it.
- ``pip install pooltk[lab]``: the same wheel in a venv that sees the project's whole environment
  through a ``.pth`` line (Python adds it to ``sys.path`` without running the editable finder that
  points back at the checkout); the log readers and the claims ledger run there.

Every command runs with a temporary folder as its working directory, so no module may read a path
inside the checkout. The wheel's metadata is checked too: only torch, PyYAML and numpy
unconditionally.
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


# What a torch-only install holds besides pooltk: torch, what torch itself needs, PyYAML and numpy.
BASE_ENV = (
    "torch",
    "torchgen",
    "functorch",
    "typing_extensions",
    "sympy",
    "mpmath",
    "networkx",
    "jinja2",
    "markupsafe",
    "fsspec",
    "filelock",
    "yaml",
    "numpy",
)
LAB_ONLY = ("pandas", "seaborn", "matplotlib", "jupyterlab", "ipywidgets", "nbclient", "nbformat")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy of what the wheel is made of, so nothing (build/, *.egg-info) is written
    # into the checkout and no stale build/lib from an earlier build can end up in the wheel.
    src = tmp / "src"
    src.mkdir()
    for name in ("pooltk", "data"):
        shutil.copytree(
            ROOT / name,
            src / name,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    wheels = tmp / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (found,) = wheels.glob("pooltk-*.whl")
    return found


def _venv(tmp: Path, wheel: Path, path_line: str) -> dict[str, Path]:
    env = tmp / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120
    )
    site = Path(
        subprocess.run(
            [
                str(env / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "project-env.pth").write_text(path_line + "\n")
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(env / "bin" / "python"),
            "install",
            "--no-deps",
            "-q",
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp / "elsewhere"
    work.mkdir()
    return {
        "wheel": wheel,
        "python": env / "bin" / "python",
        "bin": env / "bin",
        "work": work,
        "site": site,
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> dict[str, Path]:
    """``pip install pooltk[lab]``: the wheel, seeing the project's whole environment."""
    return _venv(tmp_path_factory.mktemp("lab"), wheel, sysconfig.get_paths()["purelib"])


@pytest.fixture(scope="module")
def torch_only(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> dict[str, Path]:
    """``pip install pooltk``: the wheel, seeing torch, torch's own dependencies and PyYAML
    alone."""
    import importlib.util

    tmp = tmp_path_factory.mktemp("torch_only")
    base = tmp / "base-site"
    base.mkdir()
    for name in BASE_ENV:
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        origin = Path(spec.origin)
        src = origin.parent if origin.name == "__init__.py" else origin
        (base / src.name).symlink_to(src)
        libs = src.with_name(src.name + ".libs")  # a wheel's bundled shared libraries (numpy.libs)
        if libs.is_dir():
            (base / libs.name).symlink_to(libs)
    return _venv(tmp, wheel, str(base))


def _run(installed: dict[str, Path], *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(installed["bin"] / "pooltk"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=installed["work"],
        env=env,
    )


def test_the_wheel_asks_for_torch_pyyaml_and_numpy_alone_and_puts_the_lab_stack_behind_an_extra(
    wheel: Path,
) -> None:
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        meta = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    reqs = [
        Requirement(line.split(":", 1)[1].strip())
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    base = sorted(r.name.lower() for r in reqs if r.marker is None)
    lab = {
        r.name.lower() for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "lab"})
    }
    assert base == ["numpy", "pyyaml", "torch"], base
    assert {"pandas", "seaborn", "matplotlib", "jupyterlab"} <= lab, lab


def test_the_torch_only_install_has_no_lab_stack(torch_only: dict[str, Path]) -> None:
    program = (
        "import importlib.util, pooltk; "
        f"print([m for m in {LAB_ONLY!r} if importlib.util.find_spec(m) is not None], "
        "pooltk.__file__)"
    )
    out = subprocess.run(
        [str(torch_only["python"]), "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=torch_only["work"],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    present, where = out.stdout.rsplit(" ", 1)
    assert present == "[]" and Path(where.strip()).is_relative_to(torch_only["site"]), out.stdout


def test_probe_the_memory_model_and_the_schedules_run_in_the_torch_only_install(
    torch_only: dict[str, Path],
) -> None:
    out = _run(torch_only, "schedules", "--schedule", "1F1B", "--pp", "2", "--microbatches", "4")
    assert out.returncode == 0 and "1F1B" in out.stdout, out.stderr[-2000:]
    out = _run(torch_only, "probe")
    assert out.returncode == 0 and "layout" in out.stdout, out.stderr[-2000:]
    out = _run(
        torch_only, "memory", "--preset", "kimi-k3-gb200-2k-calibrated", "--capacity", "gb200"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        "stock-lazy" in out.stdout
        and "fits on gb200" in out.stdout
        and "fullest stage" in out.stdout
    )
    yaml_config = ROOT / "data" / "configs" / "kimi_k3_gb200_2k_automodel.yaml"
    out = _run(torch_only, "memory", "--config", str(yaml_config), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    assert '"pp": 8' in out.stdout


def test_a_pooled_pipeline_runs_in_the_torch_only_install_bitwise_equal_to_stock(
    torch_only: dict[str, Path],
) -> None:
    """Two gloo ranks, stock then pooled, torch's own shape inference (which needs numpy)
    included."""
    out = _run(torch_only, "parity", "--pp", "2", "--microbatches", "4", "--steps", "2", "--json")
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
    import json

    report = json.loads(out.stdout[out.stdout.index("{") :])
    assert report["bitwise_equal"] is True
    pooled = [v for v in report["variants"] if v["pooled"]]
    assert pooled and all(
        v["stages"]["1"]["rings"]["forward"] < 4 for v in pooled
    )  # a ring, not M sets


def test_what_needs_the_lab_stack_says_so_in_the_torch_only_install(
    torch_only: dict[str, Path],
) -> None:
    log = ROOT / "data" / "cpu_runs"
    for argv in (
        ("schedules", "--validate", "--schedule", "1F1B", "--pp", "2"),
        ("memory", "--measure", "--pp", "2", "--microbatches", "4"),
        ("logs", str(log)),
    ):
        out = _run(torch_only, *argv)
        named = "pooltk[lab]" in out.stderr and "Traceback" not in out.stderr
        assert out.returncode == 2 and named, (argv, out.stderr[-2000:])


def test_the_wheel_ships_the_package_data_as_files_not_links(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for data in (
            "pooltk/studies/kimi_k3/data/kimi_k3_gb200.csv",
            "pooltk/analysis/data/schedules_gloo_2026-11-30.csv",
        ):
            assert data in names, sorted(n for n in names if "data" in n)
            assert zf.read(data).startswith(b"id,") or zf.read(data).startswith(b"schedule,")


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: dict[str, Path]) -> None:
    out = subprocess.run(
        [str(installed["python"]), "-c", "import pooltk; print(pooltk.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=installed["work"],
    )
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


def test_the_claims_ledger_reads_its_published_figures_from_the_installed_wheel(
    installed: dict[str, Path],
) -> None:
    program = (
        "from pooltk.studies.kimi_k3 import load_published; from pooltk.nb.schedules import "
        "validation_summary; print(len(load_published().frame), len(validation_summary()))"
    )
    out = subprocess.run(
        [str(installed["python"]), "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=installed["work"],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    published, validated = map(int, out.stdout.split())
    assert published > 10 and validated > 10
