"""The git queries the audit's checks share, cached per commit and study: which
commit a run names, whether HEAD contains it, the plan registries and seed history in
force, and later commits that changed registered files (checks b to d)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rearrival.prereg.audit.manifests import Run
from rearrival.prereg.registration import (
    PREREG_ROOT,
    PlanRegistry,
    PreregError,
    bad_revision_errors,
    is_plan_registry,
    parse_plan_registry,
    registrations,
)


class Auditor:
    """Git lookups shared by all runs, cached: trees, registries and seed history."""

    def __init__(self, repo: Any, runs: list[Run]) -> None:
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
                for blob in study_blobs(commit, study)
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
                    first.setdefault(plan.seed, (commit_time(commit), commit.hexsha))
            self._seed_history[study] = first
        return self._seed_history[study]

    def judged_registration(self, study: str) -> Any | None:
        """The registration commit a study's decisions are recomputed against: the latest
        one its complete runs name, else its first; None when it has none."""
        history = registrations(self.repo, study)
        used = {
            str(r.prereg.get("commit"))
            for r in self.runs
            if r.study == study and r.status == "complete" and r.prereg.get("commit")
        }
        commits = [c for c in history if c.hexsha in used] or history[:1]
        return commits[-1] if commits else None

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
        paths = [blob.path for blob in study_blobs(commit, study)]
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
                        f"({commit_time(change).isoformat()}) after prereg commit "
                        f"{commit.hexsha[:12]}"
                    )
        return found


def study_blobs(commit: Any, study: str) -> list[Any]:
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


def commit_time(commit: Any) -> datetime:
    return datetime.fromtimestamp(commit.committed_date, UTC)
