"""The package's shape, checked over the source: arrows point down the declared layers, the pool
needs torch alone.

These read every module under ``pooltk/`` with :mod:`ast` (imports inside functions count too),
so a rule broken anywhere fails here with the module and line that broke it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pooltk"
STDLIB = set(sys.stdlib_module_names)

# What the pool may reach: the standard library, torch, the two shared root modules, itself, and
# the schedule analysis below it (torch-only at import: the slack and stock rules, schedule names,
# and schedule="auto" ring plans).
POOL_MAY_IMPORT = ("pooltk.config", "pooltk._validate", "pooltk.pool", "pooltk.analysis")
HEAVY = (
    "pandas",
    "numpy",
    "matplotlib",
    "seaborn",
    "ipywidgets",
    "IPython",
    "jupyterlab",
    "nbformat",
    "nbclient",
    "nbconvert",
    "yaml",
    "pyarrow",
    "polars",
)


@dataclass(frozen=True, slots=True)
class Import:
    importer: str
    """Dotted name of the importing module."""
    line: int
    module: str
    """Dotted name of the imported module (``from a.b import c`` -> ``a.b``)."""
    names: tuple[str, ...]
    """Names taken from it (``from`` imports); empty for ``import a.b``."""
    type_checking: bool
    """Inside ``if TYPE_CHECKING:`` (never executed)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[Import]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                guarded.update(id(n) for n in ast.walk(sub))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append(Import(name, node.lineno, alias.name, (), id(node) in guarded))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append(
                Import(
                    name,
                    node.lineno,
                    module,
                    tuple(a.name for a in node.names),
                    id(node) in guarded,
                )
            )
    return out


ALL = {_module_name(p): _imports(p) for p in sorted(PKG.rglob("*.py"))}


def _top(module: str) -> str:
    return module.split(".")[0]


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_pool_imports_only_the_standard_library_torch_and_pooltks_torch_only_core() -> None:
    bad = []
    for name, imports in ALL.items():
        if not _within(name, ("pooltk.pool",)):
            continue
        for imp in imports:
            if imp.type_checking or _top(imp.module) in STDLIB | {"torch", "__future__"}:
                continue
            if not _within(imp.module, POOL_MAY_IMPORT):
                bad.append(f"{name}:{imp.line} imports {imp.module}")
    assert not bad, "pooltk.pool must need torch alone:\n" + "\n".join(bad)


def test_the_analysis_the_pool_calls_imports_nothing_heavy_at_module_level() -> None:
    # pandas only inside the functions that return DataFrames (never on the pool's path).
    bad = []
    for path in sorted((PKG / "analysis").glob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module level only
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                if mod and _top(mod) in HEAVY:
                    bad.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} imports {mod} at module level"
                    )
    assert not bad, "\n".join(bad)


def test_nothing_outside_the_cli_imports_the_cli_but_the_package_entry_point() -> None:
    bad = [
        f"{name}:{imp.line} imports {imp.module}"
        for name, imports in ALL.items()
        for imp in imports
        if _within(imp.module, ("pooltk.cli",))
        and not _within(name, ("pooltk.cli",))
        and name != "pooltk.__main__"
    ]  # ``python -m pooltk`` is the CLI's own entry point
    assert not bad, (
        "arrows point down: the CLI calls the library, never the reverse:\n" + "\n".join(bad)
    )


# The layer order of docs/architecture.md, lowest first. A module may import its own package and any
# package on a LOWER layer, never a peer on its own layer nor anything above. ``pooltk`` itself (the
# root ``__init__``: ``install`` / ``probe`` re-exported from the pool) sits just above the pool;
# ``python -m pooltk`` (``pooltk.__main__``) just above the CLI it starts.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pooltk._validate",),
    ("pooltk.config",),
    (
        "pooltk.analysis",
        "pooltk.logs",
    ),  # logs is independent of the pool: numpy and pandas, nothing of pooltk's
    ("pooltk.pool",),
    ("pooltk",),
    ("pooltk.memory",),
    ("pooltk.parity",),
    ("pooltk.studies", "pooltk.integrations"),
    ("pooltk.nb",),
    ("pooltk.cli",),
    ("pooltk.__main__",),
)
# Arrows that still run up, each named with what removes it. Empty: every arrow points down
# (the last one, memory.measured -> parity.rss, went when resident measurement moved beside the
# harness as pooltk.parity.measured).
KNOWN_UPWARD: frozenset[tuple[str, str]] = frozenset()


