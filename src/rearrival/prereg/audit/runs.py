"""Per-run checks (a) to (e) and (h): each complete run against the registration its
manifest names (time, ancestry, unchanged files, plans, validation seed, design,
profile), plus one summary row per registered study."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rearrival.model.configuration import ConfigurationError, configuration_from_mapping
from rearrival.prereg.audit.history import Auditor, commit_time, study_blobs
from rearrival.prereg.audit.manifests import Run
from rearrival.prereg.audit.report import (
    EXCLUDED,
    OK,
    REGISTRATION_ROW,
    UNREGISTERED,
    VIOLATION,
    AuditRow,
)
from rearrival.prereg.registration import (
    PREREG_ROOT,
    PROFILE_FILE,
    PreregError,
    parse_utc,
    registrations,
    starts_after,
)


def _check_plans(
    auditor: Auditor, run: Run, commit: Any, study: str, problems: list[str], passed: list[str]
) -> None:
    """Checks (e) plan hash and (d) validation seeds against the registries at ``commit``."""
    try:
        registries = auditor.registries(commit, study)
    except PreregError as exc:
        problems.append(str(exc))
        return
    if not registries:
        return
    entries = [
        p
        for reg in registries
        for p in reg.plans
        if p.replicate == run.replicate and p.n == run.n and p.variant in (None, run.variant)
    ]
    matching = [p for p in entries if p.sha256 == run.plan_sha256]
    if not matching:
        registered = ", ".join(sorted({p.sha256[:12] for p in entries})) or "none"
        problems.append(
            f"plan_sha256 {str(run.plan_sha256)[:12]} is not the plan registered "
            f"for replicate {run.replicate}, N={run.n}, variant {run.variant} "
            f"(registered: {registered})"
        )
    else:
        passed.append("plan sha256 registered")
    if any(reg.validation for reg in registries):
        _check_validation_seed(auditor, run, study, matching, problems, passed)


def _check_design(
    run: Run, commit: Any, study: str, problems: list[str], passed: list[str]
) -> None:
    """Check (h): the run measured the registered design: its backend, N, replicate,
    variant and its configuration's knobs (any substrate's) are the ones in
    design.json at its prereg commit (a config edited around the DAG-time refusal and
    run by hand is caught here)."""
    try:
        design = json.loads((commit.tree / f"{PREREG_ROOT}/{study}/design.json").data_stream.read())
    except (KeyError, ValueError):
        return  # registrations without a design (hand-made ones) have nothing to compare
    configuration = run.configuration if isinstance(run.configuration, dict) else {}
    registered = design.get("configurations", {}).get(configuration.get("name"))
    found = []
    if run.backend != design.get("backend"):
        found.append(f"backend {run.backend}, registered {design.get('backend')}")
    if run.n not in design.get("n", []):
        found.append(f"N={run.n} not among the registered {design.get('n')}")
    if not isinstance(run.replicate, int) or run.replicate >= design.get("replicates", 0):
        found.append(f"replicate {run.replicate} beyond the registered {design.get('replicates')}")
    if run.variant not in design.get("variants", []):
        found.append(f"variant {run.variant} not among the registered {design.get('variants')}")
    measured = _measured_knobs(configuration)
    if registered is None or measured != registered:
        found.append(
            f"configuration {configuration.get('name')} {measured}, registered {registered}"
        )
    if found:
        problems.append("run does not match the registered design: " + "; ".join(found))
    else:
        passed.append("registered design")


def _measured_knobs(configuration: dict[str, Any]) -> dict[str, Any] | str:
    """The knobs the manifest's configuration holds, as registrations write them (any
    substrate: a vLLM manifest names its own), or why they cannot be read."""
    try:
        return configuration_from_mapping(configuration).as_dict()
    except ConfigurationError as err:
        return f"unreadable ({err})"


def _check_validation_seed(
    auditor: Auditor,
    run: Run,
    study: str,
    matching: list[Any],
    problems: list[str],
    passed: list[str],
) -> None:
    """Check (d): the plan seed is registered and unused before its registration."""
    seed = run.plan_seed
    if seed is None:
        problems.append(
            "validation run has no plan seed (seeds.plan is null); "
            "validation plans must come from registered seeds"
        )
        return
    if matching and seed not in {p.seed for p in matching}:
        problems.append(f"plan seed {seed} is not the seed registered for this plan")
        return
    registered = auditor.seed_history(study).get(seed)
    if registered is None:
        problems.append(f"plan seed {seed} is not registered in {PREREG_ROOT}/{study}/")
        return
    when, sha = registered
    before = len(problems)
    for other in auditor.runs:
        if (
            other is not run
            and other.plan_seed == seed
            and other.start is not None
            and other.start < when
        ):
            problems.append(
                f"plan seed {seed} was already used by run {other.label} "
                f"(started {other.started_at}) before its registration in "
                f"commit {sha[:12]} ({when.isoformat()})"
            )
    for other_study in auditor.studies():
        earlier = auditor.seed_history(other_study).get(seed) if other_study != study else None
        if earlier is not None and earlier[0] < when:
            problems.append(
                f"plan seed {seed} was registered earlier by study {other_study} "
                f"(commit {earlier[1][:12]})"
            )
    if len(problems) == before:
        passed.append("validation seed new")


def audit_run(auditor: Auditor, run: Run) -> AuditRow:
    """All checks for one manifest; every failed check adds its reason to the row."""
    sha = run.prereg.get("commit")
    study = str(run.prereg.get("study") or run.study)
    if run.status != "complete":
        return AuditRow(
            run.study,
            run.label,
            sha,
            None,
            run.started_at,
            EXCLUDED,
            f"status {run.status}: {run.reason or 'no reason recorded'}",
        )
    if not sha:
        return _unregistered_row(auditor, run, study)
    commit = auditor.resolve(str(sha))
    if commit is None:
        return AuditRow(
            run.study,
            run.label,
            str(sha),
            None,
            run.started_at,
            VIOLATION,
            f"prereg commit {sha} does not exist in this repository",
        )
    problems: list[str] = []
    passed: list[str] = []
    committed = commit_time(commit)
    if not auditor.is_ancestor(commit):
        problems.append(
            f"prereg commit {commit.hexsha[:12]} is not an ancestor of HEAD "
            "(unmerged branch or rewritten history)"
        )
    if not study_blobs(commit, study):
        problems.append(f"prereg commit {commit.hexsha[:12]} holds no {PREREG_ROOT}/{study}/")
    _check_recorded_time(run, committed, problems)
    if run.start is not None and not starts_after(run.start, committed):
        problems.append(
            f"run started {run.started_at}, before its prereg commit "
            f"{commit.hexsha[:12]} ({committed.isoformat()})"
        )
    else:
        passed.append("committed before start")
    if auditor.is_ancestor(commit):
        changes = auditor.later_changes(commit, study)
        problems.extend(changes)
        if not changes:
            passed.append("files unchanged since")
    _check_plans(auditor, run, commit, study, problems, passed)
    _check_design(run, commit, study, problems, passed)
    _check_profile(commit, study, problems, passed)
    verdict, reason = (VIOLATION, "; ".join(problems)) if problems else (OK, ", ".join(passed))
    return AuditRow(
        run.study, run.label, commit.hexsha, committed.isoformat(), run.started_at, verdict, reason
    )


def _check_profile(commit: Any, study: str, problems: list[str], passed: list[str]) -> None:
    """The profile the predictions used (design.json's sha256) must be the profile.yaml
    committed with them, so every constant a prediction rests on predates the run."""
    try:
        design = json.loads((commit.tree / f"{PREREG_ROOT}/{study}/design.json").data_stream.read())
    except (KeyError, ValueError):
        return
    recorded = design.get("profile_sha256") if isinstance(design, dict) else None
    if recorded is None:
        return  # registered before profiles were recorded: nothing to compare
    try:
        committed = hashlib.sha256(
            (commit.tree / f"{PREREG_ROOT}/{study}/{PROFILE_FILE}").data_stream.read()
        ).hexdigest()
    except KeyError:
        committed = None
    if committed != recorded:
        problems.append(
            f"predictions used profile sha256 {str(recorded)[:12]}, but prereg "
            f"commit {commit.hexsha[:12]} holds "
            f"{'no ' + PROFILE_FILE if committed is None else 'a different one'}: "
            "the profile was not committed before the run; re-register the study"
        )
    else:
        passed.append("profile committed")


def _check_recorded_time(run: Run, committed: datetime, problems: list[str]) -> None:
    recorded = run.prereg.get("committed_at")
    try:
        same = parse_utc(recorded, "prereg.committed_at") == committed
    except PreregError:
        same = False
    if not same:
        problems.append(
            f"manifest prereg.committed_at {recorded} differs from git's commit "
            f"time {committed.isoformat()}"
        )


def _unregistered_row(auditor: Auditor, run: Run, study: str) -> AuditRow:
    """A complete run without prereg: fine for an unregistered study, not otherwise."""
    earlier = [
        c
        for c in registrations(auditor.repo, study)
        if run.start is not None and starts_after(run.start, commit_time(c))
    ]
    if earlier:
        return AuditRow(
            run.study,
            run.label,
            None,
            None,
            run.started_at,
            VIOLATION,
            f"study {study} was preregistered in commit {earlier[0].hexsha[:12]} "
            "before this run started, but the manifest records no prereg commit",
        )
    return AuditRow(
        run.study,
        run.label,
        None,
        None,
        run.started_at,
        OK,
        UNREGISTERED,
    )


def registration_rows(auditor: Auditor) -> Iterator[AuditRow]:
    for study in auditor.studies():
        history = registrations(auditor.repo, study)
        if not history:
            continue
        runs = sum(1 for r in auditor.runs if (r.prereg.get("study") or r.study) == study)
        yield AuditRow(
            study,
            REGISTRATION_ROW,
            history[0].hexsha,
            commit_time(history[0]).isoformat(),
            None,
            OK,
            f"first registration; {len(history)} commit(s) touch "
            f"{PREREG_ROOT}/{study}/; {runs} run manifest(s)",
        )
