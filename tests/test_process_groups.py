"""Stopping a job's servers on SIGTERM, SIGINT and SIGHUP (rearrival.measure.process_groups,
docs/DESIGN.md §15 "Stopping a job", issue 38): the owner stops every adopted process
group, the verb says so in one line and exits 128 + the signal, and an interrupted
replicate keeps its failed record and publishes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rearrival.measure.process_groups import (
    Interrupted,
    adopt,
    group_alive,
    release,
    stopping_on_signals,
)
from rearrival.model.plans.plan import Plan, PlanMeta, Session, write_plan
from rearrival.workflow.run import keeping_unfinished

CLI = str(Path(sys.executable).with_name("rearrival"))
# a leader that starts a child in its own group and ignores SIGTERM, as a server whose
# shutdown hangs would: only SIGKILL ends it
STUBBORN = (
    "import signal, subprocess, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "subprocess.Popen(['sleep', '300']); time.sleep(300)"
)
POLITE = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


def _group(code: str) -> subprocess.Popen[bytes]:
    """A leader and its child in a session of their own, as ServerProcess starts one."""
    process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    time.sleep(0.5)  # the child is started
    return process


def _gone(pgid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not group_alive(pgid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_stops_every_adopted_group_and_raises(signum: int) -> None:
    before = signal.getsignal(signum)
    process = _group(POLITE)
    with pytest.raises(Interrupted) as stopped, stopping_on_signals(grace_s=5):
        adopt(process.pid, "test server")
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler raises before this ends
    assert stopped.value.signum == signum and stopped.value.exit_code == 128 + signum
    assert _gone(process.pid)
    assert signal.getsignal(signum) == before  # the previous handler is back


def test_leaving_kills_a_group_that_ignores_sigterm_after_the_grace() -> None:
    process = _group(STUBBORN)
    with stopping_on_signals(grace_s=0.5):
        adopt(process.pid, "stubborn server")
    assert _gone(process.pid)


def test_a_released_group_is_not_the_owners_to_stop() -> None:
    process = _group(POLITE)
    try:
        with stopping_on_signals(grace_s=0.5):
            adopt(process.pid, "test server")
            release(process.pid)
        assert group_alive(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_second_signal_does_not_interrupt_the_clean_up() -> None:
    process = _group(POLITE)
    cleaned: list[bool] = []
    with pytest.raises(Interrupted), stopping_on_signals(grace_s=5):
        adopt(process.pid, "test server")
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # impatient operator
            time.sleep(0.2)
            cleaned.append(True)
    assert cleaned == [True] and _gone(process.pid)


def test_an_interrupted_replicate_keeps_its_failed_run_and_names_the_replicate(
    tmp_path: Path,
) -> None:
    staging, failed = tmp_path / ".n8_r1.x.tmp", tmp_path / "logs" / "n8_r1.failed"
    for label, status in (("done", "complete"), ("stopped", "failed")):
        (staging / label).mkdir(parents=True)
        (staging / label / "manifest.json").write_text(json.dumps({"status": status}))
    (staging / "never-written").mkdir()
    with (
        pytest.raises(Interrupted) as stopped,
        keeping_unfinished(staging, failed, tmp_path / "n8_r1"),
    ):
        raise Interrupted(signal.SIGTERM, "run x: interrupted by SIGTERM")
    line = str(stopped.value)
    assert "\n" not in line and f"replicate {tmp_path / 'n8_r1'} not published" in line
    assert str(failed / "stopped") in line and "reruns this replicate" in line
    assert sorted(p.name for p in failed.iterdir()) == ["stopped"]


def _server_children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (the servers the verb started)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_run_verb_stopped_by_a_signal_leaves_no_server(tmp_path: Path, signum: int) -> None:
    """`rearrival run --backend emulated-http` starts an emulate-server in its own
    session; a stop signal to the verb ends that server too, in one line naming the run."""
    plan = Plan((Session(0, 50, 2, 2, 4, 120.0, "Bash"),), PlanMeta(seed=4, n=1))
    plan_path = write_plan(plan, tmp_path / "plan.json")
    out = tmp_path / "run"
    argv = [CLI, "run", str(plan_path), "--backend", "emulated-http", "--time-scale", "1"]
    verb = subprocess.Popen(
        [*argv, "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "run.server.log"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and b"listening" not in (
        log.read_bytes() if log.is_file() else b""
    ):
        time.sleep(0.1)
    time.sleep(1.0)  # the replay has begun: the session waits 120 s for its tool
    servers = _server_children(verb.pid)
    assert servers, "the verb started no server"
    verb.send_signal(signum)
    _, err = verb.communicate(timeout=60)
    assert verb.returncode == 128 + signum
    line = err.strip()
    assert len(line.splitlines()) == 1, err
    assert line.startswith(f"rearrival: {signal.Signals(signum).name}: run ")
    assert all(_gone(pid) for pid in servers)
