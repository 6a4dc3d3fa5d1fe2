"""A fleet run on real vLLM servers behind the real vllm-router (README "A study on a real
fleet"): every request names its replica, its cached tokens (summing to that server's own
counter) and its first-token time; and the faults: a port in use, a router that never
becomes ready, a replica killed mid-run, a signal to the job. Each fault is one line naming
the run, the process and the reason, the run written as failed, and no process left.

Without the vLLM environment or the router the module skips, except under CI (CI=true).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fleet_records import check_fleet_run, fleet_ports, listening
from vllm_env import BLOCK, IN_CI, manifest, require_vllm

from rearrival.judge.fleet_agreement import compare_fleet_run
from rearrival.measure.fleet import backend as fleet_backend
from rearrival.measure.fleet.backend import FleetSettings, run_fleet
from rearrival.measure.records import manifest_template, read_run
from rearrival.measure.serve import free_port
from rearrival.measure.vllm.backend import VllmSettings
from rearrival.measure.vllm.server import engine_core_pids
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import load_vllm_profile
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round
from rearrival.router_env import BUILD_HINT, ENV_ROUTER, router_executable
from rearrival.vocabulary import VLLM

pytestmark = pytest.mark.timeout(900)
SERVE = VllmSettings(max_model_len=2048, grace_s=5)
PROFILE = Path(__file__).parents[1] / "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
CONFIGURATION = VllmConfiguration(
    (), 4, num_blocks=128, block_size=BLOCK, max_num_batched_tokens=2048, name="baseline"
)


@pytest.fixture(scope="module")
def fleet_ready() -> Path:
    require_vllm()
    router = router_executable()
    if not router.is_file():
        message = f"no vllm-router at {router}: {BUILD_HINT}"
        if IN_CI:
            pytest.fail(f"CI must run the fleet tests: {message}")
        pytest.skip(message)
    return router


def open_plan() -> Plan:
    """Four staggered sessions of two or three rounds with short tool gaps."""
    sessions = (
        MultiRoundSession(0, (Round(300, 8, 0.3), Round(40, 6, 0.2), Round(20, 4)), start_s=0.0),
        MultiRoundSession(1, (Round(200, 6, 0.2), Round(50, 5)), start_s=0.4),
        MultiRoundSession(2, (Round(250, 7, 0.1), Round(30, 6, 0.3), Round(25, 3)), start_s=0.9),
        MultiRoundSession(3, (Round(150, 5, 0.2), Round(60, 4)), start_s=1.5),
    )
    return Plan(sessions, PlanMeta(seed=21, n=len(sessions)))


def _manifest(label: str) -> dict:
    return manifest_template(
        study="fleet",
        backend=VLLM,
        configuration=CONFIGURATION,
        variant="wait",
        condition=label,
        replicate=0,
        n=4,
        plan_path=f"{label}.json",
        plan_sha256=open_plan().sha256(),
        plan_seed=21,
        run_seed=5,
        condition_order=[label],
    )


def _run(out: Path, settings: FleetSettings, plan: Plan | None = None):
    return run_fleet(
        plan or open_plan(),
        out,
        configuration=CONFIGURATION,
        settings=settings,
        variant="wait",
        seed=5,
        manifest=_manifest(out.name),
        plan_source=f"{out.name}.json",
    )


def _failed_reason(out: Path) -> str:
    record = manifest(out)
    assert record["status"] in ("failed", "partial")
    with pytest.raises(ValueError, match="cannot be used"):
        read_run(out)
    reason = record["reason"]
    assert reason.startswith(f"run {record['run_id']}: ") and "\n" not in reason
    return reason


# Slow tier: `make all-fleet` runs this path end to end in .ci/run (four fresh fleets,
# round_robin and consistent_hash), and tests/test_fleet_study_records.py checks each of
# its runs with the same check_fleet_run; this one-fleet version stays for `-m slow`.
@pytest.mark.slow
def test_fleet_run_names_replica_cached_tokens_and_first_token_of_every_request(
    fleet_ready: Path, tmp_path: Path
) -> None:
    out = tmp_path / "hash"
    outcome = _run(out, FleetSettings(policy="consistent_hash", vllm=SERVE))
    assert outcome.status == "complete", outcome.reason
    run = check_fleet_run(out, "consistent_hash")
    requests = run.requests
    assert len(requests) == open_plan().requests
    # a re-arrival on its session's replica finds at least its earlier full blocks
    later = requests[requests["turn"] > 0]
    assert (later["cached_tokens"] >= BLOCK).all()
    # the fleet predictor on the observed arrivals and placement: 128 blocks hold every
    # session, so no pool evicts and every request's cached tokens must agree exactly
    agreement = compare_fleet_run(run, open_plan(), load_vllm_profile(PROFILE), "plan")
    summary = agreement.summary()
    assert summary["predictor_errors"] == [] and summary["timing_dependent"] == 0
    assert summary["agreeing"] == summary["requests"] == len(requests)
    assert [r.replica for r in agreement.requests] == list(requests["replica"])
    assert all(r.ttft_s_predicted > 0 and r.ttft_s_observed > 0 for r in agreement.requests)


def test_port_in_use_is_one_line_and_nothing_starts(fleet_ready: Path, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = tmp_path / "busy"
        _run(out, FleetSettings(vllm=SERVE, router_port=port))
    reason = _failed_reason(out)
    assert f"port http://127.0.0.1:{port} for the router is already in use" in reason
    assert (out / "server-0.log").read_text() == ""  # no server was started


def _fake_router(tmp_path: Path) -> Path:
    """A 'router' that never answers: it prints one line and sleeps."""
    fake = tmp_path / "bin" / "vllm-router"
    fake.parent.mkdir()
    fake.write_text(
        f"#!{sys.executable}\nimport time\nprint('starting', flush=True)\ntime.sleep(600)\n"
    )
    fake.chmod(0o755)
    return fake


def test_router_that_never_becomes_ready_is_a_failed_run(
    fleet_ready: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_ROUTER, str(_fake_router(tmp_path)))
    monkeypatch.setattr(fleet_backend, "router_version", lambda router: "fake")
    out = tmp_path / "deaf"
    _run(out, FleetSettings(vllm=SERVE, router_ready_timeout_s=3))
    reason = _failed_reason(out)
    assert "the router never became ready" in reason and "not ready after 3 s" in reason
    assert "vllm-router: starting" in reason
    assert listening(fleet_ports(manifest(out))) == []


def _api_server_pid_text(text: str) -> int | None:
    found = re.search(r"\(APIServer pid=(\d+)\)", text)
    return int(found.group(1)) if found else None


def _api_server_pid(log: Path) -> int | None:
    return _api_server_pid_text(log.read_text(errors="replace"))


def test_replica_killed_mid_run_is_one_line_naming_run_and_replica(
    fleet_ready: Path, tmp_path: Path
) -> None:
    """kill -9 replica 1's whole server once its engine took a request."""
    out = tmp_path / "killed"
    log = out.with_name("killed.server-1.log")
    killed: list[int] = []

    def kill_replica() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            if log.is_file() and "Added request" in log.read_text(errors="replace"):
                pid = _api_server_pid(log)
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.02)

    watcher = threading.Thread(target=kill_replica, daemon=True)
    watcher.start()
    long_plan = Plan(
        tuple(
            MultiRoundSession(i, (Round(200, 60, 1.0), Round(20, 60, 1.0), Round(20, 60)), i * 0.2)
            for i in range(4)
        ),
        PlanMeta(seed=22, n=4),
    )
    _run(out, FleetSettings(policy="round_robin", vllm=SERVE), long_plan)
    watcher.join(timeout=5)
    assert killed, "replica 1 never took a request"
    reason = _failed_reason(out)
    assert "replica 1 (http://127.0.0.1:" in reason and "exited during the run" in reason
    assert "killed by SIGKILL" in reason
    assert listening(fleet_ports(manifest(out))) == []


