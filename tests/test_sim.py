"""Predictor simulator (docs/DESIGN.md §4): hand-computed cases, corner rules, invariants, CLI."""

from __future__ import annotations

import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import random_plan
from typer.testing import CliRunner

from rearrival.errors import RearrivalError
from rearrival.model.buckets import select_bucket
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import (
    MultiRoundSession,
    Plan,
    PlanMeta,
    Round,
    Session,
    load_plan,
    write_plan,
)
from rearrival.model.simulator.rbln.sim import SimConfig, SimConfigError, simulate

# The keys of SimResult.summary(), in order (the record schema of the predictions).
SUMMARY_KEYS = (
    "decode_steps",
    "prefill_steps",
    "padding_ratio",
    "reuse_hits",
    "re_arrivals",
    "computed_prefill_tokens",
    "decode_s",
    "prefill_s",
    "device_s",
    "interference_s",
    "makespan_s",
    "histogram",
)

# The paper's constants written out (docs/DESIGN.md §3), so these cases do not lean on
# the profile code they exercise.
F_MS = {1: 9.870, 2: 10.420, 4: 10.825, 8: 12.970}
ALPHA_MS, BETA_MS = 0.501, 0.0413


def step(n: int, b: int) -> float:
    return (F_MS[b] + ALPHA_MS + BETA_MS * n) / 1000


def prefill(q: int) -> float:
    return math.ceil(q / 128) * (0.021206 + 6.399e-7 * q)


def plan_of(*rows: tuple[int, int, int, float]) -> Plan:
    """Sessions from (prompt L0, first generation G0, follow-up generation G1, wait s)."""
    return Plan(
        tuple(Session(i, l0, g0, g1, 8, w, "test") for i, (l0, g0, g1, w) in enumerate(rows)),
        PlanMeta(),
    )


def config(buckets=(1, 2), **kwargs) -> SimConfig:
    return SimConfig(buckets=buckets, batch_size=buckets[-1], **kwargs)


# ---- hand-computed cases ---------------------------------------------------------------


def test_one_session_reuses_its_prompt_after_the_wait():
    result = simulate(plan_of((1000, 3, 2, 0.5)), SimConfig())
    s = result.summary()
    first, follow = result.requests
    # L1 = 1000 + 3 + 8 = 1011; C = floor(min(1000, 1010) / 128) * 128 = 896; q = 115
    assert (follow.prompt_tokens, follow.cached_tokens, follow.computed_tokens) == (1011, 896, 115)
    assert s["histogram"] == {"1->1": 3}  # G0-1 + G1-1 decode advances, all at n=1
    counts = (s["decode_steps"], s["prefill_steps"], s["reuse_hits"], s["re_arrivals"])
    assert counts == (3, 2, 1, 1)
    assert s["computed_prefill_tokens"] == 115
    assert s["padding_ratio"] == 0.0
    assert s["decode_s"] == pytest.approx(3 * step(1, 1), rel=1e-12)
    assert s["prefill_s"] == pytest.approx(prefill(1000) + prefill(115), rel=1e-12)
    assert s["device_s"] == s["decode_s"] + s["prefill_s"]
    assert s["interference_s"] == 0.0  # nothing else was decoding during either prefill
    assert first.first_token_s == pytest.approx(prefill(1000), rel=1e-12)
    assert first.complete_s == pytest.approx(prefill(1000) + 2 * step(1, 1), rel=1e-12)
    assert follow.arrival_s == pytest.approx(first.complete_s + 0.5, rel=1e-12)
    assert follow.admit_s == follow.arrival_s  # idle: time jumps to the arrival
    assert s["makespan_s"] == pytest.approx(follow.arrival_s + prefill(115) + step(1, 1), rel=1e-12)
    assert (first.slot, follow.slot, follow.evicted_slot) == (0, 1, None)


