"""Preregistration (docs/DESIGN.md §8; paper Section II-D): commit before you measure.

The paper's claim "predictions and decision criteria were committed to the repository
before measurement and not changed afterward, and the order of commit time and
measurement time is on record" is made checkable here. A study's predictions, criteria,
plan hashes and plan seeds are written under ``preregistration/<study>/`` and committed
with GitPython; a run asks :func:`check_before_run` for the commit it is judged by and
records it in its manifest (``prereg``: study, commit, committed_at).

Design decisions:

- A committed file cannot contain its own commit sha, so the sha and time are written
  after the commit to ``<results>/prereg/<study>.json`` (outside version control, for
  Snakemake and run jobs). That file is a convenience copy: ``rearrival audit``
  re-derives every sha and time from git history.
- Registered files are immutable. Registering different content under an existing name
  is refused; an amendment (the paper's tau rule registered before the N=6
  re-measurement) is a new commit that only adds files, and applies only to runs that
  start after it (:func:`prereg_in_force`).
- Commits contain only the prereg paths (``git commit --only``), so anything else a user
  has staged never leaks into a registration commit.
- Plan registries (files named ``plans.json`` or ``*-plans.json``, see
  :class:`PlanRegistry`) record, per (replicate, N), the plan sha256 and plan seed a run
  will use, and whether the study is a validation study; the audit checks runs against
  them (paper: "new seeds not used in any earlier measurement").
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import git
from gitdb.exc import BadName, BadObject

from rearrival.atomic import atomic_write_bytes, atomic_write_json
from rearrival.errors import RearrivalError

PREREG_ROOT = "preregistration"
RECORDS_SUBDIR = "prereg"
PLAN_REGISTRY_SUFFIX = "plans.json"
# The profile file a study's predictions used, committed beside design.json, which
# records its sha256 (docs/DESIGN.md §3, "Calibration"); the audit checks the pair.
PROFILE_FILE = "profile.yaml"
STUDY_TRAILER = "Prereg-Study"
AMENDS_TRAILER = "Prereg-Amends"
PIPELINE_NAME = "rearrival pipeline"
PIPELINE_EMAIL = "rearrival@localhost"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_LOCK_RETRIES = 30
_LOCK_WAIT_S = 1.0


@dataclass(frozen=True)
class Signing:
    """SSH signing of registration and ledger commits (config ``signing:``; git's
    ``gpg.format ssh``): a signature ties each commit to a key a third party can check
    with ``rearrival audit --allowed-signers``, which a rewritten commit cannot carry
    unless the key signed it again."""

    key: Path

    def __post_init__(self) -> None:
        if not Path(self.key).is_file():
            raise PreregError(
                f"signing.key {self.key}: no such file (relative paths resolve against the "
                "current directory); give the SSH key that signs "
                "registration and ledger commits (ssh-keygen -t ed25519 -f <path>) or remove "
                "signing: from the config"
            )

    @classmethod
    def from_key(cls, key: Path | None) -> Signing | None:
        """The config's ``signing.key`` as settings, None when signing is off."""
        return cls(key) if key is not None else None

    def git_options(self) -> list[str]:
        """``git -c`` options that make one commit SSH-signed with this key."""
        return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={self.key}"]


def bad_revision_errors() -> tuple[type[Exception], ...]:
    return (ValueError, BadName, BadObject)


class PreregError(RearrivalError):
    """A preregistration that cannot be made or trusted; names the path, field and fix."""


@dataclass(frozen=True)
class PreregFile:
    """One committed prereg file: repository-relative POSIX path and sha256 of its bytes."""

    path: str
    sha256: str


@dataclass(frozen=True)
class PreregRecord:
    """The registration a run is judged by: the commit and every file in force at it."""

    study: str
    commit: str
    committed_at: str
    files: tuple[PreregFile, ...]
    amendment_of: str | None = None

    def manifest_entry(self) -> dict[str, Any]:
        """The run manifest's ``prereg`` field (TEAM.md run-record contract)."""
        return {"study": self.study, "commit": self.commit, "committed_at": self.committed_at}

    def to_json(self) -> dict[str, Any]:
        return {
            "study": self.study,
            "commit": self.commit,
            "committed_at": self.committed_at,
            "amendment_of": self.amendment_of,
            "files": {f.path: f.sha256 for f in self.files},
        }


@dataclass(frozen=True)
class RegisteredPlan:
    """One input plan a study commits to before measurement: its hash and its seed."""

    replicate: int
    n: int
    seed: int | None
    sha256: str
    variant: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "replicate": self.replicate,
            "n": self.n,
            "seed": self.seed,
            "sha256": self.sha256,
            "variant": self.variant,
        }


