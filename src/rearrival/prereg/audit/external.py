"""Checks against evidence outside the local history: (j) the witness remote holds every
registration and ledger commit, (k) each of them is signed by an allowed key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rearrival.prereg.audit.history import Auditor
from rearrival.prereg.audit.report import OK, VIOLATION, AuditRow
from rearrival.prereg.signatures import check_signatures
from rearrival.prereg.witness import compare, parse_ref


def witness_rows(auditor: Auditor, remote: str) -> Iterator[AuditRow]:
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