@pytest.mark.parametrize("release", ["deferred", "immediate"])
def test_single_slot_request_evicts_its_own_prefix(release):
    # Admission secures the slot before the look-up, so the session's own KV is the victim.
    result = simulate(plan_of((1000, 3, 2, 0.0)), config((1,), slots=1, release=release))
    first, follow = result.requests
    assert follow.cached_tokens == 0 and follow.computed_tokens == 1011
    assert (follow.evicted_slot, follow.evicted_session, follow.evicted_turn) == (0, 0, 0)
    assert result.summary()["reuse_hits"] == 0
    assert follow.admit_s == first.complete_s  # nothing running: admission retried at once
    assert [(e.session, e.turn, e.cause) for e in result.evictions] == [(0, 0, "admission")]


def test_two_slots_keep_the_prefix_for_one_session():
    result = simulate(plan_of((1000, 3, 2, 0.0)), config((1,), slots=2))
    assert result.requests[1].cached_tokens == 896
    assert result.evictions == ()


def test_two_sessions_interference_and_histogram():
    # Session 1 is admitted while session 0 waits for decode: W = 1 x T(900).
    result = simulate(plan_of((1000, 4, 1, 10.0), (900, 2, 1, 10.0)), SimConfig(slots=4))
    s = result.summary()
    r00, r01, r10, r11 = result.requests
    assert r10.running_at_admission == 1 and r00.running_at_admission == 0
    assert s["histogram"] == {"1->1": 2, "2->2": 1}
    t1 = prefill(1000) + prefill(900) + step(2, 2)
    assert r10.complete_s == pytest.approx(t1, rel=1e-12)
    assert r00.complete_s == pytest.approx(t1 + 2 * step(1, 1), rel=1e-12)
    # both follow-ups generate one token (prefill only); floor(1000/128) = floor(900/128) = 7
    assert (r01.cached_tokens, r11.cached_tokens) == (896, 896)
    assert s["interference_s"] == pytest.approx(prefill(900), rel=1e-12)
    assert s["padding_ratio"] == 0.0
    assert r11.arrival_s == pytest.approx(r10.complete_s + 10.0, rel=1e-12)


@pytest.mark.parametrize(("release", "extra_steps"), [("deferred", 1), ("immediate", 0)])
def test_deferred_release_blocks_the_next_admission_for_one_decode_step(release, extra_steps):
    # S = batch = 2. Session 1 finishes after one step and re-arrives at once. With
    # deferred release its slot is not evictable yet: releases are applied and one decode
    # step runs before the admission; with immediate release it is admitted at once.
    result = simulate(plan_of((1000, 5, 3, 1.0), (900, 2, 2, 0.0)), config((1, 2), release=release))
    _, _, r10, r11 = result.requests
    t_done = prefill(1000) + prefill(900) + step(2, 2)
    assert r10.complete_s == pytest.approx(t_done, rel=1e-12)
    assert r11.arrival_s == r10.complete_s
    assert r11.admit_s == pytest.approx(t_done + extra_steps * step(1, 1), rel=1e-12)
    assert r11.running_at_admission == 1
    # either way it secured its own slot first and so evicted its own prefix
    assert (r11.evicted_session, r11.evicted_turn, r11.cached_tokens) == (1, 0, 0)


@pytest.mark.parametrize(("release", "victim"), [("deferred", 1), ("immediate", 0)])
def test_just_finished_slot_is_not_the_next_victim_under_deferred_release(release, victim):
    # S = 3, batch = 2. Session 1 (one token) finishes during the first prefills; session
    # 2's admission takes the free slot 2 and (deferred) releases slot 1. Session 0 then
    # finishes; session 3's admission needs a victim: immediate release offers slot 0
    # (oldest allocation), deferred release protects it and slot 1 goes instead.
    plan = plan_of((1000, 6, 2, 5.0), (1000, 1, 2, 5.0), (1000, 10, 2, 5.0), (1000, 2, 2, 5.0))
    result = simulate(plan, config((1, 2), slots=3, release=release))
    r30 = result.requests[6]
    assert r30.admit_s == pytest.approx(result.requests[0].complete_s, rel=1e-12)
    assert r30.evicted_session == victim and r30.evicted_turn == 0


