"""``rearrival capacity`` (docs/DESIGN.md §17 "Capacity"):
the goodput of every configuration x fleet size x router under a latency SLO, with
``--rate`` the cheapest fleet for that rate and what to deploy. The options are parsed and
checked here; the work is ``rearrival.search.capacity``."""

from __future__ import annotations

import math
import shlex
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from rearrival.errors import RearrivalError

DEFAULT_TOLERANCE = 0.02
MIN_TOLERANCE = 1e-4  # rates are tried at 6 significant digits (bisection.DIGITS)
VLLM_OPTIONS = {
    "block_sizes": "--block-size",
    "num_blocks": "--num-blocks",
    "max_num_seqs": "--max-num-seqs",
    "token_budgets": "--max-num-batched-tokens",
    "capture_sets": "--capture-sizes",
    "step_cost": "--step-cost",
}
RBLN_OPTIONS = {
    "buckets": "--buckets",
    "batch_sizes": "--batch-sizes",
    "slots": "--slots",
    "max_buckets": "--max-buckets",
}


class CapacityOptionError(RearrivalError, ValueError):
    """Capacity options that cannot be used; the message names the option and the fix."""


def _ints(option: str, text: str | None) -> tuple[int, ...] | None:
    """``"1,2"`` -> (1, 2), in the order given, duplicates dropped."""
    if text is None:
        return None
    try:
        values = tuple(dict.fromkeys(int(p) for p in text.split(",") if p.strip()))
    except ValueError:
        values = ()
    if not values:
        raise CapacityOptionError(
            f"option {option} {text!r}: give comma-separated integers, e.g. 1,2"
        )
    return values


def _names(option: str, text: str) -> tuple[str, ...]:
    values = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not values:
        raise CapacityOptionError(f"option {option} is empty: give comma-separated names")
    return values


def _check_foreign(substrate: str, given: dict[str, Any]) -> None:
    if substrate not in ("vllm", "rbln"):
        raise CapacityOptionError(f"option --substrate {substrate!r}: use vllm or rbln")
    foreign = RBLN_OPTIONS if substrate == "vllm" else VLLM_OPTIONS
    named = [flag for name, flag in foreign.items() if given.get(name) is not None]
    if named:
        other = "rbln" if substrate == "vllm" else "vllm"
        raise CapacityOptionError(
            f"{', '.join(named)}: only for --substrate {other}; drop them or pass "
            f"--substrate {other}"
        )


def _numbers(
    tolerance: float, grid: int, resamples: int, rate: float | None, horizon: float, warmup: float
) -> None:
    from rearrival.limits import (
        CAPACITY_GRID_WHY,
        CAPACITY_RESAMPLES_WHY,
        MAX_CAPACITY_GRID,
        MAX_CAPACITY_RESAMPLES,
        check_at_most,
    )

    if not (MIN_TOLERANCE <= tolerance <= 0.5):
        raise CapacityOptionError(
            f"option --tolerance {tolerance}: give a relative tolerance in [0.0001, 0.5], "
            "e.g. 0.02 (rates are tried at 6 significant digits)"
        )
    if grid < 0 or resamples < 0:
        option = "--grid" if grid < 0 else "--resamples"
        raise CapacityOptionError(f"option {option}: give a count >= 0")
    check_at_most("--grid", grid, MAX_CAPACITY_GRID, CAPACITY_GRID_WHY)
    check_at_most("--resamples", resamples, MAX_CAPACITY_RESAMPLES, CAPACITY_RESAMPLES_WHY)
    if not (math.isfinite(horizon) and 0 <= warmup < horizon):
        raise CapacityOptionError(
            f"options --warmup {warmup} --horizon {horizon}: the window needs 0 <= warm-up "
            "< horizon (seconds)"
        )
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise CapacityOptionError(f"option --rate {rate}: give sessions per second > 0")


def _load_pool(path: Path, token_scale: float) -> Any:
    from rearrival.model.plans.pool import TRACE_SUFFIXES, load_pool

    if token_scale != 1.0 and path.suffix not in TRACE_SUFFIXES:
        raise CapacityOptionError(
            f"option --token-scale: applies to a trace pool only; {path} is a plan or a "
            "folder of plans, whose tokens are as written"
        )
    return load_pool(path, token_scale=token_scale)


