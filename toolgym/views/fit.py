"""Terminal tables that fit the console's width without cutting a name.

Rich shrinks a table that is wider than the console by wrapping, then by cutting cells with an
ellipsis (``typew…``, ``step_…``). Here a table is described as columns and rows first; a column
holding names (environments, runs, graders, categories) never wraps, and when the whole table is
wider than the console its columns are *stacked*: printed as several tables, each repeating the
key columns (the names that identify a row) followed by as many of the other columns as fit.
Only prose columns (a measure's rule, a note) may wrap, at spaces. In a pipe the width is rich's
default of 80 columns (or ``$COLUMNS``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

__all__ = ["Col", "fitted_tables", "print_fitted"]


@dataclass(frozen=True)
class Col:
    """A column of a fitted table.

    Attributes:
        header (str): Column title (never wrapped).
        justify (Literal["left", "right", "center"]): Alignment of its cells.
        wrap (bool): Whether its cells may wrap at spaces (prose only; names and numbers never
            wrap).
    """

    header: str
    justify: Literal["left", "right", "center"] = "right"
    wrap: bool = False


def _plain(value: Any) -> str:
    return value.plain if isinstance(value, Text) else str(value)


def _cell(value: Any) -> RenderableType:
    return value if isinstance(value, Text) else Text(str(value))


def _build(cols: Sequence[Col], rows: Sequence[Sequence[Any]], index: Sequence[int], sections: Sequence[int],
           table_kw: dict[str, Any], title: Any = None, caption: Any = None) -> Table:
    table = Table(title=title, caption=caption, **table_kw)
    for i in index:
        col = cols[i]
        natural = None
        if not col.wrap:  # rich measures a cell's narrowest width at its longest word: forbid that
            natural = max([cell_len(col.header), *(cell_len(line) for row in rows for line in _plain(row[i]).splitlines())])
        table.add_column(
            Text(col.header), justify=col.justify, no_wrap=not col.wrap, overflow="fold" if col.wrap else "ellipsis",
            min_width=natural,
        )
    for r, row in enumerate(rows):
        if r in sections and r > 0:
            table.add_section()
        table.add_row(*(_cell(row[i]) for i in index))
    return table


def _min_width(console: Console, table: Table) -> int:
    """The narrowest width the table renders at without cutting a no-wrap column."""
    return Measurement.get(console, console.options.update_width(10**5), table).minimum


def fitted_tables(
    console: Console,
    cols: Sequence[Col],
    rows: Sequence[Sequence[Any]],
    keys: int = 1,
    title: Any = None,
    caption: Any = None,
    sections: Sequence[int] = (),
    width: int | None = None,
    **table_kw: Any,
) -> list[Table]:
    """The rows as one ``rich`` table when it fits, else as several tables whose columns are
    consecutive groups of the non-key columns, each group after the ``keys`` first columns.

    Args:
        console (Console): The console the tables will be printed on (its width and its
            measuring of wide characters are used).
        cols (Sequence[Col]): The columns, key columns first.
        rows (Sequence[Sequence[Any]]): Cells (``str`` or ``rich.text.Text``; a ``str`` is never
            read as markup), one sequence of ``len(cols)`` per row.
        keys (int): How many leading columns identify a row and are repeated in every part.
        title (Any): Title of the first table (later parts are titled ``(continued)``).
        caption (Any): Caption of the last table.
        sections (Sequence[int]): Row indices that start a new section (a rule above them).
        width (int | None): Width to fit (default: the console's).
        **table_kw: Passed to every ``rich.table.Table``.

    Returns:
        list[Table]: One table, or the stacked parts in column order.

    Raises:
        ValueError: when a row has not ``len(cols)`` cells or ``keys`` exceeds the columns.
    """
    if not 0 <= keys <= len(cols):
        raise ValueError(f"keys={keys} but the table has {len(cols)} columns")
    for n, row in enumerate(rows):
        if len(row) != len(cols):
            raise ValueError(f"row {n} has {len(row)} cells for {len(cols)} columns")
    width = console.width if width is None else width
    key_index = list(range(keys))
    whole = _build(cols, rows, range(len(cols)), sections, table_kw, title, caption)
    if _min_width(console, whole) <= width or len(cols) <= keys + 1:
        return [whole]
    groups: list[list[int]] = []
    for i in range(keys, len(cols)):
        if groups and _min_width(console, _build(cols, rows, [*key_index, *groups[-1], i], sections, table_kw)) <= width:
            groups[-1].append(i)
        else:
            groups.append([i])  # alone if need be: a cell too wide for any console is not ours to cut
    return [
        _build(
            cols, rows, [*key_index, *group], sections, table_kw,
            title if n == 0 else (Text("(continued)") if title is not None else None),
            caption if n == len(groups) - 1 else None,
        )
        for n, group in enumerate(groups)
    ]


def print_fitted(console: Console, cols: Sequence[Col], rows: Sequence[Sequence[Any]], keys: int = 1,
                 **kwargs: Any) -> int:
    """Print :func:`fitted_tables` on ``console``; returns the number of tables printed."""
    tables = fitted_tables(console, cols, rows, keys, **kwargs)
    for table in tables:
        console.print(table)
    return len(tables)
