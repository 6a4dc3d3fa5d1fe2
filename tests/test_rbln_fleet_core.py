"""The compiled RBLN fleet (``rearrival.model.simulator.rbln.core.run_fleet``; docs/DESIGN.md
§16) gives the Python fleet's results bit for bit, and the step-by-step fleet's within 1e-9
relative: on random fleets of 1-3 replicas behind every router, under every RBLN rule set
(and every release x dummy-block pair), with staggered starts, renewal chains (gap 0 among
them), one or two shared prefixes and fixed arrivals, every request's replica, counts and
times, every total, stretch and eviction are equal. One compiled replica is the single
engine; ``simulate_fleet`` runs the compiled fleet on RBLN by default."""

from __future__ import annotations

import itertools
import random

import pytest
import test_sim_equivalence as equivalence
from test_cores_renewal_prefix import random_open_plan
from test_fleet import _close

from rearrival.model.cost.profile import measured_profile
from rearrival.model.fleet.routers import ROUTERS
from rearrival.model.fleet.simulate import FleetCoreError, simulate_fleet
from rearrival.model.simulator.rbln import compiled_fleet, core
from rearrival.model.simulator.rbln.config import SimConfigError
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.vocabulary import RULE_SETS

PROFILE = measured_profile()
PAIRS = list(itertools.product(("deferred", "immediate"), ("off", "pre-evict", "reserved")))