def _vllm_cost(step_cost: str | None, profile_path: Path | None) -> tuple[Any, Any, dict]:
    """The step cost, its profile (None for --step-cost) and its provenance."""
    from rearrival.model.cost.vllm_profile import choose_vllm_profile, parse_step_cost

    if step_cost is not None and profile_path is not None:
        raise CapacityOptionError("--step-cost and --profile both give the step cost; pass one")
    if step_cost is not None:
        cost = parse_step_cost(step_cost)
        return (
            cost,
            None,
            {
                "step_cost": list(cost.as_tuple()),
                "source": "--step-cost on the command line (no calibration, no device)",
            },
        )
    profile = choose_vllm_profile(profile_path)
    return (
        profile.step_cost,
        profile,
        {
            "step_cost": list(profile.step_cost.as_tuple()),
            "source": "vLLM profile",
            "profile": profile.identity(),
            "note": profile.seconds_note(),
        },
    )


def _vllm_space(options: dict[str, Any], axes: Any, pool: Any, profile: Any) -> Any:
    from rearrival.search.capacity.space import VllmKnobs, space_for_vllm
    from rearrival.search.vllm.defaults import BATCH_DEFAULTS, BLOCK_SIZE
    from rearrival.search.vllm.space import block_budget, parse_capture_sets

    device = "gpu" if profile is None else profile.device
    seqs, budget = BATCH_DEFAULTS[device]
    sets = options["capture_sets"]
    knobs = VllmKnobs(
        options["block_sizes"] or (BLOCK_SIZE[device],),
        options["num_blocks"],
        options["max_num_seqs"] or (seqs,),
        options["token_budgets"] or (budget,),
        parse_capture_sets(sets) if sets else ("none",),
    )

    def memory_blocks(block_size: int) -> int | None:
        memory = None if profile is None else block_budget(profile, block_size)
        return None if memory is None else memory.max_slots()

    return space_for_vllm(knobs, axes, pool, memory_blocks)


def _rbln_space(options: dict[str, Any], axes: Any) -> Any:
    from rearrival.model.buckets import sizes_problem
    from rearrival.search.capacity.space import space_for_rbln

    sets = None
    if options["buckets"] is not None:
        sets = []
        for part in options["buckets"].split(";"):
            sizes = _ints("--buckets", part) or ()
            problem = sizes_problem(tuple(sizes), "buckets", "1,2,4,8")
            if problem is not None:
                raise CapacityOptionError(f"option --buckets {options['buckets']!r}: {problem}")
            sets.append(tuple(sizes))
    elif options["batch_sizes"] is None and options["max_buckets"] is None:
        sets = [(1, 2, 4, 8)]
    return space_for_rbln(
        sets, options["batch_sizes"], options["max_buckets"], options["slots"], axes
    )


def _substrate_space(
    substrate: str,
    options: dict[str, Any],
    axes: Any,
    drawn: Any,
    profile: Path | None,
    model: str | None,
    rules: str,
) -> tuple[Any, Any, dict[str, Any], dict[str, Any]]:
    """The space, the cost model, its provenance and what the deploy lines need."""
    if substrate == "vllm":
        cost, vllm_profile, provenance = _vllm_cost(options["step_cost"], profile)
        space = _vllm_space(options, axes, drawn, vllm_profile)
        model = model or (vllm_profile.model_id if vllm_profile is not None else "MODEL")
        return space, cost, provenance, {"model": model}
    from rearrival.model.cost.profile import load_profile
    from rearrival.vocabulary import RULE_SETS

    if rules not in RULE_SETS:
        raise CapacityOptionError(f"option --rules {rules!r}: use one of {', '.join(RULE_SETS)}")
    cost = load_profile(profile)
    provenance = {"source": "RBLN profile", "profile": cost.identity(), "rules": rules}
    deploy_args = {"model": model, "num_devices": cost.num_devices}
    return _rbln_space(options, axes), cost, provenance, deploy_args


