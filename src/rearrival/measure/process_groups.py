"""The process groups a job owns, stopped when the job is told to stop (docs/DESIGN.md §15,
"Stopping a job").

Why: every server the project starts (vLLM's api_server and its EngineCore, vllm-rbln,
the emulate-server; later a vllm-router) runs in a session and process group of its own
(``start_new_session``), so a signal to the job's process never reaches it. Slurm's
scancel and time limits, ``timeout``, container stops and Snakemake send SIGTERM, a
terminal Ctrl-C (SIGINT) or a closed terminal (SIGHUP): without a handler the job dies at
once, its servers are re-parented to init and keep listening, and its staging folders
stay behind. Here one owner holds the groups; inside ``stopping_on_signals`` a stop
signal sends SIGTERM to every owned group and raises ``Interrupted`` in the main thread,
so every ``finally`` on the way out runs (the server's stop, the failed record, the
staging folder's removal), and on leaving, whatever still runs gets SIGTERM, then SIGKILL
after the grace period. A second signal while that clean-up runs SIGKILLs the groups
and does not interrupt the clean-up itself.

Use (a new kind of child, e.g. a router, needs only the two calls)::

    with stopping_on_signals():           # the verb's entry point (rearrival.cli.main)
        process = subprocess.Popen(argv, start_new_session=True)
        adopt(process.pid, "vllm-router")  # its pid is its process group's id
        ...
        release(process.pid)              # once it is stopped and reaped
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

# The signals that mean "stop this job": scancel/timeout/container stop, Ctrl-C, hang-up.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long a group gets after SIGTERM before SIGKILL (vLLM's api_server shuts its engine
# core down on SIGTERM within a few seconds on an idle machine).
GRACE_S = 15.0
_POLL_S = 0.05


class Interrupted(BaseException):
    """The job got a stop signal. A BaseException, as KeyboardInterrupt is, so no
    ``except Exception`` on the way out swallows it; its text is one line for the
    operator, ``exit_code`` the shell's convention (128 + the signal's number)."""

    def __init__(self, signum: int, text: str = "") -> None:
        self.signum = signum
        super().__init__(text or f"stopped by {signal.Signals(signum).name}")

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def naming(self, text: str) -> Interrupted:
        """The same interruption, its line saying more (the run, the kept record)."""
        return Interrupted(self.signum, text)


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` still exists (a zombie leader that is our
    own child is reaped first, so it does not count)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProcessGroups:
    """The process groups one job started and has not stopped yet, by group id."""

    def __init__(self) -> None:
        self._groups: dict[int, str] = {}
        self._lock = threading.Lock()

    def add(self, pgid: int, what: str) -> None:
        with self._lock:
            self._groups[pgid] = what

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.pop(pgid, None)

    def owned(self) -> dict[int, str]:
        with self._lock:
            return dict(self._groups)

    def signal_all(self, signum: int) -> None:
        for pgid in self.owned():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signum)

    def stop_all(self, grace_s: float = GRACE_S) -> None:
        """SIGTERM every owned group, SIGKILL what still runs after ``grace_s``; all are
        released."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(group_alive(pgid) for pgid in self.owned()) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        self.signal_all(signal.SIGKILL)
        for pgid in self.owned():
            while group_alive(pgid) and time.monotonic() < deadline + grace_s:
                time.sleep(_POLL_S)
            self.discard(pgid)


_active: list[ProcessGroups] = []


def adopt(pgid: int, what: str) -> None:
    """Put a just-started child's process group in the innermost owner's care (nothing
    outside ``stopping_on_signals``: the caller's own stop is then the only one)."""
    if _active:
        _active[-1].add(pgid, what)


def release(pgid: int) -> None:
    """The group was stopped by its own code: no longer the owner's to stop."""
    for owner in _active:
        owner.discard(pgid)


@contextmanager
def stopping_on_signals(grace_s: float = GRACE_S) -> Iterator[ProcessGroups]:
    """Own the process groups started inside; on SIGTERM, SIGINT or SIGHUP stop them and
    raise ``Interrupted``; on leaving, stop whatever is still owned. Outside the main
    thread (where Python delivers no signals) only the stop on leaving applies."""
    owner = ProcessGroups()
    interrupted: list[int] = []  # the signals received, in order
    closing: list[bool] = []  # non-empty once the stop on leaving has begun

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        interrupted.append(signum)
        if len(interrupted) > 1 or closing:  # already stopping: let the clean-up finish
            owner.signal_all(signal.SIGKILL)
            return
        owner.signal_all(signal.SIGTERM)
        raise Interrupted(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    _active.append(owner)
    try:
        yield owner
    finally:
        closing.append(True)
        try:
            owner.stop_all(grace_s)
        finally:
            _active.remove(owner)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
    if interrupted:  # a signal that came while the block was already leaving normally
        raise Interrupted(interrupted[0])
