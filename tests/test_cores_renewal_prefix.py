"""Session renewal, shared prefixes and first-token times in every core of both rule sets
(docs/DESIGN.md §2, "Engines and fleets", "Latency and SLOs").

Random plans mix staggered starts, renewal chains (a session's round 0 sent when its
leader's last round finishes, some with gap 0, leaders of lower and higher index), zero to
two shared prefixes and 1-8 rounds. On the vLLM rule set the step-by-step reference, the
Python event core and the compiled core agree on every record and total; on the RBLN rule
sets the reference, the Python core and the compiled core agree as in
``tests/test_sim_equivalence.py``, under every release x dummy block x fixed-arrival
variant. Hand-computed cases pin what the rules say: renewal with gap 0 sends the next
session at the finish (the authors' ``successor``); a second session hits the prefix
blocks the first computed on vLLM and never on RBLN (one sequence per slot).
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import test_sim_equivalence as equivalence
from vllm_cases import BUDGETS, CAPTURE_SIZES, Case, random_cost

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import measured_profile
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import After, MultiRoundSession, Plan, PlanMeta, Prefix, Round
from rearrival.model.simulator.rbln.event import simulate_python
from rearrival.model.simulator.rbln.reference import simulate_reference
from rearrival.model.simulator.rbln.sim import SimConfig, simulate
from rearrival.model.simulator.vllm import event
from rearrival.model.simulator.vllm.engine import Engine
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.reference import simulate_reference as vllm_reference
from rearrival.model.simulator.vllm.sim import simulate_vllm

BLOCK_SIZES = (1, 4, 16, 32, 128)


def _gap(rng: random.Random) -> float:
    draw = rng.random()
    if draw < 0.3:
        return 0.0
    if draw < 0.5:
        return rng.choice((0.01, 0.05, 0.1, 0.5))
    return rng.uniform(0.0, 1.0)


def random_open_plan(
    rng: random.Random, *, sessions: int, rounds: int, prompt: int, new: int, gen: int
) -> Plan:
    """Sessions of 1..``rounds`` rounds; about half renew an earlier one in a random order
    (so chains, and leaders of higher index than their follower), the others start at 0
    or spread over 1 s; zero, one or two prefixes, named by some sessions."""
    n = rng.randint(1, sessions)
    prefixes = tuple(
        Prefix(f"agent-{i}", rng.choice((rng.randint(1, prompt), 16 * rng.randint(1, 20))))
        for i in range(rng.choice((0, 1, 1, 2, 2)))
    )
    order = list(range(n))
    rng.shuffle(order)
    followed: set[int] = set()
    after: dict[int, After] = {}
    for position, i in enumerate(order):
        free = [j for j in order[:position] if j not in followed]
        if free and rng.random() < 0.5:
            leader = rng.choice(free)
            followed.add(leader)
            after[i] = After(leader, _gap(rng))
    spread = rng.choice((0.0, 0.05, 1.0))
    items = []
    for i in range(n):
        k = rng.randint(1, rounds)
        body = tuple(
            Round(
                rng.randint(1, prompt) if j == 0 else rng.randint(0, new),
                rng.randint(1, gen),
                _gap(rng) if j + 1 < k else 0.0,
            )
            for j in range(k)
        )
        prefix = rng.choice(prefixes) if prefixes and rng.random() < 0.7 else None
        start = 0.0 if i in after or rng.random() < 0.3 else rng.uniform(0.0, spread)
        items.append(
            MultiRoundSession(
                i,
                body,
                start,
                prefix=prefix.id if prefix else None,
                prefix_tokens=prefix.tokens if prefix else 0,
                after=after.get(i),
            )
        )
    return Plan(tuple(items), PlanMeta(n=n), prefixes)


# --- the vLLM rule set ------------------------------------------------------------------
SMALL = {"sessions": 8, "rounds": 8, "prompt": 300, "new": 120, "gen": 24}


def random_vllm_case(rng: random.Random, **sizes) -> Case:
    """A random open plan with knobs from just large enough to ample (tests/vllm_cases.py)."""
    block_size = rng.choice(BLOCK_SIZES)
    plan = random_open_plan(rng, **sizes)
    inputs = vllm_inputs(plan, block_size)
    tight = inputs.blocks_needed() + 1
    num_blocks = tight + int((inputs.never_evicting_blocks() - tight) * rng.random() ** 3)
    max_num_seqs = rng.choice((4, 4, 6, 8, 12, 16, 32))
    configuration = VllmConfiguration(
        rng.choice(CAPTURE_SIZES),
        max_num_seqs,
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_batched_tokens=rng.choice([b for b in BUDGETS if b >= max_num_seqs]),
    )
    return Case(plan, configuration, random_cost(rng))


def vllm_agree(seed: int, **sizes) -> dict[str, int]:
    """One random case on the three cores, asserted equal; returns what it reached."""
    rng = random.Random(seed)
    case = random_vllm_case(rng, **sizes)
    fixed = None
    if rng.random() < 0.2:  # fixed times cover rounds >= 1; renewed round 0s follow finishes
        free = simulate_vllm(case.plan, case.configuration, case.step_cost, core="compiled")
        fixed = [max(0.0, r.arrival_s + rng.uniform(-0.3, 0.3)) for r in free.requests if r.round]
    args = (case.plan, case.configuration, case.step_cost, fixed)
    reference = vllm_reference(*args)
    for core in ("python", "compiled"):
        other = simulate_vllm(*args, core=core)
        assert other.requests == reference.requests, f"seed {seed} {core}"
        assert other.summary() == reference.summary(), f"seed {seed} {core}"
    arrays = reference.inputs.arrays
    for record in reference.requests:
        assert record.first_scheduled_s < record.first_token_s <= record.finish_s, seed
        assert (record.first_token_s == record.finish_s) == (record.gen_tokens == 1), seed
    for rid, follower in enumerate(arrays.follower):
        if follower >= 0:  # the renewed round 0 is sent at the leader's finish + its gap
            sent = reference.requests[rid].finish_s + arrays.follow_gap[rid]
            assert reference.requests[follower].arrival_s == sent, seed
    summary = reference.summary()
    round0 = [r for r in reference.requests if r.round == 0]
    return {
        "prefix_hits": sum(r.cached_tokens > 0 for r in round0),
        "renewed": sum(follower >= 0 for follower in arrays.follower),
        "preempted": summary["preemptions"] > 0,
        "lost": summary["re_arrivals_lost"] > 0,
    }


def test_the_three_vllm_cores_agree_on_open_plans(monkeypatch):
    held = []
    counted = event.held_prefix_blocks

    def counting(engine, r):
        held.append(counted(engine, r))
        return held[-1]

    monkeypatch.setattr(event, "held_prefix_blocks", counting)
    outcomes = [vllm_agree(seed, **SMALL) for seed in range(1500)]
    # the cases reach what is new: round 0s hitting a prefix, renewals, and a blocked
    # head of the queue whose prefix blocks another request holds; and the old rules
    assert sum(o["prefix_hits"] for o in outcomes) > 1000
    assert sum(o["renewed"] for o in outcomes) > 1000
    assert sum(h > 0 for h in held) > 100
    assert sum(o["preempted"] for o in outcomes) > 40
    assert sum(o["lost"] for o in outcomes) > 200


def test_the_three_vllm_cores_agree_on_long_generations():
    for seed in range(40):
        vllm_agree(50_000 + seed, sessions=8, rounds=3, prompt=400, new=100, gen=300)


@pytest.mark.slow
def test_the_three_vllm_cores_agree_on_many_open_plans():
    for seed in range(60_000, 63_000):
        vllm_agree(seed, **SMALL)


def test_a_never_evicting_pool_computes_each_prefix_at_most_as_often_as_its_sessions():
    # never_evicted_prefill counts each prefix's full blocks once per plan; vLLM computes
    # a block twice only when two round 0s naming the prefix prefill at once
    equal = 0
    for seed in range(300):
        case = random_vllm_case(random.Random(seed), **SMALL)
        inputs = vllm_inputs(case.plan, case.configuration.block_size)
        roomy = dataclasses.replace(case.configuration, num_blocks=inputs.never_evicting_blocks())
        result = vllm_reference(case.plan, roomy, case.step_cost)
        summary = result.summary()
        assert (summary["preemptions"], summary["re_arrivals_lost"]) == (0, 0)
        assert summary["prefill_tokens"] >= result.never_evicted_prefill
        equal += summary["recomputed_prefill_tokens"] == 0
    assert equal > 200


COST = VllmStepCost(0.01, 0.001, 0.0001, 1e-5)


def _vllm(num_blocks: int = 32, budget: int = 2048) -> VllmConfiguration:
    return VllmConfiguration(
        (), 4, num_blocks=num_blocks, block_size=16, max_num_batched_tokens=budget
    )


def _step(decode: int, prefill: int, context: int) -> float:
    """docs/DESIGN.md §15 rule 7, written out."""
    return (
        COST.base_s
        + COST.per_decode_token_s * decode
        + COST.per_prefill_token_s * prefill
        + COST.per_kv_token_s * context
    )


def _all_cores(plan: Plan, configuration: VllmConfiguration) -> list[dict]:
    reference = vllm_reference(plan, configuration, COST)
    for core in ("python", "compiled"):
        assert simulate_vllm(plan, configuration, COST, core=core).summary() == reference.summary()
    return reference.summary()["requests"]


def test_vllm_renewal_with_gap_0_sends_the_next_session_at_the_finish():
    plan = Plan(
        (
            MultiRoundSession(0, (Round(10, 3),)),
            MultiRoundSession(1, (Round(5, 2),), after=After(0, 0.0)),
        )
    )
    first, second = _all_cores(plan, _vllm())
    token = _step(0, 10, 0)  # the prefill samples the first token
    finish = token + _step(1, 0, 10) + _step(1, 0, 11)
    assert (first["first_token_s"], first["finish_s"]) == (token, finish)
    assert second["arrival_s"] == second["first_scheduled_s"] == finish
    assert second["first_token_s"] == finish + _step(0, 5, 0)
    assert second["finish_s"] == finish + _step(0, 5, 0) + _step(1, 0, 5)


def test_a_second_session_hits_the_prefix_on_vllm_whoever_computed_it():
    # a 40-token prefix fills 2 blocks of 16; session 1 starts after session 0 finished,
    # session 2 while session 1 still decodes (its prefix blocks held, not free)
    prefix = Prefix("agent", 40)
    named = {"prefix": "agent", "prefix_tokens": 40}
    plan = Plan(
        (
            MultiRoundSession(0, (Round(8, 2),), **named),
            MultiRoundSession(1, (Round(5, 30),), 1.0, **named),
            MultiRoundSession(2, (Round(3, 1),), 1.05, **named),
            MultiRoundSession(3, (Round(3, 1),), 2.0),
        ),
        prefixes=(prefix,),
    )
    rows = _all_cores(plan, _vllm())
    assert [r["cached_tokens"] for r in rows] == [0, 32, 32, 0]
    s0, s1 = rows[0], rows[1]
    assert s0["first_token_s"] == _step(0, 48, 0)
    assert s0["finish_s"] == _step(0, 48, 0) + _step(1, 0, 48)
    assert s1["first_token_s"] == 1.0 + _step(0, 13, 32)  # 45 tokens, 32 cached
    result = vllm_reference(plan, _vllm(), COST)
    # each prefix block counted as computed once: sessions 1 and 2 hit it
    assert result.never_evicted_prefill == 48 + 13 + 11 + 3
    assert result.summary()["re_arrivals_lost"] == 0  # round 0 hits are not re-arrivals


def test_vllm_first_token_is_the_end_of_the_step_whose_chunk_ends_the_prompt():
    # a 300-token prompt under a 256-token budget: the second chunk samples the first token
    plan = Plan((MultiRoundSession(0, (Round(300, 2),)),))
    (row,) = _all_cores(plan, _vllm(budget=256))
    token = _step(0, 256, 0) + _step(0, 44, 256)
    assert (row["first_scheduled_s"], row["first_token_s"]) == (0.0, token)
    assert row["finish_s"] == token + _step(1, 0, 300)


def test_a_driven_engine_reports_what_each_step_finished_and_sends_nothing():
    plan = Plan(
        (
            MultiRoundSession(0, (Round(10, 1, 0.5), Round(3, 1))),
            MultiRoundSession(1, (Round(5, 2),), after=After(0, 0.0)),
        )
    )
    engine = Engine(vllm_inputs(plan, 16), _vllm(), COST, None, driven=True)
    assert engine.pending == [] and engine.just_finished == []
    engine.queue(0)
    engine.queue(2)
    engine.step()  # both prefill; request 0 samples its only token
    assert [r.rid for r in engine.just_finished] == [0]
    engine.step()
    assert [r.rid for r in engine.just_finished] == [2]
    assert engine.pending == [] and not engine.advance_to_work()


# --- the RBLN rule sets ------------------------------------------------------------------
def random_rbln_case(rng: random.Random, release: str, dummy_block: str, fixed: bool):
    plan = random_open_plan(rng, sessions=16, rounds=8, prompt=1600, new=300, gen=25)
    buckets = rng.choice(equivalence.BUCKET_SETS)
    batch = buckets[-1]
    n = plan.n
    slots = rng.choice([None, 1, max(1, batch // 2), batch + 1, 2 * batch, n, 3 * n])
    fixed_arrivals = None
    if fixed:  # one time per round >= 1; renewed round 0s always follow their leader
        fixed_arrivals = [
            round(rng.uniform(0.0, 3.0), rng.choice([2, 9])) for _ in range(plan.requests - n)
        ]
    config = SimConfig(
        buckets=buckets,
        batch_size=batch,
        slots=slots,
        release=release,
        dummy_block=dummy_block,
        fixed_arrivals=fixed_arrivals,
    )
    return plan, config


@pytest.mark.parametrize(("release", "dummy_block", "fixed"), equivalence.VARIANTS)
def test_the_rbln_cores_agree_on_open_plans(release, dummy_block, fixed):
    variant = (release, dummy_block, fixed)
    equivalence.check_random_plans(random_rbln_case, variant, 30, 70_000)


@pytest.mark.slow
@pytest.mark.parametrize(("release", "dummy_block", "fixed"), equivalence.VARIANTS)
def test_the_rbln_cores_agree_on_many_open_plans(release, dummy_block, fixed):
    variant = (release, dummy_block, fixed)
    equivalence.check_random_plans(random_rbln_case, variant, 400, 80_000)


def _rbln_all_cores(plan: Plan, config: SimConfig):
    profile = measured_profile()
    compiled = simulate(plan, config, core="compiled")
    equivalence.assert_identical(compiled, simulate_python(plan, config, profile), "python")
    equivalence.assert_same(compiled, simulate_reference(plan, config), "reference")
    return compiled


def test_rbln_renewal_with_gap_0_is_the_authors_successor():
    # the follower arrives at its leader's completion and is admitted there
    plan = Plan(
        (
            MultiRoundSession(0, (Round(200, 3),)),
            MultiRoundSession(1, (Round(100, 2),), after=After(0, 0.0)),
        )
    )
    profile = measured_profile()
    config = SimConfig()
    first, second = _rbln_all_cores(plan, config).requests
    dt = profile.decode_step_s(1, 1)
    done = profile.prefill_s(200) + 2 * dt
    assert math.isclose(first.complete_s, done, rel_tol=1e-12)
    assert second.arrival_s == second.admit_s == first.complete_s
    assert math.isclose(second.complete_s, done + profile.prefill_s(100) + dt, rel_tol=1e-12)


def test_rbln_never_reuses_a_prefix_across_sessions():
    # a prefix is part of round 0's prompt; each slot holds one session's sequence
    named = {"prefix": "agent", "prefix_tokens": 1024}
    plan = Plan(
        (
            MultiRoundSession(0, (Round(16, 2, 0.1), Round(8, 2)), **named),
            MultiRoundSession(1, (Round(16, 2),), 1.0, **named),
        ),
        prefixes=(Prefix("agent", 1024),),
    )
    records = _rbln_all_cores(plan, SimConfig()).requests
    assert [(r.session, r.turn, r.prompt_tokens) for r in records] == [
        (0, 0, 1040),
        (0, 1, 1050),
        (1, 0, 1040),
    ]
    assert records[2].cached_tokens == 0 and records[2].computed_tokens == 1040
    assert records[1].cached_tokens > 0  # the session's own round still reuses its slot