def advise_at_rate(
    trace: Path,
    rate: float,
    slo: str,
    raw: dict[str, Any],
    *,
    substrate: str,
    attainment: float,
    horizon: float,
    warmup: float,
    seed: int,
    replicas: str,
    routers: str,
    profile: Path | None,
    token_scale: float,
    resamples: int,
    workers: int,
) -> None:
    """``rearrival advise --trace T --rate R --slo ...``: the pick of ``capacity --rate``
    with the trace's sessions as the pool: every configuration x fleet size x router run
    on the open plan at R, the cheapest meeting the SLO (fewest replicas, then the lowest
    device-seconds per session), its spread over resampled pools and what to deploy. No
    goodput is searched and no folder written: ``capacity`` gives those. ``raw``: the
    knobs as advise's options give them (text)."""
    from rearrival.model.fleet.latency import Slo
    from rearrival.search.capacity.evaluate import Workload
    from rearrival.search.capacity.outputs import text
    from rearrival.search.capacity.run import pick_at
    from rearrival.search.capacity.space import FleetAxes
    from rearrival.search.capacity.summary import pick_summary

    options = {
        "block_sizes": _ints("--block-sizes", raw["block_sizes"]),
        "num_blocks": _ints("--num-blocks", raw["num_blocks"]),
        "max_num_seqs": _ints("--max-num-seqs", raw["max_num_seqs"]),
        "token_budgets": _ints("--max-num-batched-tokens", raw["max_num_batched_tokens"]),
        "capture_sets": raw["capture_sizes"],
        "step_cost": raw["step_cost"],
        "buckets": None,
        "batch_sizes": _ints("--batch-sizes", raw["batch_sizes"]),
        "slots": None,
        "max_buckets": raw["max_buckets"],
    }
    _check_foreign(substrate, options)
    _numbers(DEFAULT_TOLERANCE, 0, resamples, rate, horizon, warmup)
    the_slo = Slo.parse(slo, attainment)
    axes = FleetAxes(_ints("--replicas", replicas) or (1,), _names("--routers", routers))
    drawn = _load_pool(trace, token_scale)
    space, cost, provenance, deploy_args = _substrate_space(
        substrate, options, axes, drawn, profile, None, "base"
    )
    workload = Workload(drawn, horizon, warmup, seed, the_slo, cost)
    pick, dispersion = pick_at(space.fleets, workload, rate, resamples, workers)
    typer.echo(
        f"advise at {text(rate)} sessions/s from {trace} ({drawn.n} sessions, token scale "
        f"{token_scale:g}): {len(space.fleets)} fleets on open traffic over {horizon:g} s "
        f"(measured from {warmup:g} s, seed {seed}), SLO {slo} for {attainment:.0%} of "
        f"requests; cost: {provenance['source']}"
    )
    for line in pick_summary(pick, dispersion, deploy_args)[1]:
        typer.echo(line)


def _exact(value: float) -> str:
    """A number as the shortest text that reads back as the same float."""
    return f"{value:g}" if float(f"{value:g}") == value else repr(value)


