"""The calibration driver: run every measurement plan through the backends dispatcher,
read the samples back, fit the cost model and write the samples (docs/DESIGN.md §3,
"Calibration"; paper II-B, III-C, IV, Table VII).

``emulated``, ``emulated-http`` and ``rbln`` run the same plans and write the same run
records; any fit that does not hold raises naming bucket or range and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.config.calibration import MeasurementSettings
from rearrival.measure.backends import RunRequest, run_backend
from rearrival.measure.calibration.design import (
    STUDY,
    CalibrationError,
    Measurement,
    all_measurements,
)
from rearrival.measure.calibration.parse import Measured, collect
from rearrival.measure.emulate.truth import load_truth
from rearrival.model.cost.fits import (
    CompileFit,
    DecodeFit,
    PrefillFit,
    ReuseCheck,
    check_reuse,
    fit_compile,
    fit_decode,
    fit_prefill,
)
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import write_plan
from rearrival.model.plans.plangen import derive_seed
from rearrival.parquet import write_frame
from rearrival.vocabulary import RBLN

DECODE_STEPS_FILE = "decode_steps.parquet"
PREFILL_FILE = "prefill.parquet"
REUSE_FILE = "reuse.parquet"


@dataclass(frozen=True)
class CalibrationFiles:
    """Where a calibration writes its runs, their plans and the samples behind its fits
    (the workflow's rule names each; outside it they go into one folder, ``--work``)."""

    runs: Path
    plans: Path
    decode_steps: Path
    prefill: Path
    reuse: Path

    @classmethod
    def in_directory(cls, out_dir: Path) -> CalibrationFiles:
        """The default layout: runs/, plans/ and the sample tables in ``out_dir``."""
        return cls(
            out_dir / "runs",
            out_dir / "plans",
            out_dir / DECODE_STEPS_FILE,
            out_dir / PREFILL_FILE,
            out_dir / REUSE_FILE,
        )


def _files(out: CalibrationFiles | Path) -> CalibrationFiles:
    return out if isinstance(out, CalibrationFiles) else CalibrationFiles.in_directory(out)


@dataclass(frozen=True)
class Calibration:
    """A finished calibration: samples, fits, and where they came from."""

    measured: Measured
    decode: DecodeFit
    prefill: PrefillFit
    reuse: ReuseCheck
    backend: str
    truth_version: str | None
    compile: CompileFit | None = None


def run_measurements(
    measurements: list[Measurement], files: CalibrationFiles, backend: Any, seed: int
) -> None:
    """Run every calibration plan through the backends dispatcher (fresh server per run
    on HTTP backends); each plan is written first, so each manifest names its file."""
    runs_dir, plans_dir = files.runs, files.plans
    for m in measurements:
        plan_path = write_plan(m.plan, plans_dir / f"{m.label}.parquet")
        run = RunRequest(
            study=STUDY,
            plan=m.plan,
            plan_path=plan_path,
            configuration=m.artifact,
            variant="wait",
            label=m.label,
            replicate=0,
            seed=derive_seed(seed, 0, m.n, 0, f"calib:{m.label}"),
            condition_order=[m.label],
            prereg={},
        )
        run_backend(backend, run, runs_dir / m.label)


def calibrate(
    config: MeasurementSettings,
    backend: Any,
    out: CalibrationFiles | Path,
    *,
    seed: int,
    compile_records: list[tuple[int, float, float]] | None = None,
) -> Calibration:
    """Measure, fit and return a calibration; the runs and plans go where ``out`` says
    (a directory: its runs/ and plans/).

    ``backend`` is a :class:`rearrival.measure.backends.BackendSettings`. Any fit that does not
    hold raises (``rearrival.model.cost.fits.FitError``) naming bucket or range and the fix.
    """
    settings = config.calibration
    seed = seed + settings.seed_block
    measurements = all_measurements(settings, config.model.max_seq_len, seed)
    files = _files(out)
    runs_dir = files.runs
    if runs_dir.exists():
        raise CalibrationError(
            f"{runs_dir}: exists; calibration writes fresh runs, remove "
            "it (or choose another --work directory) and re-run"
        )
    run_measurements(measurements, files, backend, seed)
    measured = collect(measurements, runs_dir, settings)
    decode, prefill, reuse = fit(measured, config, seed)
    truth = None
    if backend.backend != RBLN:
        truth = load_truth(backend.emulator_truth).version
    return Calibration(
        measured,
        decode,
        prefill,
        reuse,
        backend.backend,
        truth,
        fit_compile(compile_records) if compile_records else None,
    )


def fit(
    measured: Measured, config: MeasurementSettings, seed: int
) -> tuple[DecodeFit, PrefillFit, ReuseCheck]:
    """g(b) and beta, the prefill model, and the reuse rule checked on every re-arrival;
    a reuse rule the backend breaks is an error (the predictor could not describe it)."""
    settings = config.calibration
    reference = measured_profile()
    decode = fit_decode(
        measured.decode,
        min_steps=settings.min_steps,
        max_residual=settings.max_residual,
        resamples=settings.bootstrap_resamples,
        seed=seed,
    )
    prefill = fit_prefill(
        measured.prefill["computed_tokens"].to_numpy(),
        measured.prefill["prefill_s"].to_numpy(),
        chunk_tokens=reference.prefill_chunk_tokens,
        max_error=settings.max_prefill_error,
        resamples=settings.bootstrap_resamples,
        seed=seed,
        max_tokens=config.model.max_seq_len,
    )
    reuse = check_reuse(
        measured.reuse["previous_prompt"].to_numpy(),
        measured.reuse["prompt"].to_numpy(),
        measured.reuse["cached_tokens"].to_numpy(),
        reference.reuse_block_tokens,
    )
    if reuse.violations:
        p, length, expected, got = reuse.violations[0]
        raise CalibrationError(
            f"reuse rule: {len(reuse.violations)} of {reuse.checked} "
            f"re-arrivals break C = floor(min(P, L-1)/128)*128 (first: "
            f"P={p}, L={length}, expected {expected}, reported {got}); "
            "the predictor's field reuse.block_tokens does not describe "
            "this backend: check the prefix-cache settings"
        )
    return decode, prefill, reuse


def write_samples(calibration: Calibration, out: CalibrationFiles | Path) -> None:
    """The samples behind the fits, for Table VII and the step-time figure."""
    files = _files(out)
    write_frame(calibration.measured.decode, files.decode_steps)
    write_frame(calibration.measured.prefill, files.prefill)
    write_frame(calibration.measured.reuse, files.reuse)
