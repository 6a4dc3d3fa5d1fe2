"""vllm-router in front of a fleet run's servers (README "A study on a real fleet").

The router is vLLM's Rust load balancer (``vllm-router``, pinned in envs/vllm-router.txt,
located by ``rearrival.router_env``), started on loopback after every server is ready, so
its own start-up wait (``--worker-startup-timeout-secs``, polled every
``--worker-startup-check-interval`` seconds) finds them healthy at once. Its command line is
an argument list, recorded whole in the manifest.

Choices, each for the study's sake:

- ``--disable-retries``: a request the router forwarded is admitted once. A retry on the
  other replica would be a second admission the client never sent (the client itself never
  retries a completion, ``rearrival.measure.client``), and would hide a dead replica.
- ``--prometheus-port`` a free port: the default, 29000, would collide between two runs.
- ``consistent_hash`` keys on the ``X-Session-ID`` header the client sends (the router's
  own rule: a session header first, then the request's text), so a session stays on one
  replica; which one is the router's hash, unknown in advance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

# vllm-router 0.1.17's --policy choices that run on a CPU fleet of plain vLLM servers:
# kv_aware needs the servers' ZMQ KV events (--kv-event-source), which this fleet does not
# publish, so it is left out (README "A study on a real fleet").
ROUTER_POLICIES = (
    "round_robin",
    "consistent_hash",
    "cache_aware",
    "power_of_two",
    "random",
    "sticky_least_loaded",
)
# The header consistent_hash reads the session from (vllm-router's consistent_hash.rs).
SESSION_HEADER = "X-Session-ID"
# How often the router polls the servers while it starts: they are ready before it starts.
STARTUP_CHECK_INTERVAL_S = 1


def router_argv(
    router: Path,
    worker_urls: Sequence[str],
    *,
    policy: str,
    port: int,
    prometheus_port: int,
    startup_timeout_s: float,
    host: str = "127.0.0.1",
) -> list[str]:
    """The router's whole command line for one run (recorded in the manifest)."""
    if policy not in ROUTER_POLICIES:
        raise ValueError(f"router policy {policy!r}: use one of {', '.join(ROUTER_POLICIES)}")
    return [
        str(router),
        "--host",
        host,
        "--port",
        str(port),
        "--worker-urls",
        *worker_urls,
        "--policy",
        policy,
        "--disable-retries",
        "--prometheus-host",
        host,
        "--prometheus-port",
        str(prometheus_port),
        "--worker-startup-timeout-secs",
        str(max(1, round(startup_timeout_s))),
        "--worker-startup-check-interval",
        str(STARTUP_CHECK_INTERVAL_S),
        "--log-level",
        "info",
    ]


def router_reason(log_text: str) -> str:
    """The router's own last word, from its log: the last ERROR line, else the last line
    that says anything (ANSI colours removed)."""
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in log_text.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if " ERROR " in f" {line} " or line.startswith("error")]
    chosen = errors[-1] if errors else (lines[-1] if lines else "the router log is empty")
    return chosen[:400]
