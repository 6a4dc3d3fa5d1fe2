"""CLI verbs of the report area (registered by rearrival.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("tables")(tables)


def tables(
    config: Annotated[Path, typer.Option(
        "--config", help="Study definition (config.yaml).")] = Path("config/config.yaml"),
    results: Annotated[Path, typer.Option(
        "--results", help="Results tree written by the pipeline.")] = Path("results"),
    out: Annotated[Path, typer.Option(
        "--out", help="Report directory: report.html, tables/, figures/.")] = Path("reports"),
) -> None:
    """Re-render every table, figure and report.html from existing results (SPEC 13).

    Reads results only and reruns nothing: each paper table as CSV (with run ids),
    Markdown and LaTeX under OUT/tables/, figures as SVG, one self-contained
    OUT/report.html stating the backend, and OUT/tables/index.json listing the files.
    Results not produced yet are reported as such instead of failing.
    """
    from rearrival.report import build_report

    index = build_report(config, results, out)
    typer.echo(f"{out / index['report']}: {len(index['tables'])} tables, "
               f"{len(index['figures'])} figures")
    for line in index["not_produced"]:
        typer.echo(f"not produced: {line}", err=True)
