"""Layout shapes of torch's pipelining modules: read from a wheel's sources, from a live torch, or
built as fakes.

A *shape* is what pooltk's feature detection can see of ``torch.distributed.pipelining``:
per module, the classes (bases, and the methods each class body defines, with their
parameters) and the other module-level names. ``tests/compat/layouts/torch-<release>.json``
holds one shape per real release, extracted with :func:`shape_from_wheel` (AST only, no
import) from the wheel itself. :func:`build_fake_modules` turns a shape back into module
objects with empty methods of the same names and signatures, so detection can be pinned
per family without installing each multi-GB wheel; :func:`shape_from_live` reads the
same facts from the torch that is imported, so the matrix can prove each fixture matches
its real release.

Stdlib only (the matrix script imports it before any torch exists).
"""

from __future__ import annotations

import ast
import inspect
import json
import types
import zipfile
from pathlib import Path
from typing import Any

__all__ = [
    "FAMILY_BY_MINOR",
    "MODULES",
    "RELEVANT_CLASSES",
    "build_fake_modules",
    "expected_family",
    "load_shape",
    "relevant",
    "shape_from_live",
    "shape_from_source",
    "shape_from_wheel",
]

# Modules of torch.distributed.pipelining that the adapters look at.
MODULES: tuple[str, ...] = ("stage", "_recv_buffers")
# Classes whose method sets and signatures decide the family.
RELEVANT_CLASSES: tuple[str, ...] = (
    "_PipelineStageBase",
    "PipelineStage",
    "_PipelineStage",
    "_RecvInfo",
    "_RootArgPlaceholder",
)
LAYOUTS = Path(__file__).resolve().parent / "layouts"

# The test oracle: the family each release line was found to have by reading its wheel's
# pipelining sources (tests/compat/layouts/). pooltk itself never decides by version.
FAMILY_BY_MINOR: dict[tuple[int, int], str] = {
    (2, 11): "prepare-infra",
    (2, 12): "setup-recv-info",
    (2, 13): "setup-recv-info",
    (2, 14): "setup-recv-info",
    (2, 15): "lazy",
}


def expected_family(version: str) -> str | None:
    """Family measured for the release line of ``version`` ("2.14.1+cu130" -> setup-recv-info), or
    None."""
    try:
        major, minor = (int(x) for x in version.split("+")[0].split(".")[:2])
    except ValueError:
        return None
    return FAMILY_BY_MINOR.get((major, minor))


_KINDS = {
    "posonly": inspect.Parameter.POSITIONAL_ONLY,
    "arg": inspect.Parameter.POSITIONAL_OR_KEYWORD,
    "vararg": inspect.Parameter.VAR_POSITIONAL,
    "kwonly": inspect.Parameter.KEYWORD_ONLY,
    "kwarg": inspect.Parameter.VAR_KEYWORD,
}
_KIND_NAMES = {v: k for k, v in _KINDS.items()}


# ------------------------------------------------------------------------------------
# From sources (AST)
# ------------------------------------------------------------------------------------


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[list[Any]]:
    a = fn.args
    out: list[list[Any]] = []
    positional = a.posonlyargs + a.args
    n_defaults = len(a.defaults)
    for i, p in enumerate(positional):
        kind = "posonly" if i < len(a.posonlyargs) else "arg"
        out.append([p.arg, kind, i >= len(positional) - n_defaults])
    if a.vararg:
        out.append([a.vararg.arg, "vararg", False])
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append([p.arg, "kwonly", d is not None])
    if a.kwarg:
        out.append([a.kwarg.arg, "kwarg", False])
    return out


