"""The vLLM calibration driver (docs/DESIGN.md §15, "Calibration"): run the calibration
plan and the held-out validation plan on real vLLM servers through the backends
dispatcher, read the steps back, fit the step cost and check it on the held-out run.

Two servers in all (a run is one fresh server): the calibration plan holds every design
cell (``vllm_design``), so one server serves the whole calibration and no prefix cache is
shared between cells (every session's prompt is its own). The validation predicts the
held-out run's device time with the fitted step cost two ways, both against the sum of
its logged elapsed times: the predictor as the search uses it (``simulate_vllm`` with the
run's observed re-arrival send times), and the fitted cost priced on the run's own steps
as replayed (the cost model alone, the scheduler taken as observed).
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.config.served_model import load_served_model
from rearrival.measure.backends import BackendSettings, RunRequest, run_backend, run_status
from rearrival.measure.calibration.design import CalibrationError
from rearrival.measure.calibration.vllm_design import (
    VllmCalibrationDesign,
    calibration_plan,
    validation_plan,
)
from rearrival.measure.calibration.vllm_samples import replay_run, step_samples
from rearrival.measure.records import RunRecord, read_run
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.measure.vllm.backend import VllmSettings
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_fit import StepSamples, VllmStepCostFit, fit_vllm_step_cost
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import Plan, write_plan
from rearrival.model.plans.plangen import derive_seed
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.parquet import write_frame
from rearrival.vocabulary import VLLM

STUDY = "calibration-vllm"
CALIBRATION, VALIDATION = "calibration", "validation"
SAMPLES_FILE = "vllm_steps.parquet"
# vLLM refuses a --seed outside [0, 2**32) ("Seed must be between 0 and 2**32 - 1").
VLLM_SEEDS = 2**32


@dataclass(frozen=True)
class VllmCalibrationSettings:
    """What a vLLM calibration measures on and how it fits: the configuration's knobs,
    the served model and its length (``VllmSettings``), the design, the seed, the
    bootstrap (``resamples`` refits over blocks of ``block_steps`` consecutive steps,
    about one segment's decode) and the residual bound: a cell of at least
    ``min_cell_steps`` steps whose mean is further than ``max_residual`` (relative) from
    the fitted one is named in the profile as beyond the bound (the linear form does not
    hold there), never hidden."""

    configuration: VllmConfiguration
    vllm: VllmSettings = field(default_factory=VllmSettings)
    design: VllmCalibrationDesign = field(default_factory=VllmCalibrationDesign)
    seed: int = 0
    resamples: int = 1000
    block_steps: int = 64
    max_residual: float = 0.25
    min_cell_steps: int = 10

    def __post_init__(self) -> None:
        if not self.max_residual > 0 or self.min_cell_steps < 1:
            raise CalibrationError(
                f"residual bound {self.max_residual!r} must be > 0 and min_cell_steps "
                f"{self.min_cell_steps!r} >= 1"
            )

    def max_model_len(self) -> int:
        """The served length: the setting, else the model's ``max_position_embeddings``."""
        return (
            self.vllm.max_model_len
            or load_served_model(self.vllm.model_dir).max_position_embeddings
        )


@dataclass(frozen=True)
class Validation:
    """The held-out run against the fitted step cost (seconds; relative = pred/obs - 1)."""

    run_id: str
    steps: int
    requests: int
    logged_s: float
    simulated_s: float
    simulated_steps: int
    priced_s: float

    @property
    def simulated_relative(self) -> float:
        return self.simulated_s / self.logged_s - 1

    @property
    def priced_relative(self) -> float:
        return self.priced_s / self.logged_s - 1


@dataclass(frozen=True)
class VllmCalibration:
    """A finished vLLM calibration: the fit, its samples, the runs it read, the
    validation, and what the machine was doing meanwhile."""

    fit: VllmStepCostFit
    samples: pd.DataFrame
    calibration_run: RunRecord
    validation_run: RunRecord
    validation: Validation
    settings: VllmCalibrationSettings
    wall_s: float
    load_average: tuple[tuple[float, float, float], tuple[float, float, float]]


def _run(
    settings: VllmCalibrationSettings, plan: Plan, role: str, work: Path
) -> tuple[RunRecord, Plan]:
    """One plan on a fresh server; a run that did not complete is one error naming it."""
    plan_path = write_plan(plan, work / "plans" / f"{role}.json")
    configuration = settings.configuration.named(f"vllm-{role}")
    request = RunRequest(
        study=STUDY,
        plan=plan,
        plan_path=plan_path,
        configuration=configuration,
        variant="wait",
        label=f"vllm-{role}",
        replicate=0,
        seed=derive_seed(settings.seed, 0, plan.n, 0, f"calib-vllm:{role}") % VLLM_SEEDS,
        condition_order=[f"vllm-{role}"],
        prereg={},
    )
    out = run_backend(
        BackendSettings(backend=VLLM, vllm=settings.vllm), request, work / "runs" / role
    )
    status, reason = run_status(out)
    if status != "complete":
        raise CalibrationError(
            f"{role} run {out}: {status} ({reason}); the calibration uses complete runs only: "
            "fix the cause and re-run into a fresh --work directory"
        )
    return read_run(out), plan


def fit_samples(samples: pd.DataFrame, settings: VllmCalibrationSettings) -> VllmStepCostFit:
    """The step cost fitted to the samples outside the warm-up."""
    used = samples[~samples["warmup"]]
    arrays = StepSamples(
        used["decode_padded"].to_numpy(),
        used["context_tokens"].to_numpy(),
        used["context_read"].to_numpy(),
        used["elapsed_s"].to_numpy(),
        used["run_id"].to_numpy(),
    )
    return fit_vllm_step_cost(
        arrays, resamples=settings.resamples, block_steps=settings.block_steps, seed=settings.seed
    )


def validate(
    record: RunRecord, plan: Plan, configuration: VllmConfiguration, cost: VllmStepCost
) -> Validation:
    """The held-out run's logged device time against the fitted step cost's (module
    docstring): simulated with the observed re-arrivals, and priced on its own steps."""
    replay = replay_run(record, plan, configuration)
    priced = math.fsum(
        cost.step_s(
            configuration.padded(s.generation_tokens) if s.generation_tokens else 0,
            s.context_tokens,
            s.context_read,
        )
        for s in replay.steps
    )
    requests = record.requests
    later = requests[requests[ROUND_COLUMN] > 0].sort_values(["session", ROUND_COLUMN])
    simulated = simulate_vllm(
        plan, configuration, cost, [float(t) for t in later["send_s"]], source=str(record.path)
    )
    return Validation(
        run_id=record.run_id,
        steps=len(record.steps),
        requests=len(requests),
        logged_s=math.fsum(float(x) for x in record.steps["elapsed_s"]),
        simulated_s=simulated.device_s,
        simulated_steps=simulated.run.total_steps,
        priced_s=priced,
    )


def calibrate_vllm(settings: VllmCalibrationSettings, work: Path) -> VllmCalibration:
    """Measure, fit and validate (module docstring); the runs and plans go into ``work``.
    Raises :class:`CalibrationError` naming the run when a run fails or cannot be
    replayed, ``VllmFitError`` when the steps cannot identify the step cost."""
    if (work / "runs").exists():
        raise CalibrationError(
            f"{work / 'runs'}: exists; a calibration writes fresh runs, remove it (or choose "
            "another --work directory) and re-run"
        )
    started, load_before = time.monotonic(), os.getloadavg()
    length = settings.max_model_len()
    configuration = settings.configuration
    plans = {
        CALIBRATION: calibration_plan(configuration, length, settings.design, settings.seed),
        VALIDATION: validation_plan(configuration, length, settings.seed),
    }
    calibration_record, plan = _run(settings, plans[CALIBRATION], CALIBRATION, work)
    samples = step_samples(calibration_record, plan, configuration, settings.design.warmup_steps)
    fit = fit_samples(samples, settings)
    validation_record, held_out = _run(settings, plans[VALIDATION], VALIDATION, work)
    validation = validate(validation_record, held_out, configuration, fit.step_cost)
    return VllmCalibration(
        fit=fit,
        samples=samples,
        calibration_run=calibration_record,
        validation_run=validation_record,
        validation=validation,
        settings=settings,
        wall_s=time.monotonic() - started,
        load_average=(load_before, os.getloadavg()),
    )


def write_samples(calibration: VllmCalibration, work: Path) -> Path:
    """The per-step samples behind the fit (the report's and a reader's evidence)."""
    path = work / SAMPLES_FILE
    write_frame(calibration.samples, path)
    return path


def run_summary(record: RunRecord, role: str) -> dict[str, Any]:
    """A run as the profile lists it."""
    manifest = record.manifest
    return {
        "role": role,
        "run_id": record.run_id,
        "path": str(record.path),
        "plan_sha256": manifest["plan_sha256"],
        "requests": len(record.requests),
        "steps": len(record.steps),
        "started_at": manifest["started_at"],
        "finished_at": manifest["finished_at"],
    }
