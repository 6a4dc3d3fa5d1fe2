"""The substrate registry (in the spirit of Vidur's scheduler registries): what each
substrate gives the layers above, so they ask the registry instead of branching on the
substrate's name.

An entry names its configuration and profile types, the predictor's rule sets and the one
every registered prediction uses, its arrival tolerance, its one
``simulate(plan, configuration, profile, rules, arrivals)`` and how it builds a fleet of its
engines (``rearrival.model.fleet``: R driven engines of its rule set, and how their
per-request columns become the substrate's own result and the shared request records
``rearrival.model.fleet.records.RequestOutcome``); an entry may also run the whole fleet
compiled, the same bits (both do: ``rearrival.model.simulator.vllm.core`` and
``rearrival.model.simulator.rbln.compiled_fleet``). A third
substrate is one package of its rule set (an engine with the calls of
``rearrival.model.fleet.engine.FleetEngine``) and one entry here (docs/DESIGN.md §16).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import starmap
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.model.configuration import RblnConfiguration, VllmConfiguration
from rearrival.model.cost.profile import Profile
from rearrival.model.cost.vllm_profile import VllmProfile
from rearrival.model.fleet.records import RequestOutcome
from rearrival.model.simulator.plan_arrays import PlanArrays
from rearrival.model.simulator.rbln.config import SimConfig
from rearrival.model.simulator.rbln.result import SimResult
from rearrival.vocabulary import ARRIVAL_TOLERANCE_S, PREDICTION, RULE_SETS, VLLM_RULES

Outcome = tuple[Any, tuple[RequestOutcome, ...], tuple[float, ...]]


class SubstrateError(RearrivalError, ValueError):
    """A configuration no substrate knows, or a substrate name that does not exist."""


@dataclass(frozen=True)
class Fleet:
    """R engines of one rule set on one plan, and how to read their outcome back:
    ``outcome(placement)`` gives the substrate's result over the whole fleet, the request
    records and each replica's device time."""

    arrays: PlanArrays
    engines: Sequence[Any]
    outcome: Callable[[list[int]], Outcome]


@dataclass(frozen=True)
class Substrate:
    """One substrate: its configuration type (on RBLN the predictor's own ``SimConfig``
    is one, with the rule set added), its profile type, the predictor's rule sets
    with the one every registered prediction uses, the arrival tolerance, and the two
    entry points: ``simulate(plan, configuration, profile, rules, arrivals)`` for one
    engine and ``fleet(...)`` for R of them."""

    name: str
    configuration_type: type
    profile_type: type
    rule_sets: tuple[str, ...]
    registered_rules: str
    tolerance_s: float  # an arrival at a counts at the first boundary >= a - tolerance_s
    simulate: Callable[..., Any]
    fleet: Callable[..., Fleet]  # (plan, configuration, cost, replicas, stepwise, source)
    # The whole fleet compiled, or None: (plan, configuration, cost, replicas, router index
    # into ROUTERS, fixed arrivals, source) -> the outcome, the same bits as ``fleet``
    # driven by the loop
    compiled: Callable[..., Outcome] | None = None

    def check(self, configuration: Any, name: str) -> None:
        """Refuse a configuration of another substrate in one line naming it."""
        if not isinstance(configuration, self.configuration_type):
            raise SubstrateError(
                f"configuration {name} is not a {self.name} configuration; a {self.name} "
                f"profile predicts {self.configuration_type.__name__}s"
            )


def _rbln_simulate(
    plan: Any,
    configuration: RblnConfiguration,
    profile: Profile,
    rules: str = PREDICTION,
    arrivals: Sequence[float] | None = None,
) -> SimResult:
    """The paper's predictor under one of its rule sets (``RULE_SETS``)."""
    from rearrival.model.simulator.rbln.sim import simulate

    return simulate(plan, SimConfig.of(configuration, rules, arrivals), profile)


def _vllm_simulate(
    plan: Any,
    configuration: VllmConfiguration,
    profile: VllmProfile,
    rules: str = VLLM_RULES,
    arrivals: Sequence[float] | None = None,
) -> Any:
    """The ``vllm`` rule set priced with the profile's step cost."""
    from rearrival.model.simulator.vllm.sim import simulate_vllm

    return simulate_vllm(plan, configuration, profile.step_cost, arrivals)


def _rbln_fleet(
    plan: Any, config: SimConfig, profile: Any, replicas: int, stepwise: bool, source: str
) -> Fleet:
    from rearrival.model.simulator.rbln.engine import RblnEngine

    engines = [RblnEngine(plan, config, profile, stepwise) for _ in range(replicas)]
    arrays = engines[0].arrays

    def outcome(placement: list[int]) -> Outcome:
        results = [engine.result() for engine in engines]
        merged = _merge_rbln(engines, results, placement)
        device = tuple(result.device_s for result in results)
        return merged, _rbln_records(merged, placement), device

    return Fleet(arrays, engines, outcome)


