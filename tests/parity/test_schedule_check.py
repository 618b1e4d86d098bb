"""``pooltk schedules --validate``: its claims refuse a bad table, and it writes only a table that
holds them.

The tables here are built by the test from the analysis ([Note: the claims of a validation] in
pooltk/parity/schedule_check.py): a good one passes, each claim broken alone fails by its name. The
live grid runs in tests/dist/test_schedules_pooled.py.
"""

from __future__ import annotations

import pytest

pd = pytest.importorskip("pandas")

from pooltk.analysis.lifetimes import DIRECTIONS, lifetimes, live_sets, min_safe_ring  # noqa: E402
from pooltk.parity.schedule_check import (  # noqa: E402
    CLAIMS,
    ScheduleCheck,
    check_rows,
    main,
    planned_shapes,
)

SHAPES, _ = planned_shapes((2,), (1, 2), ("1F1B", "Interleaved1F1B"))


def good_rows(shapes=SHAPES) -> list[dict]:
    """Per-stage rows as the validation writes them: peaks and rings as analysed, stock M where a
    stage receives."""
    rows = []
    for name, pp, vpp, m in shapes:
        spans = lifetimes(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
        live = live_sets(name, pp=pp, n_microbatches=m, stages_per_rank=vpp)
        for stage in range(pp * vpp):
            for d in DIRECTIONS:
                low = min_safe_ring(spans, stage, d, m)
                rows.append(
                    dict(
                        schedule=name,
                        pp=pp,
                        vpp=vpp,
                        n_microbatches=m,
                        stage=stage,
                        direction=d,
                        stock=m if live[(stage, d)] else 0,
                        pooltk=low,
                        analysed_peak=live[(stage, d)],
                        analysed_min=low,
                        measured_peak=live[(stage, d)],
                        peak_matches=True,
                        parity=True,
                    )
                )
    return rows


def good_check() -> ScheduleCheck:
    rank = dict(
        schedule="Interleaved1F1B",
        pp=2,
        vpp=2,
        n_microbatches=4,
        rank=0,
        direction="forward",
        stock=8,
        per_stage=4,
        rank_shared=3,
        analysed=3,
        rank_live=3,
        measured_peak=3,
        matches_analysis=True,
        parity=True,
    )
    return ScheduleCheck(
        rows=good_rows(),
        rank_rows=[rank],
        guard={"1F1B": "n/a: ...", "Interleaved1F1B": "caught (pp2 M4)"},
        shapes=list(SHAPES),
    )


def _frame() -> pd.DataFrame:
    return pd.DataFrame(good_rows())


def _first(frame: pd.DataFrame, mask) -> int:
    return frame.index[mask][0]


def _set(frame: pd.DataFrame, mask, **values) -> pd.DataFrame:
    frame = frame.copy()
    i = _first(frame, mask)
    for k, v in values.items():
        frame.loc[i, k] = v(frame.loc[i]) if callable(v) else v
    return frame


def _pooled(f):
    return f.analysed_min > 0


BREAKS = {
    "covers_the_grid: a row missing": ("covers_the_grid", lambda f: f.drop(index=f.index[3])),
    "covers_the_grid: a shape missing": ("covers_the_grid", lambda f: f[f.n_microbatches != 8]),
    "covers_the_grid: a shape not asked for": (
        "covers_the_grid",
        lambda f: pd.concat([f, pd.DataFrame(good_rows([("GPipe", 2, 1, 4)]))], ignore_index=True),
    ),
    "every_pooled_run_bitwise_equal": (
        "every_pooled_run_bitwise_equal",
        lambda f: _set(f, _pooled(f), parity=False),
    ),
    "measured_peaks_equal_the_analysis: one more": (
        "measured_peaks_equal_the_analysis",
        lambda f: _set(
            f, _pooled(f), measured_peak=lambda r: r.measured_peak + 1, peak_matches=False
        ),
    ),
    "measured_peaks_equal_the_analysis: peak_matches says no": (
        "measured_peaks_equal_the_analysis",
        lambda f: _set(f, _pooled(f), peak_matches=False),
    ),
    "slack0_ring_is_the_analysed_minimum": (
        "slack0_ring_is_the_analysed_minimum",
        lambda f: _set(f, _pooled(f), pooltk=lambda r: r.pooltk + 1),
    ),
    "pooled_never_holds_more_than_stock": (
        "pooled_never_holds_more_than_stock",
        lambda f: _set(f, (f.analysed_min == 0) & (f.stock == 0), pooltk=1),
    ),
    "analysed_columns_equal_the_analysis": (
        "analysed_columns_equal_the_analysis",
        lambda f: _set(
            f,
            _pooled(f),
            analysed_peak=lambda r: r.analysed_peak + 1,
            measured_peak=lambda r: r.measured_peak + 1,
        ),
    ),
}
"""Per-stage claims: case -> (claim, how a good table is broken)."""

CHECK_BREAKS = {
    "rank_rings_match_the_analysis": lambda c: c.rank_rows[0].update(
        rank_shared=4, matches_analysis=False
    ),
    "every_pooled_run_bitwise_equal": lambda c: c.rank_rows[0].update(parity=False),
    "guard_catches_a_short_ring": lambda c: c.guard.update(
        {"Interleaved1F1B": "NOT caught (pp2 M4): the run finished"}
    ),
}
"""Claims only the writer holds (rank rows and guard results are not in the CSV): claim -> how to
break it."""


def _names(broken: list[str]) -> list[str]:
    return [line.split(":", 1)[0] for line in broken]


def test_a_table_that_holds_every_claim_passes():
    frame = _frame()
    assert (frame.analysed_min > 0).any() and (frame.analysed_min == 0).any()
    assert check_rows(frame, SHAPES) == [] and check_rows(frame) == []
    assert good_check().broken() == [] and good_check().ok


@pytest.mark.parametrize("case", list(BREAKS))
def test_each_per_stage_claim_broken_alone_fails_by_its_name(case):
    name, breaks = BREAKS[case]
    broken = check_rows(breaks(_frame()), SHAPES)
    assert _names(broken) == [name], broken
    assert "found" in broken[0] and "required" in broken[0]


@pytest.mark.parametrize("name", list(CHECK_BREAKS))
def test_each_rank_and_guard_claim_broken_alone_fails_by_its_name(name):
    check = good_check()
    CHECK_BREAKS[name](check)
    assert _names(check.broken()) == [name] and not check.ok


def test_every_claim_has_a_case_that_breaks_it():
    assert {n for n, _ in BREAKS.values()} | set(CHECK_BREAKS) == set(CLAIMS)


def test_a_validation_without_rows_or_columns_is_named_not_a_traceback():
    assert _names(ScheduleCheck(shapes=list(SHAPES)).broken()) == ["covers_the_grid"]
    assert _names(check_rows(_frame().drop(columns=["parity"]))) == ["covers_the_grid"]


def test_planned_shapes_are_each_schedule_at_m_factor_times_2pp_with_its_stages_per_rank():
    from pooltk.parity.schedule_check import STAGES_PER_RANK

    names = ("1F1B", "Interleaved1F1B")
    assert SHAPES == [(n, 2, STAGES_PER_RANK[n], f * 2 * 2) for f in (1, 2) for n in names]


def test_check_of_a_written_file_exits_0_when_it_holds_1_naming_the_claim_2_when_unreadable(
    tmp_path, capsys
):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    _frame().to_csv(good, index=False)
    BREAKS["slack0_ring_is_the_analysed_minimum"][1](_frame()).to_csv(bad, index=False)
    grid = ["--pp", "2", "--factors", "1", "2", "--schedule", "1f1b", "interleaved1f1b"]
    assert main(["--check", str(good), *grid]) == 0
    assert main(["--check", str(good), "--any-shapes"]) == 0
    assert main(["--check", str(bad), *grid]) == 1
    assert "slack0_ring_is_the_analysed_minimum: found" in capsys.readouterr().err
    assert main(["--check", str(good)]) == 1  # the default grid: pp 2 and 4, every schedule
    assert "covers_the_grid: found" in capsys.readouterr().err
    assert main(["--check", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.fixture
def validated(monkeypatch):
    """``pooltk schedules --validate`` with its launches replaced by a ScheduleCheck built here."""
    import pooltk.parity.schedule_check as schedule_check

    state = {"check": good_check()}
    monkeypatch.setattr(schedule_check, "check_schedules", lambda **kw: state["check"])
    return state


def test_validate_writes_a_table_that_holds_every_claim(tmp_path, validated):
    from pooltk.cli import main as pooltk

    out = tmp_path / "v.csv"
    assert (
        pooltk(["schedules", "--validate", "--pp", "2", "--factors", "1", "2", "--csv", str(out)])
        == 0
    )
    assert (
        main(
            [
                "--check",
                str(out),
                "--pp",
                "2",
                "--factors",
                "1",
                "2",
                "--schedule",
                "1F1B",
                "Interleaved1F1B",
            ]
        )
        == 0
    )


def test_validate_writes_nothing_when_a_claim_breaks_and_says_which(tmp_path, validated, capsys):
    from pooltk.cli import main as pooltk

    out = tmp_path / "v.csv"
    CHECK_BREAKS["guard_catches_a_short_ring"](validated["check"])
    assert (
        pooltk(["schedules", "--validate", "--pp", "2", "--factors", "1", "2", "--csv", str(out)])
        == 1
    )
    err = capsys.readouterr().err
    assert not out.exists()
    assert (
        f"nothing written to {out}" in err
        and "guard_catches_a_short_ring: found Interleaved1F1B" in err
    )


def test_the_guard_is_checked_for_every_schedule_of_the_grid_not_only_the_last_shapes(
    monkeypatch,
):
    """The grid's last shape may hold none of its schedules (torch refuses it): the guard check
    still runs once per schedule the grid launched."""
    from types import SimpleNamespace

    from pooltk.parity import schedule_check

    quiet = SimpleNamespace(recv={}, peak_live={}, bitwise_equal=True)
    monkeypatch.setattr(
        schedule_check, "planned_shapes", lambda *a: ([("1F1B", 2, 1, 4), ("GPipe", 2, 1, 4)], [])
    )
    monkeypatch.setattr(
        schedule_check, "run_parity", lambda spec: SimpleNamespace(variant=lambda name: quiet)
    )
    monkeypatch.setattr(schedule_check, "guard_catch", lambda name, **kw: f"caught {name}")
    check = schedule_check.check_schedules(pps=(2,), factors=(1, 2))
    assert check.guard == {"1F1B": "caught 1F1B", "GPipe": "caught GPipe"}


@pytest.mark.parametrize("module", ["schedule_check", "measured"])
@pytest.mark.parametrize(
    "content, why",
    [
        (None, "a folder"),
        (b"\x00\x01\xff\xfe", "not UTF-8 text"),
        (b'schedule,pp\n"unterminated\n', "not a CSV"),
    ],
)
def test_a_check_file_that_is_a_folder_not_text_or_not_csv_exits_2_saying_why(
    tmp_path, capsys, module, content, why
):
    """It was IsADirectoryError, UnicodeDecodeError or pandas' ParserError, a traceback."""
    import importlib

    path = tmp_path / "table.csv"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    main_of = importlib.import_module(f"pooltk.parity.{module}").main
    assert main_of(["--check", str(path), "--any-shapes"]) == 2
    err = capsys.readouterr().err
    assert f"found {path}: {why}" in err and "required a CSV written by" in err


@pytest.mark.parametrize("flag, value", [("--pp", "1"), ("--pp", "0"), ("--factors", "0")])
def test_a_grid_flag_below_its_minimum_exits_2_naming_the_flag_before_any_launch(
    tmp_path, capsys, validated, flag, value
):
    """--pp 1 was ParitySpec's traceback after the analysis, --pp 0 or --factors 0 pandas'
    KeyError on an empty grid (or, with --check, every shape 'not asked for': exit 1)."""
    from pooltk.cli import main as pooltk

    good = tmp_path / "good.csv"
    _frame().to_csv(good, index=False)
    validated["check"] = None  # check_schedules must not run
    assert pooltk(["schedules", "--validate", flag, value]) == 2
    assert main(["--check", str(good), flag, value]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2
    for err in errors:
        assert f"error: {flag}: found {value}; required an integer >= " in err and "Fix:" in err


def test_planned_shapes_reads_a_name_in_any_case_and_one_name_alone_as_one_schedule():
    """'1f1b' was a KeyError and '1F1B' four schedules '1', 'F', '1', 'B' (a KeyError too)."""
    assert planned_shapes((2,), (1,), ("1f1b",)) == planned_shapes((2,), (1,), ("1F1B",))
    assert planned_shapes((2,), (1,), "1F1B") == planned_shapes((2,), (1,), ("1F1B",))


@pytest.mark.parametrize("pps, factors", [((), (1,)), (2, (1,)), ((2,), "12"), ((2,), (1.5,))])
def test_planned_shapes_refuses_a_grid_that_is_not_a_sequence_of_integers(pps, factors):
    from pooltk._validate import InputError

    with pytest.raises(InputError, match="found .*; required an integer >= |a sequence"):
        planned_shapes(pps, factors)
