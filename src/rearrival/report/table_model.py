"""The table type every report table is built as, and its renderers (docs/DESIGN.md §13).

A table has one or more parts (e.g. Table XIII: ratios against the baseline per N, then
the adjacent-pair saturation classification); each part has its own columns. The CSV
holds every part with a leading ``part`` column and full precision; Markdown, LaTeX and
the HTML report render the parts as sub-tables with each column's display format.

``csv_text`` is the one routine that writes the report's CSV files (the tables here and
the scorecard), so every report CSV quotes, terminates lines and renders cells the
same way.
"""

from __future__ import annotations

import csv
import io
import math
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    """One column: key into the row dicts, header, and display format.

    ``fmt`` is one of ``str``, ``int``, ``f2``, ``f3``, ``f4`` (decimals), ``pct2``
    (a fraction shown as a percentage with two decimals) or ``ids`` (run ids).
    """

    key: str
    header: str
    fmt: str = "str"


@dataclass(frozen=True)
class Part:
    """One sub-table: its own columns, and rows as dicts keyed by ``Column.key``."""

    name: str
    columns: tuple[Column, ...]
    rows: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Table:
    """A paper table rebuilt from results: parts, caption, and notes (incl. gaps)."""

    id: str
    title: str
    caption: str
    parts: tuple[Part, ...]
    notes: tuple[str, ...] = ()
    backend: str = "unknown"


def cell_number(value: Any) -> float | None:
    """A cell or result value as a float, or None when it holds no number: absent, NaN
    (an empty cell read back by pandas), a boolean, or text (a label or a "k/m" count,
    which is never read as a number even when it looks like one). Infinity is a number."""
    if value is None or isinstance(value, bool | str):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def display(value: Any, fmt: str) -> str:
    """A cell as shown in Markdown, LaTeX and HTML (the CSV keeps full precision)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if fmt == "int":
        return f"{int(value):,}"
    if fmt.startswith("f") and fmt[1:].isdigit():
        return f"{float(value):.{int(fmt[1:])}f}"
    if fmt == "pct2":
        return f"{100 * float(value):.2f}%"
    if fmt == "ids":
        ids = str(value).split()
        return f"{len(ids)} run(s)" if ids else ""
    return str(value)


def csv_cell(value: Any) -> str:
    """A cell as the CSV keeps it: full precision (``repr`` of a float), empty when absent."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """CSV text of a header and rows, cells through ``csv_cell``, ``\\n`` line ends."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([csv_cell(value) for value in row] for row in rows)
    return buffer.getvalue()


def table_csv(table: Table) -> str:
    """Every part in one CSV: ``part`` first, then the union of columns in order."""
    keys: list[str] = []
    for part in table.parts:
        keys += [c.key for c in part.columns if c.key not in keys]
    return csv_text(
        ["part", *keys],
        ([part.name, *(row.get(k) for k in keys)] for part in table.parts for row in part.rows),
    )


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# Markdown files are read as text: every line fits this many columns where it can (a
# single cell wider than that cannot be wrapped inside a pipe table and stays whole).
MARKDOWN_WIDTH = 100


def wrap_markdown(text: str, indent: str = "", width: int = MARKDOWN_WIDTH) -> list[str]:
    """Prose lines (captions, notes, list items) wrapped at ``width``, words never split
    (paths and ids stay whole); ``indent`` starts every line after the first."""
    return textwrap.wrap(
        text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    ) or [""]


def _pipe_width(widths: Sequence[int], columns: Sequence[int]) -> int:
    """Characters of one ``| a | b |`` line over ``columns``."""
    return sum(widths[i] + 3 for i in columns) + 1


def _key_columns(cells: Sequence[Sequence[str]], widths: Sequence[int], width: int) -> list[int]:
    """The leading columns that tell the rows apart (the shortest prefix whose cells are
    unique per row), at most half the width: each column block repeats them."""
    keys = [0]
    while (
        len({tuple(row[i] for i in keys) for row in cells}) < len(cells)
        and len(keys) < len(widths) - 1
        and _pipe_width(widths, [*keys, len(keys)]) <= width // 2
    ):
        keys.append(len(keys))
    return keys


def _column_blocks(widths: Sequence[int], keys: Sequence[int], width: int) -> list[list[int]]:
    """Columns split into blocks that each fit ``width``, every block led by ``keys``;
    one block when the whole table fits."""
    if _pipe_width(widths, range(len(widths))) <= width:
        return [list(range(len(widths)))]
    blocks: list[list[int]] = []
    block = list(keys)
    for column in range(len(keys), len(widths)):
        if len(block) > len(keys) and _pipe_width(widths, [*block, column]) > width:
            blocks.append(block)
            block = list(keys)
        block.append(column)
    return [*blocks, block]


