"""The torch layout table (notebook 00, docs/torch-compat.md) holds against the recorded shapes of
the real wheels.

``tests/compat/layouts/torch-<release>.json`` are the class and method names read from each real
release's wheel. Each family's cells must be defined in every release it lists, the methods that
tell two families apart must be absent from the other family's releases, and the PR's statement
about the 2.12 line is checked against 2.12.1's wheel: it makes its buffers in
``_setup_*_recv_info``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pooltk.nb.layouts import FAMILIES, ROLES, Marker, layout_rows, markdown_table

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ROOT / "tests" / "compat" / "layouts"


def _shape(release: str) -> dict:
    return json.loads((LAYOUTS / f"torch-{release}.json").read_text())["modules"]


def _defined(marker: Marker, release: str) -> bool:
    modules = _shape(release)
    module = modules.get(marker.module.rsplit(".", 1)[-1])
    if module is None:
        return False
    if not marker.owner:
        return (
            marker.attr in module.get("classes", {})
            or marker.attr in module.get("functions", {})
            or marker.attr in module.get("names", [])
        )
    return marker.attr in module.get("classes", {}).get(marker.owner, {}).get("methods", {})


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_every_cell_of_a_family_is_defined_in_every_release_it_lists(family) -> None:
    for release in family.releases:
        missing = [m.where for m in family.markers if not _defined(m, release)]
        assert not missing, f"{family.name}: {missing} not in torch {release}'s recorded shape"


def test_the_methods_telling_the_eager_families_apart_are_absent_where_the_other_family_ships() -> (
    None
):
    prepare, setup, lazy = FAMILIES
    own = [m for m in setup.makes if m not in prepare.makes]
    assert own, "setup-recv-info has no method of its own"
    for release in prepare.releases:
        assert not any(_defined(m, release) for m in own), (release, [m.where for m in own])
    for release in setup.releases:
        assert not _defined(lazy.makes[0], release), release


def test_the_released_2_12_line_makes_its_buffers_in_the_setup_methods_not_prepare_infra() -> None:
    """PR #3780: 'the 2.12 line in current NGC containers (_prepare_forward/backward_infra)'. The
    released 2.12.1 wheel."""
    prepare, setup, _ = FAMILIES
    assert "2.12.1" in setup.releases and all(_defined(m, "2.12.1") for m in setup.makes)
    assert "NGC" in prepare.note and "2.12" in prepare.note
    assert not _defined(
        Marker(module="torch.distributed.pipelining.stage", owner="", attr="_RootArgPlaceholder"),
        "2.12.1",
    )


def test_one_method_shared_by_two_families_is_one_row_said_so_and_no_row_repeats() -> None:
    rows = layout_rows()
    names = [r[""] for r in rows]
    assert len(names) == len(set(names)) and names[: len(ROLES)] == list(ROLES)
    shared = [
        r
        for r in rows
        if r[""] in ROLES and r["prepare-infra"].split(" ")[0] == r["setup-recv-info"].split(" ")[0]
    ]
    assert [r[""] for r in shared] == ["forward buffers, tracing frontend (pipeline())"]
    assert "same method" in shared[0]["setup-recv-info"]


def test_docs_torch_compat_shows_the_table_as_the_code_has_it() -> None:
    doc = (ROOT / "docs" / "torch-compat.md").read_text()
    assert markdown_table() in doc, "docs/torch-compat.md: paste pooltk.nb.layouts.markdown_table()"
