"""CLI verbs of the simulate area (registered by rearrival.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from rearrival.commands.profile import PROFILE_HELP
from rearrival.config.location import DEFAULT_CONFIG
from rearrival.errors import RearrivalError

# Options that only one substrate reads, by the name the verb gives them.
RBLN_ONLY = {
    "buckets": "--buckets",
    "batch_size": "--batch-size",
    "slots": "--slots",
    "release": "--release",
    "dummy_block": "--dummy-block",
}
VLLM_ONLY = {
    "block_size": "--block-size",
    "num_blocks": "--num-blocks",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "capture_sizes": "--capture-sizes",
    "step_cost": "--step-cost",
}
RBLN_DEFAULTS = {
    "buckets": "1,2,4,8",
    "batch_size": 8,
    "slots": None,
    "release": "deferred",
    "dummy_block": "off",
}


class SimulateOptionError(RearrivalError, ValueError):
    """Options that do not fit together; the message names them and the fix."""


def _without_fields(message: str) -> str:
    """The library's message without its "SimConfig field(s) 'x':" lead, which names
    internals once the options are named (issue 36)."""
    import re

    return re.sub(r"^SimConfig fields? (?:'[a-z_]+'(?:/'[a-z_]+')*:? )?", "", message)


def parse_buckets(text: str, option: str = "--buckets") -> tuple[int, ...]:
    """``"1,2,4,8"`` -> (1, 2, 4, 8); anything else is a one-line error naming the option."""
    from rearrival.model.simulator.rbln.sim import SimConfigError

    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError as exc:
        raise SimConfigError(
            f"{option} {text!r}: give comma-separated integers such as 1,2,4,8"
        ) from exc


def observed_rearrivals(run_dir: Path) -> list[float]:
    """The send times of a run's re-arrivals (every round after a session's first), in
    (session, round) order, from its ``requests.parquet``."""
    from rearrival.measure.records import read_run
    from rearrival.measure.records.contract import ROUND_COLUMN

    requests = read_run(run_dir).requests
    later = requests[requests[ROUND_COLUMN] > 0].sort_values(["session", ROUND_COLUMN])
    return [float(t) for t in later["send_s"]]


def _plans(plans: list[Path], options: dict[str, Any]) -> list[Any]:
    from rearrival.model.plans.plan import load_plan

    return [load_plan(path).variant(options["variant"]) for path in plans]


def _fixed(options: dict[str, Any]) -> list[float] | None:
    run_dir = options["fixed_arrivals"]
    return None if run_dir is None else observed_rearrivals(run_dir)


def _refuse_foreign(substrate: str, given: dict[str, Any]) -> None:
    foreign = VLLM_ONLY if substrate == "rbln" else RBLN_ONLY
    named = [flag for name, flag in foreign.items() if given.get(name) is not None]
    if named:
        other = "vllm" if substrate == "rbln" else "rbln"
        raise SimulateOptionError(
            f"{', '.join(named)}: only for --substrate {other}; drop them or pass "
            f"--substrate {other}"
        )


def _simulate_rbln(
    plans: list[Path], options: dict[str, Any], as_json: bool, fleet: Any = None
) -> None:
    from rearrival.commands.profile import profile_for_config
    from rearrival.model.plans.plan import check_context
    from rearrival.model.simulator.rbln.sim import SimConfig, SimConfigError, simulate

    knobs = {name: options[name] for name in RBLN_DEFAULTS} | {
        name: RBLN_DEFAULTS[name] for name in RBLN_DEFAULTS if options[name] is None
    }
    try:
        config = SimConfig(
            buckets=parse_buckets(knobs["buckets"]),
            batch_size=knobs["batch_size"],
            slots=knobs["slots"],
            release=knobs["release"],
            dummy_block=knobs["dummy_block"],
            fixed_arrivals=_fixed(options),
        )
    except SimConfigError as exc:  # the library names fields; name their options
        flags = ", ".join("--" + name.replace("_", "-") for name in exc.fields)
        raise SimConfigError(
            f"{flags}: {_without_fields(str(exc))}" if flags else str(exc)
        ) from None
    given, config_file = options["profile_path"], options["config_file"]
    chosen = profile_for_config(
        config_file, None if given is None else str(given), config_file != DEFAULT_CONFIG
    )
    profile = chosen.profile
    loaded = _plans(plans, options)
    for path, plan in zip(plans, loaded, strict=True):
        where = f"{path} (profile measured at {profile.slot_tokens:,} tokens)"
        check_context(plan, profile.slot_tokens, where)
    chosen.announce()
    for path, plan in zip(plans, loaded, strict=True):
        if fleet is None:
            summary = simulate(plan, config, profile).summary()
        else:
            summary = fleet.summary(plan, config, profile, config.fixed_arrivals, str(path))
        _echo(summary, as_json, fleet, _rbln_line(path, plan, summary))


def _rbln_line(path: Path, plan: Any, summary: dict[str, Any]) -> str:
    return (
        f"{path}: N={plan.n} D={summary['device_s']:.4f}s "
        f"(decode {summary['decode_s']:.4f}s, prefill {summary['prefill_s']:.4f}s) "
        f"W={summary['interference_s']:.4f} session-s "
        f"steps={summary['decode_steps']} padding={summary['padding_ratio']:.4f} "
        f"reuse={summary['reuse_hits']}/{summary['re_arrivals']} "
        f"makespan={summary['makespan_s']:.3f}s"
    )


def _echo(summary: dict[str, Any], as_json: bool, fleet: Any, line: str) -> None:
    """One plan's output: its JSON object, or its line (and the fleet's latency line)."""
    import json

    if as_json:
        typer.echo(json.dumps(summary, sort_keys=True))
        return
    typer.echo(line)
    if fleet is not None:
        typer.echo(fleet.line(summary))


def _vllm_step_cost(options: dict[str, Any]) -> tuple[Any, Any]:
    """The step cost and the profile it came from (None for --step-cost)."""
    from rearrival.model.cost.vllm_profile import (
        DEFAULT_VLLM_PROFILE,
        choose_vllm_profile,
        parse_step_cost,
    )

    text, profile = options["step_cost"], options["profile_path"]
    if text is not None and profile is not None:
        raise SimulateOptionError(
            "--step-cost and --profile both give the step cost; pass one of them"
        )
    if text is not None:
        return parse_step_cost(text), None
    if profile is not None or DEFAULT_VLLM_PROFILE is not None:
        chosen = choose_vllm_profile(profile)
        return chosen.step_cost, chosen
    raise SimulateOptionError(
        "--substrate vllm needs the step cost: pass --step-cost BASE,DEC,PRE[,KV] (seconds "
        "per step, per decode token, per prefill token, per token of context) or --profile "
        "VLLM_PROFILE.yaml (docs/DESIGN.md §15); no calibrated vLLM profile ships yet"
    )


def _vllm_configuration(options: dict[str, Any]) -> Any:
    from rearrival.model.configuration import ConfigurationError, VllmConfiguration

    missing = [
        flag
        for name, flag in VLLM_ONLY.items()
        if name not in ("capture_sizes", "step_cost") and options[name] is None
    ]
    if missing:
        raise SimulateOptionError(
            f"--substrate vllm needs {', '.join(missing)} (the server's knobs: block size, "
            "KV pool in blocks including the null block, max_num_seqs, token budget)"
        )
    sizes = options["capture_sizes"]
    flags = {"batch_size": "--max-num-seqs", "buckets": "--capture-sizes"}
    try:
        return VllmConfiguration(
            parse_buckets(sizes, "--capture-sizes") if sizes else (),
            options["max_num_seqs"],
            num_blocks=options["num_blocks"],
            block_size=options["block_size"],
            max_num_batched_tokens=options["max_num_batched_tokens"],
        )
    except ConfigurationError as exc:
        named = ", ".join(flags.get(f, "--" + f.replace("_", "-")) for f in exc.fields)
        raise ConfigurationError(f"{named}: {exc}" if named else str(exc)) from None


def _simulate_vllm(
    plans: list[Path], options: dict[str, Any], as_json: bool, fleet: Any = None
) -> None:
    from rearrival.commands.profile import announce_vllm_profile
    from rearrival.model.simulator.vllm.sim import simulate_vllm

    configuration = _vllm_configuration(options)
    step_cost, profile = _vllm_step_cost(options)
    fixed = _fixed(options)
    loaded = _plans(plans, options)
    summaries = [
        simulate_vllm(plan, configuration, step_cost, fixed, source=str(path)).summary()
        if fleet is None
        else fleet.summary(plan, configuration, step_cost, fixed, str(path))
        for path, plan in zip(plans, loaded, strict=True)
    ]
    for path, plan, summary in zip(plans, loaded, summaries, strict=True):
        _echo(summary, as_json, fleet, _vllm_line(path, plan, summary))
    if profile is not None:
        announce_vllm_profile(profile, options["profile_path"])


def _vllm_line(path: Path, plan: Any, summary: dict[str, Any]) -> str:
    return (
        f"{path}: N={plan.n} D={summary['device_s']:.4f}s steps={summary['steps']} "
        f"tokens decode={summary['decode_tokens']} prefill={summary['prefill_tokens']} "
        f"cached={summary['cached_tokens']} preemptions={summary['preemptions']} "
        f"lost={summary['re_arrivals_lost']}/{summary['re_arrivals']} "
        f"recomputed={summary['recomputed_prefill_tokens']} "
        f"makespan={summary['makespan_s']:.3f}s"
    )


def register(app: typer.Typer) -> None:
    """Add this area's verbs to the top-level app."""

    @app.command("simulate")
    def simulate_cmd(
        plans: list[Path] = typer.Argument(..., help="Plan files (Parquet or JSON)."),  # noqa: B008
        substrate: str = typer.Option(
            "rbln",
            "--substrate",
            help="rbln (the paper's compile-time-static stack, docs/DESIGN.md §4) or vllm "
            "(paged KV with prefix caching, vLLM 0.32.0's scheduler, docs/DESIGN.md §15).",
        ),
        buckets: str | None = typer.Option(
            None, "--buckets", help="RBLN: compiled decode buckets (default 1,2,4,8)."
        ),
        batch_size: int | None = typer.Option(
            None,
            "--batch-size",
            help="RBLN: largest bucket and execution limit (default 8, at most 1,024).",
        ),
        slots: int | None = typer.Option(
            None, "--slots", help="RBLN: KV slots (default: batch size; at most 1,024)."
        ),
        release: str | None = typer.Option(
            None,
            "--release",
            help="RBLN: slot release timing: deferred (paper's base, the default) or "
            "immediate (measured stack).",
        ),
        dummy_block: str | None = typer.Option(
            None,
            "--dummy-block",
            help="RBLN: padding-block rule: off (paper's base, the default), pre-evict "
            "(measured stack) or reserved (paper's Supplementary S9 simulator, with "
            "deferred release).",
        ),
        block_size: int | None = typer.Option(
            None, "--block-size", help="vLLM: tokens per KV block."
        ),
        num_blocks: int | None = typer.Option(
            None,
            "--num-blocks",
            help="vLLM: KV pool in blocks, the null block included (at most 1,048,576).",
        ),
        max_num_seqs: int | None = typer.Option(
            None, "--max-num-seqs", help="vLLM: most requests running at once (at most 1,024)."
        ),
        max_num_batched_tokens: int | None = typer.Option(
            None, "--max-num-batched-tokens", help="vLLM: token budget of one step."
        ),
        capture_sizes: str | None = typer.Option(
            None,
            "--capture-sizes",
            help="vLLM: CUDA-graph capture sizes, e.g. 1,2,4,8 (default: none, as on CPU).",
        ),
        step_cost: str | None = typer.Option(
            None,
            "--step-cost",
            help="vLLM: BASE,DEC,PRE[,KV] seconds per step, per decode token, per prefill "
            "token, per token of context (docs/DESIGN.md §15 rule 7).",
        ),
        variant: str = typer.Option(
            "wait",
            "--variant",
            help="Workload variant of the plan: wait, control (no tool wait) or equal (mean wait).",
        ),
        profile_path: Path | None = typer.Option(  # noqa: B008
            None,
            "--profile",
            help=f"RBLN: {PROFILE_HELP} With --substrate vllm: a vLLM profile holding the "
            "step cost.",
        ),
        config_file: Path = typer.Option(  # noqa: B008
            DEFAULT_CONFIG,
            "--config",
            help="RBLN: study definition whose profile: and model: choose the constants "
            "(none in this directory: the published constants).",
        ),
        fixed_arrivals: Path | None = typer.Option(  # noqa: B008
            None,
            "--fixed-arrivals",
            help="Run directory whose requests.parquet gives every re-arrival's send time "
            "(the fixed-arrival variant) instead of finish + tool wait.",
        ),
        replicas: int | None = typer.Option(
            None,
            "--replicas",
            help="Serve the plan on a fleet of R identical replicas (docs/DESIGN.md §16; "
            "default 1, at most 16). Any fleet option adds the fleet's fields: each "
            "request's replica and first-token time, latency percentiles, replica device time.",
        ),
        router: str | None = typer.Option(
            None,
            "--router",
            help="Fleet router: round_robin (default), least_loaded, session_affinity or "
            "prefix_aware (docs/DESIGN.md §16).",
        ),
        slo: str | None = typer.Option(
            None,
            "--slo",
            help="Latency SLO in seconds, e.g. ttft=0.3,tpot=0.03 (optionally e2e=...): "
            "the output gains the attainment over the measured window.",
        ),
        attainment: float | None = typer.Option(
            None, "--attainment", help="Share of measured requests that must meet --slo (0.9)."
        ),
        warmup: float | None = typer.Option(
            None, "--warmup", help="Measured window starts here (seconds, default 0)."
        ),
        horizon: float | None = typer.Option(
            None,
            "--horizon",
            help="Measured window ends here (seconds; default: every request is measured).",
        ),
        as_json: bool = typer.Option(
            False, "--json", help="One summary JSON object per plan per line, sorted keys."
        ),
    ) -> None:
        """Predict decode steps, reuse and device time of plans on one configuration.

        Runs the predictor simulator of paper Section IV (docs/DESIGN.md §4) on each plan,
        or with --substrate vllm the vLLM rule set (docs/DESIGN.md §15). On RBLN a plan
        whose transcript outgrows the profile's maximum sequence length is refused: its
        costs were never measured there.
        """
        options = dict(locals())
        from rearrival.model.substrates import SUBSTRATES

        if substrate not in SUBSTRATES:
            raise SimulateOptionError(
                f"--substrate {substrate!r}: use one of {', '.join(SUBSTRATES)}"
            )
        _refuse_foreign(substrate, options)
        from rearrival.commands.fleet_options import FleetOptions

        fleet = FleetOptions.from_options(options)
        if substrate == "rbln":
            _simulate_rbln(plans, options, as_json, fleet)
        else:
            _simulate_vllm(plans, options, as_json, fleet)
