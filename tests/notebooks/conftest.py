"""Each notebook executed once per session (nbrun.execute_notebook), shared by test_notebooks_execute.py and test_figures.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from nbrun import Executed, execute_notebook

_CACHE: dict[Path, Executed] = {}


@pytest.fixture(scope="session")
def executed(tmp_path_factory: pytest.TempPathFactory):
    """``executed(path) -> Executed``: each notebook runs once per session, whichever test asks first."""
    from test_notebooks_execute import PROBES

    def run(path: Path) -> Executed:
        path = Path(path).resolve()
        if path not in _CACHE:
            probe = PROBES.get(path.stem)
            _CACHE[path] = execute_notebook(path, tmp_path_factory.mktemp(path.stem),
                                            probe[0] if probe is not None else None)
        return _CACHE[path]

    return run
