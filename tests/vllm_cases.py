"""Random cases for the vLLM rule set's tests: plans (two-round and multi-round, staggered
starts, zero and round-number gaps) with knobs that make both eviction and preemption
happen (pools from just large enough to ample, budgets 256-8192, 4-64 sequences), and
step costs that are sometimes round numbers (so float ties between arrivals and step
boundaries occur)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, Session
from rearrival.model.simulator.vllm.inputs import vllm_inputs

BUDGETS = (256, 384, 512, 1024, 2048, 4096, 8192)
CAPTURE_SIZES = ((), (), (1, 2, 4, 8), (1, 2, 4, 8, 16, 24, 32), (2, 8, 32, 64))


@dataclass(frozen=True)
class Case:
    plan: Plan
    configuration: VllmConfiguration
    step_cost: VllmStepCost


def _gap(rng: random.Random) -> float:
    draw = rng.random()
    if draw < 0.25:
        return 0.0
    if draw < 0.5:
        return rng.choice((0.01, 0.05, 0.1, 0.25, 0.5, 1.0))
    return rng.uniform(0.0, 1.5)


def _start(rng: random.Random, staggered: bool) -> float:
    if not staggered:
        return 0.0
    if rng.random() < 0.4:
        return rng.choice((0.0, 0.01, 0.02, 0.1, 0.5))
    return rng.uniform(0.0, 1.0)


def random_plan(
    rng: random.Random, *, sessions: int, rounds: int, prompt: int, new: int, gen: int
) -> Plan:
    """Two-round sessions (a third of the plans) or 1..``rounds`` rounds per session."""
    staggered = rng.random() < 0.5
    if rng.random() < 0.3:
        rows = tuple(
            Session(
                session=i,
                prompt_tokens=rng.randint(1, prompt),
                gen_tokens=rng.randint(1, gen),
                followup_gen_tokens=rng.randint(1, gen),
                appended_tokens=rng.choice((0, 8, rng.randint(0, new))),
                tool_wait_s=_gap(rng),
                tool_name="t",
            )
            for i in range(sessions)
        )
        return Plan(rows, PlanMeta(n=sessions))
    multi = []
    for i in range(sessions):
        k = rng.randint(1, rounds)
        items = tuple(
            Round(
                rng.randint(1, prompt) if j == 0 else rng.randint(0, new),
                rng.randint(1, gen),
                _gap(rng) if j + 1 < k else 0.0,
                "t",
            )
            for j in range(k)
        )
        multi.append(MultiRoundSession(i, items, _start(rng, staggered)))
    return Plan(tuple(multi), PlanMeta(n=sessions))


def random_cost(rng: random.Random) -> VllmStepCost:
    if rng.random() < 0.3:  # round numbers: exact float ties between sends and boundaries
        return VllmStepCost(
            rng.choice((0.01, 0.02, 0.005)),
            rng.choice((0.0, 0.001, 0.0005)),
            rng.choice((0.0, 0.0001, 1e-5)),
            rng.choice((0.0, 0.0, 1e-6)),
        )
    return VllmStepCost(
        rng.uniform(0.002, 0.02),
        rng.uniform(1e-5, 1e-3),
        rng.uniform(1e-6, 1e-4),
        rng.choice((0.0, rng.uniform(0.0, 1e-7))),
    )


def random_case(
    rng: random.Random,
    *,
    block_sizes: tuple[int, ...] = (16, 128),
    sessions: int = 10,
    rounds: int = 5,
    prompt: int = 600,
    new: int = 200,
    gen: int = 40,
) -> Case:
    """One random case (module docstring)."""
    block_size = rng.choice(block_sizes)
    plan = random_plan(
        rng, sessions=rng.randint(1, sessions), rounds=rounds, prompt=prompt, new=new, gen=gen
    )
    inputs = vllm_inputs(plan, block_size)
    tight = inputs.blocks_needed() + 1
    ample = inputs.never_evicting_blocks()
    # skewed towards the tight end, where eviction and preemption happen
    num_blocks = tight + int((ample - tight) * rng.random() ** 3)
    max_num_seqs = rng.choice((4, 4, 6, 8, 12, 16, 32, 64))
    budget = rng.choice([b for b in BUDGETS if b >= max_num_seqs])
    configuration = VllmConfiguration(
        rng.choice(CAPTURE_SIZES),
        max_num_seqs,
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_batched_tokens=budget,
    )
    return Case(plan, configuration, random_cost(rng))
