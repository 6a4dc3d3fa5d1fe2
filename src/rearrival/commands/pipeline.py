"""CLI verbs of the pipeline area (registered by rearrival.cli): prereg and audit.

Both are thin: ``prereg`` lets a Snakemake rule commit files an earlier rule prepared,
``audit`` prints the table of rearrival.prereg.audit and turns violations into exit code 1
(docs/DESIGN.md §8).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RepoOption = Annotated[Path, typer.Option("--repo", help="Git repository (top level).")]


def prereg(
    study: Annotated[str, typer.Argument(help="Study name (a key under studies in the config).")],
    files: Annotated[
        list[Path],
        typer.Option(
            "--files", help="Prepared prereg file, or a directory of them; repeat for several."
        ),
    ],
    repo: RepoOption = Path("."),
    amends: Annotated[
        str | None,
        typer.Option(
            "--amends",
            help="Sha of the registration this amendment extends; the new files "
            "apply only to runs started after the new commit.",
        ),
    ] = None,
    message: Annotated[str | None, typer.Option("--message", "-m", help="Commit message.")] = None,
    results: Annotated[
        Path | None,
        typer.Option(
            "--results",
            help="Results directory receiving prereg/<study>.json (default: <repo>/results).",
        ),
    ] = None,
) -> None:
    """Commit a study's predictions and criteria before measurement; print the commit sha.

    Registering identical files again makes no commit. Registered files never change: add
    an amendment file with --amends instead (paper Section II-D).
    """
    from rearrival.prereg.registration import RECORDS_SUBDIR, read_prepared_files, register

    kind = "Amend" if amends else "Preregister"
    record = register(
        repo,
        study,
        read_prepared_files(files),
        message=message or f"{kind} {study}: predictions and criteria before measurement",
        amendment_of=amends,
        records_dir=(results or repo / "results") / RECORDS_SUBDIR,
    )
    typer.echo(record.commit)


def audit(
    repo: RepoOption = Path("."),
    results: Annotated[
        Path | None,
        typer.Option(
            "--results", help="Directory searched for run manifests (default: <repo>/results)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check every run against git history: prereg committed before the run, unchanged
    since, an ancestor of HEAD, new validation seeds, registered plan hashes (docs/DESIGN.md §8).

    Exits 1 when any row is a violation, 0 otherwise.
    """
    import json

    from rearrival.prereg.audit import audit as run_audit

    report = run_audit(repo, results or repo / "results")
    typer.echo(json.dumps(report.to_json(), indent=2) if as_json else report.table())
    raise typer.Exit(0 if report.ok else 1)


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("prereg")(prereg)
    app.command("audit")(audit)
