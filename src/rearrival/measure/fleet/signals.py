"""A signal to the job stops the fleet (README "A study on a real fleet").

Snakemake, Slurm and a user's Ctrl-C end a job with SIGTERM, SIGINT or SIGHUP. Python's
default for SIGTERM and SIGHUP kills the interpreter at once, so no ``finally`` would stop
the servers and the router, which run in process groups of their own and would outlive
the job. Inside ``stopping_on_signals`` those signals raise ``Stopped`` instead, the
fleet's ``finally`` stops every process it started, and the exception ends the job with
the signal's conventional exit status (128 + signal).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(SystemExit):
    """The job got ``signum``; raised in the main thread so cleanup runs, and, uncaught,
    ends the interpreter quietly with exit status 128 + ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


def _raise(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stopping_on_signals() -> Iterator[None]:
    """SIGTERM/SIGINT/SIGHUP raise ``Stopped`` while inside; the old handlers after.
    Outside the main thread (where Python cannot install handlers) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
