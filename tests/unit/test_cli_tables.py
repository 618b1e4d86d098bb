"""The command line's one table: records (dicts or dataclass rows) in, aligned text lines out."""

from __future__ import annotations

from dataclasses import dataclass

from pooltk.cli.tables import RULE, Column, render


@dataclass(frozen=True)
class Row:
    name: str
    sets: int


def test_dicts_and_dataclass_rows_give_the_same_table() -> None:
    columns = [Column("name", align="left"), Column("sets", "buffer sets")]
    from_dicts = render([{"name": "a", "sets": 12}, {"name": "bbb", "sets": 3}], columns)
    from_rows = render([Row("a", 12), Row("bbb", 3)], columns)
    expected = [
        "name  buffer sets",
        "a              12",
        "bbb             3",
    ]
    assert from_dicts == from_rows == expected


def test_a_rule_under_the_header_and_in_place_of_a_record() -> None:
    lines = render(
        [{"stage": "0", "bytes": "1.00"}, RULE, {"stage": "total", "bytes": "10.25"}],
        [Column("stage"), Column("bytes")],
        rule_under_header=True,
    )
    assert lines == [
        "stage  bytes",
        "-----  -----",
        "    0   1.00",
        "-----  -----",
        "total  10.25",
    ]


def test_cells_read_through_their_column_and_keep_a_least_width() -> None:
    lines = render(
        [{"name": "1F1B", "bytes": 1536}],
        [
            Column("name", align="left", width=8),
            Column("bytes", "MiB", text=lambda n: f"{n / 1024:.1f}"),
        ],
        gap=" ",
    )
    assert lines == ["name     MiB", "1F1B     1.5"]


def test_a_table_without_records_is_its_header() -> None:
    assert render([], [Column("rank"), Column("stages")]) == ["rank  stages"]
