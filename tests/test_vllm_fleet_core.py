"""The compiled vLLM fleet (``rearrival.model.simulator.vllm.core``; docs/DESIGN.md §16) gives
the Python fleet's results bit for bit: on random fleets of 1-3 replicas, every router, staggered
starts, renewal chains, fixed arrivals and shared prefixes, every request's
replica, counts and times and every total are equal (==), and one compiled replica is the
single engine; on shared prefixes it is the step-by-step fleet too. The core choice of
``simulate_fleet`` refuses what it cannot run."""

from __future__ import annotations

import random

import pytest

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.fleet.routers import ROUTERS
from rearrival.model.fleet.simulate import FleetCoreError, simulate_fleet
from rearrival.model.plans.plan import After, MultiRoundSession, Plan, Prefix, Round
from rearrival.model.simulator.vllm import core
from rearrival.model.simulator.vllm.inputs import VllmPlanError, vllm_inputs
from rearrival.model.simulator.vllm.sim import simulate_vllm

STEP_COST = VllmStepCost(0.01, 2e-4, 2e-5, 1e-7)
PREFIXES = (Prefix("agent-a", 70), Prefix("agent-b", 37))


def random_plan(rng: random.Random, sessions: int, renewal: bool, prefixes: bool) -> Plan:
    """Staggered multi-round sessions; some follow an earlier one (``renewal``), some send
    one of two shared prefixes first (``prefixes``)."""
    out: list[MultiRoundSession] = []
    followed: set[int] = set()
    for i in range(sessions):
        k = rng.randint(1, 5)
        rounds = tuple(
            Round(
                rng.randint(1 if j == 0 else 0, 90),
                rng.randint(1, 90),
                round(rng.uniform(0, 0.4), 3) if j < k - 1 else 0.0,
            )
            for j in range(k)
        )
        prefix = rng.choice(PREFIXES) if prefixes and rng.random() < 0.7 else None
        named = {} if prefix is None else {"prefix": prefix.id, "prefix_tokens": prefix.tokens}
        free = [j for j in range(i) if j not in followed]
        if renewal and free and rng.random() < 0.4:
            leader = rng.choice(free)
            followed.add(leader)
            gap = rng.choice([0.0, round(rng.uniform(0, 1), 3)])
            out.append(MultiRoundSession(i, rounds, after=After(leader, gap), **named))
        else:
            out.append(MultiRoundSession(i, rounds, round(rng.uniform(0, 0.5), 3), **named))
    return Plan(tuple(out), prefixes=PREFIXES if prefixes else ())


def vllm_config(rng: random.Random, plan: Plan) -> VllmConfiguration:
    """A pool from just large enough for the longest request to twice that."""
    block_size = rng.choice([4, 16])
    need = vllm_inputs(plan, block_size).blocks_needed()
    return VllmConfiguration(
        rng.choice([(), (1, 2, 4)]),
        rng.randint(2, 4),
        num_blocks=need + 1 + rng.randint(0, need),
        block_size=block_size,
        max_num_batched_tokens=rng.choice([48, 512]),
    )


def fixed_arrivals(rng: random.Random, plan: Plan) -> list[float] | None:
    """Observed send times for every re-arrival, or none."""
    if rng.random() < 0.7:
        return None
    re_arrivals = sum(len(s.rounds) - 1 for s in plan.sessions)
    return sorted(round(rng.uniform(0, 6), 3) for _ in range(re_arrivals))


def test_router_indices_follow_the_registry():
    order = (
        core.ROUND_ROBIN,
        core.LEAST_LOADED,
        core.SESSION_AFFINITY,
        core.PREFIX_AWARE,
    )
    assert order == tuple(range(len(ROUTERS)))
    assert ROUTERS == ("round_robin", "least_loaded", "session_affinity", "prefix_aware")