def test_pre_evict_frees_the_padding_block_before_the_decode_step():
    # S = batch = 2, immediate + pre-evict: once session 0 finishes, the next decode step
    # (n = 1 < batch) finds no free slot and evicts session 0's KV as the padding block;
    # the follow-up later takes that free slot without evicting anything.
    plan = plan_of((1000, 2, 2, 0.05), (900, 20, 2, 5.0))
    base = dict(release="immediate")
    off = simulate(plan, config((1, 2), **base))
    pre = simulate(plan, config((1, 2), dummy_block="pre-evict", **base))
    follow_off, follow_pre = off.requests[1], pre.requests[1]
    assert follow_off.evicted_slot == 0 and follow_pre.evicted_slot is None
    assert follow_pre.slot == 0 and follow_pre.cached_tokens == 0
    first = pre.evictions[0]
    assert (first.cause, first.session, first.turn) == ("dummy-block", 0, 0)
    assert first.time_s == pytest.approx(pre.requests[0].complete_s, rel=1e-12)
    # same decode distribution: the dummy block changes KV, not the schedule here
    assert pre.summary()["histogram"] == off.summary()["histogram"]


def test_reserved_padding_block_keeps_the_second_session_waiting():
    # S = batch = 2 under "reserved": while session 0 decodes (0 < n < 2) the padding
    # block holds the second slot, so session 1 is admitted only once session 0's first
    # request has finished; under "off" it is admitted right after session 0's prefill.
    plan = plan_of((1000, 3, 2, 5.0), (900, 3, 2, 5.0))
    off = simulate(plan, config((1, 2)))
    reserved = simulate(plan, config((1, 2), dummy_block="reserved"))
    assert off.requests[2].admit_s == pytest.approx(prefill(1000), rel=1e-12)
    first = reserved.requests[0]
    assert reserved.requests[2].admit_s == pytest.approx(first.complete_s, rel=1e-12)
    assert first.complete_s == pytest.approx(prefill(1000) + 2 * step(1, 1), rel=1e-12)
    assert reserved.summary()["histogram"] == {"1->1": 6}
    assert off.summary()["histogram"] != reserved.summary()["histogram"]


def three_rounds(start_s: float = 0.0, session: int = 0) -> MultiRoundSession:
    # prompts: L0 = 1000; L1 = 1000 + 3 + 300 = 1303; L2 = 1303 + 2 + 30 = 1335
    rounds = (Round(1000, 3, 0.5), Round(300, 2, 0.5), Round(30, 2, 0.0))
    return MultiRoundSession(session, rounds, start_s)


def test_multi_round_look_up_takes_the_latest_surviving_round():
    # S = 2, deferred: round 2 evicts round 0's slot (the oldest evictable) and still finds
    # round 1's KV: C = floor(min(1303, 1334) / 128) * 128 = 1280, not round 0's 896.
    plan = Plan((three_rounds(),), PlanMeta())
    result = simulate(plan, config((1, 2)))
    r0, r1, r2 = result.requests
    assert [r.turn for r in result.requests] == [0, 1, 2] == [r.round for r in result.requests]
    assert (r1.prompt_tokens, r1.cached_tokens) == (1303, 896)
    assert (r2.prompt_tokens, r2.cached_tokens, r2.evicted_turn) == (1335, 1280, 0)
    assert r1.arrival_s == pytest.approx(r0.complete_s + 0.5, rel=1e-12)
    assert r2.arrival_s == pytest.approx(r1.complete_s + 0.5, rel=1e-12)
    s = result.summary()
    assert (s["prefill_steps"], s["re_arrivals"], s["reuse_hits"]) == (3, 2, 2)
    assert s["computed_prefill_tokens"] == (1303 - 896) + (1335 - 1280)
    assert s["decode_steps"] == 2 + 1 + 1
    # one slot: every round evicts its own prefix
    single = simulate(plan, config((1, 2), slots=1)).summary()
    assert (single["reuse_hits"], single["computed_prefill_tokens"]) == (0, 1303 + 1335)