def _rbln_records(merged: SimResult, placement: list[int]) -> tuple[RequestOutcome, ...]:
    """The fleet's request records from its merged ``SimResult``'s columns (RBLN never
    preempts; the first token is the prefill's end, as ``PredictedRequest`` has it)."""
    arrays = merged.arrays
    arrival, admit, complete, prompt, cached, prefill = merged.columns[:6]
    first_token = [a + p for a, p in zip(admit, prefill, strict=True)]
    preemptions = [0] * arrays.requests
    return tuple(
        starmap(
            RequestOutcome,
            zip(
                arrays.session_of,
                arrays.round_of,
                placement,
                prompt,
                arrays.gen,
                cached,
                preemptions,
                arrival,
                admit,
                first_token,
                complete,
                strict=True,
            ),
        )
    )


def _merge_rbln(
    engines: Sequence[Any], results: list[SimResult], placement: list[int]
) -> SimResult:
    """One ``SimResult`` over the fleet: each request's columns from its replica, the
    decode histograms summed (decode time from the summed histogram, as a single engine
    prices its own), prefill time and interference summed, the latest replica's makespan;
    stretches and evictions replica by replica. With one replica, that replica's result."""
    if len(results) == 1:
        return results[0]
    columns = tuple(
        [results[placement[rid]].columns[c][rid] for rid in range(len(placement))]
        for c in range(len(results[0].columns))
    )
    histogram: dict[tuple[int, int], int] = {}
    for result in results:
        for key, steps in result.histogram_nb.items():
            histogram[key] = histogram.get(key, 0) + steps
    histogram = dict(sorted(histogram.items()))
    step_s = engines[0].step_s
    decode_total = 0.0
    for (n, _), steps in histogram.items():
        decode_total += steps * step_s[n]
    return SimResult(
        results[0].config,
        results[0].arrays,
        histogram,
        decode_total,
        sum(r.prefill_s for r in results),
        sum(r.interference_s for r in results),
        max(r.makespan_s for r in results),
        columns,
        [row for engine in engines for row in engine.stretches],
        [row for engine in engines for row in engine.evictions],
    )


def _rbln_compiled_fleet(
    plan: Any,
    config: SimConfig,
    profile: Profile,
    replicas: int,
    router: int,
    fixed_arrivals: Sequence[float] | None,
    source: str,
) -> Outcome:
    """The same fleet on the compiled core (``rbln.core.run_fleet``): the outcome, the same
    bits as ``_rbln_fleet`` driven by the loop. A plan whose integer keys could overflow
    the kernel's int64 keys runs on the loop instead (as ``simulate`` does)."""
    from rearrival.model.simulator.rbln.compiled_fleet import run_compiled_fleet

    fleet = run_compiled_fleet(plan, config, profile, replicas, router, fixed_arrivals)
    if fleet is not None:
        return fleet.result, _rbln_records(fleet.result, fleet.placement), fleet.replica_device_s
    from rearrival.model.fleet.loop import run_fleet
    from rearrival.model.fleet.routers import ROUTERS, make_router

    python = _rbln_fleet(plan, config, profile, replicas, False, source)
    state = run_fleet(python.arrays, python.engines, make_router(ROUTERS[router]), fixed_arrivals)
    return python.outcome(state.placement)


def _vllm_fleet(
    plan: Any,
    configuration: VllmConfiguration,
    step_cost: Any,
    replicas: int,
    stepwise: bool,
    source: str,
) -> Fleet:
    from rearrival.model.simulator.vllm.fleet_engine import VllmFleetEngine
    from rearrival.model.simulator.vllm.inputs import check_pool, vllm_inputs
    from rearrival.model.simulator.vllm.result import RawRun

    inputs = vllm_inputs(plan, configuration.block_size)
    check_pool(inputs, configuration, source)
    engines = [VllmFleetEngine(inputs, configuration, step_cost, stepwise) for _ in range(replicas)]
    arrays = inputs.arrays

    def outcome(placement: list[int]) -> Outcome:
        own = [engines[placement[rid]].engine.requests[rid] for rid in range(arrays.requests)]
        inner = [engine.engine for engine in engines]
        device = 0.0
        for engine in inner:
            device = device + engine.device_s
        raw = RawRun(
            cached_tokens=[r.cached_tokens for r in own],
            preemptions=[r.preemptions for r in own],
            steps=[r.steps for r in own],
            arrival_s=[r.arrival_s for r in own],
            first_scheduled_s=[r.first_scheduled_s for r in own],
            finish_s=[r.finish_s for r in own],
            first_token_s=[r.first_token_s for r in own],
            total_steps=sum(e.steps for e in inner),
            decode_tokens=sum(e.decode_tokens for e in inner),
            prefill_tokens=sum(e.prefill_tokens for e in inner),
            device_s=device,
            makespan_s=max(e.t for e in inner),
        )
        device_by_replica = tuple(e.device_s for e in inner)
        return _vllm_outcome(inputs, configuration, raw, placement, device_by_replica)

    return Fleet(arrays, engines, outcome)


