"""The parts of a fleet run that need no server (README "A study on a real fleet"): the
placement read from vLLM's own log lines, the router's command line, the settings'
refusals, and the signal guard that turns SIGTERM into a cleanup."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from rearrival.measure.client import ReplayOptions, request_headers
from rearrival.measure.fleet.backend import FleetSettings
from rearrival.measure.fleet.placement import FleetStepLog, placement, placement_problem
from rearrival.measure.fleet.router import router_argv, router_reason
from rearrival.measure.process_groups import Interrupted, stopping_on_signals
from rearrival.measure.records.contract import RequestRecord
from rearrival.measure.vllm.backend import VllmRunError

ADDED = "(APIServer pid=7) INFO 12-03 14:39:40 [async_llm.py:578] Added request cmpl-{}-0-9ff265d4."


def _record(session: int, round_index: int, replica: int | None) -> RequestRecord:
    return RequestRecord(
        session,
        round_index,
        0.0,
        0.1,
        0.2,
        10,
        0,
        10,
        2,
        replica=replica,
        request_id=f"rq-s{session}-r{round_index}",
    )


def test_placement_is_the_server_whose_log_took_the_request() -> None:
    logs = (ADDED.format("rq-s0-r0") + "\n" + ADDED.format("rq-s1-r1"), ADDED.format("rq-s1-r0"))
    where, twice = placement(logs)
    assert where == {"rq-s0-r0": 0, "rq-s1-r1": 0, "rq-s1-r0": 1} and twice == []


def test_a_request_in_two_logs_or_in_none_is_a_problem() -> None:
    where, twice = placement((ADDED.format("rq-s0-r0"), ADDED.format("rq-s0-r0")))
    assert twice == ["rq-s0-r0"]
    assert "admitted twice" in placement_problem([_record(0, 0, 1)], where, twice)
    problem = placement_problem([_record(0, 0, None)], {}, [])
    assert "rq-s0-r0" in problem and "--enable-log-requests" in problem


def test_headers_carry_the_session_and_a_request_id_only_when_asked() -> None:
    assert request_headers(ReplayOptions(), 3, 1) == ({}, None)
    options = ReplayOptions(session_header="X-Session-ID", request_id_prefix="rq")
    headers, request_id = request_headers(options, 3, 1)
    assert headers == {"X-Session-ID": "session-3", "X-Request-Id": "rq-s3-r1"}
    assert request_id == "rq-s3-r1"


def test_router_argv_names_policy_workers_and_no_retries() -> None:
    argv = router_argv(
        Path("/r/vllm-router"),
        ["http://127.0.0.1:1", "http://127.0.0.1:2"],
        policy="consistent_hash",
        port=3,
        prometheus_port=4,
        startup_timeout_s=60,
    )
    assert argv[argv.index("--policy") + 1] == "consistent_hash"
    assert argv[argv.index("--worker-urls") + 1 : argv.index("--worker-urls") + 3] == [
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
    ]
    assert "--disable-retries" in argv and argv[argv.index("--prometheus-port") + 1] == "4"


def test_router_reason_is_its_last_error_without_colours() -> None:
    log = "\x1b[2m2026\x1b[0m  INFO ready\n2026  ERROR worker http://x failed\n2026  INFO bye\n"
    assert router_reason(log) == "2026  ERROR worker http://x failed"
    assert router_reason("") == "the router log is empty"


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"policy": "kv_aware"}, "KV events"),
        ({"replicas": 0}, "must be >= 1"),
        ({"server_ports": (1,)}, "one per replica"),
    ],
)
def test_settings_refuse_what_cannot_run(settings: dict, says: str) -> None:
    with pytest.raises(VllmRunError, match=says):
        FleetSettings(**settings)


def test_sigterm_inside_the_guard_is_interrupted_and_restores_the_handler() -> None:
    """The fleet's guard is the one every real-engine process shares (process_groups)."""
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped, stopping_on_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()  # pragma: no cover -- the handler raises before this returns
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before


ITERATION = (
    "(APIServer pid=7) INFO 12-03 14:39:41 [loggers.py:1] Engine 000: Iteration(0): 1 context "
    "requests, 40 context tokens, 0 generation requests, 0 generation tokens, iteration "
    "elapsed time: 4.85 ms, CPU KV cache usage: 8.7%"
)


def test_fleet_steps_keep_their_types_when_a_replica_logged_no_iteration() -> None:
    """A replica killed before its first step has no iteration line; the fleet's steps are
    the other replica's, with the contract's integer columns."""
    steps = FleetStepLog((ITERATION, "")).steps("")
    assert len(steps) == 1 and str(steps["iteration"].dtype) == "int64"
    both = FleetStepLog((ITERATION, ITERATION)).steps("")
    assert list(both["step"]) == [0, 1] and str(both["context_tokens"].dtype) == "int64"
