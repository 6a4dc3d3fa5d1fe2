"""CLI verbs of the measure area (registered by rearrival.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rearrival.commands.panels import PIPELINE_PANEL
from rearrival.commands.run_options import (
    RunArtifactOption,
    RunBackendOption,
    RunBatchSizeOption,
    RunBlockSizeOption,
    RunBucketsOption,
    RunConditionOption,
    RunMaxModelLenOption,
    RunMaxNumBatchedTokensOption,
    RunModelOption,
    RunNumBlocksOption,
    RunOutOption,
    RunPlanPathOption,
    RunReplicasOption,
    RunReplicateOption,
    RunRouterPolicyOption,
    RunSeedOption,
    RunSitePackagesOption,
    RunSlotsOption,
    RunStudyOption,
    RunTimeScaleOption,
    RunUrlOption,
    RunVariantOption,
)
from rearrival.vocabulary import BACKENDS, EMULATED, EMULATED_HTTP, VLLM

if TYPE_CHECKING:
    from rearrival.measure.vllm.backend import VllmSettings
    from rearrival.model.configuration import VllmConfiguration


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""
    app.command("channels", rich_help_panel=PIPELINE_PANEL)(channels)
    app.command("run", rich_help_panel=PIPELINE_PANEL)(run)
    app.command("emulate-server")(emulate_server)


# --- channels (rearrival.judge.channels; docs/DESIGN.md §6-7) -----------------------------


def channels(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(metavar="RUN_DIR", help="Run directories written by `rearrival run`."),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per run, one per line.")
    ] = False,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", help="Profile YAML; default: the measured RBLN-CA25 profile."),
    ] = None,
) -> None:
    """Channel A (step-log device time), channel B (client in-flight union) and r = B - A.

    Paper Section II-D: A prices every decode step (f(b)+alpha+beta*n) and every request's
    computed prefill tokens; B is the union of the send-to-complete intervals. Only runs
    whose manifest status is 'complete' are read.
    """
    import json

    from rearrival.judge.channels import channels as run_channels
    from rearrival.measure.records import read_run
    from rearrival.model.cost.profile import load_profile

    costs = load_profile(profile)
    for run_dir in run_dirs:
        values = run_channels(read_run(run_dir), costs)
        if as_json:
            typer.echo(json.dumps(values))
        elif "a_elapsed_s" in values:  # a vLLM run: its steps' own elapsed times beside B
            typer.echo(
                f"{run_dir}: A(elapsed)={values['a_elapsed_s']:.6f} s B={values['b_s']:.6f} s "
                f"r={values['r_elapsed_s']:.6f} s (A priced by the vLLM profile: "
                "`rearrival.judge.channels.channels(record, step_cost=...)`)"
            )
        else:
            typer.echo(
                f"{run_dir}: A={values['a_s']:.6f} s (decode {values['a_decode_s']:.6f}"
                f" + prefill {values['a_prefill_s']:.6f}) B={values['b_s']:.6f} s "
                f"r={values['r_s']:.6f} s"
            )


# --- run and emulate-server (measure.client, measure.emulate_server; docs/DESIGN.md §5-6) ------


def run(
    plan_path: RunPlanPathOption,
    out: RunOutOption,
    backend: RunBackendOption = EMULATED,
    buckets: RunBucketsOption = None,
    batch_size: RunBatchSizeOption = 8,
    slots: RunSlotsOption = None,
    variant: RunVariantOption = "wait",
    url: RunUrlOption = None,
    seed: RunSeedOption = 0,
    time_scale: RunTimeScaleOption = None,
    study: RunStudyOption = "adhoc",
    replicate: RunReplicateOption = None,
    condition: RunConditionOption = None,
    artifact: RunArtifactOption = None,
    site_packages: RunSitePackagesOption = None,
    num_blocks: RunNumBlocksOption = 512,
    block_size: RunBlockSizeOption = 32,
    max_num_batched_tokens: RunMaxNumBatchedTokensOption = 512,
    model: RunModelOption = None,
    max_model_len: RunMaxModelLenOption = None,
    replicas: RunReplicasOption = 1,
    router_policy: RunRouterPolicyOption = "round_robin",
) -> None:
    """Run one condition of one plan on one backend and write its run directory (docs/DESIGN.md §6).

    emulated runs the virtual-time twin in process; emulated-http and rbln replay the
    plan through the async client (token-id prompts, streaming) against a fresh server.
    Every round of a session is one request (requests.parquet column 'turn' = round
    index); each round after the first resends the session's transcript so far.
    A run cut short is still written, marked failed/partial with its reason, and the
    command exits non-zero.
    """
    import asyncio

    from rearrival.commands.configuration import configuration_option, vllm_configuration_option
    from rearrival.errors import RearrivalError
    from rearrival.measure.backends import BackendSettings, RunRequest, run_backend, run_status
    from rearrival.measure.process_groups import Interrupted
    from rearrival.measure.vllm.backend import VllmSettings
    from rearrival.model.plans.plan import load_plan

    if backend not in BACKENDS:
        raise RearrivalError(f"--backend '{backend}': use one of {', '.join(BACKENDS)}")
    if backend == VLLM:
        _run_vllm(
            plan_path,
            out,
            vllm_configuration_option(
                buckets,
                batch_size,
                num_blocks=num_blocks,
                block_size=block_size,
                max_num_batched_tokens=max_num_batched_tokens,
                name=condition or "adhoc",
            ),
            VllmSettings(model_dir=model, max_model_len=max_model_len),
            variant=variant,
            seed=seed,
            study=study,
            replicate=replicate,
            fleet=(replicas, router_policy) if replicas > 1 else None,
        )
        return
    configuration = configuration_option(buckets, batch_size, slots)
    plan = load_plan(plan_path)
    plan.variant(variant)  # validates the variant name before anything starts
    served = None
    if backend == EMULATED_HTTP and url is not None:
        from rearrival.measure.client_http import ClientError
        from rearrival.measure.emulate_client import server_configuration

        try:
            served = asyncio.run(server_configuration(url))
        except ClientError:
            served = None  # unreachable: the replay records the failure as the run's reason
    settings = BackendSettings(
        backend=backend,
        time_scale=_time_scale(backend, time_scale, served, url),
        url=url,
        artifact=artifact,
        site_packages=site_packages,
    )
    label = condition or f"{backend}:{configuration.id}:{variant}"
    request = RunRequest(
        study=study,
        plan=plan,
        plan_path=plan_path,
        configuration=configuration,
        variant=variant,
        label=label,
        replicate=replicate if replicate is not None else (plan.meta.replicate or 0),
        seed=seed,
        condition_order=[label],
        prereg={},
    )
    try:
        written = run_backend(settings, request, out)
    except Interrupted as stop:
        raise stop.naming(
            f"run {label}: {stop}; its server was stopped, {out} not written"
        ) from None
    status, reason = run_status(written)
    if status != "complete":
        raise RearrivalError(
            f"run {status}: {reason}; the record at {written} is marked "
            f"'{status}' and is never used by a decision"
        )
    typer.echo(f"{out} complete")


def _run_vllm(
    plan_path: Path,
    out: Path,
    configuration: VllmConfiguration,
    vllm: VllmSettings,
    *,
    variant: str,
    seed: int,
    study: str,
    replicate: int | None,
    fleet: tuple[int, str] | None = None,
) -> None:
    """``run --backend vllm``: one run on a fresh vLLM server (docs/DESIGN.md §15), or
    with ``fleet`` (replicas, router policy) on a fresh fleet behind vllm-router."""
    from rearrival.errors import RearrivalError
    from rearrival.measure.backends import (
        BackendSettings,
        RunRequest,
        run_backend,
        run_manifest,
        run_status,
    )
    from rearrival.measure.fleet.backend import FleetSettings, run_fleet
    from rearrival.measure.process_groups import Interrupted
    from rearrival.model.plans.plan import load_plan

    plan = load_plan(plan_path)
    plan.variant(variant)  # validates the variant name before anything starts
    label = configuration.name
    request = RunRequest(
        study=study,
        plan=plan,
        plan_path=plan_path,
        configuration=configuration,
        variant=variant,
        label=label,
        replicate=replicate if replicate is not None else (plan.meta.replicate or 0),
        seed=seed,
        condition_order=[label],
        prereg={},
    )
    settings = BackendSettings(backend=VLLM, vllm=vllm)
    try:
        if fleet is None:
            written = run_backend(settings, request, out)
        else:
            written = run_fleet(
                plan,
                out,
                configuration=configuration,
                settings=FleetSettings(policy=fleet[1], replicas=fleet[0], vllm=vllm),
                variant=variant,
                seed=seed,
                manifest=run_manifest(settings, request),
                plan_source=str(plan_path),
            ).path
    except Interrupted as stop:
        raise stop.naming(f"{stop}: {out}") from None
    status, reason = run_status(written)
    if status != "complete":
        raise RearrivalError(
            f"run {status}: {reason}; the record at {written} is marked "
            f"'{status}' and is never used by a decision"
        )
    typer.echo(f"{out} complete")


def _time_scale(backend: str, asked: float | None, served: dict | None, url: str | None) -> float:
    """Wall seconds per plan second: 1 for the in-process twin and real hardware, the
    server's own scale for a running emulate-server, else the schema's default."""
    from rearrival.errors import RearrivalError

    if backend == EMULATED:
        return 1.0
    if served is not None:
        if asked is not None and asked != served["time_scale"]:
            raise RearrivalError(
                f"--time-scale {asked}: the server at {url} runs at "
                f"{served['time_scale']}; omit --time-scale or restart it"
            )
        return float(served["time_scale"])
    if asked is not None:
        return asked
    from rearrival.config.backends import EmulatedHttpSettings

    return EmulatedHttpSettings().time_scale if backend == EMULATED_HTTP else 1.0


def emulate_server(
    port: Annotated[int, typer.Option("--port", help="TCP port to listen on.")],
    host: Annotated[str, typer.Option("--host", help="Address (keep it loopback).")] = (
        "127.0.0.1"
    ),
    buckets: Annotated[str, typer.Option("--buckets", help="Compiled buckets.")] = "1,2,4,8",
    batch_size: Annotated[int, typer.Option("--batch-size")] = 8,
    slots: Annotated[
        int | None, typer.Option("--slots", help="KV slots; default batch_size; at most 1,024.")
    ] = None,
    time_scale: Annotated[
        float,
        typer.Option("--time-scale", help="Wall seconds per emulated second (0.05 = 20x faster)."),
    ] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="Engine noise and generated ids.")] = 0,
    log: Annotated[
        Path | None, typer.Option("--log", help="Append the step log here; default: stdout.")
    ] = None,
    truth: Annotated[
        Path | None,
        typer.Option(
            "--truth",
            help="Emulator truth YAML (default: the shipped twin of the measured "
            "stack; e.g. the hypothetical emulator_truth_assumed.yaml).",
        ),
    ] = None,
) -> None:
    """Serve the emulated engine over HTTP like vLLM until SIGTERM (docs/DESIGN.md §5).

    OpenAI-compatible /v1/completions (token-id prompts, streaming) and
    /v1/chat/completions (text messages, tokenised by the rule of docs/DESIGN.md §5, so
    usage and cached tokens are exact; max_completion_tokens required), /v1/models,
    /health, Prometheus /metrics, and a [BUCKET] line per decode step in the log. A
    request field the emulator does not implement (n > 1, logprobs, echo, stop, tools,
    ...) or a token id outside Qwen3-4B's vocabulary (151,936 ids) is refused with
    HTTP 400 naming it.
    """
    import asyncio

    from rearrival.commands.configuration import configuration_option
    from rearrival.measure.emulate.server import ServerOptions, serve

    options = ServerOptions(
        configuration_option(buckets, batch_size, slots),
        seed=seed,
        time_scale=time_scale,
        log_path=log,
        truth_path=truth,
    )
    asyncio.run(serve(options, host, port))