def _pipe_lines(
    headers: Sequence[str], cells: Sequence[Sequence[str]], widths: Sequence[int], block: list[int]
) -> list[str]:
    def line(values: Sequence[str]) -> str:
        return "| " + " | ".join(values[i].ljust(widths[i]) for i in block) + " |"

    rule = "|" + "|".join("-" * (widths[i] + 2) for i in block) + "|"
    return [line(headers), rule, *(line(row) for row in cells)]


def markdown_pipe_table(
    headers: Sequence[str], cells: Sequence[Sequence[str]], width: int = MARKDOWN_WIDTH
) -> list[str]:
    """Aligned pipe table; a table wider than ``width`` becomes several tables, one per
    block of columns, each repeating the columns that identify a row."""
    widths = [max(3, len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    lines: list[str] = []
    for block in _column_blocks(widths, _key_columns(cells, widths, width), width):
        lines += [*([""] if lines else []), *_pipe_lines(headers, cells, widths, block)]
    return lines


def table_markdown(table: Table, level: int = 2) -> str:
    """Markdown: heading (``level`` hashes), caption, one pipe table per part, then the
    notes; readable as text at 100 columns (wide parts split into column blocks, prose
    wrapped)."""
    head = [f"{'#' * level} Table {table.id}: {table.title}", "", *wrap_markdown(table.caption)]
    return "\n".join(head) + "\n\n" + table_body_markdown(table, level + 1)


def table_body_markdown(table: Table, level: int = 3) -> str:
    """A table's parts (named under ``level`` hashes when there are several) and notes,
    without heading or caption: how a report section shows a table of its own prose."""
    lines: list[str] = []
    for part in table.parts:
        if len(table.parts) > 1:
            lines += [f"{'#' * level} {part.name}", ""]
        if not part.rows:
            lines += ["(no rows)", ""]
            continue
        headers = [_md_cell(c.header) for c in part.columns]
        cells = [
            [_md_cell(display(row.get(c.key), c.fmt)) for c in part.columns] for row in part.rows
        ]
        lines += [*markdown_pipe_table(headers, cells), ""]
    # a column of run ids shows a count; the ids are in the table's CSV (none else cites it)
    summarized = any(c.fmt == "ids" for part in table.parts for c in part.columns)
    cite = [f"Run ids of every row: table_{table.id}.csv, column run_ids."] if summarized else []
    for note in [*table.notes, *cite]:
        lines += wrap_markdown(f"- {note}", indent="  ")
    return "\n".join(lines).rstrip() + "\n"


_TEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def tex_escape(text: str) -> str:
    """Text safe inside LaTeX (captions, headers and cells carry ``_``, ``%``, ``&``)."""
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in text)


def table_latex(table: Table) -> str:
    """A LaTeX ``table`` float, one ``tabular`` per part, for pasting into the paper."""
    lines = [
        f"% Table {table.id}: generated by rearrival tables from results; do not edit.",
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{tex_escape(table.title)}. {tex_escape(table.caption)}}}",
        rf"\label{{tab:{table.id.lower()}}}",
        r"\scriptsize",
    ]
    for part in table.parts:
        if len(table.parts) > 1:
            lines.append(rf"\par\smallskip\textit{{{tex_escape(part.name)}}}\par")
        if not part.rows:
            lines.append(r"(no rows)\par")
            continue
        lines.append(r"\begin{tabular}{" + "l" * len(part.columns) + "}")
        lines.append(r"\hline")
        lines.append(" & ".join(tex_escape(c.header) for c in part.columns) + r" \\")
        lines.append(r"\hline")
        for row in part.rows:
            cells = [tex_escape(display(row.get(c.key), c.fmt)) for c in part.columns]
            lines.append(" & ".join(cells) + r" \\")
        lines.append(r"\hline")
        lines.append(r"\end{tabular}")
    for note in table.notes:
        lines.append(rf"\par\smallskip{{\footnotesize {tex_escape(note)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def table_context(table: Table) -> dict[str, Any]:
    """A table as the HTML template renders it: display cells, and run ids kept apart
    so each row can link its runs."""
    parts = []
    for part in table.parts:
        columns = [c for c in part.columns if c.fmt != "ids"]
        rows = [
            {
                "cells": [display(row.get(c.key), c.fmt) for c in columns],
                "run_ids": str(row.get("run_ids") or "").split(),
            }
            for row in part.rows
        ]
        parts.append({"name": part.name, "headers": [c.header for c in columns], "rows": rows})
    return {
        "id": table.id,
        "title": table.title,
        "caption": table.caption,
        "backend": table.backend,
        "notes": list(table.notes),
        "parts": parts,
        "multi": len(table.parts) > 1,
    }