@dataclass(frozen=True)
class PlanRegistry:
    """Content of a ``*plans.json`` prereg file.

    ``validation`` marks a study whose plan seeds must be new (paper Section II-D: the
    validation measurements "used new seeds not used in any earlier measurement").
    ``sha256`` is ``Plan.sha256()`` of the plan file a run reads, i.e. the manifest's
    ``plan_sha256``; an entry with ``variant`` set applies only to runs of that workload
    variant (per-variant plan files), one without applies to every variant.
    """

    validation: bool
    plans: tuple[RegisteredPlan, ...]

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.plans, key=lambda p: (p.n, p.replicate, p.variant or "", p.sha256))
        return {"validation": self.validation, "plans": [p.to_json() for p in ordered]}


def is_plan_registry(name: str) -> bool:
    """Prereg files holding plan hashes and seeds, by naming convention."""
    return PurePosixPath(name).name.endswith(PLAN_REGISTRY_SUFFIX)


def parse_plan_registry(data: bytes | Mapping[str, Any], source: str) -> PlanRegistry:
    """Read and check a plan registry; every error names ``source`` and the field."""
    raw: Any = data
    if isinstance(data, bytes):
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise PreregError(
                f"{source}: not valid JSON ({exc}); write it as a JSON object "
                "with keys validation and plans"
            ) from exc
    if not isinstance(raw, Mapping):
        raise PreregError(f"{source}: must be a JSON object with keys validation and plans")
    if not isinstance(raw.get("validation"), bool):
        raise PreregError(f"{source}: field validation must be true or false")
    entries = raw.get("plans")
    if not isinstance(entries, list):
        raise PreregError(
            f"{source}: field plans must be a list of "
            "{replicate, n, seed, sha256, variant} objects"
        )
    return PlanRegistry(
        raw["validation"],
        tuple(_registered_plan(e, f"{source}: plans[{i}]") for i, e in enumerate(entries)),
    )


def _registered_plan(entry: Any, where: str) -> RegisteredPlan:
    if not isinstance(entry, Mapping):
        raise PreregError(f"{where}: must be an object with replicate, n, seed, sha256")
    for key in ("replicate", "n"):
        value = entry.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PreregError(f"{where}.{key}: must be a non-negative integer")
    seed = entry.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise PreregError(f"{where}.seed: must be an integer or null")
    sha = entry.get("sha256")
    if not isinstance(sha, str) or not _SHA256_RE.match(sha):
        raise PreregError(f"{where}.sha256: must be 64 lowercase hex digits (Plan.sha256())")
    variant = entry.get("variant")
    if variant is not None and not isinstance(variant, str):
        raise PreregError(f"{where}.variant: must be a variant name (wait, control, equal) or null")
    return RegisteredPlan(entry["replicate"], entry["n"], seed, sha, variant)


def open_repo(repo_dir: str | Path) -> Any:
    """The git repository at ``repo_dir`` (its top level), or a one-line PreregError."""
    path = Path(repo_dir)
    try:
        repo = git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise PreregError(
            f"{path}: not a git repository; run `git init {path}` (and commit) or give "
            "the repository's top-level directory"
        ) from None
    if repo.bare or repo.working_tree_dir is None:
        raise PreregError(
            f"{path}: is a bare git repository; preregistration needs a "
            "working tree, so give a checkout"
        )
    return repo


def ensure_identity(repo: Any) -> None:
    """Give the repository a local committer identity when the machine has none.

    Asking git (not reading files) honours every config level and GIT_CONFIG_* variables;
    only the repository's own config is ever written, never the user's global one.
    """
    defaults = {"user.name": PIPELINE_NAME, "user.email": PIPELINE_EMAIL}
    for key, value in defaults.items():
        try:
            configured = repo.git.config("--get", key).strip()
        except git.GitCommandError:
            configured = ""
        if not configured:
            repo.git.config("--local", key, value)


def _check_name(value: str, what: str, fix: str) -> None:
    if not _NAME_RE.match(value):
        raise PreregError(
            f"{what} '{value}': use letters, digits, '.', '_' or '-' (no path separators); {fix}"
        )