def _layer_of(module: str) -> tuple[int, str]:
    """(layer index, the LAYERS entry that owns ``module``): the longest matching prefix wins."""
    best: tuple[int, str] | None = None
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            exact_root = prefix == "pooltk" and module == "pooltk"
            if (exact_root or (prefix != "pooltk" and _within(module, (prefix,)))) and (
                best is None or len(prefix) > len(best[1])
            ):
                best = (index, prefix)
    assert best is not None, (
        f"{module} is on no layer: add its package to LAYERS (and to docs/architecture.md)"
    )
    return best


def test_every_module_of_pooltk_is_on_a_declared_layer() -> None:
    # A new package (pooltk/foo/) is on no layer until LAYERS names it: _layer_of refuses it.
    homes = {name: _layer_of(name)[1] for name in ALL}
    assert all(home != "pooltk" for name, home in homes.items() if name != "pooltk"), homes
    with pytest.raises(AssertionError, match="on no layer"):
        _layer_of("pooltk.not_a_package.module")


def _upward_arrows(modules: dict[str, list[Import]]) -> tuple[list[str], set[tuple[str, str]]]:
    """(imports that run up or sideways across the layers, the KNOWN_UPWARD entries met)."""
    bad, used = [], set()
    for name, imports in modules.items():
        mine, my_home = _layer_of(name)
        for imp in imports:
            if not _within(imp.module, ("pooltk",)):
                continue
            theirs, their_home = _layer_of(imp.module)
            if their_home == my_home or theirs < mine:
                continue
            if (name, imp.module) in KNOWN_UPWARD:
                used.add((name, imp.module))
                continue
            bad.append(
                f"{name}:{imp.line} ({my_home}, layer {mine}) imports {imp.module} "
                f"({their_home}, layer {theirs})"
            )
    return bad, used


def test_no_import_runs_up_the_layers() -> None:
    # Every import of a pooltk module, inside functions and under TYPE_CHECKING included: an arrow
    # drawn only for a type checker still ties the lower package to the upper one.
    bad, used = _upward_arrows(ALL)
    assert not bad, "arrows point down only (docs/architecture.md, the house):\n" + "\n".join(bad)
    assert used == KNOWN_UPWARD, (
        "these known upward arrows are gone: drop them from KNOWN_UPWARD: "
        f"{sorted(KNOWN_UPWARD - used)}"
    )


def test_the_layer_check_refuses_an_upward_and_a_sideways_import() -> None:
    # The check itself can fail: the analysis importing the pool (the arrow issue 22 removed) runs
    # up; logs and analysis are peers on one layer, so neither may import the other.
    fake = {
        "pooltk.analysis.lifetimes": [
            Import("pooltk.analysis.lifetimes", 1, "pooltk.pool.ring", ("ring_size",), False)
        ],
        "pooltk.logs.reader": [
            Import("pooltk.logs.reader", 2, "pooltk.analysis.lifetimes", (), True)
        ],
        "pooltk.memory.model": [Import("pooltk.memory.model", 3, "pooltk.pool.sizing", (), False)],
    }
    bad, _ = _upward_arrows(fake)
    assert [b.split(" ")[0] for b in bad] == [
        "pooltk.analysis.lifetimes:1",
        "pooltk.logs.reader:2",
    ], bad
    assert (
        _layer_of("pooltk")[1] == "pooltk" and _layer_of("pooltk.__main__")[1] == "pooltk.__main__"
    )


def test_pool_config_is_the_one_config_type_and_the_ring_rule_lives_in_the_pool() -> None:
    # Issue #41: the rule and the harness's rings were three types; now a user's PoolConfig, the
    # pool's ring_size, and the harness's private Harness. The old names are spelled in pieces here
    # so that a search of the tree for them finds nothing.
    gone = ("Ring" + "Rule", "Ring" + "s(")
    assert not (PKG / "analysis" / "rings.py").exists()
    files = [
        p
        for folder in ("pooltk", "tools", "benchmarks", "notebooks")
        for p in sorted((ROOT / folder).rglob("*"))
        if p.suffix in (".py", ".ipynb") and ".ipynb_checkpoints" not in p.parts
    ]
    assert files
    bad = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if any(name in line for name in gone)
    ]
    assert not bad, (
        "the old config types are gone; use PoolConfig (or the harness's Harness):\n"
        + "\n".join(bad)
    )


