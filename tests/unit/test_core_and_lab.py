"""``pip install pooltk`` keeps a small core ([Note: core and lab] in pooltk/cli/errors.py).

Every module of ``pooltk/`` is marked core or lab here. The core is the pool, ``PoolConfig``, the
receive-buffer model, the schedule analysis and the ``probe``, ``memory`` and ``schedules``
commands; the lab is the rest, its third-party stack behind the ``lab`` extra. No core module
imports a lab module (imports inside functions count), nor a package of the lab stack when it is
imported (a core record's ``to_frame()`` may import pandas when called: typed results that become
DataFrames); a core command's flag that does lab work imports its module by name through
``from_lab``, and every such crossing is listed in :data:`CROSSINGS`. tests/packaging runs the
core commands in an install without the lab stack.
"""

from __future__ import annotations

import ast
import tomllib

from test_architecture import ALL, PKG, ROOT, _module_name, _within  # noqa: E402

CORE = (
    "pooltk",
    "pooltk.__main__",
    "pooltk._validate",
    "pooltk.config",
    "pooltk.pool",
    "pooltk.analysis",
    "pooltk.memory",
    "pooltk.cli",
)
"""The core's packages and modules, less what :data:`LAB` takes out of them."""
LAB = (
    "pooltk.logs",
    "pooltk.nb",
    "pooltk.parity",
    "pooltk.studies",
    "pooltk.integrations",
    "pooltk.memory.replay",
    "pooltk.memory.decoder",
    "pooltk.cli.estimate",
    "pooltk.cli.fuzz",
    "pooltk.cli.logs",
    "pooltk.cli.parity",
    "pooltk.cli.report",
)
"""The lab: logs, notebook helpers, parity, the studies, the integrations, the whole-stage replay
and the decoder it builds, and the commands over them."""
CORE_COMMANDS = ("probe", "memory", "schedules")

CROSSINGS = {
    ("pooltk.cli.memory", "pooltk.studies.kimi_k3"): "--preset, --compare, --list-presets and "
    "--k3-story read the Kimi-K3 study's presets and story (torch-only at import)",
    ("pooltk.cli.memory", "pooltk.parity.measured"): "--measure compares measured and modelled",
    ("pooltk.cli.memory", "pooltk.parity.rss"): "--measure launches the ranks it measures",
    ("pooltk.cli.schedules", "pooltk.parity.schedule_check"): "--validate runs gloo proofs",
}
"""Where a core command's flag does lab work: (core module, lab module) -> which flag and why."""


def side(module: str) -> str:
    """'lab' or 'core' for a module of pooltk (the longest marked prefix wins)."""
    if _within(module, LAB):
        return "lab"
    assert _within(module, CORE), f"{module} is marked neither core nor lab: add it to CORE or LAB"
    return "core"


def _lab_stack() -> set[str]:
    """The import names of the lab extra's packages (pyproject.toml's ``lab``)."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {
        r.split(">")[0].split("=")[0].split("[")[0].strip()
        for r in extra["optional-dependencies"]["lab"]
    }
    return {n.replace("-", "_") for n in names} | {"IPython"}


def _import_time_lines(path) -> set[int]:
    """Lines of the imports that run when ``path`` is imported (outside any function body)."""
    tree = ast.parse(path.read_text())
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
              for n in ast.walk(f)}  # fmt: skip
    return {
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom) and id(n) not in inside
    }


def _crossings(path) -> list[tuple[int, str]]:
    """Every ``from_lab("module", ...)`` call in ``path``: (line, module)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "from_lab":
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Constant), (
                f"{path}:{node.lineno}: name the module literally"
            )
            out.append((node.lineno, first.value))
    return out


def test_every_module_is_marked_core_or_lab_and_the_core_is_what_pip_install_pooltk_promises() -> (
    None
):
    sides = {name: side(name) for name in ALL}
    core = {name for name, s in sides.items() if s == "core"}
    for promised in ("pooltk.pool.install", "pooltk.config", "pooltk.memory.model",
                     "pooltk.analysis.programs", "pooltk.cli.probe", "pooltk.cli.memory",
                     "pooltk.cli.schedules"):  # fmt: skip
        assert promised in core, promised
    assert all(_within(n, LAB) for n in ("pooltk.logs.reader", "pooltk.memory.replay.run")), sides


def test_no_core_module_imports_a_lab_module_or_the_lab_stack_on_import() -> None:
    stack = _lab_stack()
    assert {"pandas", "polars", "matplotlib", "nbclient"} <= stack, stack
    paths = {_module_name(p): p for p in PKG.rglob("*.py")}
    bad = []
    for name, imports in ALL.items():
        if side(name) != "core":
            continue
        at_import = _import_time_lines(paths[name])
        for imp in imports:
            if _within(imp.module, ("pooltk",)) and side(imp.module) == "lab":
                bad.append(f"{name}:{imp.line} imports the lab module {imp.module}")
            elif imp.module.split(".")[0] in stack and not imp.type_checking:
                if imp.line in at_import:
                    bad.append(f"{name}:{imp.line} imports {imp.module} (the lab extra) on import")
    assert not bad, "the core stays small ([Note: core and lab]):\n" + "\n".join(bad)


def test_every_crossing_from_the_core_into_the_lab_is_declared_and_reaches_the_lab() -> None:
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        name = _module_name(path)
        for line, target in _crossings(path):
            assert side(target) == "lab", f"{name}:{line}: {target} is core: import it plainly"
            found[(name, target)] = line
    assert set(found) == set(CROSSINGS), (
        f"undeclared: {sorted(set(found) - set(CROSSINGS))}; "
        f"gone: {sorted(set(CROSSINGS) - set(found))}"
    )


def test_the_command_table_runs_the_core_commands_from_core_modules() -> None:
    from pooltk.cli import _COMMANDS

    for command, (module, _) in _COMMANDS.items():
        expected = "core" if command in CORE_COMMANDS else "lab"
        assert side(module) == expected, (command, module)


def test_the_marks_refuse_an_unmarked_module_and_the_import_check_can_fail() -> None:
    import pytest

    with pytest.raises(AssertionError, match="neither core nor lab"):
        side("pooltk_elsewhere.module")
    assert side("pooltk.memory.model") == "core" and side("pooltk.memory.replay.run") == "lab"
