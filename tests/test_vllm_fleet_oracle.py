"""The oracle of vLLM fleets (docs/DESIGN.md §16, "Latency and SLOs"): R copies of
vLLM 0.32.0's own Scheduler behind a router, driven in virtual time by ``oracle_driver``
under the vLLM environment's python, and the predictor's fleet held to it.

The driver itself is checked three ways before anything is held to it: on hand-made two-replica
fleets whose every time, hit and replica is derived in the comments from the docs/DESIGN.md §16
event order and routers; with one replica, where every router must give exactly the single engine's
run; and on random open-traffic fleets (tests/vllm_fleet_cases.py) by invariants any correct run
keeps: each request arrives when docs/DESIGN.md §16 says, is scheduled,
emits its first token and finishes in that order, is routed as its router says (round
robin and least-loaded choices rebuilt from the rows' outstanding counts), never hits more
than its shared prefix's full blocks at round 0, and on a pool that never evicts hits the
whole prefix once a session of the same prefix has computed it on that replica and its
previous round's full blocks on a re-arrival to the same replica. The predictor's fleet
(``rearrival.model.fleet.simulate.simulate_fleet``) must then agree per request: replica,
cached tokens and preemptions exactly, arrival, first scheduled, first token and finish
within 1e-9 relative: on fleets whose sessions share no prefix, and on the whole tier.
All cases of a test
go to one driver process. Without the vLLM environment the tests skip, except under CI
(CI=true), where that is a failure.
"""

from __future__ import annotations

import random
from collections import defaultdict
from types import SimpleNamespace

import pytest
from test_vllm_rules import UNIT, vllm
from vllm_cases import random_case
from vllm_env import require_vllm
from vllm_fleet_cases import ROUTERS, FleetCase, random_fleet_cases, without_prefixes

from rearrival.model.fleet.simulate import simulate_fleet
from rearrival.model.plans.plan import After, MultiRoundSession, Plan, PlanMeta, Prefix, Round
from rearrival.model.simulator.vllm import oracle

CI_CASES = 40
CI_UNSHARED_CASES = 20
SLOW_CASES = 400
PREFIX = Prefix("p", 32)  # two full blocks of 16


@pytest.fixture(scope="module")
def vllm_environment() -> None:
    require_vllm()


def plan(*sessions: tuple) -> Plan:
    """Sessions from (start_s or After, prefix id or None, [(new, gen, gap), ...])."""
    rows = []
    for i, (start, prefix, rounds) in enumerate(sessions):
        after = start if isinstance(start, After) else None
        rows.append(
            MultiRoundSession(
                i,
                tuple(Round(*r) for r in rounds),
                0.0 if after else start,
                prefix=prefix,
                prefix_tokens=PREFIX.tokens if prefix else 0,
                after=after,
            )
        )
    return Plan(tuple(rows), PlanMeta(n=len(rows)), (PREFIX,))


