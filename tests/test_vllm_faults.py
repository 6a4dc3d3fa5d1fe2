"""Faults and bad input on the vllm backend, on real vLLM servers (docs/DESIGN.md §14-15):
an engine killed mid-run, a server that never becomes ready, a port in use, and
configurations vLLM refuses. Each gives one line naming the run and vLLM's own reason,
and the run is written as failed (never complete, so never used by a decision).

Without the vLLM environment the module skips, except under CI (CI=true).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from vllm_env import BLOCK, CLI, cli, manifest, require_vllm, two_round_plan

from rearrival.measure.backends import BackendSettings, RunRequest, run_backend
from rearrival.measure.records import read_run
from rearrival.measure.vllm.backend import VllmSettings
from rearrival.measure.vllm.server import engine_core_pids
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, write_plan
from rearrival.vocabulary import VLLM

pytestmark = pytest.mark.timeout(900)
# 127 usable blocks of 32 tokens hold 4,064: room for one sequence of this length
SERVE = VllmSettings(max_model_len=2048)


@pytest.fixture(scope="module")
def vllm_ready() -> Path:
    return require_vllm()


def _request(plan: Plan, configuration: VllmConfiguration, label: str) -> RunRequest:
    return RunRequest(
        study="faults",
        plan=plan,
        plan_path=Path(f"{label}.json"),
        configuration=configuration,
        variant="wait",
        label=label,
        replicate=0,
        seed=1,
        condition_order=[label],
        prereg={},
    )


def _configuration(**knobs: int) -> VllmConfiguration:
    values = {"num_blocks": 128, "block_size": BLOCK, "max_num_batched_tokens": 512} | knobs
    return VllmConfiguration((), 4, **values, name="baseline")


def _failed_run(run_dir: Path) -> str:
    """The run was written, marked failed or partial, and refused for decisions."""
    record = manifest(run_dir)
    assert record["status"] in ("failed", "partial")
    with pytest.raises(ValueError, match="cannot be used"):
        read_run(run_dir)
    reason = record["reason"]
    assert reason.startswith(f"run {record['run_id']}: ") and "; vLLM: " in reason
    assert "\n" not in reason
    return reason


def test_engine_killed_mid_run_is_a_failed_run_with_vllms_reason(
    vllm_ready: Path, tmp_path: Path
) -> None:
    """kill -9 the engine core once it has logged a few iterations."""
    plan = Plan(
        (MultiRoundSession(0, (Round(200, 400, 1.0), Round(10, 400, 0.0)), start_s=0.0),),
        PlanMeta(seed=3, n=1),
    )
    out = tmp_path / "killed"
    log = out.with_name("killed.server.log")
    killed: list[int] = []

    def kill_engine_core() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            text = log.read_text(errors="replace") if log.is_file() else ""
            if "Iteration(20)" in text:
                pid = engine_core_pids(text)[0]
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_engine_core, daemon=True)
    watcher.start()
    settings = BackendSettings(backend=VLLM, vllm=SERVE)
    run_backend(settings, _request(plan, _configuration(), "killed"), out)
    watcher.join(timeout=5)
    assert killed, "the engine core was never seen iterating"
    reason = _failed_run(out)
    assert "Engine" in reason or "died" in reason or "exited" in reason or "broke off" in reason


def test_server_that_never_becomes_ready_is_a_failed_run(vllm_ready: Path, tmp_path: Path) -> None:
    out = tmp_path / "slow"
    settings = BackendSettings(backend=VLLM, vllm=replace(SERVE, ready_timeout_s=2, grace_s=5))
    run_backend(settings, _request(two_round_plan(), _configuration(), "slow"), out)
    reason = _failed_run(out)
    assert "not ready after 2 s" in reason
    assert read_run(out, require_complete=False).requests.empty


def test_port_in_use_is_a_failed_run_with_vllms_reason(vllm_ready: Path, tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = tmp_path / "busy"
        settings = BackendSettings(backend=VLLM, vllm=replace(SERVE, port=port))
        run_backend(settings, _request(two_round_plan(), _configuration(), "busy"), out)
    reason = _failed_run(out)
    assert f"port http://127.0.0.1:{port} is already in use" in reason
    assert "Address already in use" in reason


@pytest.mark.parametrize(
    ("knobs", "refusal"),
    [
        # 8 blocks of 32 tokens cannot hold one 2,048-token sequence
        ({"num_blocks": 8}, "configuration baseline.num_blocks: 8 blocks of 32 tokens"),
        # the CPU attention kernels take block sizes that are multiples of 32 only (256
        # blocks of 16 tokens would hold the 2,048-token sequence)
        ({"block_size": 16, "num_blocks": 256}, "configuration baseline.block_size: block size"),
        ({"max_model_len": 100000}, "max_model_len: 100,000 tokens is longer than"),
    ],
    ids=["kv-too-small", "block-size-16", "model-too-short"],
)
def test_configuration_vllm_refuses_is_one_line_before_any_server_starts(
    vllm_ready: Path, tmp_path: Path, knobs: dict[str, int], refusal: str
) -> None:
    """vLLM's own start-up checks (rearrival.model.vllm_knobs) refuse before a server
    starts (issue 38: these once cost a server start each), and nothing is written."""
    plan_path = write_plan(two_round_plan(), tmp_path / "plan.json")
    out = tmp_path / "refused"
    knobs = {"max_model_len": 2048} | knobs
    done = cli(
        "run",
        str(plan_path),
        "--backend",
        "vllm",
        "--out",
        str(out),
        "--condition",
        "baseline",
        *(f"--{k.replace('_', '-')}={v}" for k, v in knobs.items()),
    )
    assert done.returncode == 2
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith(f"rearrival: error: {refusal}"), line
    assert not out.exists() and not out.with_name("refused.server.log").exists()


def test_sigterm_of_a_vllm_run_stops_its_server_and_keeps_a_failed_record(
    vllm_ready: Path, tmp_path: Path
) -> None:
    """`kill -TERM` of `rearrival run --backend vllm` once requests flow (issue 38): the
    api_server and its EngineCore (their own session) are gone, one line names the run,
    the run is written as failed and no server log is left beside it."""
    plan = Plan(
        (MultiRoundSession(0, (Round(200, 400, 30.0), Round(10, 400, 0.0)), start_s=0.0),),
        PlanMeta(seed=3, n=1),
    )
    plan_path = write_plan(plan, tmp_path / "plan.json")
    out = tmp_path / "stopped"
    log = out.with_name("stopped.server.log")
    argv = [CLI, "run", str(plan_path), "--backend", "vllm", "--max-model-len", "2048"]
    verb = subprocess.Popen(
        [*argv, "--num-blocks", "128", "--out", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and "Iteration(5)" not in (
        log.read_text(errors="replace") if log.is_file() else ""
    ):
        time.sleep(0.1)
    engines = engine_core_pids(log.read_text(errors="replace"))
    servers = _children(verb.pid)
    assert engines and servers, "no server was seen iterating"
    verb.send_signal(signal.SIGTERM)
    _, err = verb.communicate(timeout=120)
    assert verb.returncode == 128 + signal.SIGTERM
    line = err.strip().splitlines()[-1]
    assert line.startswith("rearrival: SIGTERM: run ") and "interrupted by SIGTERM" in line
    assert not [pid for pid in engines + servers if Path(f"/proc/{pid}").exists()]
    assert "interrupted by SIGTERM" in _failed_run_reason(out)
    assert not log.exists()


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _failed_run_reason(run_dir: Path) -> str:
    record = manifest(run_dir)
    assert record["status"] == "failed"
    return record["reason"]
