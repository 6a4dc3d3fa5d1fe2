"""A witness for registrations and ledgers (paper Section II-D; ``docs/DESIGN.md``).

Git commit times are written by the committer, so "registered before the run" holds
only as far as the local history is trusted. A preregistration means something because
a third party holds a copy the researcher cannot rewrite: any git remote (a hosting
service, a registry, a shared bare repository) can be that witness.

``rearrival publish`` pushes every registration and ledger commit to the witness under a
dedicated ref namespace, one ref per commit (``refs/rearrival/<kind>/<study>/<sha>``), so
no branch of the witness is touched and a ref's name says which commit it must hold.
``rearrival audit --witness`` then checks both directions: every local registration and
ledger commit is reachable from the witness with the same hash, and every commit the
witness holds is in the local history (a rewritten registration that was already
published shows up as the witness's commit missing locally, even when the rewritten
local history is consistent in itself).

Only plain ``git push`` / ``git ls-remote`` / ``git fetch`` are used, so any transport git
speaks works, with the user's own credentials; prompts are disabled so a failure is one
line. When the local history lacks a witnessed commit, the audit fetches its objects (no
ref is written) and says what replaced it (:mod:`rearrival.prereg.rewrite`).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.prereg.ledger import LEDGER_ROOT, ledger_commits
from rearrival.prereg.registration import PREREG_ROOT, bad_revision_errors, registrations
from rearrival.prereg.rewrite import (
    Divergence,
    FileChange,
    changed_files,
    divergence,
    registered_root,
)

NAMESPACE = "refs/rearrival"
PREREG_KIND, LEDGER_KIND = "prereg", "ledger"
_TIMEOUT_S = 120


class WitnessError(RearrivalError):
    """The witness cannot be reached, refused a push, or does not hold a commit."""


@dataclass(frozen=True)
class Witnessed:
    """A registration or ledger commit and the witness ref that holds it."""

    kind: str
    study: str
    commit: str

    @property
    def ref(self) -> str:
        return witness_ref(self.kind, self.study, self.commit)

    @property
    def what(self) -> str:
        return "registration" if self.kind == PREREG_KIND else "ledger"


def witness_ref(kind: str, study: str, commit: str) -> str:
    return f"{NAMESPACE}/{kind}/{study}/{commit}"


def parse_ref(ref: str) -> Witnessed | None:
    """The commit a witness ref names, or None for a ref outside the namespace's form."""
    parts = ref.removeprefix(f"{NAMESPACE}/").split("/")
    if not ref.startswith(f"{NAMESPACE}/") or len(parts) != 3:
        return None
    if parts[0] not in (PREREG_KIND, LEDGER_KIND):
        return None
    return Witnessed(parts[0], parts[1], parts[2])


def _head_dirs(repo: Any, root: str) -> list[Any]:
    if not repo.head.is_valid():
        return []
    try:
        return list((repo.head.commit.tree / root).traverse(depth=1))
    except KeyError:
        return []


def local_commits(repo: Any) -> list[Witnessed]:
    """Every registration and ledger commit of every study on HEAD's history."""
    studies = {t.name for t in _head_dirs(repo, PREREG_ROOT) if t.type == "tree"}
    ledgers = {
        b.name.removesuffix(".json") for b in _head_dirs(repo, LEDGER_ROOT) if b.type == "blob"
    }
    found = [
        Witnessed(PREREG_KIND, study, c.hexsha)
        for study in sorted(studies)
        for c in registrations(repo, study)
    ]
    found += [
        Witnessed(LEDGER_KIND, study, c.hexsha)
        for study in sorted(ledgers)
        for c in ledger_commits(repo, study)
    ]
    return found


