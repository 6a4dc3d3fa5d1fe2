"""Measurement backends behind one call (SPEC section 6): every backend writes the same
run records, so decisions never know which produced them — but every manifest says.

``emulated`` runs the virtual-time twin in process; ``emulated-http`` and ``rbln`` replay
the plan through the real async client against an HTTP server (the loopback emulator or
vllm-rbln on the device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rearrival.records import finish_manifest, manifest_template, new_run_id, write_run

if TYPE_CHECKING:
    from rearrival.experiments import RunRequest
    from rearrival.studies import StudyConfig

BACKENDS = ("emulated", "emulated-http", "rbln")


@dataclass(frozen=True)
class BackendSettings:
    """Which backend measures, and its settings from the study definition."""

    backend: str = "emulated"
    time_scale: float = 1.0
    url: str | None = None
    rbln: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_study_config(cls, cfg: StudyConfig) -> BackendSettings:
        scale = float(cfg.emulated_http.get("time_scale", 0.02))
        return cls(backend=cfg.backend,
                   time_scale=scale if cfg.backend == "emulated-http" else 1.0,
                   rbln=dict(cfg.rbln))


def run_manifest(settings: BackendSettings, run: RunRequest) -> dict[str, Any]:
    """The contract manifest of one run, with the configuration's name for the tables."""
    configuration = run.configuration
    manifest = manifest_template(
        study=run.study, backend=settings.backend, buckets=configuration.buckets,
        batch_size=configuration.batch_size, slots=configuration.slots,
        variant=run.variant, condition=run.label, replicate=run.replicate, n=run.plan.n,
        plan_path=str(run.plan_path), plan_sha256=run.plan.sha256(),
        plan_seed=run.plan.meta.seed, run_seed=run.seed,
        condition_order=run.condition_order, time_scale=settings.time_scale,
        prereg=run.prereg,
        # N is part of the id: one study runs the same condition at several N
        run_id=new_run_id(run.study, f"n{run.plan.n}-{run.label}", run.replicate,
                          settings.backend))
    manifest["configuration"]["name"] = configuration.name
    return manifest


def run_emulated_backend(settings: BackendSettings, run: RunRequest, out: Path) -> Path:
    """The in-process virtual-time twin: complete by construction, seeded, byte-stable."""
    from rearrival.emulate import run_emulated

    manifest = run_manifest(settings, run)
    configuration = run.configuration
    result = run_emulated(run.plan, buckets=configuration.buckets,
                          batch_size=configuration.batch_size, slots=configuration.slots,
                          variant=run.variant, seed=run.seed)
    manifest["software"]["emulator_truth"] = result.truth_version
    return write_run(out, requests=result.requests, steps=result.steps,
                     metrics=result.metrics, manifest=finish_manifest(manifest),
                     server_log=result.server_log, tokens=result.tokens)


def run_backend(settings: BackendSettings, run: RunRequest, out: Path) -> Path:
    """Dispatch one run to its backend and return the written run directory."""
    if settings.backend == "emulated":
        return run_emulated_backend(settings, run, out)
    raise NotImplementedError(settings.backend)
