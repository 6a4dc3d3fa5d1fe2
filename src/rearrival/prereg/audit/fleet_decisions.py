"""Check (f) on the fleet study (docs/DESIGN.md §18): its decision tables under
``results/fleet/decisions`` equal their recomputation from the registration commit
(criteria, predictions and profile as committed) and the sealed run records.

The decision stage reads each run's comparison folder (``rearrival compare``); the audit
does not trust those folders: it re-runs every comparison from the run's own records, its
plan (the file its manifest names, checked against the registered sha256 by
``compare_fleet_run``) and the committed profile, then decides again with the stage's own
``decision_tables``. A fleet study is one whose registered design says ``kind: fleet``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.judge.fleet_agreement import compare_fleet_run
from rearrival.judge.fleet_study import (
    CONDITIONS_FILE,
    DECISIONS_FILE,
    ComparedRun,
    decision_tables,
    registered_order,
    table_csv,
)
from rearrival.judge.vllm_agreement import PredictorBugWarning
from rearrival.measure.records import read_run
from rearrival.model.cost.vllm_profile import VllmProfile
from rearrival.model.plans.plan import load_plan
from rearrival.prereg.audit.decisions import table_differences
from rearrival.prereg.audit.history import Auditor, commit_time
from rearrival.prereg.audit.report import OK, VIOLATION, AuditRow
from rearrival.prereg.fleet import CRITERIA, DESIGN, PREDICTIONS
from rearrival.prereg.registered import registered_profile
from rearrival.prereg.registration import PREREG_ROOT

FLEET_ROOT = Path("fleet")
TABLE_KEYS = {DECISIONS_FILE: ("replicate", "name"), CONDITIONS_FILE: ("replicate", "condition")}


def _committed_json(commit: Any, study: str, name: str) -> Any:
    path = f"{PREREG_ROOT}/{study}/{name}"
    try:
        return json.loads((commit.tree / path).data_stream.read())
    except KeyError:
        raise RearrivalError(f"{path}: not in prereg commit {commit.hexsha[:12]}") from None


def _is_fleet(commit: Any, study: str) -> bool:
    try:
        return _committed_json(commit, study, DESIGN).get("kind") == "fleet"
    except (RearrivalError, ValueError, AttributeError):
        return False  # not a fleet registration (or no design): the other checks report it


def _compared(repo: Any, results: Path, study: str, key: str, profile: VllmProfile) -> ComparedRun:
    """One run's comparison re-run from its sealed records (never its comparison folder)."""
    rep, _, label = key.partition("/")
    folder = results / "runs" / study / f"{label}_{rep}" / label
    record = read_run(folder)
    plan_path = Path(str(record.manifest.get("plan_path")))
    if not plan_path.is_absolute():
        plan_path = Path(repo.working_tree_dir) / plan_path
    with warnings.catch_warnings():  # a predictor error is counted in the summary
        warnings.simplefilter("ignore", PredictorBugWarning)
        agreement = compare_fleet_run(record, load_plan(plan_path), profile, str(plan_path))
    return ComparedRun(agreement.frame(), agreement.summary())


def recomputed_tables(auditor: Auditor, results: Path, study: str, commit: Any) -> dict[str, str]:
    """The decision stage's two tables, as CSV text, recomputed from ``commit``."""
    criteria = _committed_json(commit, study, CRITERIA)["criteria"]
    predictions = _committed_json(commit, study, PREDICTIONS)["conditions"]
    profile = registered_profile(auditor.repo, study, commit.hexsha)
    if not isinstance(profile, VllmProfile):
        raise RearrivalError(f"{PREREG_ROOT}/{study}: the committed profile is not a vLLM one")
    order = registered_order(_committed_json(commit, study, DESIGN))
    compared = {
        f"r{rep}/{label}": _compared(auditor.repo, results, study, f"r{rep}/{label}", profile)
        for rep, label in order
    }
    decisions, conditions = decision_tables(criteria, predictions, order, compared)
    return {DECISIONS_FILE: table_csv(decisions), CONDITIONS_FILE: table_csv(conditions)}


def fleet_decision_rows(auditor: Auditor, results: Path) -> Iterator[AuditRow]:
    """Check (f) on every fleet study with decision tables: one row per table."""
    folder = results / FLEET_ROOT / "decisions"
    if not (folder / DECISIONS_FILE).exists():
        return
    for study in auditor.studies():
        commit = auditor.judged_registration(study)
        if commit is None or not _is_fleet(commit, study):
            continue
        where = (study, "(decisions) fleet", commit.hexsha, commit_time(commit).isoformat(), None)
        try:
            recomputed = recomputed_tables(auditor, results, study, commit)
        except (RearrivalError, OSError, KeyError, ValueError) as exc:
            yield AuditRow(
                *where,
                VIOLATION,
                f"{folder}: cannot be recomputed from the registration and the run records ({exc})",
            )
            continue
        yield _table_row(where, folder, recomputed, commit)


def _table_row(
    where: tuple[Any, ...], folder: Path, recomputed: dict[str, str], commit: Any
) -> AuditRow:
    differences = [
        f"{name} {difference}"
        for name, text in recomputed.items()
        for difference in _differences(folder / name, text, TABLE_KEYS[name])
    ]
    if differences:
        return AuditRow(
            *where,
            VIOLATION,
            f"{folder} differs from its recomputation from registration {commit.hexsha[:12]} "
            "and the run records: " + "; ".join(differences),
        )
    return AuditRow(
        *where,
        OK,
        "decisions and conditions recomputed from the registration and the run records "
        "(every comparison re-run)",
    )


def _differences(path: Path, recomputed: str, keys: tuple[str, ...]) -> list[str]:
    if not path.exists():
        return ["is missing"]
    return table_differences(path.read_text(), recomputed, keys)
