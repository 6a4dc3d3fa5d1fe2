"""The capacity search's fast path is the full path's bits (docs/DESIGN.md §17 "Capacity"):
the open plan's kernel rows gathered from the pool equal the rows of the plan `plans open`
builds, a fleet's Point from the kernel's columns equals the Point of the plan run by
``simulate_fleet``, and a whole search's capacity and curve rows are the same text; on
random pools (shared prefixes, one to five rounds, gaps), configurations and routers."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import parse_step_cost
from rearrival.model.fleet.latency import Slo
from rearrival.model.fleet.routers import ROUTERS
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Prefix, Round
from rearrival.model.plans.workloads_open import WorkloadError, open_plan
from rearrival.model.simulator.vllm.inputs import (
    VllmPlanError,
    check_pool,
    kernel_plan,
    vllm_inputs,
)
from rearrival.model.simulator.vllm.open_kernel import OpenKernelPlans
from rearrival.search.capacity import evaluate as evaluate_module
from rearrival.search.capacity.evaluate import Workload, evaluate, fleet_capacity
from rearrival.search.capacity.outputs import (
    CAPACITY_COLUMNS,
    CURVE_COLUMNS,
    capacity_row,
    curve_rows,
    to_csv,
)
from rearrival.search.capacity.space import Fleet

STEP_COST = parse_step_cost("0.01,0.0002,0.00002,0.000001")


def random_pool(rng: random.Random) -> Plan:
    """Up to eight sessions of one to five rounds; some name one of two prefixes."""
    prefixes = (Prefix("sys-a", rng.randint(10, 400)), Prefix("sys-b", rng.randint(10, 400)))
    sessions = []
    for i in range(rng.randint(1, 8)):
        count = rng.randint(1, 5)
        rounds = tuple(
            Round(
                rng.randint(1, 200),
                rng.randint(1, 120),
                round(rng.uniform(0.0, 4.0), 3) if k + 1 < count else 0.0,
            )
            for k in range(count)
        )
        named = rng.choice((None, prefixes[0], prefixes[1]))
        sessions.append(
            MultiRoundSession(
                i,
                rounds,
                0.0,
                None if named is None else named.id,
                0 if named is None else named.tokens,
            )
        )
    used = {s.prefix for s in sessions}
    return Plan(tuple(sessions), PlanMeta(), tuple(p for p in prefixes if p.id in used))


def random_configuration(rng: random.Random) -> VllmConfiguration:
    seqs = rng.choice((1, 2, 4, 8))
    return VllmConfiguration(
        rng.choice(((), (1, 2, 4), (2, 8))),
        seqs,
        num_blocks=rng.choice((64, 160, 600)),
        block_size=rng.choice((8, 16, 32)),
        max_num_batched_tokens=rng.choice((64, 256, 2048)),
    )


def _workload(pool: Plan, horizon: float, seed: int) -> Workload:
    slo = Slo(ttft_s=0.3, tpot_s=0.03, attainment=0.9)
    return Workload(pool, horizon, horizon / 10, seed, slo, STEP_COST)


@pytest.mark.parametrize("case", range(30))
def test_the_pools_rows_are_the_open_plans_rows(case: int) -> None:
    rng = random.Random(case)
    pool = random_pool(rng)
    horizon, seed = rng.choice((20.0, 60.0, 300.0)), rng.randint(0, 99)
    plans = OpenKernelPlans(pool, horizon, seed)
    rates = sorted(rng.uniform(0.05, 3.0) for _ in range(4))
    for rate in rates[::-1] if case % 2 else rates:  # the draw extended and read back
        configuration = random_configuration(rng)
        try:
            plan = open_plan(pool.sessions, pool.prefixes, rate, horizon, seed)
        except WorkloadError as refused:
            with pytest.raises(WorkloadError, match=str(refused)):
                plans.at(rate, configuration, "plan")
            continue
        inputs = vllm_inputs(plan, configuration.block_size)
        try:
            check_pool(inputs, configuration, "plan")
        except VllmPlanError as refused:
            with pytest.raises(VllmPlanError) as fast:
                plans.at(rate, configuration, "plan")
            assert str(fast.value) == str(refused)
            continue
        want = kernel_plan(inputs)
        got = plans.at(rate, configuration, "plan")
        assert got.sessions == plan.n
        assert got.starts.tolist() == [s.start_s for s in plan.sessions]
        assert got.kernel.plan_i.dtype == want.plan_i.dtype and got.kernel.plan_i.flags.c_contiguous
        for name in ("plan_i", "gap", "follow_gap", "start"):
            assert np.array_equal(getattr(got.kernel, name), getattr(want, name)), name
        assert got.kernel.keys == want.keys


@pytest.mark.parametrize("case", range(24))
def test_a_point_from_the_kernels_columns_is_the_simulated_plans_point(case: int) -> None:
    rng = random.Random(1000 + case)
    pool = random_pool(rng)
    workload = _workload(pool, rng.choice((30.0, 120.0)), rng.randint(0, 99))
    fleet = Fleet(random_configuration(rng), rng.randint(1, 3), rng.choice(ROUTERS))
    for rate in (rng.uniform(0.05, 0.5), rng.uniform(0.5, 4.0)):
        try:
            full = evaluate(workload, fleet, rate, plan=workload.plan(rate))
        except (WorkloadError, VllmPlanError) as refused:
            with pytest.raises(type(refused), match=str(refused).replace("(", r"\(")[:40]):
                evaluate(workload, fleet, rate)
            continue
        assert evaluate(workload, fleet, rate) == full


@pytest.mark.parametrize("case", range(6))
def test_a_whole_search_writes_the_same_rows_as_the_full_path(case: int, monkeypatch) -> None:
    rng = random.Random(2000 + case)
    pool = random_pool(rng)
    configuration = VllmConfiguration((), rng.choice((2, 4, 8)), num_blocks=600)
    fleet = Fleet(configuration, rng.randint(1, 2), rng.choice(ROUTERS))
    fast = fleet_capacity(_workload(pool, 60.0, case), fleet, 0.05, grid=4)
    monkeypatch.setattr(
        evaluate_module,
        "_compiled",
        lambda workload, fleet, rate: evaluate(workload, fleet, rate, plan=workload.plan(rate)),
    )
    full = fleet_capacity(_workload(pool, 60.0, case), fleet, 0.05, grid=4)
    assert to_csv([capacity_row(fast)], CAPACITY_COLUMNS) == to_csv(
        [capacity_row(full)], CAPACITY_COLUMNS
    )
    assert to_csv(curve_rows(fast), CURVE_COLUMNS) == to_csv(curve_rows(full), CURVE_COLUMNS)
    assert len(fast.points) >= 3


def test_a_request_too_long_for_the_pool_is_refused_as_the_plan_is() -> None:
    pool = Plan((MultiRoundSession(0, (Round(100, 50, 1.0), Round(300, 40)), 0.0),), PlanMeta())
    small = VllmConfiguration((), 4, num_blocks=20, block_size=16)
    plan = open_plan(pool.sessions, (), 1.0, 10.0, 3)
    with pytest.raises(VllmPlanError) as full:
        check_pool(vllm_inputs(plan, 16), small, "plan")
    with pytest.raises(VllmPlanError) as fast:
        OpenKernelPlans(pool, 10.0, 3).at(1.0, small, "plan")
    assert str(fast.value) == str(full.value)
