"""CLI verbs of the report area (registered by rearrival.cli): ``tables`` re-renders the
report from a whole results tree; ``rearrival study report`` (the report rule) renders it
from exactly the files the rule declares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.values import Values, checked_config
from rearrival.config.location import DEFAULT_CONFIG

ConfigOption = Annotated[Path, typer.Option("--config", help="Study definition (config.yaml).")]


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("tables")(tables)


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
            help="Print each finding of the paper: verdict, paper vs this run, then why. "
            "Reads the scorecard the report stage wrote when it is newer than the results "
            "and the config; renders the report first only when it is not.",
        ),
    ] = False,
) -> None:
    """Re-render every table, figure and report.html from existing results (docs/DESIGN.md §13).

    Reads results only and reruns nothing: each paper table as CSV (with run ids),
    Markdown and LaTeX under OUT/tables/, figures as SVG, one self-contained
    OUT/report.html stating the backend, and OUT/tables/index.json listing the files.
    Results not produced yet are reported as such instead of failing. The report opens
    with the scorecard of the paper's findings, also written as OUT/tables/scorecard.csv
    and .md; --scorecard prints it here, each finding within 100 columns, without
    rendering again when what was written is up to date.
    """
    from rearrival.config.study import load_study_config
    from rearrival.report.render import render_tree

    index_path = out / "tables" / "index.json"
    stale = stale_because(index_path, config, results) if scorecard else None
    if scorecard and stale is None:
        index = json.loads(index_path.read_text())
        typer.echo(
            f"{out / 'tables' / 'scorecard.csv'}: written by the report stage, newer than "
            f"{results} and {config}"
        )
    else:
        if stale is not None:
            typer.echo(f"{stale}: rendering the report again", err=True)
        index = render_tree(load_study_config(config), results, out)
        typer.echo(
            f"{out / index['report']}: {len(index['tables'])} tables, "
            f"{len(index['figures'])} figures"
        )
    if scorecard:
        print_scorecard(out, index)
    for line in index["not_produced"]:
        typer.echo(f"not produced: {line}", err=True)


def stale_because(index: Path, config: Path, results: Path) -> str | None:
    """Why the report under ``index``'s directory is not up to date with ``config``, every
    file under ``results`` and rearrival's own files (templates, paper numbers, code);
    None when it is (the index is the report stage's last write)."""
    import rearrival

    if not index.is_file() or not (index.parent / "scorecard.csv").is_file():
        return f"{index.parent / 'scorecard.csv'}: not written yet"
    written = index.stat().st_mtime
    package = Path(rearrival.__file__).parent
    inputs = [config, *_files(results), *_files(package)]
    newer = [p for p in inputs if p.is_file() and p.stat().st_mtime > written]
    if not newer:
        return None
    return f"{max(newer, key=lambda p: p.stat().st_mtime)} is newer than {index}"


def _files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def print_scorecard(out: Path, index: dict) -> None:
    """Each finding, what to expect on the run's backends, then the tally."""
    from rearrival.report.scorecard import (
        Scorecard,
        backend_expectation,
        read_scorecard_csv,
        summary_lines,
    )
    from rearrival.report.table_model import wrap_markdown

    rows = read_scorecard_csv(out / "tables" / "scorecard.csv").rows
    card = Scorecard(rows, tuple(index.get("backends", ())))
    for line in summary_lines(card):
        typer.echo(line)
    expected = backend_expectation(card)
    if expected:
        typer.echo("\n".join(wrap_markdown(expected)))
    typer.echo(", ".join(f"{count} {name}" for name, count in card.counts().items()))


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
    index = build_report(cfg, res, ReportFiles(html, tables_dir, figures_dir))
    typer.echo(f"{html}: {len(index['tables'])} tables, {len(index['figures'])} figures")
    for line in index["not_produced"]:
        typer.echo(f"not produced: {line}", err=True)
