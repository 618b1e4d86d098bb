"""Each notebook executed once per session, shared by test_notebooks_execute.py and test_figures.py.

The run is the browser test's JupyterLab run where it finished, else a headless one
([Note: one execution per notebook] in nbrun.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nbrun import LAB_RECORDS, Executed, execute_notebook, load_lab_record

_CACHE: dict[Path, Executed] = {}


@pytest.fixture(scope="session")
def executed(tmp_path_factory: pytest.TempPathFactory):
    """``executed(path) -> Executed``: each notebook runs once per session, whichever test asks
    first."""
    from test_notebooks_execute import PROBES

    def run(path: Path) -> Executed:
        path = Path(path).resolve()
        if path not in _CACHE and path in LAB_RECORDS:
            _CACHE[path] = load_lab_record(path, LAB_RECORDS[path])
        if path not in _CACHE:
            probe = PROBES.get(path.stem)
            _CACHE[path] = execute_notebook(
                path, tmp_path_factory.mktemp(path.stem), probe[0] if probe is not None else None
            )
        return _CACHE[path]

    return run