def _git(repo: Any, args: list[str], remote: str, doing: str) -> subprocess.CompletedProcess:
    """Run a git command against the witness; an unreachable witness is one line."""
    env = os.environ | {"GIT_TERMINAL_PROMPT": "0", "GIT_SSH_COMMAND": "ssh -o BatchMode=yes"}
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=repo.working_tree_dir,
            env=env,
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise WitnessError(
            f"witness {remote}: no answer within {_TIMEOUT_S} s while {doing}; check the "
            "address and that the witness is serving"
        ) from None
    if done.returncode != 0 and not done.stdout.strip():
        raise WitnessError(
            f"witness {remote}: unreachable while {doing} ({_first_error(done.stderr)}); "
            "check the address (a remote name or URL) and that the witness is serving"
        )
    return done


def _first_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    fatal = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (fatal or lines or ["no message"])[0]


def held_refs(repo: Any, remote: str) -> dict[str, str]:
    """The witness's refs under the namespace, ref -> commit sha (``git ls-remote``)."""
    done = _git(repo, ["ls-remote", remote, f"{NAMESPACE}/*"], remote, "listing its refs")
    if done.returncode != 0:
        raise WitnessError(
            f"witness {remote}: listing its refs failed ({_first_error(done.stderr)})"
        )
    refs = {}
    for line in done.stdout.splitlines():
        sha, _, ref = line.partition("\t")
        if ref:
            refs[ref.strip()] = sha.strip()
    return refs


def publish(repo: Any, remote: str, study: str | None = None) -> list[Witnessed]:
    """Push every registration and ledger commit (of ``study`` only, when given) to the
    witness, one ref each under ``refs/rearrival/``; refs already there are left alone.
    A refused ref is a WitnessError naming it and the witness's reason."""
    wanted = [c for c in local_commits(repo) if study is None or c.study == study]
    if not wanted:
        raise WitnessError(
            f"{repo.working_tree_dir}: no registration or ledger commit"
            f"{' of study ' + study if study else ''} to publish; run the prereg stage first"
        )
    refspecs = [f"{c.commit}:{c.ref}" for c in wanted]
    done = _git(repo, ["push", "--porcelain", remote, *refspecs], remote, "pushing")
    refused = [line.split("\t") for line in done.stdout.splitlines() if line.startswith("!")]
    if refused or done.returncode != 0:
        ref, reason = (
            (refused[0][1].split(":", 1)[-1], refused[0][2].strip())
            if refused and len(refused[0]) > 2
            else (refspecs[0].split(":", 1)[1], _first_error(done.stderr))
        )
        raise WitnessError(
            f"witness {remote} refused the push of {ref} ({reason}); nothing is witnessed "
            "until it accepts: allow pushes to refs/rearrival/* on the witness, or publish "
            "to another one with --remote"
        )
    return wanted


def require_witnessed(repo: Any, remote: str, study: str, commit: str) -> str:
    """Refuse a run until the witness holds its registration commit; returns the ref."""
    ref = witness_ref(PREREG_KIND, study, commit)
    if held_refs(repo, remote).get(ref) != commit:
        raise WitnessError(
            f"run of study {study} refused: witness {remote} does not hold registration "
            f"commit {commit[:12]} ({ref}); publish it first (`rearrival publish --remote "
            f"{remote}`) or re-run the prereg stage"
        )
    return ref


@dataclass(frozen=True)
class Rewrite:
    """A witnessed commit HEAD's history lacks, the local commit in its place (the k-th
    commit of the same kind and study; None: dropped) and what it registers differently
    (empty: a content-identical replay)."""

    witnessed: Witnessed
    local: Witnessed | None
    changes: tuple[FileChange, ...]

    @property
    def replayed(self) -> bool:
        return self.local is not None and not self.changes


@dataclass(frozen=True)
class WitnessCheck:
    """What the audit found comparing the local history with the witness."""

    missing: tuple[Witnessed, ...]  # local commits the witness does not hold
    rewrites: tuple[Rewrite, ...]  # witnessed commits HEAD's history lacks
    diverged: tuple[tuple[str, str], ...]  # other witness refs HEAD's history lacks
    held: tuple[Witnessed, ...]
    divergence: Divergence | None  # where the local history leaves the witnessed one


