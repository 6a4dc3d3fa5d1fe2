"""Measurement backends behind one call (docs/DESIGN.md §5): every backend writes the same
run records, so decisions never know which produced them — but every manifest says.

``emulated`` runs the virtual-time twin in process; ``emulated-http``, ``rbln`` and
``vllm`` replay the plan through the real async client against an HTTP server (the
loopback emulator, vllm-rbln on the device, a real vLLM server). ``RUNNERS`` is the
registry: one function per backend, each backend's mechanics in its own module.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rearrival.errors import RearrivalError
from rearrival.measure.client import ReplayOptions
from rearrival.measure.client_http import ClientError, UnreachableError
from rearrival.measure.emulate.driver import run_emulated
from rearrival.measure.emulate.server import server_argv
from rearrival.measure.emulate.truth import load_truth
from rearrival.measure.emulate_client import check_configuration, replay_url, server_configuration
from rearrival.measure.rbln import compiled_artifact, run_rbln
from rearrival.measure.records import finish_manifest, manifest_template, new_run_id, write_run
from rearrival.measure.serve import free_port, run_with_server
from rearrival.measure.vllm.backend import VllmSettings, run_vllm
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import check_context
from rearrival.vocabulary import BACKENDS, EMULATED, EMULATED_HTTP, RBLN, VLLM

if TYPE_CHECKING:
    from rearrival.config.study import StudyConfig
    from rearrival.model.configuration import Configuration
    from rearrival.model.plans.plan import Plan


@dataclass(frozen=True)
class BackendSettings:
    """Which backend measures, and its settings from the study definition."""

    backend: str = EMULATED
    time_scale: float = 1.0  # wall s per plan s; 1 = real time (in-process twin, hardware)
    site_packages: Path | None = None  # rbln: the patched vllm_rbln (default: this env's)
    compile_record: Path | None = None
    url: str | None = None  # emulated-http: replay against this running server
    artifact: Path | None = None  # rbln: this artifact instead of the compile record's
    emulator_truth: Path | None = None  # emulated backends: truth file; None = shipped twin
    vllm: VllmSettings = field(default_factory=VllmSettings)  # vllm: model, length, device

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise RearrivalError(f"backend '{self.backend}': use one of {', '.join(BACKENDS)}")
        if not self.time_scale > 0:
            raise RearrivalError(f"time_scale {self.time_scale}: must be > 0")

    @classmethod
    def from_study_config(
        cls, cfg: StudyConfig, compile_record: Path | None = None
    ) -> BackendSettings:

        site_packages = cfg.rbln.site_packages
        served = cfg.vllm
        return cls(
            backend=cfg.backend,
            time_scale=(cfg.emulated_http.time_scale if cfg.backend == EMULATED_HTTP else 1.0),
            site_packages=Path(site_packages) if site_packages else None,
            compile_record=compile_record,
            emulator_truth=cfg.measurement.truth_path(),
            vllm=VllmSettings(
                model_dir=Path(served.model) if served.model else None,
                max_model_len=served.max_model_len,
                device=served.device,
                ready_timeout_s=served.ready_timeout_s,
                extra_args=served.extra_args,
                async_scheduling=served.async_scheduling,
                tensor_parallel_size=served.tensor_parallel_size,
            ),
        )


@dataclass(frozen=True)
class RunRequest:
    """Everything one backend run needs besides the backend settings."""

    study: str
    plan: Plan
    plan_path: Path
    configuration: Configuration
    variant: str
    label: str
    replicate: int
    seed: int
    condition_order: list[str]
    prereg: dict[str, Any]


def run_manifest(settings: BackendSettings, run: RunRequest) -> dict[str, Any]:
    """The contract manifest of one run, with the configuration's name for the tables."""
    configuration = run.configuration
    manifest = manifest_template(
        study=run.study,
        backend=settings.backend,
        configuration=configuration,
        variant=run.variant,
        condition=run.label,
        replicate=run.replicate,
        n=run.plan.n,
        plan_path=str(run.plan_path),
        plan_sha256=run.plan.sha256(),
        plan_seed=run.plan.meta.seed,
        run_seed=run.seed,
        condition_order=run.condition_order,
        time_scale=settings.time_scale,
        prereg=run.prereg,
        # N is part of the id: one study runs the same condition at several N
        run_id=new_run_id(run.study, f"n{run.plan.n}-{run.label}", run.replicate, settings.backend),
    )
    manifest["configuration"]["name"] = configuration.name
    return manifest


def _check_slot_context(run: RunRequest) -> None:
    """A plan with a round the compiled context cannot hold is refused before anything
    starts (one line naming file, session, round and field), never half measured."""
    check_context(run.plan, measured_profile().slot_tokens, str(run.plan_path))


