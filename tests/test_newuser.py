"""A new user's pass (issue 23): result modes, the small study, errors with a way forward."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rearrival.atomic import atomic_directory, atomic_write_bytes, atomic_write_json


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_atomic_writes_get_the_mode_the_umask_gives(tmp_path: Path, mask: int) -> None:
    """mkstemp makes 0600 and mkdtemp 0700; what is renamed into place must be readable
    as an ordinary write would be (reports/ was 0600 under umask 022)."""
    with umask(mask):
        atomic_write_bytes(tmp_path / "a.bin", b"x")
        atomic_write_json(tmp_path / "sub" / "b.json", {"k": 1})
        with atomic_directory(tmp_path / "dir") as staging:
            (staging / "c.txt").write_text("c")
    assert mode(tmp_path / "a.bin") == 0o666 & ~mask
    assert mode(tmp_path / "sub" / "b.json") == 0o666 & ~mask
    assert mode(tmp_path / "dir") == 0o777 & ~mask
    assert mode(tmp_path / "dir" / "c.txt") == 0o666 & ~mask