# One second per step (UNIT), blocks of 16, 4 sequences, 256 tokens a step, a pool that
# never evicts. A prefixed round 0 of 16 new tokens is 48 tokens: the prefix's two blocks
# and one block of its own; vLLM caches a step's full blocks when it schedules the step.
# Rows: (session, round): (replica, cached_tokens, arrival_s, first_scheduled_s,
# first_token_s, finish_s).
#
# A: S0 (prefix) at 0 on R0, S1 (no prefix, 4 tokens) at 0.5 on R1, S2 (prefix) at 0.75
# to R0 (round robin's third; least loaded 1-1, lowest index; R0 holds its prefix). S2
# joins at R0's step end t=1 and hits the prefix's 32 tokens. S0 finishes at 2 and its
# round 1 (66 tokens) arrives at 2.5, when R1's step ends too: round robin's fourth goes
# to R1 (cached 0, done at 4.5 beside S1); least loaded sees R0 1 (S2 until 3), R1 1 (S1)
# and takes R0, as affinity and prefix_aware (three blocks there) do: it waits for R0's
# step end at 3 and hits S0's 48 tokens (its 49th was a sampled token, block 3 not full).
A = plan(
    (0.0, "p", [(16, 2, 0.5), (16, 2, 0.0)]),
    (0.5, None, [(16, 4, 0.0)]),
    (0.75, "p", [(16, 2, 0.0)]),
)
A_SHARED = {(1, 0): (1, 0, 0.5, 0.5, 1.5, 4.5), (2, 0): (0, 32, 0.75, 1.0, 2.0, 3.0)}
A_ON_R0 = {(0, 0): (0, 0, 0.0, 0.0, 1.0, 2.0), (0, 1): (0, 48, 2.5, 3.0, 4.0, 5.0)} | A_SHARED
A_ROUND_ROBIN = A_ON_R0 | {(0, 1): (1, 0, 2.5, 2.5, 3.5, 4.5)}
# B: A with S1 generating one token (done at 1.5): at 2.5 R0 holds S2 and R1 nothing, so
# round robin and least loaded send S0's round 1 to R1 (cached 0), affinity and
# prefix_aware to R0 (48 cached, after R0's step ends at 3).
B = plan(
    (0.0, "p", [(16, 2, 0.5), (16, 2, 0.0)]),
    (0.5, None, [(16, 1, 0.0)]),
    (0.75, "p", [(16, 2, 0.0)]),
)
B_ON_R0 = A_ON_R0 | {(1, 0): (1, 0, 0.5, 0.5, 1.5, 1.5)}
B_ON_R1 = B_ON_R0 | {(0, 1): (1, 0, 2.5, 2.5, 3.5, 4.5)}
# C: S0 (no prefix, 3 tokens) at 0 on R0, S1 (prefix, 1 token) at 0.5 on R1 (least
# loaded), S2 (prefix) at 0.75: round robin, least loaded (1-1) and affinity send it to
# R0, which does not hold the prefix (cached 0); prefix_aware to R1, which cached the
# prefix's blocks when it scheduled S1 at 0.5: S2 joins at 1.5 with 32 cached, and S1's
# round 1 (65 tokens, arriving 2.0) follows it to R1 (three blocks there) at 2.5.
C = plan(
    (0.0, None, [(16, 3, 0.0)]),
    (0.5, "p", [(16, 1, 0.5), (16, 1, 0.0)]),
    (0.75, "p", [(16, 2, 0.0)]),
)
C_COMMON = {(0, 0): (0, 0, 0.0, 0.0, 1.0, 3.0), (1, 0): (1, 0, 0.5, 0.5, 1.5, 1.5)}
C_BY_LOAD = C_COMMON | {(1, 1): (1, 48, 2.0, 2.0, 3.0, 3.0), (2, 0): (0, 0, 0.75, 1.0, 2.0, 3.0)}
C_BY_PREFIX = C_COMMON | {(1, 1): (1, 48, 2.0, 2.5, 3.5, 3.5), (2, 0): (1, 32, 0.75, 1.5, 2.5, 3.5)}
# D: renewal: S1 (prefix) arrives 0.25 after S0 (prefix) finishes at 2; round robin's
# second request goes to R1 (cached 0), every other router to the idle, emptier-or-tied
# R0 that holds the prefix (cached 32).
D = plan((0.0, "p", [(16, 2, 0.0)]), (After(0, 0.25), "p", [(16, 1, 0.0)]))
D_S0 = {(0, 0): (0, 0, 0.0, 0.0, 1.0, 2.0)}
# F: the order at an instant: S0 (3 tokens) at 0 on R0, S1 (1 token) at 0 on R1 (round
# robin's second, least loaded's emptier), S2 at exactly 1.0, when both steps end: S1's
# finish at 1 is completed before S2 is routed, so least loaded (and affinity's round 0,
# and prefix_aware's tie, no prefix being cached) sees R0 1, R1 0 and takes R1; round
# robin's third goes to R0 and joins S0's second step.
F = plan((0.0, None, [(16, 3, 0.0)]), (0.0, None, [(16, 1, 0.0)]), (1.0, None, [(16, 1, 0.0)]))
F_BOTH = {(0, 0): (0, 0, 0.0, 0.0, 1.0, 3.0), (1, 0): (1, 0, 0.0, 0.0, 1.0, 1.0)}
# E: one replica, 48 tokens in budgets of 32: the partial chunk [0, 1) emits nothing, the
# first token ends the second step, the second token the third.
E = plan((0.0, None, [(48, 2, 0.0)]))
E_ROWS = {(0, 0): (0, 0, 0.0, 0.0, 2.0, 3.0)}

