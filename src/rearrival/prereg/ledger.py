"""Sealed run records (docs/DESIGN.md §6, §8): what was measured cannot change unnoticed.

Run records are plain files that channels and decisions are recomputed from at any time,
so after a study's runs the pipeline commits a ledger, ``ledger/<study>.json``, holding
the sha256 of every file under each replicate directory (manifests included; each
manifest also lists the hashes of its run's files). One commit per study, serialised
through the workflow's ``git`` resource like preregistration commits, and only the
ledger path is committed. Channels, decisions and ``rearrival audit`` compare the run
records with the ledger as committed at HEAD (a git object, never the working file): an
edited, added or removed file is reported naming the run and the file.

Keys are ``<replicate dir>/<run dir>/<file>`` relative to the study's runs directory,
so a ledger does not depend on where the results tree lives.

A sealed ledger is append-only (a run measured once is never measured "again, better"
unseen): a later seal may add runs but never changes or removes a sealed hash, and
:func:`overwrites` finds every ledger commit on HEAD's history that did. The one
exception is a declared re-measurement: the changed runs were measured under a
registration of the study committed after the seal they replace (an amendment, paper
Section II-D), and the ledger commit names it in a ``Ledger-Remeasure`` trailer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_write_bytes
from rearrival.errors import RearrivalError
from rearrival.prereg.registration import (
    Signing,
    bad_revision_errors,
    commit_paths,
    ensure_identity,
    open_repo,
    registrations,
    trailer_values,
)

LEDGER_ROOT = "ledger"
STUDY_TRAILER = "Ledger-Study"
REMEASURE_TRAILER = "Ledger-Remeasure"
# Snakemake touches this marker inside every directory output; it is not a record.
IGNORED = frozenset({".snakemake_timestamp"})


class LedgerError(RearrivalError):
    """Run records that differ from their sealed hashes; names the run and the file."""


def file_hashes(replicate_dirs: Iterable[Path]) -> dict[str, str]:
    """sha256 of every file under the replicate directories, keyed by
    ``<replicate>/<relative path>``."""
    hashes = {}
    for replicate in map(Path, replicate_dirs):
        for path in sorted(p for p in replicate.rglob("*") if p.is_file()):
            if path.name in IGNORED:
                continue
            key = f"{replicate.name}/{path.relative_to(replicate).as_posix()}"
            hashes[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def ledger_path(study: str) -> str:
    return f"{LEDGER_ROOT}/{study}.json"


def ledger_bytes(study: str, hashes: dict[str, str]) -> bytes:
    return (json.dumps({"study": study, "files": hashes}, indent=2, sort_keys=True) + "\n").encode()


def seal(
    repo_dir: Path,
    study: str,
    replicate_dirs: Iterable[Path],
    out: Path,
    *,
    signing: Signing | None = None,
) -> dict[str, Any]:
    """Commit the study's ledger (no commit when it is unchanged) and write the record
    ``out`` naming the commit, for the stages that verify against it.

    Append-only: sealed entries of replicates not given are kept and new replicates are
    added, but a sealed hash that changed or disappeared, or a file added to a sealed
    replicate, is refused (:class:`LedgerError`) unless every such run was re-measured
    under a registration newer than the seal (then the commit declares it with a
    ``Ledger-Remeasure`` trailer)."""
    repo = open_repo(repo_dir)
    relative = ledger_path(study)
    dirs = [Path(d) for d in replicate_dirs]
    sealed_data = committed_ledger_bytes(repo, study)
    sealed = json.loads(sealed_data)["files"] if sealed_data is not None else {}
    found = file_hashes(dirs)
    names = {d.name for d in dirs}
    kept = {k: v for k, v in sealed.items() if k.split("/", 1)[0] not in names}
    changed = [key for key, _ in sealed_changes(sealed, kept | found)]
    remeasured = _remeasure_registrations(repo, study, dirs, changed) if changed else set()
    data = ledger_bytes(study, kept | found)
    if sealed_data != data:
        atomic_write_bytes(Path(repo.working_tree_dir) / relative, data)
        ensure_identity(repo)
        trailers = "".join(f"{REMEASURE_TRAILER}: {sha}\n" for sha in sorted(remeasured))
        commit_paths(
            repo,
            [relative],
            f"ledger({study}): seal run records\n\n{STUDY_TRAILER}: {study}\n{trailers}",
            signing=signing,
        )
    commit = next(repo.iter_commits("HEAD", paths=[relative], max_count=1))
    record = {
        "study": study,
        "commit": commit.hexsha,
        "ledger": relative,
        "files": len(json.loads(data)["files"]),
    }
    atomic_write_bytes(out, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode())
    return record


def _manifest_registration(replicate_dirs: list[Path], key: str) -> str | None:
    """The prereg commit the manifest of ``key``'s run records, if it has one."""
    replicate, run = key.split("/")[:2]
    for directory in replicate_dirs:
        path = directory / run / "manifest.json"
        if directory.name == replicate and path.is_file():
            try:
                prereg = json.loads(path.read_text()).get("prereg") or {}
            except (OSError, ValueError, AttributeError):
                return None
            commit = prereg.get("commit") if isinstance(prereg, dict) else None
            return commit if isinstance(commit, str) else None
    return None


