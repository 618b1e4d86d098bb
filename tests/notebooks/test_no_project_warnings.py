"""No warning in a clean run comes from the project's own notebooks or code (issue #20): held with
warnings as errors."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_notebook_reads_and_validates_without_a_warning(path):
    """Every cell has an id (nbformat 4.5), so nbformat's MissingIDFieldWarning never fires on
    reading it."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    missing = [i for i, c in enumerate(nb.cells) if "id" not in c]
    assert not missing, f"{path.name}: cells {missing} have no id"


def test_the_schedule_check_summary_warns_of_nothing_with_and_without_guard_results():
    from pooltk.parity.schedule_check import ScheduleCheck

    row = dict(
        schedule="1F1B",
        pp=2,
        vpp=1,
        n_microbatches=4,
        stage=0,
        direction="forward",
        stock=4,
        pooltk=1,
        analysed_peak=0,
        analysed_min=1,
        measured_peak=0,
        peak_matches=True,
        parity=True,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = ScheduleCheck(rows=[row]).summary()  # guard checks off: no guard results at all
        mixed = ScheduleCheck(
            rows=[row, dict(row, schedule="GPipe")], guard={"1F1B": "caught (pp2 M4)"}
        ).summary()
    assert list(plain["guard"]) == ["not run"]
    assert list(mixed["guard"]) == ["caught (pp2 M4)", "not run"]
