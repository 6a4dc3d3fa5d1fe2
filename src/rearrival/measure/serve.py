"""Server lifecycle for the backends that replay through the HTTP client (docs/DESIGN.md §5):
a fresh server per run, started from an argument list, its output captured to a log file,
readiness by polling, and a stop that always happens.

Paper Section II-D: the server was restarted for every condition so that no cache state
carries over. Commands are argument lists, never shell strings, so no configuration value
is ever interpreted by a shell (docs/DESIGN.md §14). The server runs in its own process
group, so a stop reaches every process it started (vLLM's engine core and workers too),
and that group is adopted by the job's owner (rearrival.measure.process_groups), so a
SIGTERM, SIGINT or SIGHUP of the job stops it too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rearrival.errors import RearrivalError
from rearrival.measure.client import ClientRun, ReplayOptions, replay_sync
from rearrival.measure.client_records import RunOutcome, write_client_run
from rearrival.measure.process_groups import adopt, group_alive, release

if TYPE_CHECKING:
    from rearrival.model.plans.plan import Plan


class ServerError(RearrivalError):
    """A server that could not be started, never became ready, or died; names the log."""


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS considers free right now (the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    """One server process: started from an argument list, log captured to a file.

    Used as a context manager: the server is always stopped, SIGTERM first and SIGKILL
    after ``grace_s``, even when the run inside fails.
    """

    argv: Sequence[str]
    url: str
    log_path: Path
    env: Mapping[str, str] | None = None
    ready_paths: tuple[str, ...] = ("/health", "/v1/models")
    ready_timeout_s: float = 900.0
    grace_s: float = 15.0
    install_hint: str = "check that the server's program is installed"
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    returncode: int | None = field(default=None, init=False)
    _log: IO[bytes] | None = field(default=None, init=False)

    def start(self) -> None:
        if not self.argv:
            raise ServerError("server command is empty; pass the command to run")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(  # an argument list: nothing passes through a shell
                list(self.argv),
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(self.env) if self.env else None,
                start_new_session=True,
            )
            adopt(self.process.pid, f"server {self.argv[0]} (log {self.log_path})")
        except OSError as exc:
            self._log.close()
            raise ServerError(
                f"cannot start server command '{self.argv[0]}' ({exc.strerror}); "
                f"{self.install_hint}"
            ) from None

    def _ready_once(self) -> bool:
        for path in self.ready_paths:
            try:
                with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as resp:
                    if resp.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                continue
        return False

    def wait_ready(self) -> None:
        """Poll the readiness endpoints until one answers 200, the process dies, or timeout."""
        assert self.process is not None, "start() first"
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(
                    f"server exited with code {self.process.returncode} before it "
                    f"was ready; read {self.log_path} for the cause"
                )
            if self._ready_once():
                return
            time.sleep(0.1)
        raise ServerError(
            f"server at {self.url} not ready after {self.ready_timeout_s:.0f} s; "
            f"read {self.log_path}, or raise the readiness timeout"
        )

    def wait_exit(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the server to end by itself; its exit code, or
        None while it still runs (``stop`` ends it either way)."""
        assert self.process is not None, "start() first"
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int | None:
        """SIGTERM the server's process group, SIGKILL after the grace period."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if group_alive(self.process.pid):  # the leader is gone, a child of it is not
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        release(self.process.pid)
        self.returncode = self.process.returncode
        if self._log is not None:
            self._log.close()
        return self.returncode


@contextlib.contextmanager
def running_server(
    argv: Sequence[str],
    url: str,
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout_s: float = 900.0,
    grace_s: float = 15.0,
    install_hint: str = ServerProcess.install_hint,
) -> Iterator[ServerProcess]:
    """Start, wait for readiness, yield, and always stop: a fresh server per run."""
    server = ServerProcess(
        argv,
        url.rstrip("/"),
        log_path,
        env=env,
        ready_timeout_s=ready_timeout_s,
        grace_s=grace_s,
        install_hint=install_hint,
    )
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


# --- one measured run ----------------------------------------------------------------------


def run_with_server(
    plan: Plan,
    out: Path,
    *,
    argv: Sequence[str],
    url: str,
    variant: str,
    options: ReplayOptions,
    manifest: dict[str, Any],
    log_path: Path,
    env: Mapping[str, str] | None = None,
    ready_timeout_s: float = 900.0,
    grace_s: float = 15.0,
    install_hint: str = ServerProcess.install_hint,
) -> RunOutcome:
    """Start a fresh server, replay the plan through the client, stop it, write the run.

    The run's step log is the part of the server log written after readiness, so
    warm-up steps are never priced. The whole log (start-up included) stays at
    ``log_path`` for diagnosis.
    """
    with running_server(
        argv,
        url,
        log_path,
        env=env,
        ready_timeout_s=ready_timeout_s,
        grace_s=grace_s,
        install_hint=install_hint,
    ) as server:
        offset = log_path.stat().st_size
        run = replay_sync(plan, url, variant=variant, options=options)
        alive = server.alive()
    if run.status == "complete" and not alive:
        run = ClientRun(
            run.requests,
            run.metrics_before,
            run.metrics_after,
            "partial",
            f"server exited during the run; read {log_path}",
            run.model,
            run.expected_requests,
        )
    log = log_path.read_bytes()[offset:].decode(errors="replace")
    return write_client_run(out, run, manifest=manifest, server_log=log)