def _known(repo: Any, sha: str) -> Any | None:
    try:
        return repo.commit(sha)
    except bad_revision_errors():
        return None


def compare(repo: Any, remote: str) -> WitnessCheck:
    """Local registration and ledger commits the witness does not hold (missing), and
    commits the witness holds that HEAD's history does not contain: each paired with the
    local commit that replaced it and compared with it (rewrites), or, for a ref that
    names another commit than it holds, listed as is (diverged)."""
    refs = held_refs(repo, remote)
    held_commits = set(refs.values())
    head = repo.head.commit.hexsha if repo.head.is_valid() else None
    missing, held = [], []
    for item in local_commits(repo):
        direct = refs.get(item.ref) == item.commit
        if direct or _reachable(repo, item.commit, held_commits):
            held.append(item)
        else:
            missing.append(item)
    gone, diverged = [], []
    for ref, sha in sorted(refs.items()):
        named = parse_ref(ref)
        if named is not None and named.commit == sha:
            if not _in_history(repo, head, sha):
                gone.append(named)
        elif named is not None or not _in_history(repo, head, sha):
            diverged.append((ref, sha))
    _fetch_absent(repo, remote, [w for w in gone if _known(repo, w.commit) is None])
    rewrites, missing = _pair(repo, gone, missing)
    point = divergence(repo, head, [w.commit for w in gone]) if head and gone else None
    return WitnessCheck(tuple(missing), tuple(rewrites), tuple(diverged), tuple(held), point)


def _fetch_absent(repo: Any, remote: str, absent: list[Witnessed]) -> None:
    """Bring witnessed commits the local object store lacks (a clone of a rewritten
    history) into it, objects only: no local ref or FETCH_HEAD is written."""
    if not absent:
        return
    refs = [w.ref for w in absent]
    done = _git(
        repo, ["fetch", "--no-tags", "--no-write-fetch-head", remote, *refs], remote, "fetching"
    )
    if done.returncode != 0:
        raise WitnessError(
            f"witness {remote}: fetching {len(refs)} witnessed commit(s) the local history "
            f"lacks failed ({_first_error(done.stderr)}); check the witness and re-run"
        )


def _pair(
    repo: Any, gone: list[Witnessed], missing: list[Witnessed]
) -> tuple[list[Rewrite], list[Witnessed]]:
    """Pair the k-th witnessed commit HEAD lacks with the k-th local commit the witness
    lacks, per kind and study, oldest first; the local commits left over stay missing."""
    rewrites, left = [], []
    for key in sorted({(w.kind, w.study) for w in (*gone, *missing)}):
        theirs = sorted(
            (w for w in gone if (w.kind, w.study) == key),
            key=lambda w: (repo.commit(w.commit).committed_date, w.commit),
        )
        ours = [m for m in missing if (m.kind, m.study) == key]
        for index, witnessed in enumerate(theirs):
            local = ours[index] if index < len(ours) else None
            changes = (
                changed_files(
                    repo.commit(witnessed.commit),
                    repo.commit(local.commit),
                    registered_root(*key),
                )
                if local is not None
                else ()
            )
            rewrites.append(Rewrite(witnessed, local, changes))
        left.extend(ours[len(theirs) :])
    return rewrites, left


def _in_history(repo: Any, head: str | None, sha: str) -> bool:
    return head is not None and _known(repo, sha) is not None and repo.is_ancestor(sha, head)


def _reachable(repo: Any, commit: str, held: set[str]) -> bool:
    """Whether ``commit`` is an ancestor of a commit the witness holds (only commits
    present locally can be asked; an absent one is not evidence either way)."""
    return any(_known(repo, sha) is not None and repo.is_ancestor(commit, sha) for sha in held)
