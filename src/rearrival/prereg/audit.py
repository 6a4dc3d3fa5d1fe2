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
    criteria, predictions as committed) and the run records;
(g) every run record file has the sha256 the study's committed ledger sealed;
(h) the run measured the registered design (backend, N, replicate, variant and the
    configuration's buckets, batch size and slots in design.json);
(i) the ledger is append-only: no later ledger commit changed or removed a sealed hash,
    unless it declares a re-measurement under a newer registration;
(j) given a witness, every registration and ledger commit is held by it with the same
    hash, and it holds nothing the local history lacks (no rewritten history);
(k) given an allowed-signers file, every registration and ledger commit is signed by
    an allowed key.

Runs whose status is not ``complete`` are listed as ``excluded`` (never judged), but
their seeds still count as used.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import textwrap
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rearrival.errors import RearrivalError, StageError
from rearrival.judge.collect import collect_channels
from rearrival.judge.decisions import decision_table
from rearrival.measure.records import RunRecordError
from rearrival.prereg.ledger import (
    LEDGER_ROOT,
    committed_ledger_bytes,
    ledger_commits,
    ledger_path,
    overwrites,
    verify,
)
from rearrival.prereg.registered import read_registration
from rearrival.prereg.registration import (
    PREREG_ROOT,
    PROFILE_FILE,
    PlanRegistry,
    PreregError,
    bad_revision_errors,
    is_plan_registry,
    open_repo,
    parse_plan_registry,
    parse_utc,
    registrations,
    starts_after,
)
from rearrival.prereg.signatures import check_signatures
from rearrival.prereg.witness import compare, parse_ref

OK, VIOLATION, EXCLUDED = "ok", "violation", "excluded"
REGISTRATION_ROW = "(registration)"


@dataclass(frozen=True)
class AuditRow:
    """One line of the audit table: a run (or a study's registration) and its verdict."""

    study: str
    run: str
    prereg_commit: str | None
    prereg_time: str | None
    run_start: str | None
    verdict: str
    reason: str


@dataclass(frozen=True)
class AuditReport:
    """All rows; ``ok`` is False as soon as one row is a violation."""

    rows: tuple[AuditRow, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def violations(self) -> tuple[AuditRow, ...]:
        return tuple(r for r in self.rows if r.verdict == VIOLATION)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "rows": [asdict(r) for r in self.rows]}

    def totals(self) -> str:
        counts = {v: sum(r.verdict == v for r in self.rows) for v in (OK, VIOLATION, EXCLUDED)}
        return (
            f"{len(self.rows)} rows: {counts[OK]} ok, {counts[VIOLATION]} violation, "
            f"{counts[EXCLUDED]} excluded"
        )

    def table(self, *, violations_only: bool = False) -> str:
        """The totals first, then one block per row: verdict, run, prereg commit and
        start on one line, the reason wrapped below it, all within ``WIDTH`` columns.
        Runs of studies that were never registered (calibration) are one line per
        study; ``violations_only`` keeps only the violations."""
        shown = self.violations if violations_only else self.rows
        unregistered: dict[str, int] = {}
        lines = [self.totals()]
        for row in shown:
            if row.verdict == OK and row.reason == UNREGISTERED:
                unregistered[row.study] = unregistered.get(row.study, 0) + 1
                continue
            lines.extend(_heading(row))
            lines.extend(
                textwrap.wrap(
                    row.reason,
                    WIDTH,
                    initial_indent=_INDENT,
                    subsequent_indent=_INDENT,
                    break_on_hyphens=False,
                )
            )
        lines.extend(
            f"{OK:<{len(_INDENT)}}{study}: {count} run(s) not preregistered "
            "(no prediction judges them)"
            for study, count in sorted(unregistered.items())
        )
        return "\n".join(lines)


WIDTH = 100
_INDENT = " " * 10
UNREGISTERED = "not preregistered: no prediction judges this run"


def _heading(row: AuditRow) -> list[str]:
    """Verdict, run, prereg commit and start; the last two on a line of their own when
    one line would pass ``WIDTH``."""
    named = row.run.startswith((f"{row.study}/", f"{row.study}."))
    first = f"{row.verdict:<{len(_INDENT) - 1}} {row.run if named else f'{row.study} {row.run}'}"
    details = []
    if row.prereg_commit:
        details.append(f"prereg {row.prereg_commit[:12]}")
    if row.run_start:
        details.append(f"started {row.run_start[:19]}")
    joined = "  ".join([first, *details])
    if len(joined) <= WIDTH or not details:
        return [joined]
    return [first, _INDENT + "  ".join(details)]


@dataclass(frozen=True)
class _Run:
    """The manifest fields the audit relies on (TEAM.md run-record contract)."""

    label: str
    study: str
    status: str
    reason: str | None
    started_at: str | None
    start: datetime | None
    prereg: dict[str, Any]
    plan_seed: int | None
    plan_sha256: str | None
    replicate: Any
    n: Any
    variant: Any
    backend: Any = None
    configuration: Any = None


def _load_run(path: Path, results_dir: Path) -> _Run | AuditRow:
    """A manifest as a _Run, or a violation row saying what is wrong with the file."""
    label = path.parent.relative_to(results_dir).as_posix()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return AuditRow(
            "?",
            label,
            None,
            None,
            None,
            VIOLATION,
            f"{path}: unreadable manifest ({exc}); re-run this run",
        )
    if not isinstance(raw, dict):
        return AuditRow(
            "?",
            label,
            None,
            None,
            None,
            VIOLATION,
            f"{path}: manifest is not a JSON object; re-run this run",
        )
    study = str(raw.get("study", "?"))
    label = str(raw.get("run_id") or label)
    start: datetime | None = None
    try:
        start = parse_utc(raw.get("started_at"), f"{path}: started_at")
    except PreregError as exc:
        if raw.get("status") == "complete":
            return AuditRow(study, label, None, None, None, VIOLATION, str(exc))
    prereg = raw.get("prereg") if isinstance(raw.get("prereg"), dict) else {}
    seeds = raw.get("seeds") if isinstance(raw.get("seeds"), dict) else {}
    seed = seeds.get("plan")
    return _Run(
        label,
        study,
        str(raw.get("status")),
        raw.get("reason"),
        raw.get("started_at"),
        start,
        prereg,
        seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        raw.get("plan_sha256"),
        raw.get("replicate"),
        raw.get("n"),
        raw.get("variant"),
        raw.get("backend"),
        raw.get("configuration"),
    )


class _Auditor:
    """Git lookups shared by all runs, cached: trees, registries and seed history."""

    def __init__(self, repo: Any, runs: list[_Run]) -> None:
        self.repo = repo
        self.runs = runs
        self.head = repo.head.commit if repo.head.is_valid() else None
        self._registries: dict[tuple[str, str], list[PlanRegistry]] = {}
        self._seed_history: dict[str, dict[int, tuple[datetime, str]]] = {}

    def resolve(self, sha: str) -> Any | None:
        try:
            return self.repo.commit(sha)
        except bad_revision_errors():
            return None

    def is_ancestor(self, commit: Any) -> bool:
        return self.head is not None and self.repo.is_ancestor(commit.hexsha, self.head.hexsha)

    def registries(self, commit: Any, study: str) -> list[PlanRegistry]:
        """Plan registries in force at ``commit``; a malformed one raises PreregError."""
        key = (commit.hexsha, study)
        if key not in self._registries:
            self._registries[key] = [
                parse_plan_registry(blob.data_stream.read(), f"{blob.path} at {key[0][:12]}")
                for blob in _study_blobs(commit, study)
                if is_plan_registry(blob.path)
            ]
        return self._registries[key]

    def seed_history(self, study: str) -> dict[int, tuple[datetime, str]]:
        """When each plan seed first appeared in the study's registries (time, commit)."""
        if study not in self._seed_history:
            first: dict[int, tuple[datetime, str]] = {}
            for commit in registrations(self.repo, study):
                try:
                    found = self.registries(commit, study)
                except PreregError:
                    continue  # a malformed registry is reported on the runs that use it
                for plan in (p for reg in found for p in reg.plans if p.seed is not None):
                    first.setdefault(plan.seed, (_time(commit), commit.hexsha))
            self._seed_history[study] = first
        return self._seed_history[study]

    def studies(self) -> list[str]:
        names = {r.prereg.get("study") or r.study for r in self.runs}
        if self.head is not None:
            try:
                root = self.head.tree / PREREG_ROOT
                names |= {t.name for t in root.trees}
            except KeyError:
                pass
        return sorted(str(n) for n in names if n and n != "?")

    def later_changes(self, commit: Any, study: str) -> list[str]:
        """Commits after ``commit`` that modify or delete a file it registered (check c)."""
        paths = [blob.path for blob in _study_blobs(commit, study)]
        found: list[str] = []
        later = self.repo.iter_commits(
            f"{commit.hexsha}..HEAD", paths=f"{PREREG_ROOT}/{study}", full_history=True
        )
        for change in sorted(later, key=lambda c: (c.committed_date, c.hexsha)):
            for path in paths:
                kind = _change_kind(change, path)
                if kind:
                    found.append(
                        f"{path} {kind} by commit {change.hexsha[:12]} "
                        f"({_time(change).isoformat()}) after prereg commit "
                        f"{commit.hexsha[:12]}"
                    )
        return found


def _study_blobs(commit: Any, study: str) -> list[Any]:
    try:
        tree = commit.tree / f"{PREREG_ROOT}/{study}"
    except KeyError:
        return []
    return sorted((b for b in tree.traverse() if b.type == "blob"), key=lambda b: b.path)


def _blob_sha(commit: Any, path: str) -> str | None:
    try:
        return (commit.tree / path).hexsha
    except KeyError:
        return None


def _change_kind(commit: Any, path: str) -> str | None:
    """'modified'/'deleted' when ``commit`` changed ``path`` relative to every parent
    that had it (a merge taking one side's version is not a change of its own)."""
    before = [sha for sha in (_blob_sha(p, path) for p in commit.parents) if sha is not None]
    if not before:
        return None
    after = _blob_sha(commit, path)
    if after in before:
        return None
    return "deleted" if after is None else "modified"


def _time(commit: Any) -> datetime:
    return datetime.fromtimestamp(commit.committed_date, UTC)


def _check_plans(
    auditor: _Auditor, run: _Run, commit: Any, study: str, problems: list[str], passed: list[str]
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
    run: _Run, commit: Any, study: str, problems: list[str], passed: list[str]
) -> None:
    """Check (h): the run measured the registered design: its backend, N, replicate,
    variant and its configuration's buckets, batch size and slots are the ones in
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
    measured = {key: configuration.get(key) for key in ("buckets", "batch_size", "slots")}
    if registered is None or measured != registered:
        found.append(
            f"configuration {configuration.get('name')} {measured}, registered {registered}"
        )
    if found:
        problems.append("run does not match the registered design: " + "; ".join(found))
    else:
        passed.append("registered design")


def _check_validation_seed(
    auditor: _Auditor,
    run: _Run,
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


def _audit_run(auditor: _Auditor, run: _Run) -> AuditRow:
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
    committed = _time(commit)
    if not auditor.is_ancestor(commit):
        problems.append(
            f"prereg commit {commit.hexsha[:12]} is not an ancestor of HEAD "
            "(unmerged branch or rewritten history)"
        )
    if not _study_blobs(commit, study):
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


def _check_recorded_time(run: _Run, committed: datetime, problems: list[str]) -> None:
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


def _unregistered_row(auditor: _Auditor, run: _Run, study: str) -> AuditRow:
    """A complete run without prereg: fine for an unregistered study, not otherwise."""
    earlier = [
        c
        for c in registrations(auditor.repo, study)
        if run.start is not None and starts_after(run.start, _time(c))
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


def _registration_rows(auditor: _Auditor) -> Iterator[AuditRow]:
    for study in auditor.studies():
        history = registrations(auditor.repo, study)
        if not history:
            continue
        runs = sum(1 for r in auditor.runs if (r.prereg.get("study") or r.study) == study)
        yield AuditRow(
            study,
            REGISTRATION_ROW,
            history[0].hexsha,
            _time(history[0]).isoformat(),
            None,
            OK,
            f"first registration; {len(history)} commit(s) touch "
            f"{PREREG_ROOT}/{study}/; {runs} run manifest(s)",
        )


def _table_differences(written: str, recomputed: str) -> list[str]:
    """Row by row, the columns where a written decision table differs from its
    recomputation (rows numbered from 1 after the header)."""
    ours = list(csv.DictReader(io.StringIO(written)))
    theirs = list(csv.DictReader(io.StringIO(recomputed)))
    found = []
    if len(ours) != len(theirs):
        found.append(f"{len(ours)} rows, recomputed {len(theirs)}")
    for index, (row, again) in enumerate(zip(ours, theirs, strict=False), start=1):
        columns = [c for c in again if row.get(c) != again[c]]
        if columns:
            found.append(
                f"row {index} ({again['comparison']}, N={again['n']}): "
                + ", ".join(f"{c} {row.get(c)!r} != recomputed {again[c]!r}" for c in columns)
            )
    return found


def _decision_rows(auditor: _Auditor, results: Path) -> Iterator[AuditRow]:
    """Check (f): every decision table equals its recomputation from the committed
    registration (design, criteria, predictions) and the run records."""
    for path in sorted((results / "decisions").glob("*.csv")):
        study = path.stem
        history = registrations(auditor.repo, study)
        if not history:
            continue
        used = {
            str(r.prereg.get("commit"))
            for r in auditor.runs
            if r.study == study and r.status == "complete" and r.prereg.get("commit")
        }
        commits = [c for c in history if c.hexsha in used] or history[:1]
        commit = commits[-1]
        label = f"(decisions) {path.name}"
        where = (study, label, commit.hexsha, _time(commit).isoformat(), None)
        try:
            registration = read_registration(auditor.repo, study, commit.hexsha)
            channels = collect_channels(
                sorted(p for p in (results / "runs" / study).glob("*") if p.is_dir()),
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
            )
        except (StageError, RunRecordError, KeyError, ValueError) as exc:
            yield AuditRow(
                *where,
                VIOLATION,
                f"{path}: cannot be recomputed from the registration and the run records ({exc})",
            )
            continue
        differences = _table_differences(path.read_text(), recomputed)
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


def _ledger_studies(auditor: _Auditor, results: Path) -> set[str]:
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


def _ledger_rows(auditor: _Auditor, results: Path) -> Iterator[AuditRow]:
    """Check (g): every study's run records are the files its committed ledger sealed;
    an edited, added or removed file is a violation naming the run and the file, and a
    decided study without a ledger is one too. Check (i): the ledger is append-only, so
    a later ledger commit that changed or removed a sealed hash (without declaring a
    re-measurement) is a violation naming the run, the file and both commits."""
    for study in sorted(_ledger_studies(auditor, results)):
        replicates = sorted(p for p in (results / "runs" / study).glob("*") if p.is_dir())
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


def _witness_rows(auditor: _Auditor, remote: str) -> Iterator[AuditRow]:
    """Check (j): the witness holds every registration and ledger commit, and the local
    history holds every commit the witness does."""
    check = compare(auditor.repo, remote)
    for item in check.missing:
        yield AuditRow(
            item.study,
            f"(witness) {item.what} {item.commit[:12]}",
            item.commit if item.what == "registration" else None,
            None,
            None,
            VIOLATION,
            f"{item.what} commit {item.commit[:12]} is not held by witness {remote} "
            f"({item.ref}): publish it (`rearrival publish`), or, if it was published "
            "before, the local history was rewritten",
        )
    for ref, sha in check.diverged:
        named = parse_ref(ref)
        yield AuditRow(
            named.study if named else "?",
            f"(witness) diverged {sha[:12]}",
            None,
            None,
            None,
            VIOLATION,
            f"local history diverges from witness {remote}: it holds {ref} (commit "
            f"{sha[:12]}), which HEAD's history does not contain; a published "
            f"{named.what if named else 'commit'} was rewritten or dropped here",
        )
    for study in sorted({item.study for item in check.held}):
        count = sum(item.study == study for item in check.held)
        yield AuditRow(
            study,
            "(witness)",
            None,
            None,
            None,
            OK,
            f"{count} registration and ledger commit(s) held by witness {remote}",
        )


def _signature_rows(auditor: _Auditor, allowed_signers: Path) -> Iterator[AuditRow]:
    """Check (k): every registration and ledger commit is signed by an allowed key."""
    check = check_signatures(auditor.repo, allowed_signers)
    for item, why in check.problems:
        yield AuditRow(
            item.study,
            f"(signature) {item.what} {item.commit[:12]}",
            None,
            None,
            None,
            VIOLATION,
            f"{item.what} commit {item.commit[:12]} {why}; sign registration and ledger "
            f"commits with a key in {allowed_signers} (config signing: key)",
        )
    for study in sorted({item.study for item, why in check.results if why is None}):
        count = sum(item.study == study and why is None for item, why in check.results)
        yield AuditRow(
            study,
            "(signature)",
            None,
            None,
            None,
            OK,
            f"{count} registration and ledger commit(s) signed by keys {allowed_signers} allows",
        )


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
    loaded = [_load_run(p, results) for p in sorted(results.rglob("manifest.json"))]
    runs = [r for r in loaded if isinstance(r, _Run)]
    auditor = _Auditor(repo, runs)
    rows = list(_registration_rows(auditor))
    rows += [r if isinstance(r, AuditRow) else _audit_run(auditor, r) for r in loaded]
    rows += list(_decision_rows(auditor, results))
    rows += list(_ledger_rows(auditor, results))
    if witness is not None:
        rows += list(_witness_rows(auditor, witness))
    if allowed_signers is not None:
        rows += list(_signature_rows(auditor, allowed_signers))
    return AuditReport(
        tuple(
            sorted(
                rows, key=lambda r: (r.study, r.run != REGISTRATION_ROW, r.run_start or "", r.run)
            )
        )
    )
