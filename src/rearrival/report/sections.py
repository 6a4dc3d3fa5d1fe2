"""Report sections of the studies on real engines (docs/DESIGN.md §13, §15): one type that
a section's stage builds once and renders twice, as the Markdown file a reader opens as
text (``reports/vllm.md``) and as the section file the HTML report composes
(``reports/<section>/section.json``, rendered by ``rearrival.report.engine``).

A section is a title, the backend that produced its numbers and a list of blocks
(headings, prose, tables of ``rearrival.report.table_model``, figures of
``rearrival.report.figure_model``). The section file holds every block ready to show
(cells as displayed, figures as inline SVG), so the HTML stage reads only section files
and a new section (another engine's study) joins the report by writing one: its stage
builds a ``Section``, calls ``write_section``, and the HTML rule lists the file
(rules/common.smk ``engine_section_files``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_write_json, atomic_write_text
from rearrival.errors import StageError
from rearrival.report.figure_model import Figure
from rearrival.report.table_model import (
    Table,
    table_body_markdown,
    table_context,
    table_markdown,
    wrap_markdown,
)

SECTION_FORMAT = 1  # the section file's layout; bumped when a key changes meaning


@dataclass(frozen=True)
class Heading:
    """A sub-heading inside a section (level 3 is the first level below its title)."""

    text: str
    level: int = 3


@dataclass(frozen=True)
class Prose:
    """One paragraph, wrapped in the Markdown twin and flowing in HTML."""

    text: str


Block = Heading | Prose | Table | Figure


@dataclass(frozen=True)
class Section:
    """One section of the report: ``id`` is its HTML anchor and folder name under
    reports/, ``backend`` says which backend produced every number in it, ``lead`` the
    paragraphs under its title (what ran where)."""

    id: str
    title: str
    backend: str
    blocks: tuple[Block, ...]
    lead: tuple[str, ...] = ()

    @property
    def figures(self) -> tuple[Figure, ...]:
        return tuple(b for b in self.blocks if isinstance(b, Figure))


def _table_lines(table: Table) -> list[str]:
    """A numbered table (an id) with its own heading, else its caption and body only."""
    if table.id:
        return ["#" + table_markdown(table)]
    caption = [*wrap_markdown(table.caption), ""] if table.caption else []
    return [*caption, table_body_markdown(table)]


def _figure_lines(figure: Figure, figure_dir: str) -> list[str]:
    if figure.svg is None:
        return wrap_markdown(f"Figure not produced: {figure.note}")
    return [
        f"![{figure.title}]({figure_dir}/{figure.id}.svg)",
        "",
        *wrap_markdown(f"{figure.caption} Produced by: {figure.backend}."),
    ]


def section_markdown(section: Section, figure_dir: str = "figures", level: int = 2) -> str:
    """The Markdown twin: title at ``level``, the lead, then every block; a figure is an
    image link into ``figure_dir`` (relative to the Markdown file)."""
    lines = [f"{'#' * level} {section.title}", ""]
    for paragraph in section.lead:
        lines += [*wrap_markdown(paragraph), ""]
    for block in section.blocks:
        if isinstance(block, Heading):
            lines += ["#" * block.level + " " + block.text]
        elif isinstance(block, Prose):
            lines += wrap_markdown(block.text)
        elif isinstance(block, Table):
            lines += _table_lines(block)
        else:
            lines += _figure_lines(block, figure_dir)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _block_context(block: Block) -> dict[str, Any]:
    if isinstance(block, Heading):
        return {"kind": "heading", "text": block.text, "level": block.level}
    if isinstance(block, Prose):
        return {"kind": "prose", "text": block.text}
    if isinstance(block, Table):
        return {"kind": "table", **table_context(block)}
    return {
        "kind": "figure",
        "id": block.id,
        "title": block.title,
        "caption": block.caption,
        "svg": block.svg,
        "backend": block.backend,
        "note": block.note,
    }


def section_context(section: Section) -> dict[str, Any]:
    """The section as the HTML template renders it (and its file holds): JSON values."""
    return {
        "format": SECTION_FORMAT,
        "id": section.id,
        "title": section.title,
        "backend": section.backend,
        "lead": list(section.lead),
        "blocks": [_block_context(b) for b in section.blocks],
    }


def write_section(section: Section, path: Path, figures: Path) -> list[Path]:
    """The section file at ``path`` and each drawn figure as ``figures/<id>.svg``; returns
    the figure files written (same inputs, same bytes)."""
    written = []
    for figure in section.figures:
        if figure.svg is not None:
            target = figures / f"{figure.id}.svg"
            atomic_write_text(target, figure.svg + "\n")
            written.append(target)
    atomic_write_json(path, section_context(section))
    return written


SECTION_KEYS = ("id", "title", "backend", "lead", "blocks")


def read_section(path: Path) -> dict[str, Any]:
    """A section file as ``write_section`` wrote it; anything else is one line naming the
    file, the key and the fix."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise StageError(f"{path}: not a readable section file ({exc}); rerun its stage") from exc
    if not isinstance(data, dict) or data.get("format") != SECTION_FORMAT:
        raise StageError(
            f"{path}: format {data.get('format') if isinstance(data, dict) else None!r}, "
            f"expected {SECTION_FORMAT}; rerun the stage that writes it"
        )
    lacking = [key for key in SECTION_KEYS if key not in data]
    if lacking:
        raise StageError(f"{path}: lacks {', '.join(lacking)}; rerun the stage that writes it")
    return data


def relative_dir(directory: Path, start: Path) -> str:
    """``directory`` as a link from a file in ``start`` (the Markdown twin's images)."""
    return Path(os.path.relpath(directory, start)).as_posix()


def section_sequence(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Every section file in the order given, each id once (two sections with one anchor
    would shadow each other)."""
    sections = [read_section(p) for p in paths]
    ids = [s["id"] for s in sections]
    doubled = sorted({i for i in ids if ids.count(i) > 1})
    if doubled:
        raise StageError(f"sections {', '.join(doubled)} given twice: list each section file once")
    return sections
