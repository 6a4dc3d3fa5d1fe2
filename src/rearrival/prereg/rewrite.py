"""What a rewritten history changed, measured against the witness (docs/DESIGN.md §8).

A witness (:mod:`rearrival.prereg.witness`) proves that a registration existed, byte
for byte, when it was published. When the local history no longer contains a witnessed
commit, two very different things may have happened: the commits were replayed (a
rebase, a reworded or re-dated commit below them) with every registered byte unchanged,
or a registered file was edited and the later commits replayed on top. Both change every
later hash, so comparing hashes alone flags every later commit of every study alike.

This module tells them apart. It pairs each witnessed commit the history lacks with the
local commit that now stands in its place (the k-th registration or ledger commit of the
same study, oldest first), compares what that commit registers (the study's
``preregistration/<study>/`` files, or its ``ledger/<study>.json``) value by value, and
finds the first commit where the two histories part.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from rearrival.prereg.ledger import ledger_path
from rearrival.prereg.registration import PREREG_ROOT

# How much of one difference a single audit line shows.
_SHOWN_VALUES = 3
_SHOWN_FILES = 3
_VALUE_CHARS = 40


@dataclass(frozen=True)
class FileChange:
    """One file that differs between a witnessed commit and the local one (None: absent)."""

    path: str
    witnessed: bytes | None
    local: bytes | None

    def describe(self) -> str:
        """``path: key: witnessed V, here W`` for structured files, else the sha256s."""
        if self.witnessed is None:
            return f"{self.path}: absent on the witness, added here"
        if self.local is None:
            return f"{self.path}: removed here"
        changed = value_changes(self.path, self.witnessed, self.local)
        if changed is None:
            return (
                f"{self.path}: bytes differ (sha256 {_sha(self.witnessed)} witnessed, "
                f"{_sha(self.local)} here)"
            )
        shown = "; ".join(changed[:_SHOWN_VALUES])
        more = len(changed) - _SHOWN_VALUES
        return f"{self.path}: {shown}" + (f" and {more} more value(s)" if more > 0 else "")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _parsed(path: str, data: bytes) -> Any:
    suffix = PurePosixPath(path).suffix
    if suffix == ".json":
        return json.loads(data)
    if suffix in (".yaml", ".yml"):
        return yaml.safe_load(data)
    raise ValueError(path)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys, so a change is named down to its leaf."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out |= _flat(inner, f"{prefix}.{key}" if prefix else str(key))
        return out
    return {prefix or "(document)": value}


_ABSENT = object()


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if value is not _ABSENT else "(absent)"
    return text if len(text) <= _VALUE_CHARS else text[: _VALUE_CHARS - 3] + "..."


def value_changes(path: str, witnessed: bytes, local: bytes) -> list[str] | None:
    """``key: witnessed V, here W`` for every leaf that differs between two JSON or YAML
    documents; None when either cannot be read as one."""
    try:
        old, new = _flat(_parsed(path, witnessed)), _flat(_parsed(path, local))
    except (ValueError, yaml.YAMLError):
        return None
    return [
        f"{key}: witnessed {_short(old.get(key, _ABSENT))}, here {_short(new.get(key, _ABSENT))}"
        for key in sorted(set(old) | set(new), key=str)
        if old.get(key, _ABSENT) != new.get(key, _ABSENT)
    ]


def describe_changes(changes: tuple[FileChange, ...]) -> str:
    """The first few changed files and their values, on one line."""
    shown = " | ".join(c.describe() for c in changes[:_SHOWN_FILES])
    more = len(changes) - _SHOWN_FILES
    return shown + (f" | and {more} more file(s)" if more > 0 else "")


def _blobs(commit: Any, root: str) -> dict[str, bytes]:
    """Every file under ``root`` (a directory or one file) at ``commit``."""
    try:
        entry = commit.tree / root
    except KeyError:
        return {}
    if entry.type == "blob":
        return {entry.path: entry.data_stream.read()}
    return {b.path: b.data_stream.read() for b in entry.traverse() if b.type == "blob"}


def registered_root(kind: str, study: str) -> str:
    """What a registration (``prereg``) or ledger commit of ``study`` registers."""
    return f"{PREREG_ROOT}/{study}" if kind == "prereg" else ledger_path(study)


def changed_files(witnessed: Any, local: Any, root: str) -> tuple[FileChange, ...]:
    """The files under ``root`` whose bytes differ between the two commits."""
    old, new = _blobs(witnessed, root), _blobs(local, root)
    return tuple(
        FileChange(path, old.get(path), new.get(path))
        for path in sorted(set(old) | set(new))
        if old.get(path) != new.get(path)
    )


def tree_changes(witnessed: Any, local: Any) -> tuple[FileChange, ...]:
    """Every file that differs between two commits' whole trees."""
    paths = sorted({d.a_path or d.b_path for d in witnessed.diff(local)})
    return tuple(
        FileChange(path, _blob_or_none(witnessed, path), _blob_or_none(local, path))
        for path in paths
    )


def _blob_or_none(commit: Any, path: str) -> bytes | None:
    try:
        return (commit.tree / path).data_stream.read()
    except KeyError:
        return None


@dataclass(frozen=True)
class Divergence:
    """Where the local history leaves the witnessed one: the last commit both share
    (None: no common history), the first witnessed commit after it and the local commit
    in its place (None: the local history ends there), and the files they differ in."""

    base: str | None
    witnessed: Any
    local: Any | None
    changes: tuple[FileChange, ...]


def _commits_after(repo: Any, base: str | None, tip: str) -> list[str]:
    """The commits from ``base`` (exclusive; None: from the root) to ``tip``, oldest first."""
    span = ["--ancestry-path", f"{base}..{tip}"] if base else [tip]
    return repo.git.rev_list("--reverse", "--topo-order", *span).split()


def divergence(repo: Any, head: str, gone: list[str]) -> Divergence | None:
    """The earliest point where the history of a witnessed commit in ``gone`` (each
    present in the local object store) leaves HEAD's history."""
    points = []
    for sha in gone:
        bases = repo.merge_base(head, sha)
        base = bases[0].hexsha if bases else None
        first = _commits_after(repo, base, sha)[0]
        points.append((int(repo.git.rev_list("--count", first)), base, first))
    if not points:
        return None
    _, base, first = min(points)
    witnessed = repo.commit(first)
    after = _commits_after(repo, base, head)
    local = repo.commit(after[0]) if after else None
    changes = tree_changes(witnessed, local) if local is not None else ()
    return Divergence(base, witnessed, local, changes)
