"""Checks (g) and (i): the run records are the files the committed ledger sealed, and
the ledger's git history is append-only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rearrival.atomic import is_staging
from rearrival.prereg.audit.history import Auditor
from rearrival.prereg.audit.report import OK, VIOLATION, AuditRow
from rearrival.prereg.ledger import (
    LEDGER_ROOT,
    committed_ledger_bytes,
    ledger_commits,
    ledger_path,
    overwrites,
    verify,
)


def _ledger_studies(auditor: Auditor, results: Path) -> set[str]:
    """Studies with run records, a decision table or a committed ledger at HEAD."""
    studies = {p.name for p in (results / "runs").glob("*") if p.is_dir()}
    studies |= {p.stem for p in (results / "decisions").glob("*.csv")}
    if auditor.head is not None:
        try:
            tree = auditor.head.tree / LEDGER_ROOT
            studies |= {b.name.removesuffix(".json") for b in tree.blobs}
        except KeyError:
            pass
    return studies


def ledger_rows(auditor: Auditor, results: Path) -> Iterator[AuditRow]:
    """Check (g): every study's run records are the files its committed ledger sealed;
    an edited, added or removed file is a violation naming the run and the file, and a
    decided study without a ledger is one too. Check (i): the ledger is append-only, so
    a later ledger commit that changed or removed a sealed hash (without declaring a
    re-measurement) is a violation naming the run, the file and both commits."""
    for study in sorted(_ledger_studies(auditor, results)):
        replicates = sorted(
            p
            for p in (results / "runs" / study).glob("*")
            if p.is_dir() and not is_staging(Path(p.name))
        )
        label = f"(ledger) {ledger_path(study)}"
        history = [
            AuditRow(study, f"{study}/{o.run}", None, None, None, VIOLATION, o.describe())
            for o in overwrites(auditor.repo, study)
        ]
        yield from history
        if committed_ledger_bytes(auditor.repo, study) is None:
            if (results / "decisions" / f"{study}.csv").exists():
                yield AuditRow(
                    study,
                    label,
                    None,
                    None,
                    None,
                    VIOLATION,
                    f"study {study} has a decision table but no committed ledger "
                    "sealing its run records; run the seal stage",
                )
            continue
        problems = verify(auditor.repo.working_tree_dir, study, replicates, every_replicate=True)
        for problem in problems:
            run = problem.split(":", 1)[0].removeprefix("run ")
            yield AuditRow(
                study,
                f"{study}/{run}",
                None,
                None,
                None,
                VIOLATION,
                f"{problem} (sealed in {ledger_path(study)})",
            )
        if not problems and not history:
            commits = len(ledger_commits(auditor.repo, study))
            yield AuditRow(
                study,
                label,
                None,
                None,
                None,
                OK,
                f"every run record file has its sealed sha256; {commits} ledger "
                "commit(s), append-only",
            )
