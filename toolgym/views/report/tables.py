"""Escaped HTML tables: the summary, and any JSON result files a run directory holds (the
JMultiWOZ-TC ``score_<model>.json`` files with the published rows, and diagnostics such as
lenient columns or per-tool and per-argument breakdowns), rendered generically from their
shape so that new files need no new code.

Every piece of text goes through :func:`html.escape` (quotes included).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

RESULT_FILE_PATTERNS = ("score_*.json", "score_*.jsonl", "*diagnostic*.json", "*diagnostic*.jsonl")
"""Files of a run directory shown in the report's JMultiWOZ-TC section (glob patterns)."""

MAX_DEPTH = 4


@dataclass(frozen=True)
class ResultFile:
    """A JSON result file found in a run directory.

    Attributes:
        path: The file.
        data: Its content (a JSON document, or the list of a JSON Lines file's records), or
            ``None`` when it could not be parsed.
        problem: Why it could not be parsed (file and line named), else ``None``.
    """

    path: Path
    data: Any
    problem: str | None = None


def find_result_files(directory: Path) -> list[ResultFile]:
    """Parse the result files of a run directory (see :data:`RESULT_FILE_PATTERNS`).

    A file is read as one JSON document, else as JSON Lines (the JMultiWOZ-TC scorer writes
    one object per line under a ``.json`` name). A file that is neither is returned with
    ``problem`` set, never raised: the report says what is wrong with it.
    """
    found: dict[Path, None] = {}
    for pattern in RESULT_FILE_PATTERNS:
        for path in sorted(directory.glob(pattern)):
            found.setdefault(path, None)
    return [_parse(path) for path in found]


def _parse(path: Path) -> ResultFile:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        return ResultFile(path, None, f"{path}: cannot read: {exc}")
    try:
        return ResultFile(path, json.loads(text))
    except json.JSONDecodeError:
        pass
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            return ResultFile(path, None, f"{path}:{lineno}: not JSON: {exc.msg}")
    return ResultFile(path, records)


def _scalar(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def html_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    numeric_from: int | None = None,
    css_class: str = "",
) -> str:
    """An escaped HTML table; columns from ``numeric_from`` on are right-aligned."""
    cls = f' class="{escape(css_class)}"' if css_class else ""
    head = "".join(
        f"<th{' class=num' if numeric_from is not None and i >= numeric_from else ''}>{escape(str(h))}</th>"
        for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = "".join(
            f"<td{' class=num' if numeric_from is not None and i >= numeric_from else ''}>{escape(_scalar(v))}</td>"
            for i, v in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_json(value: Any, depth: int = 0) -> str:
    """HTML for any JSON value, chosen by shape:

    * a list of flat objects → a table with one column per key (in order of appearance);
    * an object whose values are flat objects → a table with the key as first column;
    * an object of scalars → a two-column table;
    * other objects → one sub-heading per key; anything deeper than :data:`MAX_DEPTH` → JSON text.
    """
    if _is_scalar(value):
        return f"<p>{escape(_scalar(value))}</p>"
    if depth >= MAX_DEPTH:
        return f"<pre>{escape(json.dumps(value, ensure_ascii=False, indent=1, default=str))}</pre>"
    if isinstance(value, list):
        if value and all(isinstance(v, dict) and all(_is_scalar(x) for x in v.values()) for v in value):
            keys = list(dict.fromkeys(k for v in value for k in v))
            return html_table(
                keys, [[v.get(k, "") for k in keys] for v in value], numeric_from=1, css_class="results"
            )
        if all(_is_scalar(v) for v in value):
            return f"<p>{escape(', '.join(_scalar(v) for v in value))}</p>"
        return "".join(render_json(v, depth + 1) for v in value)
    if all(_is_scalar(v) for v in value.values()):
        return html_table(["key", "value"], list(value.items()), numeric_from=1, css_class="results")
    if value and all(isinstance(v, dict) and all(_is_scalar(x) for x in v.values()) for v in value.values()):
        keys = list(dict.fromkeys(k for v in value.values() for k in v))
        rows = [[name, *(v.get(k, "") for k in keys)] for name, v in value.items()]
        return html_table(["", *keys], rows, numeric_from=1, css_class="results")
    parts = []
    level = min(6, 4 + depth)
    for key, v in value.items():
        parts.append(f"<h{level}>{escape(str(key))}</h{level}>{render_json(v, depth + 1)}")
    return "".join(parts)


def render_result_file(result: ResultFile, heading: str) -> str:
    """One result file as a titled HTML block (its problem, when it could not be parsed)."""
    body = f'<p class="problem">{escape(result.problem)}</p>' if result.problem else render_json(result.data)
    return f'<div class="result-file"><h3>{escape(heading)}</h3>{body}</div>'
