"""CLI verbs of the calibration area (registered by rearrival.cli): calibrate and
calibrate-compile (docs/DESIGN.md §3, "Calibration")."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rearrival.commands.panels import PIPELINE_PANEL
from rearrival.commands.values import Values, checked_config

DEFAULT_CONFIG = Path("config/config.yaml")


def _named(flag: str, name: str) -> typer.models.OptionInfo:
    return typer.Option(flag, help=f"Where to write {name} (default: in --work).")


RunsDir = Annotated[Path | None, _named("--runs", "the calibration runs (a directory)")]
PlansDir = Annotated[Path | None, _named("--plans", "their plans (a directory)")]
DecodeSteps = Annotated[Path | None, _named("--decode-steps", "the decode-step samples")]
PrefillSamples = Annotated[Path | None, _named("--prefill", "the prefill samples")]
ReuseSamples = Annotated[Path | None, _named("--reuse", "the reuse checks")]


def calibrate(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Profile YAML to write; its runs and sample tables go into --work "
            "unless named by the options below.",
        ),
    ],
    work: Annotated[
        Path | None,
        typer.Option(
            "--work",
            help="Directory for the runs, their plans and the sample tables (runs/, plans/, "
            "*.parquet) [default: beside --out, named after it: p.yaml -> p-calibration/].",
        ),
    ] = None,
    config: Annotated[
        Path,
        typer.Option(
            "--config",
            help="Study definition with model:/calibration: sections (default "
            "settings when the file does not exist).",
        ),
    ] = DEFAULT_CONFIG,
    backend: Annotated[
        str | None,
        typer.Option("--backend", help="emulated, emulated-http or rbln (default: the config's)."),
    ] = None,
    emulator_truth: Annotated[
        str | None,
        typer.Option(
            "--emulator-truth",
            help="Truth of the emulated backends: default, assumed "
            "(hypothetical) or a truth YAML path (default: the config's).",
        ),
    ] = None,
    time_scale: Annotated[
        float | None,
        typer.Option("--time-scale", help="emulated-http: wall seconds per emulated second."),
    ] = None,
    compiled: Annotated[
        Path | None,
        typer.Option(
            "--compiled",
            help="rbln: compile record of the calibration artifacts "
            "(`rearrival calibrate-compile`); also fits compile time and size.",
        ),
    ] = None,
    runs: RunsDir = None,
    plans: PlansDir = None,
    decode_steps: DecodeSteps = None,
    prefill: PrefillSamples = None,
    reuse: ReuseSamples = None,
    values: Values = None,
) -> None:
    """Measure g(b), beta, the prefill model and the reuse rule on a backend and write a
    profile with CIs, samples and run ids (paper II-B, III-C, IV; Table VII)."""
    from dataclasses import replace

    from rearrival.config.backends import EmulatedHttpSettings
    from rearrival.config.calibration import MeasurementSettings
    from rearrival.measure.backends import BackendSettings
    from rearrival.measure.calibration.document import (
        profile_document,
        required_buckets,
        write_profile,
    )
    from rearrival.measure.calibration.drive import CalibrationFiles, write_samples
    from rearrival.measure.calibration.drive import calibrate as run_calibration
    from rearrival.measure.calibration.rbln_compile import compile_records
    from rearrival.vocabulary import EMULATED, EMULATED_HTTP, RBLN

    cfg = checked_config(config, "calibration", None, values) if config.is_file() else None
    work_dir = work if work is not None else work_directory(out)
    default = CalibrationFiles.in_directory(work_dir)
    files = CalibrationFiles(
        runs or default.runs,
        plans or default.plans,
        decode_steps or default.decode_steps,
        prefill or default.prefill,
        reuse or default.reuse,
    )
    settings = cfg.measurement if cfg is not None else MeasurementSettings()
    if emulator_truth is not None:
        settings = replace(settings, emulator_truth=emulator_truth)
    chosen = backend or (cfg.backend if cfg is not None else EMULATED)
    base = (
        BackendSettings.from_study_config(cfg, compiled)
        if cfg is not None
        else BackendSettings(compile_record=compiled)
    )
    scale = time_scale or (
        cfg.emulated_http.time_scale if cfg is not None else EmulatedHttpSettings().time_scale
    )
    backend_settings = replace(
        base,
        backend=chosen,
        time_scale=scale if chosen == EMULATED_HTTP else 1.0,
        emulator_truth=settings.truth_path(),
    )
    records = compile_records(compiled) if compiled is not None and chosen == RBLN else None
    result = run_calibration(
        settings,
        backend_settings,
        files,
        seed=cfg.study_seed if cfg is not None else 0,
        compile_records=records,
    )
    wanted = required_buckets(cfg) if cfg is not None else ()
    write_samples(result, files)
    write_profile(profile_document(result, settings, wanted), out)
    decode = result.decode
    typer.echo(
        f"{out}: {len(decode.buckets)} buckets measured on {chosen} (runs in "
        f"{files.runs}), beta "
        f"{decode.beta_s * 1e3:.4f} ms [{decode.beta_ci_s[0] * 1e3:.4f}, "
        f"{decode.beta_ci_s[1] * 1e3:.4f}], max residual "
        f"{decode.max_abs_residual:.3%}, prefill a={result.prefill.per_chunk_s:.6f} s "
        f"b={result.prefill.per_token_s:.4g} s/token, reuse {result.reuse.checked} "
        f"re-arrivals, {len(result.reuse.violations)} violations"
    )


def work_directory(profile: Path) -> Path:
    """Where a calibration writing ``profile`` puts its runs and samples by default: one
    folder named after the profile beside it, so nothing lands loose in its directory."""
    return profile.with_name(f"{profile.stem}-calibration")


def calibrate_compile(
    out: Annotated[Path, typer.Option("--out", help="Compile record JSON to write.")],
    config: Annotated[Path, typer.Option("--config", help="Study definition.")] = DEFAULT_CONFIG,
    values: Values = None,
) -> None:
    """Compile the calibration artifacts on the RBLN stack (backend rbln)."""
    from rearrival.measure.calibration.rbln_compile import compile_calibration

    cfg = checked_config(config, "calibration", None, values)
    compile_calibration(cfg.measurement, cfg.rbln, out)
    typer.echo(f"{out}: calibration artifacts compiled")


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("calibrate")(calibrate)
    app.command("calibrate-compile", rich_help_panel=PIPELINE_PANEL)(calibrate_compile)