def _file_bytes(name: str, content: bytes | str | Mapping[str, Any], study: str) -> bytes:
    """Canonical bytes: dicts become key-sorted JSON, so equal content means equal bytes."""
    if isinstance(content, bytes):
        data = content
    elif isinstance(content, str):
        data = content.encode()
    elif isinstance(content, Mapping):
        data = (json.dumps(content, indent=2, sort_keys=True) + "\n").encode()
    else:
        raise PreregError(
            f"preregistration/{study}/{name}: content must be bytes, str or a "
            f"JSON object, got {type(content).__name__}"
        )
    if is_plan_registry(name):
        parse_plan_registry(data, f"preregistration/{study}/{name}")
    return data


def _study_dir(study: str) -> str:
    return f"{PREREG_ROOT}/{study}"


def _tree_files(commit: Any, study: str) -> dict[str, Any]:
    """Blobs under ``preregistration/<study>/`` at ``commit``, keyed by repo path."""
    try:
        tree = commit.tree / _study_dir(study)
    except KeyError:
        return {}
    return {blob.path: blob for blob in tree.traverse() if blob.type == "blob"}


def _head_commit(repo: Any) -> Any | None:
    return repo.head.commit if repo.head.is_valid() else None


def _iso(commit: Any) -> str:
    return datetime.fromtimestamp(commit.committed_date, UTC).isoformat()


def trailer_values(message: str, key: str) -> list[str]:
    """Every value of the trailer ``key`` in a commit message, in order."""
    return [
        line.split(": ", 1)[1].strip()
        for line in message.splitlines()
        if line.startswith(f"{key}: ")
    ]


def _trailer(message: str, key: str) -> str | None:
    values = trailer_values(message, key)
    return values[0] if values else None


def record_at(repo: Any, commit: Any, study: str) -> PreregRecord:
    """The registration in force at ``commit``: all of the study's files there."""
    files = tuple(
        PreregFile(path, hashlib.sha256(blob.data_stream.read()).hexdigest())
        for path, blob in sorted(_tree_files(commit, study).items())
    )
    return PreregRecord(
        study, commit.hexsha, _iso(commit), files, _trailer(commit.message, AMENDS_TRAILER)
    )


def registrations(repo: Any, study: str) -> list[Any]:
    """Commits on HEAD's history that changed ``preregistration/<study>/``, oldest first."""
    if _head_commit(repo) is None:
        return []
    commits = repo.iter_commits("HEAD", paths=_study_dir(study), full_history=True)
    return sorted(commits, key=lambda c: (c.committed_date, c.hexsha))


def _latest(repo: Any, paths: list[str]) -> Any:
    return next(repo.iter_commits("HEAD", paths=paths, max_count=1))


def _resolve_amended(repo: Any, study: str, amendment_of: str) -> str:
    try:
        commit = repo.commit(amendment_of)
    except bad_revision_errors() as exc:
        raise PreregError(
            f"amendment_of '{amendment_of}': no such commit in "
            f"{repo.working_tree_dir} ({type(exc).__name__}); pass the sha of "
            f"a registration of study {study}"
        ) from None
    if not repo.is_ancestor(commit.hexsha, "HEAD") or not _tree_files(commit, study):
        raise PreregError(
            f"amendment_of '{amendment_of}': commit {commit.hexsha[:12]} holds "
            f"no {_study_dir(study)}/ on HEAD's history; pass the sha of a "
            f"registration of study {study}"
        )
    return commit.hexsha


def commit_paths(
    repo: Any, paths: list[str], message: str, *, signing: Signing | None = None
) -> None:
    """Stage and commit exactly ``paths`` (SSH-signed with ``signing``); retry while
    another process holds index.lock."""
    options = [*signing.git_options(), "commit", "-S"] if signing else ["commit"]
    for attempt in range(_LOCK_RETRIES):
        try:
            repo.git.add("--", *paths)
            repo.git.execute(["git", *options, "--only", "-m", message, "--", *paths])
            return
        except git.GitCommandError as exc:
            if "index.lock" not in str(exc) or attempt == _LOCK_RETRIES - 1:
                detail = " ".join(str(exc.stderr or exc).split())
                raise PreregError(
                    f"{repo.working_tree_dir}: git commit of {', '.join(paths)} "
                    f"failed ({detail}); fix the repository state and re-run "
                    "the prereg stage"
                ) from None
            time.sleep(_LOCK_WAIT_S)


