"""The vLLM rule set's three cores agree (docs/DESIGN.md §15): the step-by-step reference,
the Python event core (which fast-forwards pure decode stretches) and the compiled core.

Every per-request record (hit, preemptions, steps, times) and every total must be equal;
the event cores advance the clock one step at a time like the reference, so times are
equal bit for bit, well inside the contract's 1e-9 relative. Random cases
(tests/vllm_cases.py) span block sizes 1 to 128, pools from just large enough to ample,
budgets, sequence limits, capture sizes, two-round and multi-round plans with staggered
starts and zero gaps, and fixed arrivals; the default suite runs 2,000 cases, ``-m slow``
12,000 more.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
from vllm_cases import random_case

from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.reference import simulate_reference
from rearrival.model.simulator.vllm.sim import simulate_vllm

BLOCK_SIZES = (1, 4, 16, 32, 128)
SMALL = {"sessions": 6, "rounds": 4, "prompt": 300, "new": 120, "gen": 24}


def agree(seed: int, **sizes) -> tuple[bool, bool]:
    """Run one random case on every core, assert they agree; returns whether it evicted
    (a re-arrival lost its prefix) and whether it preempted."""
    rng = random.Random(seed)
    case = random_case(rng, block_sizes=BLOCK_SIZES, **sizes)
    fixed = None
    if rng.random() < 0.2:  # re-arrival times pinned, some before their round finishes
        free = simulate_vllm(case.plan, case.configuration, case.step_cost, core="compiled")
        fixed = [max(0.0, r.arrival_s + rng.uniform(-0.3, 0.3)) for r in free.requests if r.round]
    args = (case.plan, case.configuration, case.step_cost, fixed)
    reference = simulate_reference(*args)
    for core in ("python", "compiled"):
        other = simulate_vllm(*args, core=core)
        assert other.requests == reference.requests, f"seed {seed} {core}"
        assert other.summary() == reference.summary(), f"seed {seed} {core}"
    summary = reference.summary()
    return summary["re_arrivals_lost"] > 0, summary["preemptions"] > 0


def test_the_three_cores_agree_on_random_cases():
    outcomes = [agree(seed, **SMALL) for seed in range(2000)]
    # the cases reach the rules that matter: eviction during waits and preemption
    assert sum(lost for lost, _ in outcomes) > 400
    assert sum(preempted for _, preempted in outcomes) > 150


def test_the_three_cores_agree_on_long_generations():
    # long decode stretches: the event cores' fast-forward runs hundreds of steps at once
    for seed in range(40):
        agree(10_000 + seed, sessions=8, rounds=3, prompt=400, new=100, gen=300)


def test_a_pool_that_never_evicts_computes_prompts_less_what_the_last_round_left():
    # what recomputed_prefill_tokens subtracts, checked by running the plan on that pool
    for seed in range(300):
        case = random_case(random.Random(seed), block_sizes=BLOCK_SIZES, **SMALL)
        inputs = vllm_inputs(case.plan, case.configuration.block_size)
        roomy = dataclasses.replace(case.configuration, num_blocks=inputs.never_evicting_blocks())
        bounded = simulate_vllm(case.plan, case.configuration, case.step_cost)
        summary = simulate_reference(case.plan, roomy, case.step_cost).summary()
        assert (summary["preemptions"], summary["re_arrivals_lost"]) == (0, 0)
        assert summary["recomputed_prefill_tokens"] == 0
        assert summary["prefill_tokens"] == bounded.never_evicted_prefill


@pytest.mark.slow
def test_the_three_cores_agree_on_many_random_cases():
    for seed in range(20_000, 32_000):
        agree(seed, **SMALL) if seed % 4 else agree(seed)