def random_case(rng: random.Random, release: str, dummy_block: str, sessions: int = 12):
    """A random open plan (renewal chains, 0-2 shared prefixes, 1-6 rounds), a tight to
    roomy slot pool, and fixed arrivals for about one case in four."""
    plan = random_open_plan(rng, sessions=sessions, rounds=6, prompt=1600, new=300, gen=25)
    buckets = rng.choice(equivalence.BUCKET_SETS)
    batch = buckets[-1]
    slots = rng.choice([None, 1, max(1, batch // 2), batch + 1, 2 * batch, plan.n])
    config = SimConfig(
        buckets=buckets, batch_size=batch, slots=slots, release=release, dummy_block=dummy_block
    )
    fixed = None
    if rng.random() < 0.25:  # one time per round >= 1; renewed round 0s follow their leader
        fixed = [round(rng.uniform(0.0, 3.0), 3) for _ in range(plan.requests - plan.n)]
    return plan, config, fixed


def assert_identical(python, compiled, label: str) -> None:
    assert compiled.requests == python.requests, label
    assert compiled.replica_device_s == python.replica_device_s, label
    assert compiled.prediction.summary() == python.prediction.summary(), label
    assert compiled.prediction.requests == python.prediction.requests, label
    assert compiled.prediction.stretches == python.prediction.stretches, label
    assert compiled.prediction.evictions == python.prediction.evictions, label


def check_cases(release: str, dummy_block: str, count: int, seed: int) -> dict[str, int]:
    """``count`` random fleets on the Python and the compiled fleet, asserted identical;
    returns what the cases reached."""
    rng = random.Random(seed)
    reached = dict.fromkeys(("renewal", "prefix", "hit", "eviction", "spread"), 0)
    for case in range(count):
        plan, config, fixed = random_case(rng, release, dummy_block)
        replicas, router = rng.randint(1, 3), ROUTERS[case % len(ROUTERS)]
        args = (plan, config, PROFILE, replicas, router, fixed)
        python = simulate_fleet(*args, core="python")
        compiled = simulate_fleet(*args, core="compiled")
        assert_identical(python, compiled, f"case {case} R={replicas} {router} {config}")
        reached["renewal"] += any(s.after is not None for s in plan.sessions)
        reached["prefix"] += any(s.prefix for s in plan.sessions)
        reached["hit"] += python.prediction.reuse_hits > 0
        reached["eviction"] += bool(python.prediction.evictions)
        reached["spread"] += len({r.replica for r in python.requests}) > 1
    return reached


def test_router_indices_follow_the_registry():
    order = (core.ROUND_ROBIN, core.LEAST_LOADED, core.SESSION_AFFINITY, core.PREFIX_AWARE)
    assert order == tuple(range(len(ROUTERS)))
    assert ROUTERS == ("round_robin", "least_loaded", "session_affinity", "prefix_aware")


@pytest.mark.parametrize(("release", "dummy_block"), PAIRS)
def test_compiled_fleet_is_the_python_fleet_bit_for_bit(release, dummy_block):
    reached = check_cases(release, dummy_block, 40, 3400 + PAIRS.index((release, dummy_block)))
    assert all(count >= 5 for count in reached.values()), reached


@pytest.mark.slow
@pytest.mark.parametrize(("release", "dummy_block"), PAIRS)
def test_compiled_fleet_is_the_python_fleet_on_many_cases(release, dummy_block):
    check_cases(release, dummy_block, 500, 3500 + PAIRS.index((release, dummy_block)))


@pytest.mark.parametrize("rules", sorted(RULE_SETS))
def test_compiled_fleet_is_the_step_by_step_fleet(rules):
    """The third core of each rule set: the fleet of step-by-step engines (integers exact,
    times within 1e-9 relative)."""
    release, dummy_block = RULE_SETS[rules]
    rng = random.Random(3600 + sorted(RULE_SETS).index(rules))
    for case in range(25):
        plan, config, fixed = random_case(rng, release, dummy_block, sessions=8)
        replicas, router = rng.randint(1, 3), ROUTERS[case % len(ROUTERS)]
        args = (plan, config, PROFILE, replicas, router, fixed)
        compiled = simulate_fleet(*args, core="compiled")
        step = simulate_fleet(*args, stepwise=True)
        for a, b in zip(compiled.requests, step.requests, strict=True):
            assert all(
                _close(x, y) for x, y in zip(a.row().values(), b.row().values(), strict=True)
            ), (case, a, b)
        assert all(
            _close(x, y)
            for x, y in zip(compiled.replica_device_s, step.replica_device_s, strict=True)
        )
        equivalence.assert_same(compiled.prediction, step.prediction, f"case {case}")


@pytest.mark.parametrize(("release", "dummy_block"), PAIRS)
def test_one_compiled_replica_is_the_single_engine(release, dummy_block):
    rng = random.Random(3700 + PAIRS.index((release, dummy_block)))
    for case in range(15):
        plan, config, _ = random_case(rng, release, dummy_block)
        single = simulate(plan, config, PROFILE, core="compiled")
        fleet = simulate_fleet(plan, config, PROFILE, 1, ROUTERS[case % 4], core="compiled")
        equivalence.assert_identical(fleet.prediction, single, f"case {case}")
        assert [r.first_token_s for r in fleet.requests] == [
            r.first_token_s for r in single.requests
        ]


def test_auto_runs_the_compiled_fleet_on_rbln(monkeypatch):
    calls = []
    run = compiled_fleet.run_compiled_fleet

    def counted(*args):
        calls.append(args[3:5])
        return run(*args)

    monkeypatch.setattr(compiled_fleet, "run_compiled_fleet", counted)
    plan, config, _ = random_case(random.Random(2), "deferred", "off")
    auto = simulate_fleet(plan, config, PROFILE, 2, "prefix_aware")
    assert calls == [(2, core.PREFIX_AWARE)]
    python = simulate_fleet(plan, config, PROFILE, 2, "prefix_aware", core="python")
    assert len(calls) == 1 and auto.requests == python.requests


def test_the_compiled_fleet_refuses_a_wrong_count_of_fixed_arrivals():
    plan, config, _ = random_case(random.Random(4), "deferred", "off")
    with pytest.raises(SimConfigError, match="fixed_arrivals has 1 times"):
        simulate_fleet(plan, config, PROFILE, 2, fixed_arrivals=[1.0], core="compiled")
    with pytest.raises(FleetCoreError, match="step by step"):
        simulate_fleet(plan, config, PROFILE, 2, stepwise=True, core="compiled")