def run_emulated_backend(settings: BackendSettings, run: RunRequest, out: Path) -> Path:
    """The in-process virtual-time twin: complete by construction, seeded, byte-stable."""
    _check_slot_context(run)
    manifest = run_manifest(settings, run)
    result = run_emulated(
        run.plan,
        run.configuration,
        variant=run.variant,
        seed=run.seed,
        truth=load_truth(settings.emulator_truth),
    )
    manifest["software"]["emulator_truth"] = result.truth_version
    return write_run(
        out,
        requests=result.requests,
        steps=result.steps,
        metrics=result.metrics,
        manifest=finish_manifest(manifest),
        server_log=result.server_log,
        tokens=result.tokens,
    )


def run_http_backend(settings: BackendSettings, run: RunRequest, out: Path) -> Path:
    """The emulated engine behind a real loopback server, replayed by the real client:
    a fresh server per run, or the running one at ``settings.url``, which must say what
    it serves (an emulate-server's ``/rearrival/config``): a server the run did not start
    is never labelled with a configuration it did not report."""
    _check_slot_context(run)
    options = ReplayOptions(seed=run.seed, time_scale=settings.time_scale)
    manifest = run_manifest(settings, run)
    if settings.url is not None:
        try:
            served = asyncio.run(server_configuration(settings.url))
        except UnreachableError:
            served = None  # nothing answers: the replay records the failure as the reason
        except ClientError as exc:
            raise ClientError(
                f"server {settings.url} does not say what it serves ({exc}); --url takes a "
                "running `rearrival emulate-server`; to measure vLLM let the run start it "
                "(--backend vllm)"
            ) from None
        if served is not None:
            check_configuration(served, manifest["configuration"], settings.url)
            manifest["server"] = {"url": settings.url, "reports": served}
        outcome = asyncio.run(
            replay_url(
                run.plan, settings.url, out, variant=run.variant, options=options, manifest=manifest
            )
        )
        return outcome.path
    port = free_port()
    argv = server_argv(
        run.configuration,
        port=port,
        seed=run.seed,
        time_scale=settings.time_scale,
        truth=settings.emulator_truth,
    )
    outcome = run_with_server(
        run.plan,
        out,
        argv=argv,
        url=f"http://127.0.0.1:{port}",
        variant=run.variant,
        options=options,
        manifest=manifest,
        log_path=out.with_name(f"{out.name}.server.log"),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ready_timeout_s=60,
        grace_s=5,
    )
    return outcome.path


def run_rbln_backend(settings: BackendSettings, run: RunRequest, out: Path) -> Path:
    """Real hardware: the compiled artifact served by vllm-rbln, a fresh server per run."""
    _check_slot_context(run)
    configuration = run.configuration
    artifact = settings.artifact
    if artifact is None and settings.compile_record is not None:
        artifact = compiled_artifact(settings.compile_record, configuration.name)
    outcome = run_rbln(
        run.plan,
        out,
        artifact=artifact,
        configuration=configuration,
        variant=run.variant,
        options=ReplayOptions(seed=run.seed),
        manifest=run_manifest(settings, run),
        site_packages=settings.site_packages,
    )
    return outcome.path


def run_vllm_backend(settings: BackendSettings, run: RunRequest, out: Path) -> Path:
    """A real vLLM server per run (docs/DESIGN.md §15), its knobs from the configuration."""
    configuration = run.configuration
    if not isinstance(configuration, VllmConfiguration):
        raise RearrivalError(
            f"configuration {configuration.name}: backend vllm needs a vLLM configuration "
            "(num_blocks, block_size, max_num_batched_tokens, batch_size, capture sizes)"
        )
    outcome = run_vllm(
        run.plan,
        out,
        configuration=configuration,
        settings=settings.vllm,
        variant=run.variant,
        seed=run.seed,
        manifest=run_manifest(settings, run),
        plan_source=str(run.plan_path),
    )
    return outcome.path


# The backends registry: adding one is a module of its own and an entry here.
RUNNERS: dict[str, Callable[[BackendSettings, RunRequest, Path], Path]] = {
    EMULATED: run_emulated_backend,
    EMULATED_HTTP: run_http_backend,
    RBLN: run_rbln_backend,
    VLLM: run_vllm_backend,
}


def run_backend(settings: BackendSettings, run: RunRequest, out: Path) -> Path:
    """Dispatch one run to its backend and return the written run directory. A run cut
    short is written with status failed/partial and its reason, never as complete."""
    return RUNNERS[settings.backend](settings, run, out)


def run_status(out: Path) -> tuple[str, str | None]:
    """Status and reason of a written run, from its manifest."""
    manifest = json.loads((out / "manifest.json").read_text())
    return manifest["status"], manifest.get("reason")
