"""environment.yml lists exactly pyproject's dependencies (conda itself is not available to run
it)."""

import tomllib

import yaml
from packaging.requirements import Requirement
from packaging.version import Version


def _pyproject_reqs(root):
    data = tomllib.loads((root / "pyproject.toml").read_text())
    reqs = list(data["project"]["dependencies"])
    for extra in data["project"]["optional-dependencies"].values():
        reqs += extra
    return {Requirement(r).name.lower(): Requirement(r) for r in reqs}


def _env_reqs(root):
    env = yaml.safe_load((root / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    return {Requirement(r).name.lower(): Requirement(r) for r in pip if not r.startswith("-e")}


def test_environment_yml_has_the_same_packages_as_pyproject(repo_root):
    assert set(_env_reqs(repo_root)) == set(_pyproject_reqs(repo_root))


def test_environment_yml_specifiers_match_pyproject_and_torch_pin_is_in_range(repo_root):
    env, pyp = _env_reqs(repo_root), _pyproject_reqs(repo_root)
    for name, req in pyp.items():
        if name == "torch":
            pin = next(iter(env[name].specifier)).version
            assert Version(pin) in req.specifier, (
                f"environment.yml pins torch {pin} outside {req.specifier}"
            )
        else:
            assert env[name].specifier == req.specifier, name


def test_bootstrap_pins_the_same_torch_as_environment_yml(repo_root):
    pin = str(next(iter(_env_reqs(repo_root)["torch"].specifier)))
    assert f'"torch{pin}"' in (repo_root / "scripts" / "bootstrap").read_text()
    constraints = (repo_root / "requirements" / "constraints.txt").read_text().splitlines()
    assert f"torch{pin}" in constraints
