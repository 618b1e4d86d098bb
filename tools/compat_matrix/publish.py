"""The matrix document: same-day rows merged, written to docs/compat/matrix-DATE.json and into the
docs page."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from tools.compat_matrix.spec import (
    BEGIN,
    COMMAND,
    DOC,
    END,
    MICROBATCHES,
    OUT_DIR,
    PP,
    REPO,
    STEPS,
)
from tools.compat_matrix.table import table


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def merge_rows(rows: list[dict[str, Any]], earlier: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` plus the ``earlier`` rows of releases not run again, in release order."""
    run = {r["release"] for r in rows}
    return sorted(
        [r for r in earlier if r["release"] not in run] + rows,
        key=lambda r: release_key(r["release"]),
    )


def matrix_doc(rows: list[dict[str, Any]], *, date: str, argv: list[str]) -> dict[str, Any]:
    """The published JSON object for judged ``rows`` measured on this host on ``date`` by
    ``argv``."""
    boundary = next(
        (r["parity"]["boundary_bytes"] for r in rows if "boundary_bytes" in r.get("parity", {})),
        None,
    )
    return {
        "schema": 1,
        "date": date,
        "host": f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, gloo on 127.0.0.1",
        "command": " ".join([COMMAND, *argv]),
        "spec": {
            "pp": PP,
            "microbatches": MICROBATCHES,
            "steps": STEPS,
            "boundary_bytes": boundary,
        },
        "releases": rows,
    }


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def replace_block(text: str, body: str) -> str | None:
    """``text`` with what lies between BEGIN and END replaced by ``body``; None when a marker is
    missing."""
    if BEGIN not in text or END not in text:
        return None
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + body + END + tail


def publish(doc: dict[str, Any], *, out_dir: Path = OUT_DIR, page: Path = DOC) -> tuple[Path, bool]:
    """Write ``out_dir/matrix-DATE.json`` and the table between the markers of ``page``.

    Returns the JSON's path and whether the page was updated (it is left alone when it or a
    marker is missing).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"matrix-{doc['date']}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if not page.exists():
        return path, False
    body = (
        f"\nMeasured {doc['date']} with `{COMMAND}` ({doc['host']}; parity pp{doc['spec']['pp']}, "
        f"{doc['spec']['microbatches']} microbatches, {doc['spec']['steps']} steps, "
        f"boundary tensor {doc['spec']['boundary_bytes']} bytes per microbatch). "
        f"Source: `{_shown(path)}`.\n\n"
        f"{table(doc['releases'])}\n"
    )
    new = replace_block(page.read_text(), body)
    if new is None:
        return path, False
    page.write_text(new)
    return path, True


def earlier_rows(date: str, out_dir: Path = OUT_DIR) -> list[dict[str, Any]]:
    """Rows already published: those of ``date``, else those of the newest earlier matrix.

    Each row keeps the day it was measured (``measured``), so a release not run again is carried
    over as what it was, never presented as measured on ``date``.
    """
    previous = out_dir / f"matrix-{date}.json"
    if previous.exists():
        return json.loads(previous.read_text())["releases"]
    older = sorted(
        p for p in out_dir.glob("matrix-*.json") if p.stem.removeprefix("matrix-") < date
    )
    if not older:
        return []
    doc = json.loads(older[-1].read_text())
    return [dict(r, measured=r.get("measured", doc["date"])) for r in doc["releases"]]
