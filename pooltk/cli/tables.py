"""The one text table of the command line: records in, aligned lines out.

A record is a mapping or an object with attributes (a dataclass row). A :class:`Column` says
which field it shows, under which header, how the value reads and to which side it aligns;
:data:`RULE` in place of a record draws a rule of dashes. Plain text, no pandas: ``pooltk
memory``, ``pooltk schedules`` and ``pooltk probe`` run in the torch-only install.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["RULE", "Column", "render"]

RULE = None
"""In place of a record: a rule of dashes across every column."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table: the record's field ``key`` and how it is shown."""

    key: str
    header: str | None = None
    """The text above the column; None: the key."""
    text: Callable[[Any], str] = str
    """The cell's text from the field's value."""
    align: Literal["right", "left"] = "right"
    width: int = 0
    """The least width (a listing laid out in fixed columns)."""


def _field(record: Any, key: str) -> Any:
    return record[key] if isinstance(record, Mapping) else getattr(record, key)


def render(
    records: Iterable[Any],
    columns: Sequence[Column],
    *,
    gap: str = "  ",
    rule_under_header: bool = False,
) -> list[str]:
    """The table's lines: the header (and a rule), then one line per record, a rule for RULE."""
    headers = [column.key if column.header is None else column.header for column in columns]
    rows = [
        None if record is RULE else [column.text(_field(record, column.key)) for column in columns]
        for record in records
    ]
    cells_by_column = zip(headers, *(row for row in rows if row is not None))
    widths = [
        max(column.width, *map(len, cells)) for column, cells in zip(columns, cells_by_column)
    ]
    rule = gap.join("-" * width for width in widths)

    def line(cells: Sequence[str]) -> str:
        return gap.join(
            cell.rjust(width) if column.align == "right" else cell.ljust(width)
            for cell, width, column in zip(cells, widths, columns)
        )

    header_lines = [line(headers), rule] if rule_under_header else [line(headers)]
    return header_lines + [rule if row is None else line(row) for row in rows]
