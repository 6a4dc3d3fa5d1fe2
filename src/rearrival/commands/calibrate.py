"""CLI verbs of the calibration area (registered by rearrival.cli): calibrate and
calibrate-compile (docs/DESIGN.md §3, "Calibration")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rearrival.commands.panels import PIPELINE_PANEL
from rearrival.commands.values import Values, checked_config
from rearrival.config.location import DEFAULT_CONFIG

if TYPE_CHECKING:
    from rearrival.config.calibration import MeasurementSettings
    from rearrival.config.study import StudyConfig
    from rearrival.measure.backends import BackendSettings
    from rearrival.measure.calibration.drive import Calibration, CalibrationFiles
    from rearrival.model.configuration import VllmConfiguration


# ``calibrate --backend vllm``'s knobs when not given: those of ``run --backend vllm``.
VLLM_DEFAULT_KNOBS = {
    "batch_size": 8,
    "num_blocks": 512,
    "block_size": 32,
    "max_num_batched_tokens": 512,
}


def vllm_calibration_configuration(
    buckets: str | None, knobs: dict[str, int | None]
) -> VllmConfiguration:
    """The knobs given (None: the default) as the one configuration type, each refusal
    naming its option."""
    from rearrival.commands.configuration import vllm_configuration_option

    chosen = {
        name: default if knobs.get(name) is None else knobs[name]
        for name, default in VLLM_DEFAULT_KNOBS.items()
    }
    batch = chosen.pop("batch_size")
    return vllm_configuration_option(buckets, batch, **chosen, name="vllm-calibration")


@dataclass(frozen=True)
class VllmCalibrationOptions:
    """What ``--backend vllm`` reads beside the knobs (None: the default)."""

    model: Path | None = None
    max_model_len: int | None = None
    cycles: int | None = None
    seed: int | None = None


def _named(flag: str, name: str) -> typer.models.OptionInfo:
    return typer.Option(flag, help=f"Where to write {name} (default: in --work).")


RunsDir = Annotated[Path | None, _named("--runs", "the calibration runs (a directory)")]
PlansDir = Annotated[Path | None, _named("--plans", "their plans (a directory)")]
DecodeSteps = Annotated[Path | None, _named("--decode-steps", "the decode-step samples")]
PrefillSamples = Annotated[Path | None, _named("--prefill", "the prefill samples")]
ReuseSamples = Annotated[Path | None, _named("--reuse", "the reuse checks")]
ProfileOut = Annotated[
    Path,
    typer.Option(
        "--out",
        help="Profile YAML to write; its runs and sample tables go into --work "
        "unless named by the options below.",
    ),
]
WorkDir = Annotated[
    Path | None,
    typer.Option(
        "--work",
        help="Directory for the runs, their plans and the sample tables (runs/, plans/, "
        "*.parquet) [default: beside --out, named after it: p.yaml -> p-calibration/].",
    ),
]
CalibrationConfig = Annotated[
    Path,
    typer.Option(
        "--config",
        help="Study definition with model:/calibration: sections (default "
        "settings when the file does not exist).",
    ),
]
CalibrationBackend = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="emulated, emulated-http, rbln or vllm (default: the config's). vllm: the "
        "step cost of docs/DESIGN.md §15 on real vLLM servers (two: the calibration and a "
        "held-out validation), with the knobs below; --config is not read.",
    ),
]
EmulatorTruth = Annotated[
    str | None,
    typer.Option(
        "--emulator-truth",
        help="Truth of the emulated backends: default, assumed "
        "(hypothetical) or a truth YAML path (default: the config's).",
    ),
]
TimeScale = Annotated[
    float | None,
    typer.Option("--time-scale", help="emulated-http: wall seconds per emulated second."),
]
Compiled = Annotated[
    Path | None,
    typer.Option(
        "--compiled",
        help="rbln: compile record of the calibration artifacts "
        "(`rearrival calibrate-compile`); also fits compile time and size.",
    ),
]
BatchSize = Annotated[
    int | None, typer.Option("--batch-size", help="vllm: --max-num-seqs (default 8).")
]
NumBlocks = Annotated[
    int | None,
    typer.Option(
        "--num-blocks", help="vllm: KV pool in blocks, null block included (default 512)."
    ),
]
BlockSize = Annotated[
    int | None,
    typer.Option(
        "--block-size", help="vllm: tokens per KV block (default 32; CPU: multiple of 32)."
    ),
]
TokenBudget = Annotated[
    int | None,
    typer.Option("--max-num-batched-tokens", help="vllm: the per-step token budget (default 512)."),
]
CaptureSizes = Annotated[
    str | None,
    typer.Option(
        "--buckets", help="vllm: CUDA-graph capture sizes, GPU only (default none: eager)."
    ),
]
ModelDir = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="vllm: model directory with a config.json (default: the shipped "
        "tiny-qwen3, random weights).",
    ),
]
MaxModelLen = Annotated[
    int | None,
    typer.Option("--max-model-len", help="vllm: default the model's max_position_embeddings."),
]
Cycles = Annotated[
    int | None,
    typer.Option(
        "--cycles",
        help="vllm: repetitions of the calibration plan's segments (default 8; about "
        "8 s of plan each).",
    ),
]
Seed = Annotated[
    int | None, typer.Option("--seed", help="vllm: plans' and runs' seed (default 0).")
]


def flag_of(name: str) -> str:
    """The option's flag: its name with dashes, but for the capture sizes, which the
    command line calls --buckets as every verb does."""
    return "--buckets" if name == "capture_sizes" else "--" + name.replace("_", "-")


@dataclass(frozen=True)
class CalibrateOptions:
    """Every option of ``rearrival calibrate`` (None: not given). The vLLM knobs are read
    by ``--backend vllm`` only, the sample paths, truth, time scale, compile record and
    ``--values`` by the other backends only. Each field is the option of its name
    (``max_model_len``: ``--max-model-len``)."""

    out: Path
    work: Path | None = None
    config: Path = DEFAULT_CONFIG
    backend: str | None = None
    emulator_truth: str | None = None
    time_scale: float | None = None
    compiled: Path | None = None
    batch_size: int | None = None
    num_blocks: int | None = None
    block_size: int | None = None
    max_num_batched_tokens: int | None = None
    capture_sizes: str | None = None  # --buckets: vLLM's CUDA-graph capture sizes
    model: Path | None = None
    max_model_len: int | None = None
    cycles: int | None = None
    seed: int | None = None
    runs: Path | None = None
    plans: Path | None = None
    decode_steps: Path | None = None
    prefill: Path | None = None
    reuse: Path | None = None
    values: str | None = None

    def given(self, names: tuple[str, ...]) -> list[str]:
        """The options of ``names`` that were given, as their flags."""
        return [flag_of(name) for name in names if getattr(self, name) is not None]

    def vllm_knobs(self) -> dict[str, int | None]:
        return {name: getattr(self, name) for name in VLLM_DEFAULT_KNOBS}


# The options only --backend vllm reads, and those it does not read, in --help's order.
VLLM_ONLY = (
    "batch_size",
    "num_blocks",
    "block_size",
    "max_num_batched_tokens",
    "capture_sizes",
    "model",
    "max_model_len",
    "cycles",
    "seed",
)
RBLN_ONLY = (
    "emulator_truth",
    "time_scale",
    "compiled",
    "runs",
    "plans",
    "decode_steps",
    "prefill",
    "reuse",
    "values",
)


def calibrate(
    out: ProfileOut,
    work: WorkDir = None,
    config: CalibrationConfig = DEFAULT_CONFIG,
    backend: CalibrationBackend = None,
    emulator_truth: EmulatorTruth = None,
    time_scale: TimeScale = None,
    compiled: Compiled = None,
    batch_size: BatchSize = None,
    num_blocks: NumBlocks = None,
    block_size: BlockSize = None,
    max_num_batched_tokens: TokenBudget = None,
    capture_sizes: CaptureSizes = None,
    model: ModelDir = None,
    max_model_len: MaxModelLen = None,
    cycles: Cycles = None,
    seed: Seed = None,
    runs: RunsDir = None,
    plans: PlansDir = None,
    decode_steps: DecodeSteps = None,
    prefill: PrefillSamples = None,
    reuse: ReuseSamples = None,
    values: Values = None,
) -> None:
    """Measure the cost model on a backend and write a profile with CIs, samples and run
    ids: g(b), beta, the prefill model and the reuse rule (paper II-B, III-C, IV; Table
    VII), or with --backend vllm the vLLM step cost (docs/DESIGN.md §15 rule 7)."""
    run_calibrate(CalibrateOptions(**locals()))  # the parameters, one field each


def run_calibrate(options: CalibrateOptions) -> None:
    """``rearrival calibrate`` with its options: the vLLM step cost on --backend vllm,
    else the RBLN cost model; an option the chosen backend does not read is refused."""
    from rearrival.errors import RearrivalError
    from rearrival.vocabulary import VLLM

    if options.backend == VLLM:
        given = options.given(RBLN_ONLY)
        if given:
            raise RearrivalError(
                f"{', '.join(given)}: not read by --backend vllm (its runs and samples go "
                "into --work); drop them"
            )
        configuration = vllm_calibration_configuration(options.capture_sizes, options.vllm_knobs())
        vllm = VllmCalibrationOptions(
            options.model, options.max_model_len, options.cycles, options.seed
        )
        calibrate_vllm(options.out, options.work, configuration, vllm)
        return
    given = options.given(VLLM_ONLY)
    if given:
        raise RearrivalError(
            f"{', '.join(given)}: only for --backend vllm; drop them or pass --backend vllm"
        )
    calibrate_cost_model(options)


def calibrate_cost_model(options: CalibrateOptions) -> None:
    """The RBLN cost model measured on an emulated or real backend, written as a profile
    with its samples; one line says what was measured."""
    from dataclasses import replace

    from rearrival.config.calibration import MeasurementSettings
    from rearrival.measure.calibration.document import (
        profile_document,
        required_buckets,
        write_profile,
    )
    from rearrival.measure.calibration.drive import calibrate as run_calibration
    from rearrival.measure.calibration.drive import write_samples
    from rearrival.measure.calibration.rbln_compile import compile_records
    from rearrival.vocabulary import RBLN

    config = options.config
    cfg = checked_config(config, "calibration", None, options.values) if config.is_file() else None
    files = _calibration_files(options)
    settings = cfg.measurement if cfg is not None else MeasurementSettings()
    if options.emulator_truth is not None:
        settings = replace(settings, emulator_truth=options.emulator_truth)
    backend_settings = _backend_settings(options, cfg, settings)
    chosen = backend_settings.backend
    compiled = options.compiled
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
    write_profile(profile_document(result, settings, wanted), options.out)
    typer.echo(_measured_line(options.out, chosen, files, result))


def _calibration_files(options: CalibrateOptions) -> CalibrationFiles:
    """Where the runs and samples go: the paths given, else inside --work."""
    from rearrival.measure.calibration.drive import CalibrationFiles

    work_dir = options.work if options.work is not None else work_directory(options.out)
    default = CalibrationFiles.in_directory(work_dir)
    return CalibrationFiles(
        options.runs or default.runs,
        options.plans or default.plans,
        options.decode_steps or default.decode_steps,
        options.prefill or default.prefill,
        options.reuse or default.reuse,
    )


def _backend_settings(
    options: CalibrateOptions, cfg: StudyConfig | None, settings: MeasurementSettings
) -> BackendSettings:
    """The backend the calibration runs on (--backend, else the config's, else
    emulated) with the config's settings, the time scale and the emulator's truth."""
    from dataclasses import replace

    from rearrival.config.backends import EmulatedHttpSettings
    from rearrival.measure.backends import BackendSettings
    from rearrival.vocabulary import EMULATED, EMULATED_HTTP

    chosen = options.backend or (cfg.backend if cfg is not None else EMULATED)
    base = (
        BackendSettings.from_study_config(cfg, options.compiled)
        if cfg is not None
        else BackendSettings(compile_record=options.compiled)
    )
    scale = options.time_scale or (
        cfg.emulated_http.time_scale if cfg is not None else EmulatedHttpSettings().time_scale
    )
    return replace(
        base,
        backend=chosen,
        time_scale=scale if chosen == EMULATED_HTTP else 1.0,
        emulator_truth=settings.truth_path(),
    )


def _measured_line(out: Path, chosen: str, files: CalibrationFiles, result: Calibration) -> str:
    """What a cost-model calibration measured, in one line."""
    decode = result.decode
    return (
        f"{out}: {len(decode.buckets)} buckets measured on {chosen} (runs in "
        f"{files.runs}), beta "
        f"{decode.beta_s * 1e3:.4f} ms [{decode.beta_ci_s[0] * 1e3:.4f}, "
        f"{decode.beta_ci_s[1] * 1e3:.4f}], max residual "
        f"{decode.max_abs_residual:.3%}, prefill a={result.prefill.per_chunk_s:.6f} s "
        f"b={result.prefill.per_token_s:.4g} s/token, reuse {result.reuse.checked} "
        f"re-arrivals, {len(result.reuse.violations)} violations"
    )


def calibrate_vllm(
    out: Path,
    work: Path | None,
    configuration: VllmConfiguration,
    options: VllmCalibrationOptions,
) -> None:
    """``calibrate --backend vllm``: the vLLM step cost measured on real servers
    (docs/DESIGN.md §15, "Calibration"), written as a vLLM profile; one line says what
    was fitted, one stderr line names each residual cell beyond the bound."""
    import sys

    from rearrival.measure.calibration.vllm_design import VllmCalibrationDesign
    from rearrival.measure.calibration.vllm_document import profile_document, write_profile
    from rearrival.measure.calibration.vllm_drive import VllmCalibrationSettings, write_samples
    from rearrival.measure.calibration.vllm_drive import calibrate_vllm as run_calibration
    from rearrival.measure.records import utc_now_iso
    from rearrival.measure.vllm.backend import VllmSettings

    design = VllmCalibrationDesign()
    if options.cycles is not None:
        design = VllmCalibrationDesign(cycles=options.cycles)
    settings = VllmCalibrationSettings(
        configuration,
        VllmSettings(model_dir=options.model, max_model_len=options.max_model_len),
        design,
        seed=0 if options.seed is None else options.seed,
    )
    work_dir = work if work is not None else work_directory(out)
    result = run_calibration(settings, work_dir)
    write_samples(result, work_dir)
    command = ["rearrival", *sys.argv[1:]]
    document = profile_document(
        result, command=command, measured_at=utc_now_iso(), memory=device_memory(result)
    )
    write_profile(document, out)
    typer.echo(f"{out}: {calibration_summary(document)}; runs and samples in {work_dir}")
    for label in document["residuals"]["beyond_bound"]:
        typer.echo(f"calibrate: residual cell beyond the bound: {label}", err=True)


def device_memory(result: Any) -> dict[str, Any] | None:
    """The profile's memory block on a device that has memory of its own (a GPU), from
    the calibration server's log and torch in the vLLM environment; None on the CPU."""
    from rearrival.measure.calibration.vllm_memory import device_total_bytes, memory_block
    from rearrival.vllm_env import require_vllm_python

    run = result.calibration_run
    engine = run.manifest["engine"]
    if engine["device"] != "gpu":
        return None
    return memory_block(
        run.server_log or "",
        device_total_bytes(require_vllm_python()),
        result.settings.vllm.tensor_parallel_size,
    )


def calibration_summary(document: dict[str, Any]) -> str:
    """A vLLM profile's coefficients, validation and residual cells in one line."""
    cost = document["step_cost"]

    def term(name: str, scale: float, unit: str) -> str:
        entry = cost[name]
        low, high = (x * scale for x in entry["ci"])
        mark = "" if entry["identified"] else " (not identified)"
        return f"{name} {entry['value'] * scale:.4g} {unit} [{low:.4g}, {high:.4g}]{mark}"

    validation, residuals = document["validation"], document["residuals"]
    return (
        f"vLLM step cost on {document['device']} from {document['fit']['samples']} steps: "
        f"{term('base_s', 1e3, 'ms')}, {term('per_decode_token_s', 1e6, 'us')}, "
        f"{term('per_prefill_token_s', 1e6, 'us')}, {term('per_kv_token_s', 1e9, 'ns')}; "
        f"held-out device time {validation['simulated_relative_error']:+.1%} simulated, "
        f"{validation['priced_relative_error']:+.1%} priced on its steps; "
        f"{len(residuals['beyond_bound'])} residual cells beyond "
        f"{residuals['bound_relative']:.0%}; {document['provenance']['wall_s']:.0f} s"
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
