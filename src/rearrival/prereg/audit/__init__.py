"""``rearrival audit`` (docs/DESIGN.md §8): was every judged run measured after its prereg?

The paper states that predictions and decision criteria "were committed to the
repository before measurement and not changed afterward" and that validation used "new
seeds not used in any earlier measurement" (Section II-D). This module checks those
claims from two independent sources only: git history (GitPython) and the run manifests
under the results directory. Per complete run whose manifest names a prereg commit:

(a) the run started at or after the commit (same second allowed, see
    :func:`rearrival.prereg.registration.starts_after`), and the manifest's
    ``committed_at`` is git's;
(b) the commit is an ancestor of HEAD (not on an unmerged branch, not made up);
(c) no later commit modified or deleted a file the commit registered (adding amendment
    files is allowed); the offending commit is named;
(d) for validation studies, the run's plan seed is registered and was not used by any
    run started before that seed's registration, nor registered earlier by another study;
(e) the run's ``plan_sha256`` is the one registered for its (replicate, N);
(f) every decision table equals its recomputation from the registration commit (design,
    criteria, predictions as committed) and the run records; the fleet study's tables
    from its committed criteria, predictions and profile, every run's comparison re-run
    from its records;
(g) every run record file has the sha256 the study's committed ledger sealed;
(h) the run measured the registered design (backend, N, replicate, variant and the
    configuration's buckets, batch size and slots in design.json);
(i) the ledger is append-only: no later ledger commit changed or removed a sealed hash,
    unless it declares a re-measurement under a newer registration;
(j) given a witness, every registration and ledger commit is held by it with the same
    hash, and it holds nothing the local history lacks (no rewritten history); a
    rewrite is named by its first diverging commit, and each witnessed commit by the
    local one in its place, edited (files and values) or replayed with identical content;
(k) given an allowed-signers file, every registration and ledger commit is signed by
    an allowed key.

Runs whose status is not ``complete`` are listed as ``excluded`` (never judged), but
their seeds still count as used.

One concern per module: ``report`` (rows and the printed table), ``manifests`` (run
loading), ``history`` (the git queries the checks share), ``runs`` (checks a-e, h and
the registration rows), ``decisions`` and ``fleet_decisions`` (f), ``ledger_checks`` (g,
i) and ``external`` (j, k); :func:`audit` composes them.
"""

from __future__ import annotations

from pathlib import Path

from rearrival.atomic import is_staging
from rearrival.errors import RearrivalError
from rearrival.prereg.audit.decisions import decision_rows
from rearrival.prereg.audit.external import signature_rows, witness_rows
from rearrival.prereg.audit.fleet_decisions import fleet_decision_rows
from rearrival.prereg.audit.history import Auditor
from rearrival.prereg.audit.ledger_checks import ledger_rows
from rearrival.prereg.audit.manifests import Run, load_run
from rearrival.prereg.audit.report import (
    EXCLUDED,
    OK,
    REGISTRATION_ROW,
    VIOLATION,
    AuditReport,
    AuditRow,
)
from rearrival.prereg.audit.runs import audit_run, registration_rows
from rearrival.prereg.registration import open_repo

__all__ = ["EXCLUDED", "OK", "REGISTRATION_ROW", "VIOLATION", "AuditReport", "AuditRow", "audit"]


def staging_rows(results: Path, manifests: list[Path]) -> list[AuditRow]:
    """One excluded row per staging folder an unfinished job left (a SIGKILL: its records
    were never published, so they are no run of the study), naming it and the fix."""
    folders = sorted({f for f in (_staging_folder(p.relative_to(results)) for p in manifests) if f})
    return [
        AuditRow(
            folder.parts[1] if len(folder.parts) > 2 else "",
            str(folder),
            None,
            None,
            None,
            EXCLUDED,
            f"staging folder of a job that never finished ({results / folder}): never "
            "published, so ignored; delete it",
        )
        for folder in folders
    ]


def _staging_folder(relative: Path) -> Path | None:
    """The outermost staging folder ``relative`` lies in, or None."""
    for k, part in enumerate(relative.parts):
        if is_staging(Path(part)):
            return Path(*relative.parts[: k + 1])
    return None


def audit(
    repo_dir: str | Path,
    results_dir: str | Path,
    *,
    witness: str | None = None,
    allowed_signers: Path | None = None,
) -> AuditReport:
    """Audit every run manifest under ``results_dir`` against git history (paper II-D),
    against the ``witness`` remote and the ``allowed_signers`` file when given."""
    repo = open_repo(repo_dir)
    results = Path(results_dir)
    if not results.is_dir():
        raise RearrivalError(
            f"results directory {results}: no such directory; run the "
            "pipeline first or pass the directory holding the run records"
        )
    manifests = sorted(results.rglob("manifest.json"))
    loaded = [load_run(p, results) for p in manifests if not is_staging(p.relative_to(results))]
    runs = [r for r in loaded if isinstance(r, Run)]
    auditor = Auditor(repo, runs)
    rows = list(registration_rows(auditor))
    rows += [r if isinstance(r, AuditRow) else audit_run(auditor, r) for r in loaded]
    rows += staging_rows(results, manifests)
    rows += list(decision_rows(auditor, results))
    rows += list(fleet_decision_rows(auditor, results))
    rows += list(ledger_rows(auditor, results))
    if witness is not None:
        rows += list(witness_rows(auditor, witness))
    if allowed_signers is not None:
        rows += list(signature_rows(auditor, allowed_signers))
    return AuditReport(
        tuple(
            sorted(
                rows, key=lambda r: (r.study, r.run != REGISTRATION_ROW, r.run_start or "", r.run)
            )
        )
    )