def _decorators(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = []
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        names.append(ast.unparse(target))
    return names


def _method_kind(decorators: list[str]) -> str:
    for d in decorators:
        if d == "property" or d.endswith(".setter") or d.endswith(".getter"):
            return "property"
        if d in ("staticmethod", "classmethod"):
            return d
    return "function"


def shape_from_source(text: str) -> dict[str, Any]:
    """Shape of one module from its source text (classes, functions, other module-level names)."""
    tree = ast.parse(text)
    classes: dict[str, Any] = {}
    functions: dict[str, Any] = {}
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            methods: dict[str, Any] = {}
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    decorators = _decorators(item)
                    kind = _method_kind(decorators)
                    if kind == "property" and item.name in methods:
                        continue  # the setter of a property already recorded
                    methods[item.name] = {
                        "kind": kind,
                        "params": _params(item),
                        "abstract": "abstractmethod" in decorators,
                    }
            classes[node.name] = {"bases": [ast.unparse(b) for b in node.bases], "methods": methods}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = {"params": _params(node)}
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
    names -= set(classes) | set(functions)
    return {"classes": classes, "functions": functions, "names": sorted(names)}


def shape_from_wheel(wheel: Path) -> dict[str, Any]:
    """Shape of every module in :data:`MODULES` present in a torch wheel (read, never imported)."""
    out: dict[str, Any] = {"wheel": Path(wheel).name, "modules": {}}
    with zipfile.ZipFile(wheel) as zf:
        have = set(zf.namelist())
        for mod in MODULES:
            member = f"torch/distributed/pipelining/{mod}.py"
            if member in have:
                out["modules"][mod] = shape_from_source(zf.read(member).decode())
    return out


def load_shape(release: str) -> dict[str, Any]:
    return json.loads((LAYOUTS / f"torch-{release}.json").read_text())


def relevant(shape: dict[str, Any]) -> dict[str, Any]:
    """The part of a shape that detection can depend on (the matrix compares this with the live
    torch)."""
    out: dict[str, Any] = {}
    for mod, m in shape["modules"].items():
        classes = {
            name: {
                meth: [p[0] for p in spec["params"]] for meth, spec in sorted(c["methods"].items())
            }
            for name, c in m["classes"].items()
            if name in RELEVANT_CLASSES
        }
        functions = sorted(f for f in m["functions"] if f == "_make_tensor_from_meta")
        names = sorted(
            n for n in m["names"] if n in RELEVANT_CLASSES or n == "_make_tensor_from_meta"
        )
        out[mod] = {"classes": classes, "functions": functions, "imported": names}
    return out


# ------------------------------------------------------------------------------------
# From the imported torch
# ------------------------------------------------------------------------------------


def _live_params(fn: Any) -> list[list[Any]]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    return [
        [p.name, _KIND_NAMES[p.kind], p.default is not inspect.Parameter.empty]
        for p in sig.parameters.values()
    ]


def shape_from_live() -> dict[str, Any]:
    """The same facts as :func:`shape_from_wheel`, read from the torch imported here."""
    import importlib

    out: dict[str, Any] = {"wheel": None, "modules": {}}
    for mod in MODULES:
        try:
            m = importlib.import_module(f"torch.distributed.pipelining.{mod}")
        except ImportError:
            continue
        classes: dict[str, Any] = {}
        functions: dict[str, Any] = {}
        names: list[str] = []
        for name, value in vars(m).items():
            if isinstance(value, type) and getattr(value, "__module__", None) == m.__name__:
                methods = {}
                for meth, v in vars(value).items():
                    if isinstance(v, property):
                        methods[meth] = {
                            "kind": "property",
                            "params": _live_params(v.fget),
                            "abstract": False,
                        }
                    elif isinstance(v, (staticmethod, classmethod)):
                        methods[meth] = {
                            "kind": type(v).__name__,
                            "params": _live_params(v.__func__),
                            "abstract": False,
                        }
                    elif inspect.isfunction(v):
                        methods[meth] = {
                            "kind": "function",
                            "params": _live_params(v),
                            "abstract": bool(getattr(v, "__isabstractmethod__", False)),
                        }
                classes[name] = {"bases": [b.__name__ for b in value.__bases__], "methods": methods}
            elif inspect.isfunction(value) and value.__module__ == m.__name__:
                functions[name] = {"params": _live_params(value)}
            elif not name.startswith("__"):
                names.append(name)
        out["modules"][mod] = {"classes": classes, "functions": functions, "names": sorted(names)}
    return out


# ------------------------------------------------------------------------------------
# Fakes
# ------------------------------------------------------------------------------------


def _signature(params: list[list[Any]]) -> inspect.Signature:
    return inspect.Signature(
        [
            inspect.Parameter(
                name, _KINDS[kind], default=None if has_default else inspect.Parameter.empty
            )
            for name, kind, has_default in params
        ]
    )


def _stub(name: str, params: list[list[Any]]) -> Any:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(
            f"fake torch method {name} was called; fakes exist for detection and wrapping only"
        )

    stub.__name__ = stub.__qualname__ = name
    stub.__signature__ = _signature(params)  # type: ignore[attr-defined]
    return stub


def _make_class(name: str, spec: dict[str, Any], bases: tuple[type, ...]) -> type:
    body: dict[str, Any] = {}
    for meth, m in spec["methods"].items():
        fn = _stub(meth, m["params"])
        if m["kind"] == "property":
            body[meth] = property(fn)
        elif m["kind"] == "staticmethod":
            body[meth] = staticmethod(fn)
        elif m["kind"] == "classmethod":
            body[meth] = classmethod(fn)
        else:
            body[meth] = fn
    return type(name, bases, body)


def build_fake_modules(
    shape: dict[str, Any], package: str = "torch.distributed.pipelining"
) -> dict[str, types.ModuleType]:
    """Module objects (keyed by short name) with the classes, functions and names of ``shape``.

    Classes keep their in-module inheritance; names a module imports from a sibling module
    of the shape (``stage`` importing ``_RecvInfo`` from ``_recv_buffers``) are the same
    objects; every other imported name is a stub function.
    """
    mods = {name: types.ModuleType(f"{package}.{name}") for name in shape["modules"]}
    order = sorted(
        shape["modules"], key=lambda n: 0 if n != "stage" else 1
    )  # siblings before stage
    for name in order:
        spec = shape["modules"][name]
        mod = mods[name]
        made: dict[str, type] = {}
        pending = dict(spec["classes"])
        while pending:
            progressed = False
            for cname, c in list(pending.items()):
                local = [b for b in c["bases"] if b in spec["classes"]]
                if all(b in made for b in local):
                    bases = tuple(made[b] for b in local) or (object,)
                    made[cname] = _make_class(cname, c, bases)
                    made[cname].__module__ = mod.__name__
                    del pending[cname]
                    progressed = True
            if not progressed:
                raise ValueError(f"cyclic class bases in shape of {name}: {sorted(pending)}")
        for cname, cls in made.items():
            setattr(mod, cname, cls)
        for fname, f in spec["functions"].items():
            fn = _stub(fname, f["params"])
            fn.__module__ = mod.__name__
            setattr(mod, fname, fn)
        for n in spec["names"]:
            if hasattr(mod, n):
                continue
            sibling = next((mods[s] for s in order if s != name and hasattr(mods[s], n)), None)
            setattr(
                mod,
                n,
                getattr(sibling, n)
                if sibling is not None
                else _stub(n, [["args", "vararg", False]]),
            )
    return mods
