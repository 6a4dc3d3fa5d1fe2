"""Check (f): every decision table under ``results/decisions`` equals its recomputation
from the registration commit and the run records."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from rearrival.atomic import is_staging
from rearrival.errors import StageError
from rearrival.judge.collect import collect_channels
from rearrival.judge.decisions import decision_table
from rearrival.measure.records import RunRecordError
from rearrival.prereg.audit.history import Auditor, commit_time
from rearrival.prereg.audit.report import OK, VIOLATION, AuditRow
from rearrival.prereg.registered import read_registration


def table_differences(written: str, recomputed: str, keys: tuple[str, ...]) -> list[str]:
    """Row by row, the columns where a written decision table differs from its
    recomputation (rows numbered from 1 after the header, named by their ``keys``)."""
    ours = list(csv.DictReader(io.StringIO(written)))
    theirs = list(csv.DictReader(io.StringIO(recomputed)))
    found = []
    if len(ours) != len(theirs):
        found.append(f"{len(ours)} rows, recomputed {len(theirs)}")
    for index, (row, again) in enumerate(zip(ours, theirs, strict=False), start=1):
        columns = [c for c in again if row.get(c) != again[c]]
        if columns:
            found.append(
                f"row {index} ({', '.join(f'{k} {again.get(k)}' for k in keys)}): "
                + ", ".join(f"{c} {row.get(c)!r} != recomputed {again[c]!r}" for c in columns)
            )
    return found


def decision_rows(auditor: Auditor, results: Path) -> Iterator[AuditRow]:
    """Check (f): every decision table equals its recomputation from the committed
    registration (design, criteria, predictions) and the run records."""
    for path in sorted((results / "decisions").glob("*.csv")):
        study = path.stem
        commit = auditor.judged_registration(study)
        if commit is None:
            continue
        label = f"(decisions) {path.name}"
        where = (study, label, commit.hexsha, commit_time(commit).isoformat(), None)
        try:
            registration = read_registration(auditor.repo, study, commit.hexsha)
            channels = collect_channels(
                sorted(
                    p
                    for p in (results / "runs" / study).glob("*")
                    if p.is_dir() and not is_staging(Path(p.name))
                ),
                None,
                registration.profile,
            )
            recomputed, _ = decision_table(
                registration.study,
                registration.replicates,
                registration.study_seed,
                channels,
                registration.predictions,
                registration.criteria,
                registration.rule_set,
            )
        except (StageError, RunRecordError, KeyError, ValueError) as exc:
            yield AuditRow(
                *where,
                VIOLATION,
                f"{path}: cannot be recomputed from the registration and the run records ({exc})",
            )
            continue
        differences = table_differences(path.read_text(), recomputed, ("comparison", "n"))
        if differences:
            yield AuditRow(
                *where,
                VIOLATION,
                f"{path} differs from its recomputation from "
                f"registration {commit.hexsha[:12]} and the run records: " + "; ".join(differences),
            )
        else:
            yield AuditRow(
                *where, OK, "every row recomputed from the registration and the run records"
            )
