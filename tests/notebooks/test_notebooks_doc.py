"""docs/notebooks.md's tables match the notebooks/ folder; its --notebooks wording agrees with
--help."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "notebooks.md"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _table(header_start: str) -> list[list[str]]:
    """Rows (cells stripped) of the markdown table whose header line starts with
    ``header_start``."""
    lines = DOC.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header_start))
    rows = []
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    return rows


def _title(path: Path) -> str:
    """The notebook's opening heading without its number: ``# 00 — How the ring works`` ->
    ``How the ring works``."""
    first = json.loads(path.read_text())["cells"][0]
    heading = "".join(first["source"]).splitlines()[0]
    return re.sub(r"^#\s+\d+\s*(—|-)?\s*", "", heading).strip()


def test_the_notebook_table_has_one_row_per_notebook_titled_as_the_notebook_itself():
    rows = _table("| notebook | title")
    assert [r[0].strip("`") for r in rows] == [p.name for p in NOTEBOOKS]
    for row, path in zip(rows, NOTEBOOKS):
        assert row[1] == _title(path), (
            f"{path.name}: docs say {row[1]!r}, the notebook says {_title(path)!r}"
        )


def test_the_timing_table_covers_every_notebook():
    rows = _table("| notebook | seconds")
    assert [r[0].strip("`") for r in rows] == [p.name for p in NOTEBOOKS]
    assert all(re.fullmatch(r"\d+(\.\d+)?", r[1]) for r in rows), rows


def test_docs_and_help_say_the_same_about_a_relative_notebooks_glob():
    from pooltk.cli import _build_parser

    parser = _build_parser("report")
    sub = next(a for a in parser._actions if a.dest == "command").choices["report"]
    help_text = " ".join(next(a for a in sub._actions if a.dest == "notebooks").help.split())
    doc = " ".join(DOC.read_text().split())
    for phrase in ("relative glob starts from the current folder", "repository root"):
        assert phrase in help_text, help_text
        assert phrase in doc, phrase
