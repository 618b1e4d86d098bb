"""The published compatibility matrix (docs/compat/matrix-DATE.json) parses, covers 2.11-2.15, and
is green.

Green means: every release either pooled with bitwise-equal parity and both negative
controls caught; or, on the lazy layout, installed the last-stage release alone with every run
bitwise equal and the last stage's live receive buffers down from M; or cleanly stood down (a
known layout, a reason, stock and bitwise equal runs, no exception). Unit and compat tests pass
in every release's own venv. The table in docs/torch-compat.md must be the one of the same file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _shapes import FAMILY_BY_MINOR, expected_family

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "docs" / "compat"
DOC = REPO / "docs" / "torch-compat.md"


def _latest() -> tuple[Path, dict]:
    files = sorted(OUT.glob("matrix-*.json"))
    assert files, f"no published matrix in {OUT}; run python -m tools.compat_matrix"
    return files[-1], json.loads(files[-1].read_text())


@pytest.fixture(scope="module")
def matrix() -> dict:
    return _latest()[1]


def test_the_latest_matrix_covers_every_release_line_from_2_11_to_2_15(matrix):
    lines = {tuple(int(x) for x in r["release"].split(".")[:2]) for r in matrix["releases"]}
    assert set(FAMILY_BY_MINOR) <= lines
    assert matrix["spec"]["pp"] >= 2 and matrix["spec"]["microbatches"] > matrix["spec"]["pp"]
    assert matrix["date"] == _latest()[0].stem.removeprefix("matrix-")


def test_every_release_detected_its_measured_family_and_ran_the_exact_release(matrix):
    for r in matrix["releases"]:
        assert r["torch_version"].split("+")[0] == r["release"], r["release"]
        assert r["layout"] == r["expected_layout"] == expected_family(r["release"]), r["release"]
        assert r["tests"]["compat"]["failed"] == 0 and r["tests"]["compat"]["errors"] == 0, r[
            "tests"
        ]["compat"]
        assert r["tests"]["compat"]["passed"] > 0


def test_every_release_is_pooled_or_released_bitwise_equal_or_cleanly_stands_down(matrix):
    for r in matrix["releases"]:
        assert r["outcome"] in ("pooled-bitwise", "released-bitwise", "stands-down"), (
            r["release"],
            r.get("problems"),
        )
        assert r["problems"] == []
        assert r["tests"]["unit"]["failed"] == 0 and r["tests"]["unit"]["errors"] == 0, (
            r["release"],
            r["tests"],
        )
        assert "error" not in r["parity"] and r["parity"]["bitwise_equal"] is True, r["release"]
        neg = r["negative"]
        if r["outcome"] == "pooled-bitwise":
            assert r["installed"] is True
            pooled = [v for v in r["parity"]["variants"] if v["pooled"]]
            assert pooled and all(v["bitwise_equal"] and v["bytes_exact"] for v in pooled)
            assert all(any(v["rings"].values()) for v in pooled)
            for key in ("guard_off_short", "guard_off_gpipe"):
                assert neg[key]["bitwise_equal"] is False and neg[key]["max_abs_diff"] > 0, (
                    r["release"],
                    key,
                )
            for key in ("guard_on_short", "guard_on_gpipe"):
                assert neg[key]["error"] == "PoolOverrunError", (r["release"], key)
        elif r["outcome"] == "released-bitwise":
            assert r["installed"] is True and r["probe"]["mode"] == "release"
            stock, released = r["bytes"]["stock"]["sets"], r["bytes"]["released"]
            last = str(max(int(s) for s in stock))
            assert stock[last][0] == matrix["spec"]["microbatches"], (
                r["release"],
                stock,
            )  # stock holds all M
            own = r["bytes"].get("stock_variants", {})
            for name, counted in released.items():
                twin = own.get("stock/" + name.split("/", 1)[1], {"sets": stock})["sets"]
                assert 0 < counted["sets"][last][0] < twin[last][0], (r["release"], name, counted)
                if not name.endswith("+eval"):  # training steps: the live set, not M
                    assert counted["sets"][last][0] <= 2, (r["release"], name, counted)
        else:
            assert r["installed"] is False and r["probe"]["reason"]
            for key in neg:
                assert "error" not in neg[key] and neg[key]["bitwise_equal"] is True, (
                    r["release"],
                    key,
                )
                assert neg[key]["pooled"] is False


def test_pooled_releases_hold_fewer_receive_bytes_than_stock_on_middle_stages(matrix):
    for r in matrix["releases"]:
        if r["outcome"] != "pooled-bitwise":
            continue
        stock, pooled = r["bytes"]["stock"], r["bytes"]["pooled"]
        assert pooled["total"] < stock["total"], r["release"]
        for s in ("1", "2"):
            assert sum(pooled["sets"][s]) < sum(stock["sets"][s]), (r["release"], s)


def test_the_docs_table_is_the_published_matrix():
    path, m = _latest()
    text = DOC.read_text()
    begin, end = "<!-- compat-matrix:begin -->", "<!-- compat-matrix:end -->"
    assert begin in text and end in text
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert m["date"] in table and path.name in table
    for r in m["releases"]:
        row = next(
            (ln for ln in table.splitlines() if ln.startswith(f"| {r['release']} ")), None
        )  # "(measured DAY)" may follow
        assert row is not None, r["release"]
        assert r["outcome"] in row and r["torch_version"] in row