def test_staggered_start_sends_round_zero_at_the_session_start():
    plan = Plan((three_rounds(), three_rounds(start_s=50.0, session=1)), PlanMeta())
    result = simulate(plan, config((1, 2)))
    late = result.requests[3]
    assert (late.session, late.turn, late.arrival_s, late.admit_s) == (1, 0, 50.0, 50.0)
    assert result.requests[2].complete_s < 50.0  # session 0 had finished: the engine idled
    assert result.makespan_s == pytest.approx(result.requests[5].complete_s, rel=1e-12)


def test_fixed_arrivals_give_one_time_per_re_arrival_in_multi_round_plans():
    plan = Plan((three_rounds(), three_rounds(session=1)), PlanMeta())
    result = simulate(plan, config((1, 2), fixed_arrivals=[5.0, 9.0, 6.0, 20.0]))
    arrivals = [r.arrival_s for r in result.requests]
    assert arrivals == [0.0, 5.0, 9.0, 0.0, 6.0, 20.0]
    with pytest.raises(SimConfigError, match="4 re-arrivals"):
        simulate(plan, config((1, 2), fixed_arrivals=[5.0, 9.0]))


def test_generation_of_one_token_needs_no_decode():
    s = simulate(plan_of((500, 1, 1, 0.0), (700, 1, 1, 0.0)), SimConfig()).summary()
    assert s["decode_steps"] == 0 and s["histogram"] == {} and s["padding_ratio"] == 0.0
    assert s["decode_s"] == 0.0 and s["makespan_s"] == pytest.approx(s["prefill_s"], rel=1e-12)


def test_simultaneous_arrivals_are_admitted_in_session_index_order():
    plan = plan_of(*[(1000, 4, 2, 0.0)] * 3)
    result = simulate(plan, SimConfig(slots=8))
    firsts = [r.admit_s for r in result.requests[0::2]]
    follows = [r.admit_s for r in result.requests[1::2]]
    assert firsts == sorted(firsts) and follows == sorted(follows)
    assert len(set(follows)) == 3


def test_arrival_within_tolerance_counts_at_the_boundary():
    # Session 0's follow-up lands 1e-13 s after a decode boundary: it is admitted at that
    # boundary. Landing 1e-9 s after it, it waits for the end of the next step.
    rows = [(1000, 3, 2, 0.0), (1000, 40, 2, 0.0)]
    probe = simulate(plan_of(*rows), SimConfig(slots=4))
    done = probe.requests[0].complete_s
    boundary = done + step(1, 1)  # session 1 decodes alone after session 0 completes
    for late, expected in ((1e-13, boundary), (1e-9, boundary + step(1, 1))):
        rows[0] = (1000, 3, 2, step(1, 1) + late)
        result = simulate(plan_of(*rows), SimConfig(slots=4))
        assert result.requests[0].complete_s == done
        assert result.requests[1].admit_s == pytest.approx(expected, rel=1e-12)


# ---- fixed-arrival variant (a) ---------------------------------------------------------


def test_fixed_arrivals_pin_re_arrival_times():
    plan = plan_of((1000, 3, 2, 0.5), (900, 20, 2, 0.5))
    free = simulate(plan, SimConfig())
    done = [r.complete_s for r in free.requests[0::2]]
    fixed = (done[0] + 2.0, 0.01)  # session 1's time precedes its own completion
    result = simulate(plan, SimConfig(fixed_arrivals=fixed))
    assert result.requests[1].arrival_s == fixed[0]
    # queued only when its first request completes, but its arrival time is the fixed one
    late = result.requests[3]
    assert late.arrival_s == 0.01 and late.admit_s >= result.requests[2].complete_s
    mapping = simulate(plan, SimConfig(fixed_arrivals={1: 0.01, 0: fixed[0]}))
    assert mapping.summary() == result.summary()


def test_fixed_arrivals_must_cover_every_session():
    with pytest.raises(SimConfigError, match="fixed_arrivals"):
        simulate(plan_of((1000, 3, 2, 0.5)), SimConfig(fixed_arrivals=(1.0, 2.0)))
    with pytest.raises(SimConfigError, match="fixed_arrivals"):
        SimConfig(fixed_arrivals={1: 1.0})
    with pytest.raises(SimConfigError, match="fixed_arrivals"):
        SimConfig(fixed_arrivals=(float("nan"),))