HAND: list[tuple[Plan, int, str, int, dict]] = [
    (A, 2, "round_robin", 256, A_ROUND_ROBIN),
    *((A, 2, router, 256, A_ON_R0) for router in ROUTERS[1:]),
    *((B, 2, router, 256, B_ON_R1) for router in ROUTERS[:2]),
    *((B, 2, router, 256, B_ON_R0) for router in ROUTERS[2:]),
    *((C, 2, router, 256, C_BY_LOAD) for router in ROUTERS[:3]),
    (C, 2, "prefix_aware", 256, C_BY_PREFIX),
    (D, 2, "round_robin", 256, D_S0 | {(1, 0): (1, 0, 2.25, 2.25, 3.25, 3.25)}),
    *(
        (D, 2, router, 256, D_S0 | {(1, 0): (0, 32, 2.25, 2.25, 3.25, 3.25)})
        for router in ROUTERS[1:]
    ),
    (F, 2, "round_robin", 256, F_BOTH | {(2, 0): (0, 0, 1.0, 1.0, 2.0, 2.0)}),
    *((F, 2, router, 256, F_BOTH | {(2, 0): (1, 0, 1.0, 1.0, 2.0, 2.0)}) for router in ROUTERS[1:]),
    *((E, 1, router, 32, E_ROWS) for router in ROUTERS),
]
ROW = ("replica", "cached_tokens", "arrival_s", "first_scheduled_s", "first_token_s", "finish_s")


def hand_cases() -> list[FleetCase]:
    return [
        FleetCase(p, vllm(64, budget=budget), UNIT, replicas, router, True)
        for p, replicas, router, budget, _ in HAND
    ]


def run(cases: list[FleetCase]) -> list[dict]:
    """Every case in one driver process; the driver's results in case order."""
    answers = oracle.run_oracle(
        [
            oracle.fleet_case(str(i), c.plan, c.configuration, c.step_cost, c.replicas, c.router)
            for i, c in enumerate(cases)
        ],
        timeout_s=7200,
    )
    assert answers["vllm_version"] == "0.32.0"
    return answers["results"]


def test_hand_made_fleets_give_what_spec_17_derives(vllm_environment):
    for (p, replicas, router, _, expected), answer in zip(HAND, run(hand_cases()), strict=True):
        rows = {
            (r["session"], r["round"]): tuple(r[name] for name in ROW) for r in answer["requests"]
        }
        assert rows == expected, (router, p.sessions)
        replica_device_s = answer["totals"]["replica_device_s"]
        assert len(replica_device_s) == replicas
        assert sum(replica_device_s) == answer["totals"]["device_s"]


def test_one_replica_is_the_single_engine_under_every_router(vllm_environment):
    """R = 1: the fleet case under each router gives the single engine's case exactly (no
    router perturbs an engine, prefix_aware's lookups included)."""
    rng = random.Random(34)
    single = [random_case(rng, sessions=6, rounds=4, prompt=300) for _ in range(6)]
    cases = [
        oracle.case(f"{i}", c.plan, c.configuration, c.step_cost) for i, c in enumerate(single)
    ]
    for i, c in enumerate(single):
        cases += [
            oracle.fleet_case(f"{i}/{r}", c.plan, c.configuration, c.step_cost, 1, r)
            for r in ROUTERS
        ]
    opened = random_fleet_cases(35, 6)
    for i, c in enumerate(opened):
        cases += [
            oracle.fleet_case(f"open {i}/{r}", c.plan, c.configuration, c.step_cost, 1, r)
            for r in ROUTERS
        ]
    results = {r["id"]: r for r in oracle.run_oracle(cases)["results"]}
    for i in range(len(single)):
        for router in ROUTERS:
            fleet = results[f"{i}/{router}"]
            assert fleet["requests"] == results[f"{i}"]["requests"], (i, router)
            assert fleet["totals"] == results[f"{i}"]["totals"], (i, router)
    for i in range(len(opened)):
        first = results[f"open {i}/{ROUTERS[0]}"]
        for router in ROUTERS[1:]:
            fleet = results[f"open {i}/{router}"]
            assert (fleet["requests"], fleet["totals"]) == (first["requests"], first["totals"])


def arrivals_as_planned(case: FleetCase, rows: dict) -> list[str]:
    """Round 0 at start_s or its leader's last finish + gap; round k+1 at round k's finish
    + its gap (in that float order)."""
    found = []
    sessions = case.plan.sessions
    for s in sessions:
        if s.after is None:
            want = s.start_s
        else:
            leader = sessions[s.after.session]
            want = rows[(leader.session, len(leader.rounds) - 1)]["finish_s"] + s.after.gap_s
        for k, r in enumerate(s.rounds):
            if rows[(s.session, k)]["arrival_s"] != want:
                found.append(f"session {s.session} round {k}: arrival")
            want = rows[(s.session, k)]["finish_s"] + r.gap_after_s
    return found


