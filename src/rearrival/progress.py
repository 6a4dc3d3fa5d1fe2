"""Progress bars for steps that run longer than a few seconds (the search, advise).

Why: a fleet search is silent for tens of seconds otherwise, and a user cannot tell a
slow step from a hung one. On a terminal the bar goes to stderr, so stdout keeps only the
result; in logs (Snakemake jobs, pipes, CI) it prints nothing, so logs stay diffable.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import IO, TypeVar

T = TypeVar("T")


def progress(
    items: Iterable[T], total: int, what: str, unit: str, stream: IO[str] | None = None
) -> Iterator[T]:
    """``items`` with a bar ``what``, counting ``unit``s, on ``stream`` (stderr) when it
    is a terminal; the bar is removed when done, so the result line stands alone."""
    stream = stream if stream is not None else sys.stderr
    if not stream.isatty():  # no bar, and no tqdm import (0.1 s) for a job's log
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(
        items,
        total=total,
        desc=what,
        unit=unit,
        file=stream,
        leave=False,
    )