# ---- configuration validation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(buckets=(1, 2, 4), batch_size=8), "buckets"),
        (dict(buckets=(1, 2, 4, 8, 16), batch_size=8), "buckets"),
        (dict(buckets=(2, 1, 8), batch_size=8), "buckets"),
        (dict(buckets=(1, 1, 8), batch_size=8), "buckets"),
        (dict(buckets=(0, 8), batch_size=8), "buckets"),
        (dict(buckets=(), batch_size=8), "buckets"),
        (dict(batch_size=0, buckets=(0,)), "buckets"),
        (dict(slots=0), "slots"),
        (dict(release="later"), "release"),
        (dict(dummy_block="on"), "dummy_block"),
    ],
)
def test_bad_configuration_names_field_and_fix(kwargs, field):
    with pytest.raises(SimConfigError, match=field) as info:
        SimConfig(**kwargs)
    assert isinstance(info.value, RearrivalError)
    assert "\n" not in str(info.value)


def test_config_defaults_and_normalisation():
    cfg = SimConfig(buckets=[1, 4, 6], batch_size=6)
    assert cfg.buckets == (1, 4, 6) and cfg.slots == 6
    assert cfg.release == "deferred" and cfg.dummy_block == "off" and cfg.fixed_arrivals is None
    with pytest.raises(AttributeError):
        cfg.slots = 3  # frozen


# ---- invariants over random plans ------------------------------------------------------

BUCKET_SETS = [
    (1, 2, 4, 8),
    (1, 4, 8),
    (1, 2, 8),
    (1, 3, 6, 12),
    (1, 16),
    (2, 4),
    (1,),
    (1, 4, 6, 8, 10, 16),
]


def _random_case(rng: random.Random):
    n = rng.randint(1, 24)
    plan = random_plan(
        rng, n, max_gen=rng.choice([8, 40, 120]), max_wait_s=rng.choice([0.05, 0.5, 3.0])
    )
    buckets = rng.choice(BUCKET_SETS)
    slots = rng.choice([None, 1, max(1, buckets[-1] - 3), buckets[-1] + 5, 2 * n])
    cfg = SimConfig(
        buckets=buckets,
        batch_size=buckets[-1],
        slots=slots,
        release=rng.choice(["deferred", "immediate"]),
        dummy_block=rng.choice(["off", "pre-evict"]),
    )
    return plan, cfg


def test_invariants_on_random_plans():
    profile = measured_profile()
    rng = random.Random(20260501)
    for _ in range(400):
        plan, cfg = _random_case(rng)
        result = simulate(plan, cfg)
        s = result.summary()
        assert tuple(s) == SUMMARY_KEYS
        records = result.requests
        assert len(records) == 2 * plan.n
        for r in records:  # every request completes, in causal order
            assert r.arrival_s <= r.admit_s + 1e-12 < r.first_token_s <= r.complete_s
            assert r.computed_tokens == r.prompt_tokens - r.cached_tokens >= 1
            assert r.prefill_s == profile.prefill_s(r.computed_tokens)
            assert 0 <= r.running_at_admission < cfg.batch_size
            assert 0 <= r.slot < cfg.slots
        for sess in plan.sessions:
            first, follow = records[2 * sess.session], records[2 * sess.session + 1]
            assert follow.arrival_s == first.complete_s + sess.tool_wait_s
            assert first.cached_tokens == 0
        decoded = sum(int(k.split("->")[0]) * v for k, v in s["histogram"].items())
        assert decoded == sum(
            s_.gen_tokens - 1 + s_.followup_gen_tokens - 1 for s_ in plan.sessions
        )
        assert s["decode_steps"] == sum(s["histogram"].values())
        for key in s["histogram"]:
            n, b = map(int, key.split("->"))
            assert n <= min(cfg.batch_size, cfg.slots) and b == select_bucket(n, cfg.buckets)
        assert 0.0 <= s["padding_ratio"] < 1.0
        assert 0 <= s["reuse_hits"] <= s["re_arrivals"] == plan.n
        assert s["prefill_steps"] == 2 * plan.n
        assert s["computed_prefill_tokens"] == sum(r.computed_tokens for r in records[1::2])
        assert s["interference_s"] >= 0.0
        assert s["device_s"] == s["decode_s"] + s["prefill_s"]
        assert s["decode_s"] == pytest.approx(
            sum(st.steps * profile.decode_step_s(st.n, st.b) for st in result.stretches), rel=1e-12
        )
        assert s["prefill_s"] == pytest.approx(sum(r.prefill_s for r in records), rel=1e-12)
        assert s["interference_s"] == pytest.approx(
            sum(r.running_at_admission * r.prefill_s for r in records), rel=1e-12, abs=0
        )
        assert s["makespan_s"] == max(r.complete_s for r in records)
        stretches = result.stretches
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in itertools.pairwise(stretches))


