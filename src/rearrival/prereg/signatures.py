"""Signed registration and ledger commits (``signing:`` in the config; git's SSH signing).

A witness proves a commit existed at publication; a signature says who made it. With
``signing:`` set the pipeline signs every registration and ledger commit
(:class:`rearrival.prereg.registration.Signing`); ``rearrival audit --allowed-signers
FILE`` verifies each of them against an allowed-signers file (``ssh-keygen``'s format:
``<principal> <key type> <key>`` per line, the principal being the committer e-mail) and
names every commit that is unsigned or signed by a key the file does not allow.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

from rearrival.errors import RearrivalError
from rearrival.prereg.witness import Witnessed, local_commits

# git's %G? codes: G good and allowed; everything else is a problem, named here.
_VERDICTS = {
    "N": "unsigned",
    "U": "signed by a key {file} does not allow ({key})",
    "B": "has a bad signature (altered after signing)",
    "E": "has a signature that cannot be checked ({key})",
    "X": "has an expired signature",
    "Y": "is signed by an expired key ({key})",
    "R": "is signed by a revoked key ({key})",
}


class SignatureError(RearrivalError):
    """The allowed-signers file cannot be used."""


@dataclass(frozen=True)
class SignatureCheck:
    """Each registration and ledger commit with what is wrong with its signature
    (None when it is signed by an allowed key)."""

    results: tuple[tuple[Witnessed, str | None], ...]

    @property
    def problems(self) -> tuple[tuple[Witnessed, str], ...]:
        return tuple((item, why) for item, why in self.results if why is not None)


def check_signatures(repo: Any, allowed_signers: Path) -> SignatureCheck:
    """Verify every registration and ledger commit on HEAD's history (check (k))."""
    if not allowed_signers.is_file():
        raise SignatureError(
            f"{allowed_signers}: no such allowed-signers file; write one line per signer "
            "('<email> <key type> <public key>', as in ssh-keygen -Y) and pass it again"
        )
    items = local_commits(repo)
    if not items:
        return SignatureCheck(())
    shas = sorted({item.commit for item in items})
    try:
        out = repo.git.execute(
            [
                "git",
                "-c",
                f"gpg.ssh.allowedSignersFile={allowed_signers.resolve()}",
                "log",
                "--no-walk=unsorted",
                "--format=%H %G? %GK",
                *shas,
            ]
        )
    except git.GitCommandError as exc:
        raise SignatureError(
            f"{allowed_signers}: git could not verify signatures "
            f"({' '.join(str(exc.stderr).split())}); check the file's format"
        ) from None
    verdicts = {}
    for line in out.splitlines():
        sha, code, *key = line.split(" ", 2)
        template = _VERDICTS.get(code)
        key_text = (key[0].strip() if key else "") or "no key"
        verdicts[sha] = (
            template.format(file=allowed_signers, key=key_text) if template is not None else None
        )
    return SignatureCheck(tuple((item, verdicts.get(item.commit, "unsigned")) for item in items))
