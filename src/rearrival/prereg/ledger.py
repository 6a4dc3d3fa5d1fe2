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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rearrival.atomic import atomic_write_bytes
from rearrival.errors import RearrivalError
from rearrival.prereg.registration import commit_paths, ensure_identity, open_repo

LEDGER_ROOT = "ledger"
STUDY_TRAILER = "Ledger-Study"
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


def seal(repo_dir: Path, study: str, replicate_dirs: Iterable[Path], out: Path) -> dict[str, Any]:
    """Commit the study's ledger (no commit when it is unchanged) and write the record
    ``out`` naming the commit, for the stages that verify against it."""
    repo = open_repo(repo_dir)
    relative = ledger_path(study)
    data = ledger_bytes(study, file_hashes(replicate_dirs))
    target = Path(repo.working_tree_dir) / relative
    if committed_ledger_bytes(repo, study) != data:
        atomic_write_bytes(target, data)
        ensure_identity(repo)
        commit_paths(
            repo, [relative], f"ledger({study}): seal run records\n\n{STUDY_TRAILER}: {study}\n"
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