def _write_if_changed(path: Path, data: Any) -> None:
    """Rewrite the record only when it changes, so Snakemake sees no new output."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if path.exists() and path.read_text() == text:
        return
    atomic_write_json(path, data)


def write_study_record(repo: Any, study: str, records_dir: Path) -> Path:
    """Write ``<records_dir>/<study>.json``: the registration in force at HEAD + history."""
    history = registrations(repo, study)
    current = record_at(repo, history[-1], study).to_json()
    current["history"] = [
        {
            "commit": c.hexsha,
            "committed_at": _iso(c),
            "amendment_of": _trailer(c.message, AMENDS_TRAILER),
        }
        for c in history
    ]
    path = records_dir / f"{study}.json"
    _write_if_changed(path, current)
    return path


def register(
    repo_dir: str | Path,
    study: str,
    files: Mapping[str, bytes | str | Mapping[str, Any]],
    *,
    message: str,
    amendment_of: str | None = None,
    records_dir: str | Path | None = None,
    write_record: bool = True,
    signing: Signing | None = None,
) -> PreregRecord:
    """Commit a study's predictions and criteria before any run they judge (docs/DESIGN.md §8).

    Writes ``files`` under ``preregistration/<study>/`` (dicts as key-sorted JSON) and
    commits only those paths. Re-registering identical content makes no commit and returns
    the commit that registered it. Changing a registered file is refused; adding files to
    a registered study requires ``amendment_of`` (sha of the registration amended) and
    becomes a new commit. ``records_dir`` (default ``<repo>/results/prereg``) receives
    ``<study>.json`` with the sha and time, written after the commit (not with
    ``write_record`` False: an amendment leaves the amended study's record as its runs
    saw it). With ``signing`` the commit is SSH-signed.
    """
    _check_name(study, "study", "rename the study in config/config.yaml")
    if not files:
        raise PreregError(
            f"preregistration/{study}/: no files given; pass the predictions "
            "and criteria to register"
        )
    for name in files:
        _check_name(name, f"preregistration/{study}/ file", "give it a plain file name")
    repo = open_repo(repo_dir)
    root = Path(repo.working_tree_dir)
    wanted = {
        f"{_study_dir(study)}/{name}": _file_bytes(name, content, study)
        for name, content in files.items()
    }
    head = _head_commit(repo)
    existing = _tree_files(head, study) if head is not None else {}
    new_paths = _new_paths(wanted, existing, study, amendment_of)
    amended = _resolve_amended(repo, study, amendment_of) if amendment_of else None
    for path, data in wanted.items():
        target = root / path
        if not target.exists() or target.read_bytes() != data:
            atomic_write_bytes(target, data)
    if new_paths:
        ensure_identity(repo)
        trailers = f"{STUDY_TRAILER}: {study}"
        if amended:
            trailers += f"\n{AMENDS_TRAILER}: {amended}"
        commit_paths(repo, sorted(new_paths), f"{message.strip()}\n\n{trailers}\n", signing=signing)
    record = record_at(repo, _latest(repo, sorted(wanted)), study)
    if write_record:
        records = (
            Path(records_dir) if records_dir is not None else root / "results" / RECORDS_SUBDIR
        )
        write_study_record(repo, study, records)
    return record


def _new_paths(
    wanted: dict[str, bytes], existing: dict[str, Any], study: str, amendment_of: str | None
) -> set[str]:
    """Paths to commit; refuses rewrites, and additions to a study without an amendment."""
    for path, data in wanted.items():
        if path in existing and existing[path].data_stream.read() != data:
            raise PreregError(
                f"{path}: already registered with different content and registered files "
                "never change; register the change as an amendment under a new file name "
                "(e.g. amendment-01-tau.json) with amendment_of"
            )
    new = {path for path in wanted if path not in existing}
    if new and existing and amendment_of is None:
        raise PreregError(
            f"{_study_dir(study)}/: study {study} is already registered, so adding "
            f"{', '.join(sorted(new))} is an amendment; pass amendment_of with the "
            "sha of the registration it amends"
        )
    if amendment_of is not None and not existing:
        raise PreregError(
            f"{_study_dir(study)}/: nothing registered yet, so there is nothing "
            "to amend; register without amendment_of first"
        )
    return new


def _working_tree_problem(root: Path, study: str, committed: dict[str, Any]) -> str | None:
    """First difference between the working tree and HEAD's prereg files, as advice."""
    fix = "commit it or re-run the prereg stage (`rearrival prereg`)"
    on_disk = {
        p.relative_to(root).as_posix(): p
        for p in sorted((root / _study_dir(study)).rglob("*"))
        if p.is_file()
    }
    for path, blob in sorted(committed.items()):
        if path not in on_disk:
            return f"{path}: committed but missing from the working tree; restore it from git"
        if on_disk[path].read_bytes() != blob.data_stream.read():
            return f"{path}: differs from HEAD's committed content; {fix}"
    for path in sorted(set(on_disk) - set(committed)):
        return f"{path}: not committed; {fix}"
    return None


