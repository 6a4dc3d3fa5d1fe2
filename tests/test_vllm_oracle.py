"""The ``vllm`` rule set against vLLM 0.32.0's own Scheduler, KVCacheManager and BlockPool
(docs/DESIGN.md §15), driven in virtual time by ``oracle_driver`` under the vLLM
environment's python (``REARRIVAL_VLLM_PYTHON``, default ``.venv-vllm/bin/python``).

Per request the prefix hit at its first admission, the preemptions and the steps that
computed its tokens must be equal, and its arrival, first-scheduled and finish times
within 1e-9 relative; so must the run's totals. The cases are random (block sizes 16 and
128, pools from just large enough to ample, budgets 256-8192, 4-64 sequences, two-round
and multi-round plans, staggered starts, zero and round-number gaps, capture sizes on
some, fixed arrivals on some) plus the hand-made plans of tests/test_vllm_rules.py. All
cases of a tier go to one driver process (importing vLLM takes longer than hundreds of
cases). Without the vLLM environment the oracle tests skip, except under CI (CI=true),
where that is a failure.
"""

from __future__ import annotations

import ast
import os
import random
import sys

import pytest
from test_vllm_rules import UNIT, sessions, vllm
from vllm_cases import random_case

from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import Plan, PlanMeta, Session
from rearrival.model.simulator.vllm import oracle
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.vllm_env import ENV_VLLM_PYTHON, vllm_python

IN_CI = os.environ.get("CI") == "true"
CI_CASES = 300
SLOW_CASES = 3000


@pytest.fixture(scope="module")
def vllm_environment() -> None:
    if oracle.available():
        return
    reason = f"no vLLM environment at {vllm_python()} (set {ENV_VLLM_PYTHON})"
    if IN_CI:
        pytest.fail(f"CI must run the vLLM oracle: {reason}")
    pytest.skip(reason)


def hand_cases() -> list[tuple]:
    """The plans tests/test_vllm_rules.py derives by hand, as (plan, configuration,
    step cost, fixed arrivals)."""
    cost = VllmStepCost(0.5, 0.25, 0.125, 0.0625)
    return [
        (Plan((Session(0, 300, 20, 5, 8, 1.0, "t"),), PlanMeta(n=1)), vllm(64, bs), UNIT, None)
        for bs in (16, 32, 128)
    ] + [
        *(
            (
                sessions([(40, 9, 10.0), (8, 2, 0.0)], [(60, 5, 0.0)], starts=[0.0, 9.5]),
                vllm(k),
                UNIT,
                None,
            )
            for k in (5, 6, 8)
        ),
        (sessions([(16, 20, 0.0)], [(16, 20, 0.0)]), vllm(5, seqs=2, budget=64), UNIT, None),
        (sessions([(600, 4, 0.0)]), vllm(64, budget=256), UNIT, None),
        (sessions([(100, 3, 0.0)], [(64, 2, 0.0)]), vllm(11, budget=32), UNIT, None),
        (sessions([(16, 6, 0.0)], [(16, 2, 0.0)], starts=[0.0, 2.0]), vllm(16), UNIT, None),
        (sessions([(16, 6, 0.0)], [(16, 2, 0.0)], starts=[0.0, 2.0 + 1e-13]), vllm(16), UNIT, None),
        (sessions([(20, 3, 0.0), (5, 2, 0.0)]), vllm(16), UNIT, None),
        (
            sessions([(20, 3, 5.0), (5, 2, 0.0)], [(20, 3, 5.0), (5, 2, 0.0)]),
            vllm(16),
            UNIT,
            [4.5, 1.0],
        ),
        (sessions([(40, 3, 0.0)]), vllm(16, capture=(2, 4)), cost, None),
    ]


def random_cases(seed: int, count: int) -> list[tuple]:
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        case = random_case(rng)
        fixed = None
        if rng.random() < 0.15:  # pinned re-arrivals, some before their round finishes
            free = simulate_vllm(case.plan, case.configuration, case.step_cost, core="compiled")
            later = [r.arrival_s for r in free.requests if r.round]
            fixed = [max(0.0, t + rng.uniform(-0.2, 0.3)) for t in later]
        cases.append((case.plan, case.configuration, case.step_cost, fixed))
    return cases


def check_against_vllm(cases: list[tuple]) -> dict[str, int]:
    """Every case on vLLM's scheduler (one driver process) and on the compiled core;
    returns what the cases exercised, after asserting agreement on every one."""
    answers = oracle.run_oracle(
        [oracle.case(str(i), *case) for i, case in enumerate(cases)], timeout_s=7200
    )
    assert answers["vllm_version"] == "0.32.0"
    disagreements = {}
    seen = {"cases": len(cases), "preempted": 0, "lost": 0, "fixed": 0, "capture": 0}
    for i, (case, answer) in enumerate(zip(cases, answers["results"], strict=True)):
        result = simulate_vllm(*case, core="compiled")
        found = oracle.differences(result, answer)
        if found:
            disagreements[i] = found[:3]
        summary = result.summary()
        seen["preempted"] += summary["preemptions"] > 0
        seen["lost"] += summary["re_arrivals_lost"] > 0
        seen["fixed"] += case[3] is not None
        seen["capture"] += bool(case[1].buckets)
    agreed = len(cases) - len(disagreements)
    assert not disagreements, f"agreed with vLLM on {agreed} of {len(cases)}: {disagreements}"
    print(f"agreed with vLLM on {agreed} of {len(cases)} cases; {seen}")
    return seen


def test_the_rule_set_agrees_with_vllm_on_the_ci_tier(vllm_environment):
    seen = check_against_vllm(hand_cases() + random_cases(2024, CI_CASES))
    # the tier reaches what the rules are about
    assert seen["preempted"] >= 30 and seen["lost"] >= 100
    assert seen["fixed"] >= 20 and seen["capture"] >= 60


@pytest.mark.slow
def test_the_rule_set_agrees_with_vllm_on_the_slow_tier(vllm_environment):
    seen = check_against_vllm(random_cases(7, SLOW_CASES))
    assert seen["preempted"] >= 300 and seen["lost"] >= 1000


def test_the_driver_imports_only_the_standard_library_and_vllm():
    tree = ast.parse(oracle.DRIVER.read_text())
    modules = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        node.module.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
    }
    assert modules - set(sys.stdlib_module_names) == {"vllm"}