def _remeasure_registrations(
    repo: Any, study: str, replicate_dirs: list[Path], changed: list[str]
) -> set[str]:
    """The registrations the changed runs were re-measured under, or LedgerError.

    A changed or removed sealed file is accepted only when its run's manifest names a
    registration of the study committed after the ledger commit that sealed it, so the
    re-measurement was declared before it was made."""
    last_seal = next(repo.iter_commits("HEAD", paths=[ledger_path(study)], max_count=1))
    newer = {
        c.hexsha
        for c in registrations(repo, study)
        if not repo.is_ancestor(c.hexsha, last_seal.hexsha)
    }
    accepted = {key: _manifest_registration(replicate_dirs, key) for key in changed}
    refused = [key for key, sha in accepted.items() if sha not in newer]
    if refused:
        run, name = refused[0].rsplit("/", 1)
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise LedgerError(
            f"study {study}: seal refused: run {run}: file {name} sealed in commit "
            f"{last_seal.hexsha[:12]} ({ledger_path(study)}) was changed, removed, added or "
            f"re-run after sealing{more}, and a sealed ledger is append-only; either "
            "restore the sealed run records, or re-measure under a new registration "
            f"(`rearrival prereg {study} --amends <sha> --files <amendment>`, then re-run "
            "the replicate so its manifests record it)"
        )
    return {sha for sha in accepted.values() if sha is not None}


def sealed_changes(sealed: dict[str, str], now: dict[str, str]) -> list[tuple[str, str]]:
    """(key, 'changed' | 'removed' | 'added') for every sealed hash ``now`` changes or
    drops and every file ``now`` adds to a replicate that was already sealed (a
    replicate is measured once, as a whole); new replicates are not changes."""
    replicates = {key.split("/", 1)[0] for key in sealed}
    found = [
        (key, "removed" if key not in now else "changed")
        for key, value in sealed.items()
        if now.get(key) != value
    ]
    found += [
        (key, "added") for key in now if key not in sealed and key.split("/", 1)[0] in replicates
    ]
    return sorted(found)


@dataclass(frozen=True)
class Overwrite:
    """A sealed hash that a later ledger commit changed or removed, or a file it added
    to a sealed replicate."""

    study: str
    key: str
    sealed_in: str
    changed_by: str
    change: str

    @property
    def run(self) -> str:
        return self.key.rsplit("/", 1)[0]

    def describe(self) -> str:
        name = self.key.rsplit("/", 1)[1]
        ledger = ledger_path(self.study)
        if self.change == "added":
            what = (
                f"file {name} was added by commit {self.changed_by[:12]} to replicate "
                f"{self.key.split('/', 1)[0]}, sealed in commit {self.sealed_in[:12]} ({ledger})"
            )
        else:
            what = (
                f"file {name} sealed in commit {self.sealed_in[:12]} ({ledger}) was "
                f"{self.change} by commit {self.changed_by[:12]}"
            )
        return (
            f"run {self.run}: {what}; a sealed ledger is append-only: restore the sealed "
            "records, or re-measure under a new registration"
        )