@pytest.mark.parametrize("dummy_block", ["off", "pre-evict"])
@pytest.mark.parametrize("release", ["deferred", "immediate"])
def test_twice_as_many_slots_as_sessions_keeps_every_prefix(release, dummy_block):
    # Each session writes at most two slots, so with S >= 2N no admission evicts; the dummy
    # block can only fire once all 2N slots are written, i.e. after the last admission.
    rng = random.Random(11)
    for _ in range(60):
        n = rng.randint(1, 12)
        plan = random_plan(rng, n)
        buckets = rng.choice([(1, 2, 4, 8), (1, 4, 8), (1, 3, 6, 12)])
        cfg = SimConfig(
            buckets=buckets,
            batch_size=buckets[-1],
            slots=2 * n + rng.randint(0, 3),
            release=release,
            dummy_block=dummy_block,
        )
        result = simulate(plan, cfg)
        reusable = sum(1 for s in plan.sessions if s.prompt_tokens >= 128)
        assert result.summary()["reuse_hits"] == reusable
        if dummy_block == "off":
            assert result.evictions == ()


def test_zero_waits_with_one_slot_per_session_is_not_a_guarantee_of_reuse():
    # With S = batch = N and no tool wait the re-arriving request secures its slot first
    # and often evicts its own prefix (docs/DESIGN.md §4); the paper measured 7/24 at N = 8.
    plan = random_plan(random.Random(5), 8, max_gen=60, zero_wait_share=1.0)
    s = simulate(plan, SimConfig()).summary()
    assert s["reuse_hits"] < s["re_arrivals"]
    more = simulate(plan, SimConfig(buckets=(1, 2, 4, 8, 16), batch_size=16)).summary()
    assert more["reuse_hits"] == sum(1 for x in plan.sessions if x.prompt_tokens >= 128)


def test_deterministic():
    plan, cfg = _random_case(random.Random(3))
    assert simulate(plan, cfg).summary() == simulate(plan, cfg).summary()


def test_records_and_stretches_have_contract_fields(small_plan):
    result = simulate(small_plan, SimConfig())
    fields = (
        "session",
        "turn",
        "arrival_s",
        "admit_s",
        "first_token_s",
        "complete_s",
        "prompt_tokens",
        "cached_tokens",
        "computed_tokens",
        "prefill_s",
        "slot",
        "evicted_slot",
        "running_at_admission",
    )
    for name in fields:
        assert hasattr(result.requests[0], name)
    assert [(r.session, r.turn) for r in result.requests] == [
        (i, t) for i in range(small_plan.n) for t in (0, 1)
    ]
    assert sum(st.steps for st in result.stretches) == result.summary()["decode_steps"]
    assert result.total_computed_tokens == sum(r.computed_tokens for r in result.requests)


# ---- CLI -------------------------------------------------------------------------------


@pytest.fixture
def plan_files(tmp_path: Path, small_plan: Plan) -> list[Path]:
    return [
        write_plan(small_plan, tmp_path / "a.parquet"),
        write_plan(random_plan(random.Random(9), 6), tmp_path / "b.json"),
    ]


def _cli(args: list[str]):
    from rearrival.cli import app

    return CliRunner().invoke(app, args)