def _vllm_compiled_fleet(
    plan: Any,
    configuration: VllmConfiguration,
    step_cost: Any,
    replicas: int,
    router: int,
    fixed_arrivals: Sequence[float] | None,
    source: str,
) -> Outcome:
    """The same fleet on the compiled core (``rearrival.model.simulator.vllm.core``):
    its outcome, the same bits as ``_vllm_fleet`` driven by the loop."""
    from rearrival.model.simulator.vllm import core  # numba: loaded on first use
    from rearrival.model.simulator.vllm.inputs import check_pool, fixed_times, vllm_inputs
    from rearrival.model.simulator.vllm.result import RawRun

    inputs = vllm_inputs(plan, configuration.block_size)
    check_pool(inputs, configuration, source)
    fixed = fixed_times(inputs, fixed_arrivals)
    run = core.run(inputs, configuration, step_cost, replicas, router, fixed)
    device = 0.0
    for seconds in run.replica_device_s:
        device = device + seconds
    raw = RawRun(
        cached_tokens=run.cached_tokens,
        preemptions=run.preemptions,
        steps=run.steps,
        arrival_s=run.arrival_s,
        first_scheduled_s=run.first_scheduled_s,
        finish_s=run.finish_s,
        first_token_s=run.first_token_s,
        total_steps=sum(run.replica_steps),
        decode_tokens=sum(run.replica_decode_tokens),
        prefill_tokens=sum(run.replica_prefill_tokens),
        device_s=device,
        makespan_s=max(run.replica_t),
    )
    device_by_replica = tuple(run.replica_device_s)
    return _vllm_outcome(inputs, configuration, raw, run.replica, device_by_replica)


def _vllm_outcome(
    inputs: Any,
    configuration: VllmConfiguration,
    raw: Any,
    placement: list[int],
    device_by_replica: tuple[float, ...],
) -> Outcome:
    """The fleet's ``VllmResult`` and request records from its per-request columns."""
    from rearrival.model.simulator.vllm.result import VllmResult

    arrays = inputs.arrays
    records = tuple(
        RequestOutcome(
            arrays.session_of[rid],
            arrays.round_of[rid],
            placement[rid],
            arrays.prompt[rid],
            arrays.gen[rid],
            raw.cached_tokens[rid],
            raw.preemptions[rid],
            raw.arrival_s[rid],
            raw.first_scheduled_s[rid],
            raw.first_token_s[rid],
            raw.finish_s[rid],
        )
        for rid in range(arrays.requests)
    )
    return VllmResult(inputs, configuration, raw), records, device_by_replica


SUBSTRATES: dict[str, Substrate] = {
    "rbln": Substrate(
        "rbln",
        RblnConfiguration,
        Profile,
        tuple(RULE_SETS),
        PREDICTION,
        ARRIVAL_TOLERANCE_S,
        _rbln_simulate,
        _rbln_fleet,
        _rbln_compiled_fleet,
    ),
    "vllm": Substrate(
        "vllm",
        VllmConfiguration,
        VllmProfile,
        (VLLM_RULES,),
        VLLM_RULES,
        0.0,
        _vllm_simulate,
        _vllm_fleet,
        _vllm_compiled_fleet,
    ),
}


def substrate(name: str) -> Substrate:
    """The registry entry ``name``, or a one-line refusal."""
    if name not in SUBSTRATES:
        raise SubstrateError(f"substrate {name!r}: use one of {', '.join(SUBSTRATES)}")
    return SUBSTRATES[name]


def substrate_of(configuration: Any) -> Substrate:
    """The entry whose configuration type ``configuration`` is."""
    for entry in SUBSTRATES.values():
        if isinstance(configuration, entry.configuration_type):
            return entry
    raise SubstrateError(
        f"{type(configuration).__name__} is no substrate's configuration: give an "
        "RblnConfiguration (a SimConfig is one) or a VllmConfiguration"
    )


def substrate_of_profile(profile: Any) -> Substrate:
    """The entry whose profile type ``profile`` is (a study predicts with its profile)."""
    for entry in SUBSTRATES.values():
        if isinstance(profile, entry.profile_type):
            return entry
    raise SubstrateError(f"{type(profile).__name__} is no substrate's profile")