def _ledger_files(commit: Any, study: str) -> dict[str, str] | None:
    try:
        data = (commit.tree / ledger_path(study)).data_stream.read()
    except KeyError:
        return None
    try:
        files = json.loads(data).get("files")
    except (ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def ledger_commits(repo: Any, study: str) -> list[Any]:
    """Commits on HEAD's history that touched ``ledger/<study>.json``, oldest first."""
    if not repo.head.is_valid():
        return []
    commits = repo.iter_commits("HEAD", paths=ledger_path(study), full_history=True)
    return list(reversed(list(commits)))


def _declared(repo: Any, study: str, commit: Any, sealed_in: str) -> bool:
    """Whether ``commit`` declares a re-measurement under a registration of the study
    made after ``sealed_in`` and before ``commit`` itself."""
    for sha in trailer_values(commit.message, REMEASURE_TRAILER):
        try:
            registration = repo.commit(sha)
        except bad_revision_errors():
            continue
        if (
            registration.hexsha in {c.hexsha for c in registrations(repo, study)}
            and not repo.is_ancestor(registration.hexsha, sealed_in)
            and repo.is_ancestor(registration.hexsha, commit.hexsha)
        ):
            return True
    return False


def overwrites(repo: Any, study: str) -> list[Overwrite]:
    """Every sealed hash a later ledger commit changed or removed (or file it added to a
    sealed replicate) without declaring a re-measurement, naming the commit that sealed
    it and the one that changed it. A merge taking another parent's version of a file
    is not a change of its own."""
    found = []
    for commit in ledger_commits(repo, study):
        now = _ledger_files(commit, study) or {}
        before = [(p, _ledger_files(p, study)) for p in commit.parents]
        before = [(p, files) for p, files in before if files is not None]
        for parent, files in before:
            sealed_in = next(repo.iter_commits(parent, paths=ledger_path(study), max_count=1))
            for key, change in sealed_changes(files, now):
                if any(other.get(key) == now.get(key) for _, other in before if other is not files):
                    continue
                if _declared(repo, study, commit, sealed_in.hexsha):
                    continue
                found.append(Overwrite(study, key, sealed_in.hexsha, commit.hexsha, change))
    return found


def committed_ledger_bytes(repo: Any, study: str) -> bytes | None:
    """The study's ledger as committed at HEAD, or None when none was committed."""
    if not repo.head.is_valid():
        return None
    try:
        return (repo.head.commit.tree / ledger_path(study)).data_stream.read()
    except KeyError:
        return None


def differences(sealed: dict[str, str], found: dict[str, str]) -> list[str]:
    """Every file that was edited, added or removed since sealing, naming its run."""
    problems = []
    for key in sorted(set(sealed) | set(found)):
        run = key.rsplit("/", 1)[0]
        name = key.rsplit("/", 1)[1]
        if key not in found:
            problems.append(f"run {run}: file {name} removed after sealing")
        elif key not in sealed:
            problems.append(f"run {run}: file {name} added after sealing")
        elif sealed[key] != found[key]:
            problems.append(
                f"run {run}: file {name} edited after sealing (sha256 "
                f"{found[key][:12]}, sealed {sealed[key][:12]})"
            )
    return problems


def verify(
    repo_dir: Path, study: str, replicate_dirs: Iterable[Path], *, every_replicate: bool = False
) -> list[str]:
    """Differences between the study's run records and its committed ledger; a study
    without a committed ledger yields one problem saying so. Only the replicates given
    are compared unless ``every_replicate`` (the audit: a sealed replicate that is gone
    is reported as removed)."""
    data = committed_ledger_bytes(open_repo(repo_dir), study)
    if data is None:
        return [
            f"{ledger_path(study)}: no committed ledger for study {study}; run the seal "
            "stage (snakemake results/ledger/<study>.json)"
        ]
    sealed = json.loads(data)["files"]
    dirs = list(replicate_dirs)
    found = file_hashes(dirs)
    # only the replicates given are checked; a replicate absent from them is not "removed"
    names = {Path(d).name for d in dirs}
    if not every_replicate:
        sealed = {k: v for k, v in sealed.items() if k.split("/", 1)[0] in names}
    return differences(sealed, found)


def require_sealed(repo_dir: Path, study: str, replicate_dirs: Iterable[Path]) -> None:
    """Refuse run records that differ from their sealed hashes."""
    problems = verify(repo_dir, study, replicate_dirs)
    if problems:
        raise LedgerError(
            f"study {study}: run records differ from {ledger_path(study)} as "
            f"committed: {'; '.join(problems)}; restore them from the measured "
            "records or re-measure under a new registration"
        )