def test_cli_prints_one_sorted_summary_per_plan(plan_files, small_plan):
    result = _cli(
        ["simulate", *map(str, plan_files), "--buckets", "1,2,4,8", "--batch-size", "8", "--json"]
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert list(first) == sorted(SUMMARY_KEYS)
    assert first == json.loads(json.dumps(simulate(small_plan, SimConfig()).summary()))


def test_cli_variants_and_slots_reach_the_config(plan_files, small_plan):
    result = _cli(
        [
            "simulate",
            str(plan_files[0]),
            "--slots",
            "3",
            "--release",
            "immediate",
            "--dummy-block",
            "pre-evict",
            "--variant",
            "control",
            "--json",
        ]
    )
    assert result.exit_code == 0, result.output
    cfg = SimConfig(slots=3, release="immediate", dummy_block="pre-evict")
    expected = simulate(small_plan.variant("control"), cfg).summary()
    assert json.loads(result.stdout) == json.loads(json.dumps(expected))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--buckets", "1,2,4"], "--buckets"),
        (["--buckets", "1,two"], "--buckets"),
        (["--release", "sometimes"], "--release"),
        (["--dummy-block", "always"], "--dummy-block"),
    ],
)
def test_cli_bad_options_raise_one_line_errors(plan_files, args, needle):
    result = _cli(["simulate", str(plan_files[0]), *args, "--json"])
    assert isinstance(result.exception, RearrivalError)
    assert needle in str(result.exception) and "\n" not in str(result.exception)


def test_cli_missing_or_truncated_plan_exits_non_zero(tmp_path, plan_files):
    truncated = tmp_path / "cut.parquet"
    truncated.write_bytes(plan_files[0].read_bytes()[:200])
    for path in (tmp_path / "missing.parquet", truncated):
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "rearrival"), "simulate", str(path), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode != 0
        assert proc.stdout == ""
        assert str(path) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_simulates_a_multi_round_json_plan(tmp_path):
    path = tmp_path / "agent.json"
    sessions = [
        {
            "session": i,
            "start_s": 0.25 * i,
            "rounds": [
                {"new_tokens": 900 + i, "gen_tokens": 5, "gap_after_s": 0.2, "tool_name": "Bash"},
                {"new_tokens": 40, "gen_tokens": 4, "gap_after_s": 1.5, "tool_name": "Read"},
                {"new_tokens": 12, "gen_tokens": 6, "gap_after_s": 0.0, "tool_name": ""},
            ],
        }
        for i in range(3)
    ]
    path.write_text(json.dumps({"sessions": sessions}))
    result = _cli(["simulate", str(path), "--json", "--dummy-block", "reserved"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert list(summary) == sorted(SUMMARY_KEYS)
    assert (summary["prefill_steps"], summary["re_arrivals"]) == (9, 6)
    assert summary["decode_steps"] >= 4 + 3 + 5  # at least one session's G - 1 per round
    expected = simulate(load_plan(path), SimConfig(dummy_block="reserved")).summary()
    assert summary == json.loads(json.dumps(expected))
    text = _cli(["simulate", str(path)])
    assert text.exit_code == 0 and "reuse=" in text.output and "/6 " in text.output


def test_cli_refuses_a_plan_the_profile_cannot_price(tmp_path):
    """A round of a billion tokens (issue 29, item 7): the profile was measured at 8,192
    tokens, so the plan is refused naming the session and round, not priced at 1e10 s."""
    path = tmp_path / "huge.json"
    rounds = [
        {"new_tokens": 1000, "gen_tokens": 5, "gap_after_s": 0.5, "tool_name": "Bash"},
        {"new_tokens": 1_000_000_000, "gen_tokens": 5, "gap_after_s": 0.0, "tool_name": ""},
    ]
    path.write_text(json.dumps({"sessions": [{"session": 0, "start_s": 0.0, "rounds": rounds}]}))
    result = _cli(["simulate", str(path)])
    assert result.exit_code != 0 and result.stdout == ""
    message = str(result.exception)
    assert str(path) in message and "session 0 round 1" in message
    assert "8,192" in message and "1000001010 tokens" in message
