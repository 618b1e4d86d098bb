"""The logs a variant test is built from.

[Note: cases never change with ../shared]
A test built from logs runs twice: on the shipped fixtures (``[repo]``, always) and on the real logs
of ``../shared/reference/logs`` (``[shared]``, skipped where a clone has no ``../shared``). The
cases a test runs never depend on whether ``../shared`` is there; it only adds the ``[shared]``
ones (tests/unit/test_suite_collects_every_folder.py holds the rule).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from _real_logs import repo_logs, shared_logs  # noqa: E402  (tests/logs/_real_logs.py)


@pytest.fixture(params=["repo", "shared"])
def base_logs(request) -> list[Path]:
    """The logs to build variants from: the repo's fixtures, or the real logs of ../shared."""
    if request.param == "repo":
        return repo_logs()
    logs = shared_logs(request.getfixturevalue("shared_dir"))
    if not logs:
        pytest.skip("../shared has no reference/logs; the real-log cases are skipped")
    return logs
