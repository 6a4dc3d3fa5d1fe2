"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Every result in rearrival (plans, run records, tables) is written through here, so a
killed job leaves no partial output that a later stage could mistake for a result.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def umask_mode(base: int) -> int:
    """``base`` (0o666 for files, 0o777 for directories) less the process umask: the mode
    an ordinary ``open`` or ``mkdir`` would give. ``mkstemp`` and ``mkdtemp`` create 0600
    and 0700 so no one sees the temporary; what is renamed into place must not keep that,
    or other users cannot read the results."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same directory and rename, so readers never see half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, umask_mode(0o666))
        os.replace(tmp, path)
    except OSError as exc:  # a full disk's write names no file: name the one written
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def atomic_write_json(path: Path, data: Any) -> None:
    """Pretty, key-sorted JSON so the same data always gives the same bytes."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


STAGING_PREFIX, STAGING_SUFFIX = ".", ".tmp"


def is_staging(path: Path) -> bool:
    """Whether ``path`` lies in a staging folder (``.name.*.tmp``) of a job that never
    finished: a SIGKILL leaves one, no handler can remove it, and nothing in it is a
    result (the audit names and ignores it, docs/DESIGN.md §15 "Stopping a job")."""
    return any(
        part.startswith(STAGING_PREFIX) and part.endswith(STAGING_SUFFIX) for part in path.parts
    )


@contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """Build a directory under a temporary sibling name and rename it into place at the end.

    A job killed halfway leaves only a hidden ``.name.*.tmp`` sibling, never a directory a
    later stage could read as finished; an existing directory is replaced only on success.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(
        tempfile.mkdtemp(
            dir=path.parent, prefix=f"{STAGING_PREFIX}{path.name}.", suffix=STAGING_SUFFIX
        )
    )
    try:
        yield staging
        os.chmod(staging, umask_mode(0o777))
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
