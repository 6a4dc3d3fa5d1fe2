"""Random open-traffic fleet cases for the vLLM rule set's tests (docs/DESIGN.md §16): Poisson
session starts at a few rates, renewal chains (``after``, gap 0 or not), one or two shared prefixes
(some a whole number of blocks, some not; a few sessions without one), 2-8 rounds per
session, on fleets of 1-3 replicas behind each of the four routers, with pools from just
large enough (eviction and preemption) to never evicting, budgets small enough to chunk
prefills, and the step costs of tests/vllm_cases.py (round numbers on some, so float ties
between arrivals and step ends occur)."""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from vllm_cases import random_cost

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import After, MultiRoundSession, Plan, PlanMeta, Prefix, Round
from rearrival.model.simulator.vllm.inputs import vllm_inputs

ROUTERS = ("round_robin", "least_loaded", "session_affinity", "prefix_aware")
RATES = (2.0, 8.0, 32.0)  # session starts per second; a session lasts about 0.2-3 s here
BUDGETS = (64, 128, 256, 512, 2048)
CAPTURE_SIZES = ((), (), (1, 2, 4, 8))


@dataclass(frozen=True)
class FleetCase:
    plan: Plan
    configuration: VllmConfiguration
    step_cost: VllmStepCost
    replicas: int
    router: str
    never_evicting: bool  # every request's blocks fit one replica's pool beside all others'


def _gap(rng: random.Random) -> float:
    draw = rng.random()
    if draw < 0.3:
        return 0.0
    if draw < 0.5:
        return rng.choice((0.01, 0.05, 0.25))
    return rng.uniform(0.0, 1.0)


def _prefixes(rng: random.Random, block_size: int, prompt: int) -> tuple[Prefix, ...]:
    """One or two prefixes: whole blocks, or a length that ends inside a block."""
    count = rng.choice((1, 1, 2))
    return tuple(
        Prefix(
            f"agent-{i}",
            block_size * rng.randint(1, 8) if rng.random() < 0.5 else rng.randint(1, prompt),
        )
        for i in range(count)
    )


def random_open_plan(
    rng: random.Random,
    block_size: int,
    *,
    sessions: int = 10,
    prompt: int = 300,
    new: int = 120,
    gen: int = 64,
) -> Plan:
    """Open traffic: exponential inter-start times at one of ``RATES``; about a third of
    the sessions renew an earlier one that has no follower yet (chains form)."""
    prefixes = _prefixes(rng, block_size, prompt)
    rate = rng.choice(RATES)
    clock = 0.0
    followed: set[int] = set()
    rows = []
    for i in range(rng.randint(2, sessions)):
        leaders = [j for j in range(i) if j not in followed]
        after = None
        if leaders and rng.random() < 0.35:
            leader = rng.choice(leaders)
            followed.add(leader)
            after = After(leader, rng.choice((0.0, rng.uniform(0.0, 0.5))))
        start = 0.0
        if after is None:
            clock += rng.expovariate(rate)
            start = clock
        prefix = rng.choice(prefixes) if rng.random() < 0.85 else None
        k = rng.randint(2, 8)
        rounds = tuple(
            Round(
                rng.randint(1, prompt) if j == 0 else rng.randint(0, new),
                rng.randint(1, gen),
                _gap(rng) if j + 1 < k else 0.0,
                "t",
            )
            for j in range(k)
        )
        rows.append(
            MultiRoundSession(
                i,
                rounds,
                start,
                prefix=None if prefix is None else prefix.id,
                prefix_tokens=0 if prefix is None else prefix.tokens,
                after=after,
            )
        )
    return Plan(tuple(rows), PlanMeta(n=len(rows)), prefixes)


def random_fleet_case(rng: random.Random, router: str) -> FleetCase:
    """One random case under ``router`` (module docstring)."""
    block_size = rng.choice((16, 16, 32))
    plan = random_open_plan(rng, block_size)
    inputs = vllm_inputs(plan, block_size)
    tight = inputs.blocks_needed() + 1
    ample = inputs.never_evicting_blocks()
    never_evicting = rng.random() < 0.25
    # otherwise skewed towards the tight end, where eviction and preemption happen
    num_blocks = ample if never_evicting else tight + int((ample - tight) * rng.random() ** 5)
    max_num_seqs = rng.choice((2, 4, 8, 8, 16))
    configuration = VllmConfiguration(
        rng.choice(CAPTURE_SIZES),
        max_num_seqs,
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_batched_tokens=rng.choice([b for b in BUDGETS if b >= max_num_seqs]),
    )
    return FleetCase(
        plan, configuration, random_cost(rng), rng.randint(1, 3), router, never_evicting
    )


def random_fleet_cases(seed: int, count: int) -> list[FleetCase]:
    """``count`` cases, the routers in turn."""
    rng = random.Random(seed)
    return [random_fleet_case(rng, ROUTERS[i % len(ROUTERS)]) for i in range(count)]


def without_prefixes(case: FleetCase) -> FleetCase:
    """The same case with every session's shared prefix dropped (its own tokens kept): a
    fleet whose sessions share no block."""
    sessions = tuple(replace(s, prefix=None, prefix_tokens=0) for s in case.plan.sessions)
    return replace(case, plan=Plan(sessions, case.plan.meta, ()))
