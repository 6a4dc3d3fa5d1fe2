"""The observed router (README "A study on a real fleet"): replaying a placement reproduces
the fleet that made it, request by request, on both substrates' vLLM rule set, so
`rearrival compare` on a fleet run checks the replicas' rules, not a router model."""

from __future__ import annotations

import random

import pytest
from test_fleet import STEP_COST, random_plan

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.fleet.routers import ROUTERS, make_router
from rearrival.model.fleet.routers.observed import Observed
from rearrival.model.fleet.simulate import fleet_result, simulate_fleet
from rearrival.model.substrates import substrate_of

CONFIGURATION = VllmConfiguration(
    (), 4, num_blocks=120, block_size=16, max_num_batched_tokens=512, name="small"
)


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("seed", range(4))
def test_observed_placement_reproduces_every_router(router: str, seed: int) -> None:
    plan = random_plan(random.Random(seed), 6)
    made = simulate_fleet(plan, CONFIGURATION, STEP_COST, 2, router)
    placement = [r.replica for r in made.requests]
    fleet = substrate_of(CONFIGURATION).fleet(plan, CONFIGURATION, STEP_COST, 2, False, "plan")
    replayed = fleet_result(fleet, 2, "observed", Observed(placement))
    assert [r.replica for r in replayed.requests] == placement
    assert replayed.requests == made.requests
    assert make_router(router) is not None


def test_a_placement_no_router_makes_is_replayed_as_given() -> None:
    plan = random_plan(random.Random(9), 5)
    requests = sum(len(s.rounds) for s in plan.sessions)
    placement = [1] * requests  # everything on the second replica
    fleet = substrate_of(CONFIGURATION).fleet(plan, CONFIGURATION, STEP_COST, 2, False, "plan")
    replayed = fleet_result(fleet, 2, "observed", Observed(placement))
    assert {r.replica for r in replayed.requests} == {1}
    assert replayed.replica_device_s[0] == 0.0