@pytest.mark.parametrize("seed", range(4))
def test_compiled_fleet_is_the_python_fleet_bit_for_bit(seed):
    rng = random.Random(3400 + seed)
    preempted = prefixed = 0
    for case in range(40):
        plan = random_plan(rng, rng.randint(2, 12), renewal=case % 2 == 0, prefixes=case % 4 < 2)
        replicas, router, config = rng.randint(1, 3), ROUTERS[case % 4], vllm_config(rng, plan)
        fixed = fixed_arrivals(rng, plan)
        python = simulate_fleet(plan, config, STEP_COST, replicas, router, fixed, core="python")
        compiled = simulate_fleet(plan, config, STEP_COST, replicas, router, fixed, core="compiled")
        assert compiled.requests == python.requests
        assert compiled.replica_device_s == python.replica_device_s
        assert compiled.prediction.summary() == python.prediction.summary()
        preempted += python.prediction.summary()["preemptions"] > 0
        prefixed += any(r.round == 0 and r.cached_tokens > 0 for r in python.requests)
    assert preempted >= 4 and prefixed >= 4  # the cases reach preemption and hits


def test_compiled_fleet_is_the_step_by_step_fleet_on_shared_prefixes():
    """The fast-forward over pure decode stretches (with the prefix blocks other requests
    hold discounted) changes nothing: the step-by-step Python fleet gives the same bits."""
    rng = random.Random(3600)
    for case in range(30):
        plan = random_plan(rng, rng.randint(2, 12), renewal=case % 2 == 0, prefixes=True)
        replicas, router, config = rng.randint(1, 3), ROUTERS[case % 4], vllm_config(rng, plan)
        args = (plan, config, STEP_COST, replicas, router, fixed_arrivals(rng, plan))
        compiled = simulate_fleet(*args, core="compiled")
        stepwise = simulate_fleet(*args, stepwise=True)
        assert compiled.requests == stepwise.requests
        assert compiled.prediction.summary() == stepwise.prediction.summary()


@pytest.mark.parametrize("seed", range(2))
def test_one_compiled_replica_is_the_single_engine(seed):
    rng = random.Random(3500 + seed)
    for case in range(30):
        plan = random_plan(rng, rng.randint(1, 10), renewal=False, prefixes=case % 2 == 0)
        config = vllm_config(rng, plan)
        single = simulate_vllm(plan, config, STEP_COST, core="python")
        fleet = simulate_fleet(plan, config, STEP_COST, 1, ROUTERS[case % 4], core="compiled")
        assert fleet.prediction.summary() == single.summary()


def test_the_core_choice_refuses_what_it_cannot_run():
    plan = random_plan(random.Random(1), 3, renewal=False, prefixes=False)
    config = VllmConfiguration((), 2, num_blocks=200, block_size=16)
    with pytest.raises(FleetCoreError, match="use one of auto, compiled, python"):
        simulate_fleet(plan, config, STEP_COST, 2, core="numba")
    with pytest.raises(FleetCoreError, match="step by step"):
        simulate_fleet(plan, config, STEP_COST, 2, stepwise=True, core="compiled")
    with pytest.raises(VllmPlanError, match="fixed_arrivals has 1 times"):
        simulate_fleet(plan, config, STEP_COST, 2, fixed_arrivals=[1.0], core="compiled")


def test_auto_runs_the_compiled_fleet_on_vllm(monkeypatch):
    calls = []
    run = core.run

    def counted(*args):
        calls.append(args[3:5])
        return run(*args)

    monkeypatch.setattr(core, "run", counted)
    plan = random_plan(random.Random(2), 6, renewal=True, prefixes=True)
    config = VllmConfiguration((), 3, num_blocks=200, block_size=16)
    auto = simulate_fleet(plan, config, STEP_COST, 2, "prefix_aware")
    assert calls == [(2, core.PREFIX_AWARE)]
    python = simulate_fleet(plan, config, STEP_COST, 2, "prefix_aware", core="python")
    stepwise = simulate_fleet(plan, config, STEP_COST, 2, "prefix_aware", stepwise=True)
    assert len(calls) == 1 and auto.requests == python.requests
    assert [r.replica for r in stepwise.requests] == [r.replica for r in auto.requests]