# The job as `rearrival run` is one: rearrival.cli.main owns the process groups and turns
# the interruption into exit code 128 + the signal.
SIGNALLED = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from rearrival.measure.process_groups import Interrupted, stopping_on_signals
from test_vllm_fleet_run import FleetSettings, SERVE, _run
settings = FleetSettings(vllm=SERVE, server_ports={servers!r}, router_port={router!r})
try:
    with stopping_on_signals():
        _run(Path({out!r}), settings)
except Interrupted as stop:
    sys.exit(stop.exit_code)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM])
def test_signal_to_the_job_stops_router_and_servers(
    fleet_ready: Path, tmp_path: Path, signum: int
) -> None:
    """SIGTERM the job once its router started: the router and both servers (API server
    and engine core) are gone when it exits with 128 + the signal, and no run is written."""
    out = tmp_path / "signalled"
    ports: list[int] = []
    while len(ports) < 3:
        port = free_port()
        if port not in ports:
            ports.append(port)
    code = SIGNALLED.format(
        tests=str(Path(__file__).parent), servers=tuple(ports[:2]), router=ports[2], out=str(out)
    )
    job = subprocess.Popen([sys.executable, "-c", code], env=os.environ.copy())
    router_log = out.with_name("signalled.router.log")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and job.poll() is None:
        if "Router ready" in (router_log.read_text() if router_log.is_file() else ""):
            break
        time.sleep(0.1)
    assert job.poll() is None, "the job ended before its router was ready"
    texts = [out.with_name(f"signalled.server-{i}.log").read_text() for i in range(2)]
    pids = [_api_server_pid_text(text) for text in texts]
    pids += [pid for text in texts for pid in engine_core_pids(text)]
    job.send_signal(signum)
    assert job.wait(timeout=120) == 128 + signum
    assert len(pids) >= 4
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert listening(ports) == []
    assert not out.exists()  # a stopped job writes no run