def capacity_command(
    pool: Annotated[
        Path,
        typer.Option(
            "--pool",
            help="Sessions the open plans draw from, as `plans open --pool` takes them: a plan "
            "file, a folder of them or a TraceLab round trace.",
        ),
    ],
    slo: Annotated[str, typer.Option("--slo", help="Thresholds, e.g. ttft=0.3,tpot=0.03[,e2e=5].")],
    horizon: Annotated[
        float, typer.Option("--horizon", help="Seconds over which sessions start (plans open).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Folder to write (capacity.csv, ...).")],
    substrate: Annotated[str, typer.Option("--substrate", help="vllm or rbln.")] = "vllm",
    attainment: Annotated[
        float, typer.Option("--attainment", help="Share of measured requests that must meet it.")
    ] = 0.9,
    warmup: Annotated[
        float, typer.Option("--warmup", help="Requests arriving before this are not measured.")
    ] = 0.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the open plans.")] = 0,
    replicas: Annotated[str, typer.Option("--replicas", help="Fleet sizes, e.g. 1,2.")] = "1",
    routers: Annotated[
        str,
        typer.Option(
            "--routers",
            help="Routers: round_robin, least_loaded, session_affinity, prefix_aware.",
        ),
    ] = "round_robin",
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Relative tolerance of the goodput.")
    ] = DEFAULT_TOLERANCE,
    grid: Annotated[
        int, typer.Option("--grid", help="Rates from 1/4 to 2x the goodput run besides.")
    ] = 6,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="Target sessions/s: pick the cheapest fleet meeting it."),
    ] = None,
    resamples: Annotated[
        int, typer.Option("--resamples", help="With --rate: resampled pools for the spread.")
    ] = 20,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Processes.")] = 1,
    token_scale: Annotated[
        float, typer.Option("--token-scale", help="Trace pool only: scale every token count.")
    ] = 1.0,
    block_size: Annotated[
        str | None, typer.Option("--block-size", help="vLLM: block sizes, e.g. 16.")
    ] = None,
    num_blocks: Annotated[
        str | None,
        typer.Option("--num-blocks", help="vLLM: KV pools in blocks, null block included."),
    ] = None,
    max_num_seqs: Annotated[
        str | None, typer.Option("--max-num-seqs", help="vLLM: max_num_seqs values.")
    ] = None,
    max_num_batched_tokens: Annotated[
        str | None, typer.Option("--max-num-batched-tokens", help="vLLM: token budgets.")
    ] = None,
    capture_sizes: Annotated[
        str | None,
        typer.Option(
            "--capture-sizes",
            help="vLLM: capture-size sets separated by ';' (none, default, 1,2,4).",
        ),
    ] = None,
    step_cost: Annotated[
        str | None, typer.Option("--step-cost", help="vLLM: BASE,DEC,PRE[,KV] seconds.")
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option("--profile", help="A vLLM profile (vllm) or an RBLN profile (rbln)."),
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="Model the deploy lines serve/compile.")
    ] = None,
    buckets: Annotated[
        str | None, typer.Option("--buckets", help="RBLN: bucket sets separated by ';'.")
    ] = None,
    batch_sizes: Annotated[
        str | None, typer.Option("--batch-sizes", help="RBLN: batch sizes to enumerate.")
    ] = None,
    slots: Annotated[str | None, typer.Option("--slots", help="RBLN: KV slots values.")] = None,
    max_buckets: Annotated[
        int | None, typer.Option("--max-buckets", help="RBLN: most buckets per set.")
    ] = None,
    rules: Annotated[
        str, typer.Option("--rules", help="RBLN rule set: base, dummy or stack.")
    ] = "base",
) -> None:
    """Goodput of agent fleets under a latency SLO (docs/DESIGN.md §17 "Capacity"): for
    every configuration x --replicas x --routers, the largest session rate whose open
    plan (`plans open` on --pool, --horizon, --seed) meets --slo with --attainment over
    [--warmup, --horizon], by bisection to --tolerance; a non-monotone attainment curve
    is flagged. With --rate: the cheapest fleet meeting it, its spread over resampled
    pools, and the vllm serve / vllm-router (or optimum-rbln) flags to deploy it."""
    from rearrival.model.fleet.latency import Slo
    from rearrival.search.capacity.evaluate import Workload
    from rearrival.search.capacity.run import run_capacity
    from rearrival.search.capacity.space import FleetAxes
    from rearrival.search.capacity.summary import Basis

    started = time.perf_counter()
    options = {
        "block_sizes": _ints("--block-size", block_size),
        "num_blocks": _ints("--num-blocks", num_blocks),
        "max_num_seqs": _ints("--max-num-seqs", max_num_seqs),
        "token_budgets": _ints("--max-num-batched-tokens", max_num_batched_tokens),
        "capture_sets": capture_sizes,
        "step_cost": step_cost,
        "buckets": buckets,
        "batch_sizes": _ints("--batch-sizes", batch_sizes),
        "slots": _ints("--slots", slots),
        "max_buckets": max_buckets,
    }
    _check_foreign(substrate, options)
    _numbers(tolerance, grid, resamples, rate, horizon, warmup)
    the_slo = Slo.parse(slo, attainment)
    axes = FleetAxes(_ints("--replicas", replicas) or (1,), _names("--routers", routers))
    drawn = _load_pool(pool, token_scale)
    space, cost, provenance, deploy_args = _substrate_space(
        substrate, options, axes, drawn, profile, model, rules
    )
    workload = Workload(drawn, horizon, warmup, seed, the_slo, cost, rules)
    basis = Basis(
        str(pool),
        substrate,
        token_scale,
        grid,
        provenance,
        deploy_args,
        _reproduce(pool, horizon, seed, token_scale),
    )
    run = run_capacity(
        space,
        workload,
        tolerance=tolerance,
        grid=grid,
        rate=rate,
        resamples=resamples,
        workers=workers,
    )
    _write(run, basis, out, time.perf_counter() - started)


def _reproduce(pool: Path, horizon: float, seed: int, token_scale: float) -> str:
    """The `plans open` line that rebuilds a row's plan, ``{rate}`` left to fill."""
    scale = [] if token_scale == 1.0 else ["--token-scale", _exact(token_scale)]
    words = ["rearrival", "plans", "open", "--pool", str(pool), "--rate", "RATE"]
    words += ["--horizon", _exact(horizon), "--seed", str(seed), *scale, "--out", "plan.json"]
    return shlex.join(words).replace("RATE", "{rate}")


def _write(run: Any, basis: Any, out: Path, wall_s: float) -> None:
    """The folder (tables, pictures, summary) and the lines printed."""
    from rearrival.report.capacity_figures import write_figures
    from rearrival.search.capacity.outputs import result_lines, write_summary, write_tables
    from rearrival.search.capacity.summary import summary

    write_tables(run, out)
    pictures = write_figures(run.capacities, run.workload.slo.attainment, out)
    data = summary(run, basis, pictures, wall_s)
    write_summary(data, out)
    for line in [*result_lines(run, out, basis.reproduce), *data["pick_lines"]]:
        typer.echo(line)


def register(app: typer.Typer) -> None:
    """Add ``rearrival capacity``."""
    app.command("capacity")(capacity_command)
