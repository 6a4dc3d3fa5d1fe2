"""Fleets of replicas behind routers (docs/DESIGN.md §16): one replica is the single engine exactly,
the event-driven fleet agrees with the step-by-step fleet on every router, each router places
requests as docs/DESIGN.md §16 states, latencies and SLO attainment follow their definitions, and
``rearrival simulate --replicas/--router/--slo`` works on both substrates."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.errors import RearrivalError
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import measured_profile
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.fleet.latency import Slo, SloError, attainment, latency, percentiles
from rearrival.model.fleet.routers import ROUTERS, RouterError, make_router
from rearrival.model.fleet.simulate import simulate_fleet
from rearrival.model.plans.plan import After, MultiRoundSession, Plan, Round, write_plan
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.model.simulator.vllm.inputs import VllmPlanError
from rearrival.model.simulator.vllm.sim import simulate_vllm

PROFILE = measured_profile()
STEP_COST = VllmStepCost(0.01, 2e-4, 2e-5, 1e-7)


def random_plan(rng: random.Random, sessions: int, renewal: bool = False) -> Plan:
    """Staggered multi-round sessions; with ``renewal`` some follow an earlier one."""
    out = []
    for i in range(sessions):
        k = rng.randint(1, 5)
        rounds = tuple(
            Round(
                rng.randint(1 if j == 0 else 0, 400),
                rng.randint(1, 60),
                round(rng.uniform(0, 2), 3) if j < k - 1 else 0.0,
            )
            for j in range(k)
        )
        followed = {s.after.session for s in out if s.after is not None}
        free = [j for j in range(i) if j not in followed]
        if renewal and free and rng.random() < 0.4:
            gap = rng.choice([0.0, round(rng.uniform(0, 1), 3)])
            out.append(MultiRoundSession(i, rounds, after=After(rng.choice(free), gap)))
        else:
            out.append(MultiRoundSession(i, rounds, round(rng.uniform(0, 3), 3)))
    return Plan(tuple(out))


def rbln_config(rng: random.Random) -> SimConfig:
    return SimConfig(
        buckets=(1, 2, 4),
        batch_size=4,
        slots=rng.choice([None, 2, 5]),
        release=rng.choice(["deferred", "immediate"]),
        dummy_block=rng.choice(["off", "pre-evict", "reserved"]),
    )


def vllm_config(rng: random.Random) -> VllmConfiguration:
    return VllmConfiguration(
        (),
        rng.randint(1, 4),
        num_blocks=rng.randint(60, 200),
        block_size=16,
        max_num_batched_tokens=rng.choice([64, 512]),
    )


def _close(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))
    return a == b


@pytest.mark.parametrize("seed", range(4))
def test_one_replica_is_the_single_engine_exactly(seed):
    rng = random.Random(seed)
    for _ in range(40):
        plan = random_plan(rng, rng.randint(1, 10))
        config = rbln_config(rng)
        single = simulate(plan, config, PROFILE, core="python")
        fleet = simulate_fleet(plan, config, PROFILE, 1, rng.choice(ROUTERS))
        assert fleet.prediction.summary() == single.summary()
        assert [r.first_token_s for r in fleet.requests] == [
            r.first_token_s for r in single.requests
        ]
        vconfig = vllm_config(rng)
        try:
            expected = simulate_vllm(plan, vconfig, STEP_COST, core="python").summary()
        except VllmPlanError:
            continue
        got = simulate_fleet(plan, vconfig, STEP_COST, 1, rng.choice(ROUTERS))
        assert got.prediction.summary() == expected


@pytest.mark.parametrize("seed", range(4))
def test_event_fleet_agrees_with_the_step_by_step_fleet(seed):
    rng = random.Random(100 + seed)
    for _ in range(30):
        plan = random_plan(rng, rng.randint(2, 12), renewal=True)
        replicas, router = rng.randint(1, 3), rng.choice(ROUTERS)
        for configuration, cost in ((rbln_config(rng), PROFILE), (vllm_config(rng), STEP_COST)):
            try:
                event = simulate_fleet(plan, configuration, cost, replicas, router)
            except VllmPlanError:
                continue
            step = simulate_fleet(plan, configuration, cost, replicas, router, stepwise=True)
            for a, b in zip(event.requests, step.requests, strict=True):
                assert all(
                    _close(x, y) for x, y in zip(a.row().values(), b.row().values(), strict=True)
                ), (router, replicas, a, b)
            assert all(
                _close(x, y)
                for x, y in zip(event.replica_device_s, step.replica_device_s, strict=True)
            )


def _sessions(*rounds_per_session: tuple[Round, ...], starts=None) -> Plan:
    starts = starts or [0.0] * len(rounds_per_session)
    return Plan(
        tuple(
            MultiRoundSession(i, rounds, start)
            for i, (rounds, start) in enumerate(zip(rounds_per_session, starts, strict=True))
        )
    )


def test_round_robin_sends_the_kth_request_to_replica_k_mod_r():
    two_rounds = (Round(100, 4, 0.5), Round(10, 4))
    plan = _sessions(two_rounds, two_rounds, two_rounds, starts=[0.0, 0.1, 0.2])
    result = simulate_fleet(plan, SimConfig(), PROFILE, 2, "round_robin")
    order = sorted(result.requests, key=lambda r: (r.arrival_s, r.session, r.round))
    assert [r.replica for r in order] == [k % 2 for k in range(len(order))]


def test_session_affinity_keeps_every_round_on_round_zeros_replica():
    rng = random.Random(7)
    plan = random_plan(rng, 12)
    result = simulate_fleet(plan, vllm_config_fixed(), STEP_COST, 3, "session_affinity")
    first = {r.session: r.replica for r in result.requests if r.round == 0}
    assert all(r.replica == first[r.session] for r in result.requests)
    assert len(set(first.values())) > 1  # round 0 goes by load, so sessions spread


def vllm_config_fixed() -> VllmConfiguration:
    return VllmConfiguration((), 4, num_blocks=400, block_size=16, max_num_batched_tokens=2048)


def test_least_loaded_picks_the_replica_with_fewest_outstanding_requests():
    # Session 0 is long (busy on replica 0); session 1 arrives while it runs and goes to
    # replica 1; session 2 arrives after session 1 finished and before session 0 did: replica
    # 1 again (0 outstanding there, 1 on replica 0).
    plan = _sessions(
        (Round(100, 400),), (Round(100, 2),), (Round(100, 2),), starts=[0.0, 0.01, 1.0]
    )
    result = simulate_fleet(plan, SimConfig(), PROFILE, 2, "least_loaded")
    assert [r.replica for r in result.requests] == [0, 1, 1]
    assert result.requests[1].finish_s < 1.0 < result.requests[0].finish_s


def test_round_robin_loses_the_cache_that_affinity_keeps():
    # Three sessions of three rounds on two replicas: round robin sends the k-th request to
    # replica k mod 2, so some re-arrival lands where its session never ran and recomputes
    # its whole prompt.
    rounds = (Round(300, 8, 0.2), Round(50, 8, 0.2), Round(50, 8))
    plan = _sessions(rounds, rounds, rounds, starts=[0.0, 0.05, 0.1])
    config = vllm_config_fixed()
    spread = simulate_fleet(plan, config, STEP_COST, 2, "round_robin")
    kept = simulate_fleet(plan, config, STEP_COST, 2, "session_affinity")
    rearrivals = lambda result: [r.cached_tokens for r in result.requests if r.round]  # noqa: E731
    assert all(c > 0 for c in rearrivals(kept))
    assert sum(rearrivals(spread)) < sum(rearrivals(kept))
    aware = simulate_fleet(plan, config, STEP_COST, 2, "prefix_aware")
    assert rearrivals(aware) == rearrivals(kept)


def test_renewal_sends_the_follower_after_its_leaders_last_round():
    plan = Plan(
        (
            MultiRoundSession(0, (Round(100, 5, 0.3), Round(10, 5))),
            MultiRoundSession(1, (Round(100, 5),), after=After(0, 0.25)),
        )
    )
    for configuration, cost in ((SimConfig(), PROFILE), (vllm_config_fixed(), STEP_COST)):
        result = simulate_fleet(plan, configuration, cost, 2, "least_loaded")
        leader_last = result.requests[1]
        follower = result.requests[2]
        assert follower.arrival_s == leader_last.finish_s + 0.25


def test_latency_definitions_and_slo_attainment():
    plan = _sessions((Round(200, 10),), (Round(200, 1),), starts=[0.0, 0.0])
    result = simulate_fleet(plan, SimConfig(), PROFILE, 1, "round_robin")
    first, second = result.requests
    value = latency(first)
    assert value.ttft_s == first.first_token_s - first.arrival_s
    assert value.tpot_s == (first.finish_s - first.first_token_s) / 9
    assert value.queue_s == 0.0 and latency(second).queue_s > 0
    assert latency(second).tpot_s is None  # one token: no time per output token
    table = percentiles(result.requests)
    assert table["tpot_s"]["p50"] == value.tpot_s  # one request has a tpot
    strict = Slo(ttft_s=value.ttft_s)
    assert attainment(result.requests, strict) == 0.5  # the queued second misses it
    assert attainment(result.requests, Slo(ttft_s=10.0, tpot_s=1.0)) == 1.0
    summary = result.summary(strict)
    assert summary["slo"]["attainment"] == 0.5 and summary["slo"]["met"] is False
    windowed = result.summary(strict, warmup_s=0.0, horizon_s=1e-9)
    assert windowed["measured_requests"] == 2


def test_slo_refusals_are_one_line():
    for text in ("ttft", "latency=1", "ttft=abc", "ttft=-1"):
        with pytest.raises(SloError):
            Slo.parse(text)
    with pytest.raises(SloError):
        Slo(ttft_s=1.0, attainment=1.5)
    with pytest.raises(RouterError):
        make_router("random")


@pytest.fixture
def plan_file(tmp_path):
    rng = random.Random(3)
    return write_plan(random_plan(rng, 6, renewal=True), tmp_path / "plan.json")


def test_simulate_cli_serves_a_fleet_on_both_substrates(plan_file):
    runner = CliRunner()
    rbln = runner.invoke(
        app,
        [
            "simulate",
            str(plan_file),
            "--profile",
            "published",
            "--replicas",
            "2",
            "--router",
            "least_loaded",
            "--slo",
            "ttft=0.5,tpot=0.05",
            "--json",
        ],
    )
    assert rbln.exit_code == 0, rbln.output
    summary = json.loads(rbln.stdout.splitlines()[-1])
    assert summary["replicas"] == 2 and len(summary["replica_device_s"]) == 2
    assert set(summary["latency"]) == {"ttft_s", "tpot_s", "e2e_s", "queue_s"}
    assert {"replica", "first_token_s"} <= set(summary["requests"][0])
    assert 0 <= summary["slo"]["attainment"] <= 1
    vllm = runner.invoke(
        app,
        [
            "simulate",
            str(plan_file),
            "--substrate",
            "vllm",
            "--block-size",
            "16",
            "--num-blocks",
            "600",
            "--max-num-seqs",
            "4",
            "--max-num-batched-tokens",
            "2048",
            "--step-cost",
            "0.01,0.0002,0.00002",
            "--replicas",
            "3",
            "--router",
            "prefix_aware",
        ],
    )
    assert vllm.exit_code == 0, vllm.output
    assert "fleet: 3 replica(s), prefix_aware" in vllm.stdout


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--replicas", "0"], "--replicas 0"),
        (["--replicas", "17"], "over the bound"),
        (["--router", "random"], "--router 'random'"),
        (["--attainment", "0.5"], "--attainment needs --slo"),
        (["--slo", "speed=1"], "--slo"),
        (["--warmup", "5", "--horizon", "2"], "warm-up < horizon"),
    ],
)
def test_fleet_option_refusals_are_one_line(plan_file, options, needle):
    result = CliRunner().invoke(app, ["simulate", str(plan_file), *options])
    assert isinstance(result.exception, RearrivalError)  # `rearrival` prints it, exit 2
    assert needle in str(result.exception)
    assert "\n" not in str(result.exception)


def test_a_fleet_refusal_is_one_line_on_stderr(plan_file):
    cli = Path(sys.executable).with_name("rearrival")
    done = subprocess.run(
        [str(cli), "simulate", str(plan_file), "--replicas", "0"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "rearrival: error: --replicas 0: give a fleet of at least 1 replica"
    ]


def test_the_registry_refuses_a_configuration_of_another_substrate():
    from rearrival.judge.predictions import predict_study
    from rearrival.model.configuration import RblnConfiguration
    from rearrival.model.cost.vllm_profile import load_vllm_profile
    from rearrival.model.substrates import SUBSTRATES, substrate_of, substrate_of_profile

    assert substrate_of(SimConfig()).name == "rbln"
    assert substrate_of(vllm_config_fixed()).name == "vllm"
    assert substrate_of_profile(PROFILE) is SUBSTRATES["rbln"]
    study = type("S", (), {})()  # the loop refuses before it reads anything else
    study.name, study.n = "s", (2,)
    study.conditions = lambda: [type("C", (), {"configuration": "b", "variant": "wait"})()]
    profile = load_vllm_profile(
        Path(__file__).resolve().parents[1] / "src/rearrival/data/profile_vllm_tiny_qwen3_cpu.yaml"
    )
    plan = random_plan(random.Random(0), 2)
    with pytest.raises(RearrivalError, match="configuration b is not a vllm configuration"):
        predict_study(1, study, lambda n, r: plan, {"b": RblnConfiguration((1, 2), 2)}, profile)
