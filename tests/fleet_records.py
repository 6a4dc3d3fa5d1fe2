"""What every fleet run record must hold (README "A study on a real fleet"), checked the
same way on one test run (tests/test_vllm_fleet_run.py) and on every run of the
preregistered fleet study (tests/test_fleet_study_records.py, after `make all-fleet`)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from rearrival.measure.records import RunRecord, read_run

ROUTER_VERSION = "0.1.17"
CACHED_COUNTER = "vllm:prompt_tokens_cached_total"


def listening(ports: list[int]) -> list[int]:
    """The ports something still accepts connections on."""
    alive = []
    for port in ports:
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                alive.append(port)
    return alive


def fleet_ports(record: dict) -> list[int]:
    fleet = record["fleet"]
    urls = [s["url"] for s in fleet["servers"]] + [fleet["router"]["url"]]
    return [int(url.rsplit(":", 1)[1]) for url in urls]


def check_fleet_run(out: Path, policy: str, replicas: int = 2) -> RunRecord:
    """A complete fleet run: every request names its replica, cached tokens (summing per
    server to that server's own counter delta) and first-token time; the manifest names
    vllm-router with its version, policy and command line and every server; every log is
    kept; nothing listens any more on the fleet's ports."""
    run = read_run(out)
    requests = run.requests
    record = json.loads((out / "manifest.json").read_text())
    assert record["status"] == "complete"
    assert set(requests["replica"]) <= set(range(replicas))
    assert requests["request_id"].is_unique
    assert (requests["first_token_s"] >= requests["send_s"]).all()
    assert (requests["first_token_s"] <= requests["complete_s"]).all()
    if policy == "consistent_hash":  # keys on the session header: a session never moves
        assert (requests.groupby("session")["replica"].nunique() == 1).all()
    router = record["fleet"]["router"]
    assert router["name"] == "vllm-router" and router["version"] == ROUTER_VERSION
    assert (
        router["policy"] == policy
        and router["argv"][router["argv"].index("--policy") + 1] == policy
    )
    assert [s["replica"] for s in record["fleet"]["servers"]] == list(range(replicas))
    for replica, counters in enumerate(record["fleet"]["server_counters"]):
        moved = counters["after"][CACHED_COUNTER] - counters["before"][CACHED_COUNTER]
        assert requests.loc[requests["replica"] == replica, "cached_tokens"].sum() == moved
    names = [f"server-{i}.log" for i in range(replicas)] + ["router.log"]
    for name in names:
        assert (out / name).is_file() and name in record["files"]
    assert "Router ready" in (out / "router.log").read_text()
    assert listening(fleet_ports(record)) == []
    return run
