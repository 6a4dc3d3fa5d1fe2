"""CLI verbs of the prereg area (registered by rearrival.cli): prereg, audit, publish.

All are thin: ``prereg`` lets a Snakemake rule commit files an earlier rule prepared,
``audit`` prints the report of rearrival.prereg.audit and turns violations into exit
code 1, ``publish`` pushes registrations and ledgers to a witness (rearrival.prereg.witness).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.panels import PIPELINE_PANEL
from rearrival.config.location import DEFAULT_CONFIG

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
    signing_key: Annotated[
        Path | None,
        typer.Option("--signing-key", help="SSH key that signs the commit (as signing.key)."),
    ] = None,
) -> None:
    """Commit a study's predictions and criteria before measurement; print the commit sha.

    Registering identical files again makes no commit. Registered files never change: add
    an amendment file with --amends instead (paper Section II-D).
    """
    from rearrival.prereg.registration import (
        RECORDS_SUBDIR,
        Signing,
        read_prepared_files,
        register,
    )

    kind = "Amend" if amends else "Preregister"
    record = register(
        repo,
        study,
        read_prepared_files(files),
        message=message or f"{kind} {study}: predictions and criteria before measurement",
        amendment_of=amends,
        records_dir=(results or repo / "results") / RECORDS_SUBDIR,
        signing=Signing.from_key(signing_key),
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
    violations_only: Annotated[
        bool, typer.Option("--violations-only", help="Print the totals and the violations only.")
    ] = False,
    witness: Annotated[
        str | None,
        typer.Option(
            "--witness",
            help="Remote name or URL of the witness: check (j) against it.",
            metavar="REMOTE",
        ),
    ] = None,
    allowed_signers: Annotated[
        Path | None,
        typer.Option(
            "--allowed-signers",
            help="ssh-keygen allowed-signers file: check (k) against it.",
            metavar="FILE",
        ),
    ] = None,
) -> None:
    """Check every run, registration, decision table and ledger against git history
    (paper Section II-D; docs/DESIGN.md). Exits 1 on any violation.

    \b
    Per run that names a registration commit:
    (a) the run started at or after the commit, whose time the manifest records as git's;
    (b) the commit is an ancestor of HEAD;
    (c) no later commit modified or deleted a registered file (amendments add files);
    (d) a validation run's plan seed is registered and was not used before;
    (e) the run's plan sha256 is the one registered for its replicate and N;
    (h) the run measured the registered design (backend, N, variant, buckets, slots).
    Per study:
    (f) every decision table equals its recomputation from the registration;
    (g) every run record file has the sha256 its committed ledger sealed;
    (i) the ledger is append-only: a later ledger commit that changed or removed a
        sealed hash is named with the run, the file and both commits, unless it
        declares a re-measurement under a newer registration;
    (j) with --witness: every registration and ledger commit is held by the witness
        with the same hash, and the witness holds nothing the local history lacks;
    (k) with --allowed-signers: every registration and ledger commit is signed by an
        allowed key (none unsigned, none signed by another key).
    Runs of studies never registered (calibration) are counted on one line each.
    """
    import json

    from rearrival.prereg.audit import audit as run_audit

    report = run_audit(
        repo,
        results or repo / "results",
        witness=witness,
        allowed_signers=allowed_signers,
    )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(report.table(violations_only=violations_only))
    raise typer.Exit(0 if report.ok else 1)


def publish(
    repo: RepoOption = Path("."),
    remote: Annotated[
        str | None,
        typer.Option(
            "--remote",
            help="Witness remote name or URL (default: witness.remote of --config).",
            metavar="NAME|URL",
        ),
    ] = None,
    config: Annotated[
        Path, typer.Option("--config", help="Study definition naming the witness.")
    ] = DEFAULT_CONFIG,
    study: Annotated[
        str | None, typer.Option("--study", help="Publish this study's commits only.")
    ] = None,
) -> None:
    """Push every registration and ledger commit to a witness remote, one ref each under
    refs/rearrival/ (no branch is touched), so a third party holds what was registered
    and sealed, and when (paper Section II-D; docs/DESIGN.md).
    """
    from rearrival.errors import RearrivalError
    from rearrival.prereg.registration import open_repo
    from rearrival.prereg.witness import publish as push

    if remote is None:
        from rearrival.config.study import load_study_config

        if not config.is_file():
            raise RearrivalError(
                f"{config}: no study definition to read witness.remote from; pass "
                "--remote NAME|URL or --config with a witness: section"
            )
        remote = load_study_config(config).witness
        if remote is None:
            raise RearrivalError(
                f"{config}: no witness: section; pass --remote NAME|URL or add "
                "witness: {remote: <url>} to the config"
            )
    pushed = push(open_repo(repo), remote, study)
    for item in pushed:
        typer.echo(f"{item.ref}")
    typer.echo(f"{len(pushed)} registration and ledger commit(s) held by witness {remote}")


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("prereg", rich_help_panel=PIPELINE_PANEL)(prereg)
    app.command("audit")(audit)
    app.command("publish")(publish)