def order_and_hits(case: FleetCase, rows: dict) -> list[str]:
    """Each request: arrival <= first scheduled < first token <= finish (equal with one
    generated token); a hit of whole blocks below its prompt; at round 0 at most its
    prefix's full blocks, none unless a request of that prefix was scheduled on that
    replica by then, and on a never-evicting pool all of them once one had emitted a token."""
    found = []
    bs = case.configuration.block_size
    by_prefix = defaultdict(list)
    for s in case.plan.sessions:
        for k in range(len(s.rounds)):
            by_prefix[(s.prefix, rows[(s.session, k)]["replica"])].append(rows[(s.session, k)])
    for s in case.plan.sessions:
        for k, (prompt, r) in enumerate(zip(s.prompts(), s.rounds, strict=True)):
            row, where = rows[(s.session, k)], f"session {s.session} round {k}"
            times = [row[name] for name in ROW[2:]]
            if not (times[0] <= times[1] < times[2] <= times[3]):
                found.append(f"{where}: times out of order {times}")
            if r.gen_tokens == 1 and times[2] != times[3]:
                found.append(f"{where}: one token, first token {times[2]} != finish {times[3]}")
            hit = row["cached_tokens"]
            if hit % bs or not 0 <= hit <= prompt - 1:
                found.append(f"{where}: hit {hit} of a {prompt}-token prompt")
            if k or s.prefix is None:
                if k == 0 and hit:
                    found.append(f"{where}: round 0 without a prefix hit {hit}")
                continue
            full = s.prefix_tokens // bs * bs
            others = [o for o in by_prefix[(s.prefix, row["replica"])] if o is not row]
            if hit > full:
                found.append(f"{where}: hit {hit} past the prefix's {full}")
            if hit and not any(o["first_scheduled_s"] <= times[1] for o in others):
                found.append(f"{where}: hit {hit} with no prefix computed on its replica")
            computed = any(o["first_token_s"] <= times[1] for o in others)
            if case.never_evicting and computed and hit != full:
                found.append(f"{where}: hit {hit}, the computed prefix holds {full}")
    return found


def re_arrivals(case: FleetCase, rows: dict) -> list[str]:
    """On a never-evicting pool: no preemption, and a re-arrival to its previous round's
    replica hits that round's prompt + generation - 1 tokens' full blocks."""
    if not case.never_evicting:
        return []
    found = []
    bs = case.configuration.block_size
    for s in case.plan.sessions:
        prompts = s.prompts()
        for k in range(len(s.rounds)):
            row = rows[(s.session, k)]
            if row["preemptions"]:
                found.append(
                    f"session {s.session} round {k}: preempted on a pool that never evicts"
                )
            if k and row["replica"] == rows[(s.session, k - 1)]["replica"]:
                want = (prompts[k - 1] + s.rounds[k - 1].gen_tokens - 1) // bs * bs
                if row["cached_tokens"] != want:
                    found.append(
                        f"session {s.session} round {k}: hit {row['cached_tokens']} != {want}"
                    )
    return found


def routing(case: FleetCase, rows: dict) -> list[str]:
    """Rebuild the router's choices from the rows: requests are routed in (arrival,
    session, round) order; a request is outstanding on its replica from its routing until
    its finish (a finish at t is completed before the arrivals at t are routed)."""
    order = sorted(rows.values(), key=lambda r: (r["arrival_s"], r["session"], r["round"]))
    found = []
    for index, row in enumerate(order):
        where = f"session {row['session']} round {row['round']}"
        if not 0 <= row["replica"] < case.replicas:
            found.append(f"{where}: replica {row['replica']}")
            continue
        load = [0] * case.replicas
        for earlier in order[:index]:
            if earlier["finish_s"] > row["arrival_s"]:
                load[earlier["replica"]] += 1
        least = min(range(case.replicas), key=lambda r: (load[r], r))
        if case.router == "round_robin":
            want = index % case.replicas
        elif case.router == "least_loaded" or (
            case.router == "session_affinity" and row["round"] == 0
        ):
            want = least
        elif case.router == "session_affinity":
            want = rows[(row["session"], 0)]["replica"]
        else:
            continue  # prefix_aware reads the pools, which the rows do not show
        if row["replica"] != want:
            found.append(f"{where}: {case.router} sent it to {row['replica']}, not {want}")
    return found


