"""README.md's file map ("Where things are") matches the tree, both ways."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _map_rows() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        m = re.match(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$", line)
        if m:
            rows.append((m.group(1), m.group(2)))
    return rows


ROWS = _map_rows()


def test_every_path_in_the_map_exists() -> None:
    missing = [path for path, _ in ROWS if not (ROOT / path).exists()]
    assert ROWS and not missing, missing


def test_every_file_a_row_names_inside_its_package_exists() -> None:
    missing = []
    for path, holds in ROWS:
        if not path.endswith("/") or not (ROOT / path).is_dir():
            continue
        for name in re.findall(r"`([\w/]+(?:\.py|/))`", holds):
            if not (ROOT / path / name).exists():
                missing.append(f"{path}{name}")
    assert not missing, missing


def test_every_package_and_module_of_pooltk_is_in_the_map() -> None:
    named = {path.rstrip("/") for path, _ in ROWS}
    children = [
        p
        for p in (ROOT / "pooltk").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and not p.name.startswith("__"))
    ]

    def covered(rel: str) -> bool:  # named itself, inside a named folder, or holding a named folder
        return rel in named or any(
            rel.startswith(n + "/") or n.startswith(rel + "/") for n in named
        )

    absent = sorted(
        str(p.relative_to(ROOT)) for p in children if not covered(str(p.relative_to(ROOT)))
    )
    assert not absent, f"in the tree but not in README's map: {absent}"


def test_every_notebook_is_listed_by_its_number() -> None:
    holds = dict(ROWS)["notebooks/"]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert re.search(rf"\b{nb.name[:2]}\b", holds), (
            f"{nb.name} is not in README's notebooks row"
        )
