"""CLI verbs of the report area (registered by rearrival.cli): ``tables`` re-renders the
report from a whole results tree; ``rearrival study report`` (the report rule) renders it
from exactly the files the rule declares."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rearrival.commands.values import Values, checked_config

if TYPE_CHECKING:
    from rearrival.report.render import ReportFiles

DEFAULT_CONFIG = Path("config/config.yaml")
ConfigOption = Annotated[Path, typer.Option("--config", help="Study definition (config.yaml).")]


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("tables")(tables)


def _show(index: dict, out: ReportFiles, scorecard: bool) -> None:
    from rearrival.report.scorecard import read_scorecard_csv, summary_lines

    typer.echo(f"{out.html}: {len(index['tables'])} tables, {len(index['figures'])} figures")
    if scorecard:
        card = read_scorecard_csv(out.tables / "scorecard.csv")
        for line in summary_lines(card):
            typer.echo(line)
        counts = index["scorecard"]["counts"]
        typer.echo(", ".join(f"{count} {name}" for name, count in counts.items()))
    for line in index["not_produced"]:
        typer.echo(f"not produced: {line}", err=True)


def tables(
    config: ConfigOption = DEFAULT_CONFIG,
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
    from rearrival.config.study import load_study_config
    from rearrival.report.render import ReportFiles, render_tree

    index = render_tree(load_study_config(config), results, out)
    _show(index, ReportFiles.under(out), scorecard)


def study_report(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Every results file and directory the report reads (the report rule "
            "lists them); anything else is reported as not produced."
        ),
    ],
    html: Annotated[Path, typer.Option("--html", help="The HTML report to write.")],
    tables_dir: Annotated[
        Path, typer.Option("--tables", help="Directory of the tables, scorecard and index.")
    ],
    figures_dir: Annotated[Path, typer.Option("--figures", help="Directory of the figures.")],
    config: ConfigOption = DEFAULT_CONFIG,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", help="The profile file profile: names, when it is a path."),
    ] = None,
    values: Values = None,
) -> None:
    """Render the report from the declared results files only (docs/DESIGN.md §13)."""
    from rearrival.report.render import ReportFiles, build_report
    from rearrival.report.results import Results, declared_root

    cfg = checked_config(config, "report", None, values)
    declared = [*files, *([profile] if profile is not None else [])]
    res = Results(cfg, declared_root(files), declared=declared)
    files = ReportFiles(html, tables_dir, figures_dir)
    _show(build_report(cfg, res, files), files, scorecard=False)