def _package_of(module: str) -> str:
    """``pooltk.logs.reader`` -> ``pooltk.logs``; root modules (``pooltk._validate``) ->
    ``pooltk``."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or (PKG / parts[-1]).is_dir() else parts[0]


SEAM = {("pooltk.parity.experiments", "pooltk.pool.install")}
"""The one private door between packages: the harness's rings reach the pool there
([Note: the harness seam])."""


def test_no_module_imports_a_private_name_of_another_package() -> None:
    bad = []
    for name, imports in ALL.items():
        mine = _package_of(name)
        for imp in imports:
            if not _within(imp.module, ("pooltk",)) or imp.type_checking:
                continue
            theirs = _package_of(imp.module)
            if theirs == "pooltk" or theirs == mine:
                # root helpers (pooltk._validate) are every package's; a package's own privates
                # are its own
                continue
            private_module = any(
                p.startswith("_") and not p.startswith("__") for p in imp.module.split(".")
            )
            private_names = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
            if (private_module or private_names) and (name, imp.module) not in SEAM:
                bad.append(f"{name}:{imp.line} takes {imp.module} {private_names or ''}")
    assert not bad, "\n".join(bad)


def test_no_library_module_builds_a_path_from_its_own_location() -> None:
    bad = []
    for path in PKG.rglob("*.py"):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if "__file__" in code or "parents[" in code:
                bad.append(f"{path.relative_to(ROOT)}:{lineno}: {line.strip()}")
    assert not bad, "shipped data is package data read with importlib.resources:\n" + "\n".join(bad)


# torch and what torch itself needs: the whole environment a pool-only user has.
TORCH_ENV = (
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
)


def test_import_pooltk_and_plan_auto_rings_in_an_environment_with_torch_alone(
    tmp_path: Path,
) -> None:
    import importlib.util

    site = tmp_path / "site"
    site.mkdir()
    for name in TORCH_ENV:
        spec = importlib.util.find_spec(name)
        if spec is None:
            continue
        origin = Path(spec.origin)
        src = origin.parent if origin.name == "__init__.py" else origin
        (site / src.name).symlink_to(src)
    (site / "pooltk").symlink_to(PKG)
    program = textwrap.dedent(
        """
        import sys
        import pooltk
        from pooltk.analysis.lifetimes import ScheduleShape, analyse, min_safe_ring
        _, spans = analyse(ScheduleShape(schedule="Interleaved1F1B", pp=2, n_microbatches=4, """
        """stages_per_rank=2))
        assert min_safe_ring(spans, 1, "forward", 4) >= 1
        report = pooltk.probe()
        heavy = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[1:]))
        print("ok", report.layout, heavy)
    """
    )
    # -I: isolated (no user site, no PYTHONPATH from outside); -S: no site-packages at all.
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, {str(site)!r}); " + program,
            *HEAVY,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok ") and out.stdout.rstrip().endswith("[]"), out.stdout


# Modules that still spell the two directions themselves (issue 22: "Direction defined 3 times and
# ("forward", "grad") written 12 times"); each is to import DIRECTIONS from
# pooltk.analysis.lifetimes.
DIRECTIONS_STILL_SPELLED: frozenset[str] = frozenset()


def test_the_two_directions_are_spelled_once_in_analysis_lifetimes() -> None:
    import re

    spelled = re.compile(r"""[\(\[]\s*["']forward["']\s*,\s*["']grad["']\s*[\)\]]""")
    home = "pooltk/analysis/lifetimes.py"
    # the developer tools and benchmarks run pooltk too: they import the pair as well
    files = [p for top in (PKG, ROOT / "tools", ROOT / "benchmarks") for p in top.rglob("*.py")]
    found = {str(p.relative_to(ROOT)) for p in files if spelled.search(p.read_text())}
    assert home in found, "Direction / DIRECTIONS live in pooltk.analysis.lifetimes"
    new = sorted(found - {home} - DIRECTIONS_STILL_SPELLED)
    assert not new, (
        "import DIRECTIONS (and Direction) from pooltk.analysis.lifetimes instead of spelling "
        f"them: {new}"
    )


# --------------------------------------------------------------------- one binder ([Note: binding])

BINDER = "pooltk/pool/torch_compat/bind.py"


def _bound_names() -> frozenset[str]:
    """Every torch method pooltk wraps somewhere, and the other names only the binder may assign."""
    from pooltk.pool.torch_compat import stage_api as api

    wrapped = (
        api.HOT_METHODS
        + api.OPTIONAL_HOT_METHODS
        + api.SEND_METHODS
        + api.HANDOFF_METHODS
        + api.SETUP_METHODS
        + api.GUARDED_STAGE_METHODS
    )
    return frozenset(wrapped) | {
        "_warmup_p2p",
        "allocate_buffer",
        "take_buffer",
        "_make_tensor_from_meta",
        "__init__",
    }


# Dynamic (non-constant) names assigned on purpose, none of them a torch stage method.
DYNAMIC_ASSIGNMENTS = {
    "tools/integration/producers_rank.py": "torch.cuda shims for a CPU run (not stage methods)",
    "benchmarks/bench_log_reader.py": "times pooltk's own log-reading stages",
}


def _constants(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a string constant."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    out[target.id] = node.value.value
    return out


def _assigned_names(path: Path) -> list[tuple[int, str | None]]:
    """(line, name) of every attribute set with ``x.name =``, ``setattr`` / ``delattr``, or
    ``x.__dict__[...]`` / ``vars(x)[...]`` stores; name None where it is not a constant."""
    tree = ast.parse(path.read_text())
    constants = _constants(tree)

    def name_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    out = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else []
        targets += [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            if isinstance(t, ast.Attribute):
                out.append((node.lineno, t.attr))
            elif isinstance(t, ast.Subscript) and (
                (isinstance(t.value, ast.Attribute) and t.value.attr == "__dict__")
                or (isinstance(t.value, ast.Call) and getattr(t.value.func, "id", "") == "vars")
            ):
                out.append((node.lineno, name_of(t.slice)))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("setattr", "delattr"):
            out.append((node.lineno, name_of(node.args[1]) if len(node.args) > 1 else None))
    return out


def _binder_breaches(files: list[Path]) -> list[str]:
    names = _bound_names()
    bad = []
    for path in files:
        rel = str(path.relative_to(ROOT))
        for line, name in _assigned_names(path):
            if name in names or (name is None and rel not in DYNAMIC_ASSIGNMENTS):
                bad.append(f"{rel}:{line} assigns {name or 'a name it computes'}")
    return bad


def test_only_the_binder_assigns_torchs_stage_methods() -> None:
    files = [
        p
        for top in (PKG, ROOT / "tools", ROOT / "benchmarks")
        for p in sorted(top.rglob("*.py"))
        if str(p.relative_to(ROOT)) != BINDER
    ]
    bad = _binder_breaches(files)
    assert not bad, "wrap torch's methods with pooltk.pool.torch_compat.bind:\n" + "\n".join(bad)


def test_the_binder_rule_catches_each_way_of_assigning_a_method(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "NAME = 'get_fwd_recv_ops'\n"
        "stage.forward_one_chunk = f\n"
        "setattr(stage, NAME, f)\n"
        "stage.__dict__['clear_runtime_states'] = f\n"
        "vars(schedule)['_warmup_p2p'] = f\n"
        "setattr(module, name, f)\n"
        "stage.harmless = 1\n"
    )
    lines = sorted(int(b.split(":")[1].split(" ")[0]) for b in _binder_breaches_at(sneaky))
    assert lines == [2, 3, 4, 5, 6]


def _binder_breaches_at(path: Path) -> list[str]:
    names = _bound_names()
    return [
        f"x:{line} {name}" for line, name in _assigned_names(path) if name in names or name is None
    ]


# ---------------------------------------------- install loads the pool, not the analysis or the lab

NOT_LOADED_BY_INSTALL = ("pooltk.memory", "pooltk.parity", "pooltk.logs", "pooltk.nb",
       "pooltk.studies", "pooltk.integrations", "pooltk.cli")  # fmt: skip


def test_import_pooltk_and_install_load_no_analysis_beyond_the_catalog_and_no_lab_package() -> None:
    program = textwrap.dedent("""
        import sys
        import pooltk
        pooltk.install()
        pooltk.uninstall()
        print(sorted(m for m in sys.modules if m.startswith("pooltk.")))
    """)
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=240, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own list literal
    analysis = [m for m in loaded if _within(m, ("pooltk.analysis",))]
    assert analysis == ["pooltk.analysis", "pooltk.analysis.catalog"], analysis
    assert not [m for m in loaded if _within(m, NOT_LOADED_BY_INSTALL)], loaded


# ----------------------------------------------------------- the pool a reviewer reads in a sitting

MAX_FUNCTION_LINES = 50
MAX_CLASS_ATTRIBUTES = 12


def _pool_files() -> list[Path]:
    return sorted((PKG / "pool").rglob("*.py"))


def test_the_pool_is_held_to_100_columns_by_the_linter() -> None:
    exempt = [k for k in _ruff_per_file_ignores() if k.startswith("pooltk/pool")]
    assert not exempt, f"pool files exempt from the 100-column rule: {exempt}"


def _ruff_per_file_ignores() -> dict[str, list[str]]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return config["tool"]["ruff"]["lint"].get("per-file-ignores", {})


def test_no_pool_function_is_over_50_lines() -> None:
    long = []
    for path in _pool_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "\n".join(long)


def test_every_pool_error_takes_its_text_from_errors_py() -> None:
    """Pool errors live in one module with their texts as named constants: no raise or warning in
    the pool outside ``errors.py`` writes its text where it raises."""
    literal = []
    for path in _pool_files():
        if path.name == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            raised = node.exc if isinstance(node, ast.Raise) else None
            warned = node if getattr(getattr(node, "func", None), "attr", "") == "warn" else None
            call = raised if isinstance(raised, ast.Call) else warned
            for arg in [*call.args, *(k.value for k in call.keywords)] if call else ():
                if isinstance(arg, ast.JoinedStr) or isinstance(getattr(arg, "value", None), str):
                    literal.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not literal, "texts written where they are raised: " + ", ".join(literal)


def _attributes(cls: ast.ClassDef) -> set[str]:
    """A class's data attributes: its fields and slots, and what its methods set on ``self``."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and not (
            isinstance(node.value, ast.Call) and getattr(node.value.func, "id", "") == "property"
        ):
            for t in node.targets:
                if isinstance(t, ast.Name) and t.id == "__slots__":
                    names |= {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)}
                elif isinstance(t, ast.Name) and not t.id.startswith("__"):
                    names.add(t.id)
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
    return names - {"__weakref__"}


def test_no_pool_class_has_more_than_12_attributes() -> None:
    big = []
    for path in _pool_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and len(_attributes(node)) > MAX_CLASS_ATTRIBUTES:
                big.append(
                    f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: "
                    f"{sorted(_attributes(node))}"
                )
    assert not big, "\n".join(big)


def _torch_names() -> set[str]:
    """torch's method, parameter, attribute and action names as pooltk's adapters spell them."""
    from pooltk.pool.torch_compat import stage_api as api

    names = set(api.RUNTIME_ARGS) | set(api.SETUP_METHODS) | set(api.GUARDED_STAGE_METHODS)
    names |= {n for params in api.RUNTIME_ARGS.values() for n in params}
    names |= set(api.RECV_INFO_ATTRS.values()) | set(api.COMPUTE_ACTIONS) - {"F", "B", "I", "W"}
    return names | TORCH_ATTRIBUTES


TORCH_ATTRIBUTES = {
    "fwd_cache",
    "output_chunks",
    "_internal_losses",
    "_comp_type_to_function_map",
    "tensor",  # a P2P op's
}
"""Attributes of torch's objects the pool reads: spelled as strings or as attribute access."""


def _torch_names_spelled(path: Path, names: set[str]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {getattr(node, 'attr', None) or node.value!r}"
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Constant) and node.value in names)
        or (isinstance(node, ast.Attribute) and node.attr in TORCH_ATTRIBUTES & names)
    ]


def test_torchs_names_are_spelled_only_in_the_adapters() -> None:
    names = _torch_names()
    assert {"get_fwd_recv_ops", "num_microbatches", "args_recv_info", "fwd_cache"} <= names
    outside = [p for p in _pool_files() if "torch_compat" not in p.parts]
    spelled = [hit for path in outside for hit in _torch_names_spelled(path, names)]
    assert not spelled, "torch's names live in pool/torch_compat/ alone:\n" + "\n".join(spelled)
    adapter = PKG / "pool" / "torch_compat" / "stage_api.py"
    assert _torch_names_spelled(adapter, names), "the check finds the adapters' own spellings"