def check_before_run(repo_dir: str | Path, study: str) -> PreregRecord:
    """Refuse to start a run unless its prereg is committed and unmodified (docs/DESIGN.md §8).

    Returns the registration in force at HEAD (including amendments); the run copies
    ``record.manifest_entry()`` into its manifest's ``prereg`` field.
    """
    _check_name(study, "study", "rename the study in config/config.yaml")
    repo = open_repo(repo_dir)
    head = _head_commit(repo)
    committed = _tree_files(head, study) if head is not None else {}
    if not committed:
        raise PreregError(
            f"{_study_dir(study)}/: no committed preregistration for study "
            f"{study}; run the prereg stage (`rearrival prereg {study}`) "
            "before measuring"
        )
    problem = _working_tree_problem(Path(repo.working_tree_dir), study, committed)
    if problem:
        raise PreregError(f"run of study {study} refused: {problem}")
    return record_at(repo, registrations(repo, study)[-1], study)


def registered_json(
    repo_dir: str | Path, study: str, names: Iterable[str]
) -> tuple[str, dict[str, Any]] | None:
    """The named JSON files of a study's registration as committed at HEAD, with the sha
    of the commit that first registered the study; None when the study (or the directory
    as a git repository) has no registration. Read from git objects, never the working
    tree, so an edited working copy cannot stand in for what was registered."""
    try:
        repo = git.Repo(Path(repo_dir))
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    head = _head_commit(repo)
    committed = _tree_files(head, study) if head is not None else {}
    wanted = {name: committed.get(f"{_study_dir(study)}/{name}") for name in names}
    if not committed or any(blob is None for blob in wanted.values()):
        return None
    first = registrations(repo, study)[0]
    return first.hexsha, {
        name: json.loads(blob.data_stream.read()) for name, blob in wanted.items()
    }


def parse_utc(value: Any, where: str) -> datetime:
    """An ISO 8601 timestamp with an explicit offset; naive times are refused, not guessed."""
    if not isinstance(value, str):
        raise PreregError(f"{where}: must be an ISO 8601 UTC timestamp string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise PreregError(
            f"{where}: '{value}' is not ISO 8601; write e.g. 2026-06-01T12:00:00+00:00"
        ) from None
    if parsed.tzinfo is None:
        raise PreregError(f"{where}: '{value}' has no UTC offset; append +00:00")
    return parsed


def starts_after(run_start: datetime, commit_time: datetime) -> bool:
    """True when a run started at or after a commit (the comparison every check uses).

    Git records commit time truncated to the second, so the commit really happened in
    ``[t, t+1)``. A run checks its commit before it starts, hence a start in the same
    second (``run_start >= t``) is accepted; a start strictly before ``t`` is not.
    """
    return run_start >= commit_time


def prereg_in_force(repo_dir: str | Path, study: str, at: datetime | str) -> PreregRecord | None:
    """The registration (with amendments) that applies to a run started at ``at``.

    Amendments apply only to runs after them (paper Section II-D: the amended tau rule
    "registered before re-measurement"), so this is the last registration commit whose
    time is not after the run's start; None when the study was not yet registered.
    """
    start = parse_utc(at, "at") if isinstance(at, str) else at
    repo = open_repo(repo_dir)
    before = [
        c
        for c in registrations(repo, study)
        if starts_after(start, datetime.fromtimestamp(c.committed_date, UTC))
    ]
    return record_at(repo, before[-1], study) if before else None


def read_prepared_files(sources: Iterable[str | Path]) -> dict[str, bytes]:
    """Files prepared by an earlier rule: each source is a file or a directory of files."""
    out: dict[str, bytes] = {}
    for source in map(Path, sources):
        if source.is_dir():
            paths = sorted(
                p for p in source.iterdir() if p.is_file() and not p.name.startswith(".")
            )
        elif source.is_file():
            paths = [source]
        else:
            raise PreregError(
                f"prepared file {source}: no such file or directory; pass the "
                "prepared prediction/criteria files or their directory"
            )
        for path in paths:
            if path.name in out:
                raise PreregError(
                    f"prepared file {path}: a second file named {path.name}; "
                    "prereg file names must be unique within a study"
                )
            out[path.name] = path.read_bytes()
    if not out:
        raise PreregError(
            "prepared files: none found; pass the prepared prediction/criteria "
            "files or a directory holding them"
        )
    return out
