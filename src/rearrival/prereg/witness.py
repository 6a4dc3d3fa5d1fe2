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

Only plain ``git push`` / ``git ls-remote`` are used, so any transport git speaks works,
with the user's own credentials; prompts are disabled so a failure is one line.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.prereg.ledger import LEDGER_ROOT, ledger_commits
from rearrival.prereg.registration import PREREG_ROOT, bad_revision_errors, registrations

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
class WitnessCheck:
    """What the audit found comparing the local history with the witness."""

    missing: tuple[Witnessed, ...]
    diverged: tuple[tuple[str, str], ...]  # (witness ref, the commit it holds)
    held: tuple[Witnessed, ...]


def _known(repo: Any, sha: str) -> Any | None:
    try:
        return repo.commit(sha)
    except bad_revision_errors():
        return None


def compare(repo: Any, remote: str) -> WitnessCheck:
    """Local registration and ledger commits the witness does not hold (missing), and
    commits the witness holds that HEAD's history does not contain (diverged)."""
    refs = held_refs(repo, remote)
    held_commits = set(refs.values())
    local = local_commits(repo)
    head = repo.head.commit.hexsha if repo.head.is_valid() else None
    missing, held = [], []
    for item in local:
        direct = refs.get(item.ref) == item.commit
        if direct or _reachable(repo, item.commit, held_commits):
            held.append(item)
        else:
            missing.append(item)
    diverged = [
        (ref, sha)
        for ref, sha in sorted(refs.items())
        if not _in_history(repo, head, sha) or getattr(parse_ref(ref), "commit", sha) != sha
    ]
    return WitnessCheck(tuple(missing), tuple(diverged), tuple(held))


def _in_history(repo: Any, head: str | None, sha: str) -> bool:
    return head is not None and _known(repo, sha) is not None and repo.is_ancestor(sha, head)


def _reachable(repo: Any, commit: str, held: set[str]) -> bool:
    """Whether ``commit`` is an ancestor of a commit the witness holds (only commits
    present locally can be asked; an absent one is not evidence either way)."""
    return any(_known(repo, sha) is not None and repo.is_ancestor(commit, sha) for sha in held)
