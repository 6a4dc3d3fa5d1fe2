"""CLI verbs of the report area (registered by rearrival.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("tables")(tables)


def tables(
    config: Annotated[
        Path, typer.Option("--config", help="Study definition (config.yaml).")
    ] = Path("config/config.yaml"),
    results: Annotated[
        Path, typer.Option("--results", help="Results tree written by the pipeline.")
    ] = Path("results"),
    out: Annotated[
        Path, typer.Option("--out", help="Report directory: report.html, tables/, figures/.")
    ] = Path("reports"),
    scorecard: Annotated[
        bool,
        typer.Option(
            "--scorecard",
            help="Also print each finding of the paper: verdict, paper vs this run, then why.",
        ),
    ] = False,
) -> None:
    """Re-render every table, figure and report.html from existing results (docs/DESIGN.md §13).

    Reads results only and reruns nothing: each paper table as CSV (with run ids),
    Markdown and LaTeX under OUT/tables/, figures as SVG, one self-contained
    OUT/report.html stating the backend, and OUT/tables/index.json listing the files.
    Results not produced yet are reported as such instead of failing. The report opens
    with the scorecard of the paper's findings, also written as OUT/tables/scorecard.csv
    and .md; --scorecard prints it here, each finding within 100 columns.
    """
    from rearrival.report.render import build_report
    from rearrival.report.scorecard import read_scorecard_csv, summary_lines

    index = build_report(config, results, out)
    typer.echo(
        f"{out / index['report']}: {len(index['tables'])} tables, {len(index['figures'])} figures"
    )
    if scorecard:
        card = read_scorecard_csv(out / "tables" / "scorecard.csv")
        for line in summary_lines(card):
            typer.echo(line)
        counts = index["scorecard"]["counts"]
        typer.echo(", ".join(f"{count} {name}" for name, count in counts.items()))
    for line in index["not_produced"]:
        typer.echo(f"not produced: {line}", err=True)
