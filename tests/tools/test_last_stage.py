"""``python -m tools.last_stage``: its claims refuse a bad table, its writer writes only a table
that holds them.

The tables here are built by the test ([Note: the claims of a last-stage table] in
tools/last_stage/claims.py): a good one passes, and each claim, broken alone, fails by its name.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.last_stage import __main__ as cli  # noqa: E402
from tools.last_stage import heads  # noqa: E402
from tools.last_stage.claims import CLAIMS, Grid, check  # noqa: E402
from tools.last_stage.records import FIELDS, Record, read_csv, variants, write_csv  # noqa: E402

SET = 2 * 8 * 64 * 4


def _row(
    model: str,
    m: int,
    variant: str,
    slack: int | None,
    release: bool | None,
    stage: int,
    *,
    grid: Grid,
    rehomes: int = 0,
    ring: int | None = None,
    storages: int,
    code: str = "abc1234",
) -> Record:
    return Record(
        model=model,
        pp=grid.pp,
        schedule=grid.schedule,
        microbatches=m,
        steps=grid.steps,
        variant=variant,
        policy="tight" if variant == "pooled" else None,
        slack=slack,
        release=release,
        stage=stage,
        direction="grad" if stage == 0 else "forward",
        rehomes=rehomes,
        rehomed_bytes=rehomes * SET,
        ring_sets=ring,
        storages=storages,
        storage_bytes=storages * SET,
        counted_bytes=(storages + rehomes) * SET,
        peak_live=1 if variant == "pooled" else None,
        bitwise_equal=True if variant == "pooled" else None,
        hidden=64,
        seq_len=8,
        rows_per_microbatch=2,
        set_bytes=SET,
        torch="2.13.0+cpu",
        code=code,
    )


def good_table(grid: Grid | None = None, *, code: str = "abc1234") -> list[Record]:
    """A table as the claims describe it: the shape of the committed one, with re-home counts that
    obey them."""
    grid = grid or Grid()
    out = []
    for model in grid.models:
        for m in grid.microbatches:
            out += [
                _row(model, m, "stock", None, None, stage, grid=grid, storages=m, code=code)
                for stage in (0, 1)
            ]
            for slack in grid.slacks:
                for release in (True, False):
                    g = min(m, 2)
                    out.append(
                        _row(
                            model,
                            m,
                            "pooled",
                            slack,
                            release,
                            0,
                            grid=grid,
                            ring=g,
                            storages=g,
                            code=code,
                        )
                    )
                    k = min(m, 1 + slack)
                    if slack == 0:
                        n = grid.steps * (m - 1) if (model == "linear3d" or not release) else 0
                    else:
                        n = 0 if release else grid.steps * (m - 1) - grid.steps * slack
                    out.append(
                        _row(
                            model,
                            m,
                            "pooled",
                            slack,
                            release,
                            1,
                            grid=grid,
                            rehomes=n,
                            ring=k,
                            storages=k,
                            code=code,
                        )
                    )
    return out


def _rehomed(r: Record, n: int) -> Record:
    """``r`` with ``n`` re-homes, its bytes still adding up."""
    return dataclasses.replace(
        r, rehomes=n, rehomed_bytes=n * r.set_bytes, counted_bytes=r.storage_bytes + n * r.set_bytes
    )


def _one(rows: list[Record], **where) -> int:
    hits = [i for i, r in enumerate(rows) if all(getattr(r, k) == v for k, v in where.items())]
    assert len(hits) == 1, where
    return hits[0]


def _edit(rows: list[Record], change, **where) -> list[Record]:
    rows = list(rows)
    i = _one(rows, **where)
    rows[i] = change(rows[i])
    return rows


STOCK0 = dict(model="parity", microbatches=8, variant="stock", stage=0)
LAST = dict(model="parity", microbatches=16, variant="pooled", stage=1)

BREAKS = {
    "covers_the_grid: a row missing": (
        "covers_the_grid",
        lambda t: [r for r in t if _key(r) != _key(t[0])],
    ),
    "covers_the_grid: a row twice": ("covers_the_grid", lambda t: t + [t[0]]),
    "covers_the_grid: a slack not asked for": (
        "covers_the_grid",
        lambda t: t + [dataclasses.replace(r, slack=5) for r in t if r.slack == 2 and r.stage == 0],
    ),
    "covers_the_grid: other steps": (
        "covers_the_grid",
        lambda t: _edit(t, lambda r: dataclasses.replace(r, steps=2), **STOCK0),
    ),
    "one_code_version: two commits": (
        "one_code_version",
        lambda t: _edit(t, lambda r: dataclasses.replace(r, code="def5678"), **STOCK0),
    ),
    "one_code_version: two torches": (
        "one_code_version",
        lambda t: _edit(t, lambda r: dataclasses.replace(r, torch="2.14.0"), **STOCK0),
    ),
    "clean_code: a dirty tree": (
        "clean_code",
        lambda t: [dataclasses.replace(r, code="abc1234+dirty") for r in t],
    ),
    "clean_code: no git": (
        "clean_code",
        lambda t: [dataclasses.replace(r, code="unknown") for r in t],
    ),
    "bytes_add_up: counted": (
        "bytes_add_up",
        lambda t: _edit(
            t, lambda r: dataclasses.replace(r, counted_bytes=r.counted_bytes + 1), **STOCK0
        ),
    ),
    "bytes_add_up: set bytes": (
        "bytes_add_up",
        lambda t: _edit(t, lambda r: dataclasses.replace(r, hidden=32), **STOCK0),
    ),
    "bytes_add_up: re-homed bytes": (
        "bytes_add_up",
        lambda t: _edit(
            t,
            lambda r: dataclasses.replace(r, rehomed_bytes=1, counted_bytes=r.storage_bytes + 1),
            **STOCK0,
        ),
    ),
    "stock_holds_one_storage_per_microbatch: a re-home": (
        "stock_holds_one_storage_per_microbatch",
        lambda t: _edit(t, lambda r: _rehomed(r, 1), **STOCK0),
    ),
    "stock_holds_one_storage_per_microbatch: fewer storages": (
        "stock_holds_one_storage_per_microbatch",
        lambda t: _edit(
            t,
            lambda r: dataclasses.replace(
                r, storages=7, storage_bytes=7 * SET, counted_bytes=7 * SET
            ),
            **STOCK0,
        ),
    ),
    "every_pooled_run_bitwise_equal": (
        "every_pooled_run_bitwise_equal",
        lambda t: _edit(
            t, lambda r: dataclasses.replace(r, bitwise_equal=False), **LAST, slack=2, release=True
        ),
    ),
    "first_stage_grad_ring_never_rehomes": (
        "first_stage_grad_ring_never_rehomes",
        lambda t: _edit(
            t,
            lambda r: _rehomed(r, 1),
            model="linear2d",
            microbatches=64,
            variant="pooled",
            stage=0,
            slack=0,
            release=False,
        ),
    ),
    "release_leaves_the_last_stage_no_rehome: a re-home": (
        "release_leaves_the_last_stage_no_rehome",
        lambda t: _edit(t, lambda r: _rehomed(r, 1), **LAST, slack=2, release=True),
    ),
    "release_leaves_the_last_stage_no_rehome: a storage beyond the ring": (
        "release_leaves_the_last_stage_no_rehome",
        lambda t: _edit(
            t,
            lambda r: dataclasses.replace(
                r, storages=4, storage_bytes=4 * SET, counted_bytes=4 * SET
            ),
            **LAST,
            slack=2,
            release=True,
        ),
    ),
    "without_release_the_last_stage_rehomes: none": (
        "without_release_the_last_stage_rehomes",
        lambda t: _edit(t, lambda r: _rehomed(r, 0), **LAST, slack=2, release=False),
    ),
    "without_release_the_last_stage_rehomes: fewer at a larger M": (
        "without_release_the_last_stage_rehomes",
        lambda t: _edit(
            t,
            lambda r: _rehomed(r, 1),
            model="linear3d",
            microbatches=64,
            variant="pooled",
            stage=1,
            slack=2,
            release=False,
        ),
    ),
    "at_slack_0_only_a_view_output_rehomes: a plain output re-homes": (
        "at_slack_0_only_a_view_output_rehomes",
        lambda t: _edit(t, lambda r: _rehomed(r, 1), **LAST, slack=0, release=True),
    ),
    "at_slack_0_only_a_view_output_rehomes: a view output does not": (
        "at_slack_0_only_a_view_output_rehomes",
        lambda t: _edit(
            t,
            lambda r: _rehomed(r, 0),
            model="linear3d",
            microbatches=8,
            variant="pooled",
            stage=1,
            slack=0,
            release=True,
        ),
    ),
    "at_slack_0_only_a_view_output_rehomes: too few without the release": (
        "at_slack_0_only_a_view_output_rehomes",
        lambda t: _edit(t, lambda r: _rehomed(r, 3), **LAST, slack=0, release=False),
    ),
}


def _key(r: Record) -> tuple:
    return (r.model, r.microbatches, r.variant, r.slack, r.release, r.stage, r.direction)


def _names(broken: list[str]) -> list[str]:
    return [line.split(":", 1)[0] for line in broken]


def test_a_table_that_holds_every_claim_passes_the_check():
    table = good_table()
    assert len(table) == len(Grid().keys()) == 90
    assert check(table) == []


@pytest.mark.parametrize("case", list(BREAKS))
def test_each_claim_broken_alone_fails_by_its_name(case):
    name, breaks = BREAKS[case]
    broken = check(breaks(good_table()))
    assert _names(broken) == [name], broken
    assert "found" in broken[0] and "required" in broken[0]


def test_every_claim_has_a_case_that_breaks_it():
    assert {name for name, _ in BREAKS.values()} == set(CLAIMS)


def test_a_dirty_run_that_is_not_a_record_breaks_no_claim():
    table = good_table(code="abc1234+dirty")
    assert _names(check(table)) == ["clean_code"]
    assert check(table, clean=False) == []


def test_the_claims_follow_the_grid_asked_for():
    grid = Grid(models=("parity",), microbatches=(8, 16), slacks=(2,), steps=2)
    table = good_table(grid)
    assert check(table, grid) == []
    assert _names(check(table)) == ["covers_the_grid"]  # the committed grid is larger


def test_check_on_a_written_file_exits_0_when_it_holds_and_1_naming_the_claim(tmp_path, capsys):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    write_csv(good_table(), good)
    write_csv(BREAKS["every_pooled_run_bitwise_equal"][1](good_table()), bad)
    assert cli.main(["--check", str(good)]) == 0
    assert cli.main(["--check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "every_pooled_run_bitwise_equal: found" in err and "M16" in err
    assert cli.main(["--check", str(tmp_path / "none.csv")]) == 2
    assert "found no such file" in capsys.readouterr().err


@pytest.fixture
def measured(monkeypatch):
    """The tool's launches replaced by a table built here; returns what the launches return, to
    edit."""
    table = {"rows": good_table(), "code": "abc1234", "launches": 0}

    def measure(model, m, *, slacks, steps, timeout_s):
        table["launches"] += 1
        return [r for r in table["rows"] if (r.model, r.microbatches) == (model, m)]

    monkeypatch.setattr(cli, "measure", measure)
    monkeypatch.setattr(cli, "code_version", lambda: table["code"])
    return table


def test_the_writer_writes_a_table_that_holds_every_claim(tmp_path, measured):
    out = tmp_path / "t.csv"
    assert cli.main(["--csv", str(out)]) == 0
    assert read_csv(out) == measured["rows"] and measured["launches"] == 9


def test_the_writer_writes_nothing_when_a_claim_breaks_and_says_which(tmp_path, measured, capsys):
    out = tmp_path / "t.csv"
    measured["rows"] = BREAKS["release_leaves_the_last_stage_no_rehome: a re-home"][1](
        measured["rows"]
    )
    assert cli.main(["--csv", str(out)]) == 1
    err = capsys.readouterr().err
    assert not out.exists()
    assert (
        f"nothing written to {out}" in err
        and "release_leaves_the_last_stage_no_rehome: found" in err
    )


def test_the_writer_refuses_a_dirty_tree_before_measuring_unless_told(tmp_path, measured, capsys):
    out = tmp_path / "t.csv"
    measured["code"] = "abc1234+dirty"
    measured["rows"] = good_table(code="abc1234+dirty")
    assert cli.main(["--csv", str(out)]) == 2
    assert measured["launches"] == 0 and not out.exists()
    assert "found code abc1234+dirty" in capsys.readouterr().err
    assert cli.main(["--csv", str(out), "--allow-dirty"]) == 0 and out.exists()
    assert cli.main(["--check", str(out)]) == 1  # the record says what it is
    assert cli.main([]) == 0  # measuring without writing a record: any tree


def test_read_csv_names_a_missing_column_and_a_bad_cell(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("model,pp\nparity,2\n")
    with pytest.raises(ValueError, match="columns found .*required .*python -m tools.last_stage"):
        read_csv(bad)
    write_csv(good_table()[:1], bad)
    bad.write_text(bad.read_text().replace(",8,3,stock,", ",eight,3,stock,"))
    with pytest.raises(
        ValueError, match="column microbatches found 'eight'; required a whole number"
    ):
        read_csv(bad)


def test_records_round_trip_through_the_csv(tmp_path):
    path = tmp_path / "again.csv"
    table = good_table()
    write_csv(table, path)
    assert read_csv(path) == table
    assert path.read_text().splitlines()[0].split(",") == list(FIELDS)


def test_the_linear_prelude_makes_only_the_last_stage_a_plain_linear_over_2d_batches(monkeypatch):
    import torch

    from pooltk.parity import worker
    from pooltk.parity.models import ToyModel

    monkeypatch.setattr(
        worker, "make_stage_module", worker.make_stage_module
    )  # restored after the test
    monkeypatch.setattr(worker, "make_batch", worker.make_batch)
    monkeypatch.setattr(sys, "argv", ["zygote", "1", "2", "/tmp/unused", "0"])
    heads.patch(two_d=True)
    first = worker.make_stage_module(hidden=8, layers_per_stage=1, stage_index=0, seed=0)
    last = worker.make_stage_module(hidden=8, layers_per_stage=1, stage_index=1, seed=0)
    again = worker.make_stage_module(hidden=8, layers_per_stage=1, stage_index=1, seed=0)
    assert isinstance(first, ToyModel) and isinstance(last, heads.LinearHead)
    assert all(
        torch.equal(a, b) for a, b in zip(last.parameters(), again.parameters())
    )  # seeded, not global RNG
    x, y = worker.make_batch(rows=4, seq_len=3, hidden=8, step=0, seed=0)
    assert x.shape == y.shape == (12, 8)
    h = x.clone().requires_grad_(True)
    assert last(h).grad_fn is not None and not last(h)._is_view()  # 2-D: a plain addmm, no view


def test_the_linear_prelude_refuses_a_process_without_the_zygote_arguments(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["python"])
    with pytest.raises(RuntimeError, match="no world size.*run_parity"):
        heads.patch(two_d=False)


def test_variants_are_stock_then_each_slack_with_the_release_on_and_off():
    got = variants((0, 2))
    assert [v.pooled for v in got] == [False, True, True, True, True]
    assert [(v.config.slack, v.config.release) for v in got[1:]] == [
        (0, True),
        (0, False),
        (2, True),
        (2, False),
    ]
    assert len({v.name for v in got}) == len(got)