def check_invariants(cases: list[FleetCase], answers: list[dict]) -> dict[str, int]:
    """Every invariant on every case; returns what the cases exercised."""
    broken = {}
    seen = defaultdict(int)
    for i, (case, answer) in enumerate(zip(cases, answers, strict=True)):
        rows = {(r["session"], r["round"]): r for r in answer["requests"]}
        assert len(rows) == case.plan.requests == len(answer["requests"])
        found = (
            arrivals_as_planned(case, rows)
            + order_and_hits(case, rows)
            + re_arrivals(case, rows)
            + routing(case, rows)
        )
        if found:
            broken[i] = found[:3]
        totals = answer["totals"]
        assert len(totals["replica_device_s"]) == case.replicas
        seen["fleets"] += case.replicas > 1
        seen["preempted"] += totals["preemptions"] > 0
        seen["renewed"] += any(s.after is not None for s in case.plan.sessions)
        seen["prefix hits"] += any(
            rows[(s.session, 0)]["cached_tokens"] > 0 for s in case.plan.sessions
        )
        seen["moved"] += any(
            r["round"] and r["replica"] != rows[(r["session"], r["round"] - 1)]["replica"]
            for r in answer["requests"]
        )
    assert not broken, f"{len(broken)} of {len(cases)} cases break an invariant: {broken}"
    return dict(seen)


def check_against_predictor(cases: list[FleetCase], answers: list[dict]) -> None:
    """The predictor's fleet on every case, per request against vLLM's (docs/DESIGN.md §16)."""
    disagreements = {}
    for i, (case, answer) in enumerate(zip(cases, answers, strict=True)):
        result = simulate_fleet(
            case.plan,
            case.configuration,
            case.step_cost,
            replicas=case.replicas,
            router=case.router,
        )
        found = oracle.fleet_differences(result, answer)
        if found:
            disagreements[i] = (case.router, case.replicas, found[:3])
    agreed = len(cases) - len(disagreements)
    assert not disagreements, f"agreed with vLLM on {agreed} of {len(cases)}: {disagreements}"


@pytest.fixture(scope="module")
def ci_tier(vllm_environment) -> tuple[list[FleetCase], list[dict]]:
    cases = hand_cases() + random_fleet_cases(2034, CI_CASES)
    return cases, run(cases)


def test_random_fleets_keep_the_oracles_invariants(ci_tier):
    cases, answers = ci_tier
    seen = check_invariants(cases, answers)
    print(f"invariants hold on {len(cases)} fleet cases; {seen}")
    # the tier reaches what the fleets are about
    assert seen["fleets"] >= 30 and seen["renewed"] >= 15 and seen["prefix hits"] >= 20
    assert seen["preempted"] >= 3 and seen["moved"] >= 5


def test_the_predictors_fleet_agrees_with_vllm_where_sessions_share_no_prefix(
    vllm_environment,
):
    cases = [without_prefixes(c) for c in random_fleet_cases(3034, CI_UNSHARED_CASES)]
    answers = run(cases)
    check_invariants(cases, answers)
    check_against_predictor(cases, answers)


def test_the_predictors_fleet_agrees_with_vllm_on_the_ci_tier(ci_tier):
    check_against_predictor(*ci_tier)


@pytest.fixture(scope="module")
def slow_tier(vllm_environment) -> tuple[list[FleetCase], list[dict]]:
    cases = random_fleet_cases(7034, SLOW_CASES)
    return cases, run(cases)


@pytest.mark.slow
def test_random_fleets_keep_the_oracles_invariants_on_the_slow_tier(slow_tier):
    check_invariants(*slow_tier)


@pytest.mark.slow
def test_the_predictors_fleet_agrees_with_vllm_on_the_slow_tier(slow_tier):
    check_against_predictor(*slow_tier)


def test_fleet_differences_name_each_field_and_tolerate_rounding():
    """No vLLM needed: a predictor row off by one replica, one cached block or 1e-6 s is
    reported; times within 1e-9 relative and a different row order are not."""
    row = dict(zip(ROW, (1, 32, 0.5, 0.5, 1.5, 2.5), strict=True)) | {"preemptions": 0}
    answer = {"requests": [{"session": 0, "round": 0} | row, {"session": 0, "round": 1} | row]}

    def result(**changes):
        records = [
            SimpleNamespace(session=0, round=1, **row),
            SimpleNamespace(session=0, round=0, **(row | changes)),
        ]
        return SimpleNamespace(requests=records)

    assert oracle.fleet_differences(result(finish_s=2.5 * (1 + 1e-10)), answer) == []
    for name, value in (("replica", 0), ("cached_tokens", 16), ("first_token_s", 1.500001)):
        (found,) = oracle.fleet_differences(result(**{name: value}), answer)
        assert found.startswith(f"session 0 round 0: {name} ")
    (found,) = oracle.fleet_differences(SimpleNamespace(requests=result().requests[:1]), answer)
    assert "1 requests predicted, 2 from vLLM" in found
