"""Shared by the Vietnamese suite's tests: the fixture files and reading printed report tables."""

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
EXAMS_TEST = FIXTURES / "multilingual_test_vi.jsonl"
EXAMS_DEV = FIXTURES / "multilingual_dev_vi.jsonl"
XCOPA_TEST = FIXTURES / "test.vi.jsonl"
XQUAD = FIXTURES / "xquad_mini.json"


def printed_row(text: str, first_cell: str, after: str = "") -> list[str]:
    """The cells of the first table row printed by rich whose first cell is ``first_cell``.

    Args:
        text (str): Captured standard output.
        first_cell (str): The row's label (``"all"``, ``"Biology"``).
        after (str): Only look below the first line containing this (a table's title).

    Returns:
        list[str]: The stripped cells, first cell included.

    Raises:
        AssertionError: when no such row was printed.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if after in line), len(lines))
    for line in lines[start:]:
        if "│" not in line:
            continue
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no printed row {first_cell!r} after {after!r} in:\n{text}")
