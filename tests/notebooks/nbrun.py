"""Run a notebook with what the tests read from it (used by conftest.py's ``executed`` fixture).

[Note: one execution per notebook]
In the suite every notebook runs once, and the figure test, the probes and the browser test all
read that one run. ``tests/browser`` runs first (pytest collects folders in name order): its
JupyterLab kernels start with :data:`KERNEL_STARTUP`, which installs the figure recorder and,
after every cell, writes the figures, the probe's value and the errors to
``<POOLTK_NB_RECORD_DIR>/<notebook stem>/record.json`` (:func:`record_this_kernel`). Once Run All
has finished, the browser test hands the folder over (:data:`LAB_RECORDS`), and
:func:`load_lab_record` reads it. A notebook the browser did not finish (no browser, or a
``tests/notebooks`` run on its own) runs headless instead, with the same cells added.

:func:`execute_notebook` runs ``notebooks/<path>`` with nbclient (the sliced polls of
``pooltk.nb.report.notebook_client``, working directory ``notebooks/``, ``POOLTK_REPORT_DIR`` a
temporary folder) on an in-memory copy with three cells added: the figure recorder first
(``figure_checks.install()``), then, at the end, the notebook's probe (``PROBES`` in
test_notebooks_execute.py: values the notebook computed, read from its kernel) and the recorder's
dump.
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
ADDED_TAG = "pooltk-test-added"
"""The tag of the cells :func:`execute_notebook` adds (the recorder, the probe, the dump)."""
RECORD_ENV = "POOLTK_NB_RECORD_DIR"
"""The folder a recording kernel writes ``<stem>/record.json`` under (set on the JupyterLab
server)."""
LAB_RECORDS: dict[Path, Path] = {}
"""Notebook path -> its finished JupyterLab run's record folder (filled by tests/browser)."""
KERNEL_STARTUP = f"""# pooltk's test recorder: an IPython startup file of the suite's JupyterLab
# (tests/notebooks/nbrun.py)
import os as _os
if _os.environ.get({RECORD_ENV!r}) and _os.environ.get("JPY_SESSION_NAME"):
    import sys as _sys
    _sys.path.insert(0, {str(HERE)!r})
    import nbrun as _nbrun
    _nbrun.record_this_kernel()
"""


@dataclass(kw_only=True, slots=True)
class Executed:
    """One notebook as the kernel left it."""

    path: Path
    """The notebook."""
    nb: Any
    """The executed in-memory notebook with the added cells (None for a JupyterLab run)."""
    error: str | None
    """The error when a cell failed (nbclient's, or the kernel's in JupyterLab), else None."""
    errors: list[str]
    """Every error output, ``cell i: ename: evalue`` (and the traceback's end, headless)."""
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


def execute_notebook(
    path: Path,
    out_dir: Path,
    probe: str | None,
    *,
    timeout_s: float = 540,
    parameters: dict[str, Any] | None = None,
) -> Executed:
    """Run ``path`` headless with the recorder, ``probe`` (an expression) and the dump added."""
    import nbclient
    import nbformat

    import figure_checks
    from pooltk.nb.report import inject_parameters, notebook_client

    nb = nbformat.read(path, as_version=4)
    if parameters:
        inject_parameters(nb, parameters)

    def added(source: str) -> Any:
        return nbformat.v4.new_code_cell(source, metadata={"tags": [ADDED_TAG]})

    nb.cells.insert(
        0,
        added(
            f"import sys as _sys\n_sys.path.insert(0, {str(HERE)!r})\n"
            "import figure_checks as _figure_checks\n"
            "_figure_checks.install()"
        ),
    )
    if probe is not None:
        nb.cells.append(
            added(
                f"import json as _json\nprint({PROBE_MARK!r} + _json.dumps({probe}, default=str))"
            )
        )
    nb.cells.append(added("_figure_checks.dump()"))
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
    return Executed(
        path=path,
        nb=nb,
        error=error,
        errors=error_outputs(nb),
        figures_dir=out_dir,
        figures=figures,
        probe=value,
    )


def record_this_kernel() -> None:
    """In a JupyterLab kernel: record figures, the probe and errors after every cell.

    The notebook is ``JPY_SESSION_NAME`` (jupyter_server sets it); its probe expression is
    ``<folder>/probe.txt`` when the test wrote one. Figures are saved to ``<folder>/figures``, as
    ``pooltk report`` saves them ([Note: one execution per notebook]).
    """
    import figure_checks
    from IPython import get_ipython

    ip = get_ipython()
    folder = Path(os.environ[RECORD_ENV]) / Path(os.environ["JPY_SESSION_NAME"]).stem
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    os.environ["POOLTK_REPORT_DIR"] = str(folder / "figures")
    probe_file = folder / "probe.txt"
    probe = probe_file.read_text() if probe_file.is_file() else None
    errors: list[str] = []
    figure_checks.install()

    def after_cell(result: Any) -> None:
        error = result.error_in_exec or result.error_before_exec
        if error is not None:
            errors.append(f"cell {result.execution_count}: {type(error).__name__}: {error}")
        record: dict[str, Any] = {
            "cell": result.execution_count,
            "errors": errors,
            "figures": figure_checks.records_as_json(),
        }
        if probe is not None:
            try:
                record["probe"] = json.loads(json.dumps(eval(probe, ip.user_ns), default=str))
            except (
                Exception
            ) as exc:  # not defined yet, or the notebook changed: the last cell's wins
                record["probe_error"] = f"{type(exc).__name__}: {exc}"
        tmp = folder / "record.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(folder / "record.json")

    ip.events.register("post_run_cell", after_cell)


def load_lab_record(path: Path, folder: Path) -> Executed:
    """The :class:`Executed` of a notebook's finished JupyterLab run, from its record folder."""
    import figure_checks

    record = json.loads((folder / "record.json").read_text())
    errors = list(record["errors"])
    if "probe_error" in record:
        errors.append(f"the probe failed after the last cell: {record['probe_error']}")
    return Executed(
        path=path,
        nb=None,
        error="\n".join(errors) or None,
        errors=errors,
        figures_dir=folder / "figures",
        figures=[figure_checks.FigureRecord(**d) for d in record["figures"]],
        probe=record.get("probe"),
    )


def without_added_cells(nb: Any) -> Any:
    """A copy of an executed notebook without the cells :func:`execute_notebook` added: what
    ``pooltk report`` would have run and rendered."""
    import copy

    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if ADDED_TAG not in c.get("metadata", {}).get("tags", [])]
    return out


def error_outputs(nb: Any) -> list[str]:
    """``cell i: ename: evalue`` and the traceback's end, for every error output."""
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", [])))
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}\n{tb[-2500:]}")
    return found
