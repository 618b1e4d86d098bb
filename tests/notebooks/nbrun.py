"""Run a notebook headless with what the tests read from it (used by conftest.py's ``executed`` fixture).

:func:`execute_notebook` runs ``notebooks/<path>`` with nbclient (the sliced polls of
``pooltk.nb.report.notebook_client``, working directory ``notebooks/``, ``POOLTK_REPORT_DIR`` a
temporary folder) on an in-memory copy with three cells added: the figure recorder first
(``figure_checks.install()``), then, at the end, the notebook's probe (``PROBES`` in
test_notebooks_execute.py: values the notebook computed, read from its kernel) and the recorder's dump.
The committed file is never changed.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
PROBE_MARK = "__POOLTK_PROBE__"


@dataclass(kw_only=True, slots=True)
class Executed:
    """One notebook as the kernel left it."""

    path: Path
    """The notebook."""
    nb: Any
    """The executed in-memory notebook (with the added cells)."""
    error: str | None
    """nbclient's error when a cell failed, else None."""
    figures_dir: Path
    """Where ``save_figure`` wrote (``POOLTK_REPORT_DIR``)."""
    figures: list[Any]
    """``figure_checks.FigureRecord`` of every figure the notebook drew."""
    probe: Any
    """The probe's value (None when the notebook has no probe)."""


def _stream_after(nb: Any, mark: str) -> str | None:
    for cell in reversed(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and mark in out.get("text", ""):
                return out["text"]
    return None


def execute_notebook(path: Path, out_dir: Path, probe: str | None, *, timeout_s: float = 540,
                     parameters: dict[str, Any] | None = None) -> Executed:
    """Run ``path`` headless with the recorder, ``probe`` (an expression) and the dump added."""
    import nbclient
    import nbformat

    import figure_checks
    from pooltk.nb.report import inject_parameters, notebook_client

    nb = nbformat.read(path, as_version=4)
    if parameters:
        inject_parameters(nb, parameters)
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        f"import sys as _sys\n_sys.path.insert(0, {str(HERE)!r})\nimport figure_checks as _figure_checks\n"
        "_figure_checks.install()"))
    if probe is not None:
        nb.cells.append(nbformat.v4.new_code_cell(
            f"import json as _json\nprint({PROBE_MARK!r} + _json.dumps({probe}, default=str))"))
    nb.cells.append(nbformat.v4.new_code_cell("_figure_checks.dump()"))
    out_dir.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("POOLTK_REPORT_DIR")
    os.environ["POOLTK_REPORT_DIR"] = str(out_dir)
    error = None
    try:
        client = notebook_client(nb, cwd=path.parent, timeout_s=timeout_s)
        client.execute()
    except nbclient.exceptions.CellExecutionError as exc:
        error = str(exc)
    finally:
        if old is None:
            os.environ.pop("POOLTK_REPORT_DIR", None)
        else:
            os.environ["POOLTK_REPORT_DIR"] = old
    dumped = _stream_after(nb, figure_checks.DUMP_MARK)
    figures = figure_checks.read_dump(dumped) if dumped else []
    probed = _stream_after(nb, PROBE_MARK)
    value = json.loads(probed.split(PROBE_MARK, 1)[1]) if probed else None
    return Executed(path=path, nb=nb, error=error, figures_dir=out_dir, figures=figures, probe=value)


def error_outputs(nb: Any) -> list[str]:
    """``cell i: ename: evalue`` and the traceback's end, for every error output."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", [])))
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}\n{tb[-2500:]}")
    return found
