"""Checks against evidence outside the local history: (j) the witness remote holds every
registration and ledger commit, (k) each of them is signed by an allowed key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rearrival.prereg.audit.history import Auditor
from rearrival.prereg.audit.report import OK, VIOLATION, AuditRow
from rearrival.prereg.rewrite import Divergence, describe_changes
from rearrival.prereg.signatures import check_signatures
from rearrival.prereg.witness import Rewrite, compare, parse_ref


def witness_rows(auditor: Auditor, remote: str) -> Iterator[AuditRow]:
    """Check (j): the witness holds every registration and ledger commit, and the local
    history holds every commit the witness does. A witnessed commit the history lacks is
    named with the local commit in its place and what that registers differently: one
    row per edited commit, one per study for commits replayed with identical content,
    and the first commit where the two histories part."""
    check = compare(auditor.repo, remote)
    first = check.divergence
    folded = first is not None and any(
        r.witnessed.commit == first.witnessed.hexsha for r in check.rewrites
    )
    if first is not None and not folded:
        yield _divergence_row(first, check.rewrites, remote)
    for rewrite in check.rewrites:
        if not rewrite.replayed:
            yield _edit_row(rewrite, remote, first if folded else None)
    for study in sorted({r.witnessed.study for r in check.rewrites if r.replayed}):
        yield _replay_row(study, [r for r in check.rewrites if r.replayed], remote, first)
    for item in check.missing:
        yield AuditRow(
            item.study,
            f"(witness) {item.what} {item.commit[:12]}",
            item.commit if item.what == "registration" else None,
            None,
            None,
            VIOLATION,
            f"{item.what} commit {item.commit[:12]} is not held by witness {remote} "
            f"({item.ref}): publish it (`rearrival publish`)",
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
            f"{sha[:12]}), which HEAD's history does not contain",
        )
    flagged = {r.witnessed.study for r in check.rewrites} | {m.study for m in check.missing}
    for study in sorted({item.study for item in check.held} - flagged):
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


def _subject(commit: Any) -> str:
    return f"{commit.hexsha[:12]} '{commit.summary}'"


def _restore(remote: str) -> str:
    return (
        f"restore the witnessed history (`git fetch {remote} 'refs/rearrival/*:refs/rearrival/*'`"
        ", then reset to the last witnessed commit)"
    )


def _parting(first: Divergence, remote: str) -> str:
    """Where the local history leaves the witness's, as one clause."""
    after = f"after common commit {first.base[:12]}" if first.base else "with no common commit"
    if first.local is None:
        return (
            f"local history diverges from witness {remote} {after}: the first diverging "
            f"commit {_subject(first.witnessed)} and those after it are not here (HEAD is "
            "behind the witness)"
        )
    differs = (
        f"it differs in {describe_changes(first.changes)}"
        if first.changes
        else "same tree (only message, author or dates changed)"
    )
    return (
        f"local history diverges from witness {remote} {after}: the first diverging commit "
        f"{_subject(first.witnessed)} is replaced here by {_subject(first.local)}; {differs}"
    )


def _divergence_row(first: Divergence, rewrites: tuple[Rewrite, ...], remote: str) -> AuditRow:
    study = rewrites[0].witnessed.study if rewrites else "?"
    edited = sum(not r.replayed for r in rewrites)
    return AuditRow(
        study,
        f"(witness) rewritten at {first.witnessed.hexsha[:12]}",
        None,
        None,
        None,
        VIOLATION,
        f"{_parting(first, remote)}; of the {len(rewrites)} witnessed registration and "
        f"ledger commit(s) after it, {edited} register changed files and "
        f"{len(rewrites) - edited} are byte-identical; {_restore(remote)}",
    )


def _edit_row(rewrite: Rewrite, remote: str, first: Divergence | None) -> AuditRow:
    """An edited (or dropped) witnessed commit; ``first`` when it is also the first
    commit where the histories part."""
    w, local = rewrite.witnessed, rewrite.local
    if local is None:
        what = "has no counterpart here: it was dropped"
    else:
        what = (
            f"was edited: local {local.commit[:12]} in its place registers "
            f"{describe_changes(rewrite.changes)}"
        )
    where = ""
    if first is not None:
        base = f"common commit {first.base[:12]}" if first.base else "no common commit"
        where = (
            f"; it is the first diverging commit (after {base}), the later commits were "
            "replayed onto the edit"
        )
    return AuditRow(
        w.study,
        f"(witness) {'edited' if local else 'dropped'} {w.what} {w.commit[:12]}",
        local.commit if local is not None and w.what == "registration" else None,
        None,
        None,
        VIOLATION,
        f"local history diverges from witness {remote}: {w.what} {w.commit[:12]} it holds "
        f"({w.ref}) {what}{where}; {_restore(remote)}, or register the change as an amendment or "
        "a new study",
    )


def _replay_row(
    study: str, replayed: list[Rewrite], remote: str, first: Divergence | None
) -> AuditRow:
    mine = [r for r in replayed if r.witnessed.study == study]
    pairs = ", ".join(
        f"{r.witnessed.what} {r.witnessed.commit[:12]} -> {r.local.commit[:12]}"
        for r in mine
        if r.local is not None
    )
    since = f" (history rewritten at {first.witnessed.hexsha[:12]})" if first else ""
    return AuditRow(
        study,
        f"(witness) replayed {len(mine)}",
        None,
        None,
        None,
        VIOLATION,
        f"{len(mine)} commit(s) held by witness {remote} replayed here with identical "
        f"content{since}: {pairs}; no registered byte changed, but runs and the witness "
        f"name the witnessed hashes: {_restore(remote)}",
    )


def signature_rows(auditor: Auditor, allowed_signers: Path) -> Iterator[AuditRow]:
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
