"""The vLLM rule set on hand-made plans whose answers are derived by hand in the comments
(docs/DESIGN.md §15): the block pool's order of freeing and eviction, the prefix hit's
cap, the P + G - 1 reuse of a re-arrival, eviction during a tool wait, a preemption,
exact arrival comparisons, the step cost, the pool check, the profile format and the
CLI. The same plans are checked against vLLM itself in tests/test_vllm_oracle.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rearrival.errors import RearrivalError
from rearrival.model.configuration import ConfigurationError, VllmConfiguration
from rearrival.model.cost.vllm_profile import (
    DEFAULT_VLLM_PROFILE,
    VllmProfileError,
    VllmStepCost,
    load_vllm_profile,
    parse_step_cost,
    shipped_vllm_profile,
)
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round, Session
from rearrival.model.simulator.vllm.blockpool import BlockPool
from rearrival.model.simulator.vllm.engine import Engine
from rearrival.model.simulator.vllm.inputs import VllmPlanError, vllm_inputs
from rearrival.model.simulator.vllm.reference import simulate_reference
from rearrival.model.simulator.vllm.sim import simulate_vllm

UNIT = VllmStepCost(1.0, 0.0, 0.0, 0.0)  # one second per step: times count steps
SUMMARY_KEYS = {
    "steps",
    "decode_tokens",
    "prefill_tokens",
    "cached_tokens",
    "preemptions",
    "re_arrivals",
    "re_arrivals_lost",
    "recomputed_prefill_tokens",
    "device_s",
    "makespan_s",
    "requests",
}
ROW_KEYS = {
    "session",
    "round",
    "cached_tokens",
    "preemptions",
    "arrival_s",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
}


def vllm(
    num_blocks: int, block_size: int = 16, seqs: int = 4, budget: int = 256, capture=()
) -> VllmConfiguration:
    return VllmConfiguration(
        capture,
        seqs,
        num_blocks=num_blocks,
        block_size=block_size,
        max_num_batched_tokens=budget,
    )


def sessions(*rounds_per_session, starts=None) -> Plan:
    """Multi-round sessions from (new, gen, gap) triples."""
    starts = starts or [0.0] * len(rounds_per_session)
    return Plan(
        tuple(
            MultiRoundSession(i, tuple(Round(*r) for r in rounds), start)
            for i, (rounds, start) in enumerate(zip(rounds_per_session, starts, strict=True))
        ),
        PlanMeta(n=len(rounds_per_session)),
    )


def every_core(plan, configuration, cost=UNIT, fixed=None) -> dict:
    """The summary, after checking that all three cores give it."""
    summaries = [
        simulate_reference(plan, configuration, cost, fixed).summary(),
        simulate_vllm(plan, configuration, cost, fixed, core="python").summary(),
        simulate_vllm(plan, configuration, cost, fixed, core="compiled").summary(),
    ]
    assert summaries[0] == summaries[1] == summaries[2]
    return summaries[0]


# ---- the block pool ------------------------------------------------------------------


def test_the_null_block_is_never_free_and_the_queue_starts_in_id_order():
    pool = BlockPool(5)
    assert pool.free_queue() == [1, 2, 3, 4] and pool.free_count == 4


def test_freeing_puts_the_uncached_tail_first_and_cached_blocks_last_block_first():
    pool = BlockPool(8)
    blocks = pool.allocate(4)  # [1, 2, 3, 4]; the first three full and cached
    for j, block in enumerate(blocks[:3]):
        pool.cache(block, 100 + j)
    pool.free(blocks)
    # 4 (uncached) to the front; 3, 2, 1 to the tail: the request's first block goes last
    assert pool.free_queue() == [4, 5, 6, 7, 3, 2, 1]


def test_allocation_evicts_least_recently_freed_and_a_hit_takes_the_first_copy():
    pool = BlockPool(4)
    old = pool.allocate(1)
    pool.cache(old[0], 7)
    pool.free(old)  # queue [2, 3, 1]
    copy = pool.allocate(1)  # block 2: a second copy of identity 7
    pool.cache(copy[0], 7)
    assert pool.lookup(7, 1) == [1]  # the first cached copy, as vLLM's hash map keeps them
    pool.touch(pool.lookup(7, 1))  # a hit leaves the free queue
    assert pool.free_queue() == [3] and pool.free_count == 1
    assert pool.lookup(7, 0) == []  # the cap: no block may be hit


# ---- prefix caching ------------------------------------------------------------------


def test_a_fully_cached_32_token_prompt_hits_16_and_recomputes_a_block():
    # The prompt's two blocks are cached before it arrives; the hit is capped at
    # 32 - 1 tokens, i.e. one block of 16, and 16 tokens are computed.
    plan = sessions([(32, 1, 0.0)])
    engine = Engine(vllm_inputs(plan, 16), vllm(8), UNIT, None)
    earlier = engine.pool.allocate(2)
    engine.pool.cache(earlier[0], 0)
    engine.pool.cache(earlier[1], 1)
    engine.pool.free(earlier)
    assert engine.advance_to_work()
    engine.step()
    assert engine.requests[0].cached_tokens == 16 and engine.prefill_tokens == 16


@pytest.mark.parametrize(("block_size", "hit"), [(32, 288), (16, 304), (128, 256)])
def test_a_rearrival_reuses_floor_of_p_plus_g_minus_1_blocks(block_size, hit):
    # P = 300 prompt tokens, G = 20 generated: 319 tokens were computed (the last sampled
    # token never enters the cache); the follow-up adds 8 -> hit = floor(319 / bs) * bs
    # (288 at bs 32 is what a vLLM 0.32.0 server reported for the same pair).
    plan = Plan((Session(0, 300, 20, 5, 8, 1.0, "t"),), PlanMeta(n=1))
    summary = every_core(plan, vllm(64, block_size))
    assert [row["cached_tokens"] for row in summary["requests"]] == [0, hit]
    assert summary["prefill_tokens"] == 300 + (328 - hit)
    assert (summary["re_arrivals"], summary["re_arrivals_lost"]) == (1, 0)
    assert summary["recomputed_prefill_tokens"] == 0


@pytest.mark.parametrize(
    ("num_blocks", "hit", "lost"),
    [
        (5, 0, 1),  # B's 4 blocks take A's three: nothing survives the wait
        (6, 16, 1),  # B takes A's last two blocks; A's first block is evicted last
        (8, 48, 0),  # room for both
    ],
)
def test_a_tool_wait_loses_the_prefix_tail_first(num_blocks, hit, lost):
    # A: 40 prompt + 9 generated -> 48 tokens in 3 full cached blocks, done at t = 9
    # (one prefill step, 8 decodes), re-sent 10 s later with 8 new tokens (57).
    # B arrives at 9.5 with a 60-token prompt: 4 blocks from the free queue front.
    plan = sessions([(40, 9, 10.0), (8, 2, 0.0)], [(60, 5, 0.0)], starts=[0.0, 9.5])
    summary = every_core(plan, vllm(num_blocks))
    a0, a1, b0 = summary["requests"]
    assert (a0["finish_s"], b0["first_scheduled_s"], b0["finish_s"]) == (9.0, 9.5, 14.5)
    assert a1["arrival_s"] == 19.0 and a1["cached_tokens"] == hit
    assert summary["re_arrivals_lost"] == lost
    assert summary["recomputed_prefill_tokens"] == 48 - hit


# ---- scheduling ----------------------------------------------------------------------


def test_a_preemption_derived_by_hand():
    # 4 usable blocks of 16, two sequences of 16 prompt + 20 generated tokens each.
    # Step 1 admits both (1 block each, 32 prefill tokens); steps 2-17 decode both, each
    # taking its second block at step 2. Step 18: A needs a third block, none is free:
    # B (running[-1]) is preempted, its blocks freed (both cached, to the tail, last
    # first); A takes B's second block, evicting it. B (16 + 17 tokens) waits: it needs
    # 3 blocks but only 1 is free, until A finishes at step 20 (outputs 20). Step 21
    # re-admits B: its first block is still cached (hit 16), 17 tokens recomputed, which
    # vLLM's iteration log counts as generation tokens (B has output tokens); B samples
    # its 18th token and finishes at step 23.
    plan = sessions([(16, 20, 0.0)], [(16, 20, 0.0)])
    summary = every_core(plan, vllm(5, seqs=2, budget=64))
    a, b = summary["requests"]
    assert (a["preemptions"], b["preemptions"]) == (0, 1)
    assert (a["finish_s"], b["finish_s"], summary["steps"]) == (20.0, 23.0, 23)
    assert b["cached_tokens"] == 0  # the hit at its first admission, as vLLM reports it
    assert (summary["prefill_tokens"], summary["decode_tokens"]) == (32, 16 * 2 + 3 + 17 + 2)
    records = simulate_reference(plan, vllm(5, seqs=2, budget=64), UNIT).requests
    assert [r.steps for r in records] == [20, 20]


def test_a_long_prompt_is_chunked_and_only_its_last_chunk_samples():
    # 600 tokens at a budget of 256: chunks 256, 256, 88; the third step samples the
    # first token, three decodes follow.
    summary = every_core(sessions([(600, 4, 0.0)]), vllm(64, budget=256))
    assert (summary["steps"], summary["prefill_tokens"], summary["decode_tokens"]) == (6, 600, 3)
    assert summary["requests"][0]["finish_s"] == 6.0


def test_admission_needs_the_whole_sequence_to_fit():
    # 10 usable blocks, a budget of 32. A (100 prompt tokens) is prefilled in chunks of
    # 32, 32, 32, 4 and holds 7 blocks after step 4. B (64 tokens, 4 blocks) is not
    # admitted beside it: 3 blocks are free, although its first chunk (28 tokens, 2
    # blocks) would fit. A samples at step 4 and finishes at step 6; B starts then.
    plan = sessions([(100, 3, 0.0)], [(64, 2, 0.0)])
    summary = every_core(plan, vllm(11, budget=32))
    a, b = summary["requests"]
    assert a["finish_s"] == b["first_scheduled_s"] == 6.0


def test_sends_count_at_the_first_boundary_at_or_after_them_exactly():
    # Steps of exactly 1 s: B sent at 2.0 is admitted at the boundary 2.0; sent 1e-13 s
    # later it waits for the boundary 3.0 (no tolerance, unlike the RBLN rule's 1e-12).
    for start, admitted in ((2.0, 2.0), (2.0 + 1e-13, 3.0)):
        plan = sessions([(16, 6, 0.0)], [(16, 2, 0.0)], starts=[0.0, start])
        summary = every_core(plan, vllm(16))
        assert summary["requests"][1]["first_scheduled_s"] == admitted


def test_a_zero_gap_rearrives_at_the_finishing_boundary():
    summary = every_core(sessions([(20, 3, 0.0), (5, 2, 0.0)]), vllm(16))
    first, second = summary["requests"]
    assert second["arrival_s"] == second["first_scheduled_s"] == first["finish_s"] == 3.0


def test_fixed_arrivals_replace_finish_plus_gap_but_never_precede_the_finish():
    plan = sessions([(20, 3, 5.0), (5, 2, 0.0)], [(20, 3, 5.0), (5, 2, 0.0)])
    summary = every_core(plan, vllm(16), fixed=[4.5, 1.0])
    (_, s0r1, s1r0, s1r1) = summary["requests"]
    assert (s0r1["arrival_s"], s0r1["first_scheduled_s"]) == (4.5, 5.0)
    # sent "at 1.0", before its round 0 finished at 3.0: queued at that finish
    assert (s1r1["arrival_s"], s1r1["first_scheduled_s"]) == (1.0, s1r0["finish_s"])
    with pytest.raises(VllmPlanError, match="2 re-arrivals"):
        simulate_vllm(plan, vllm(16), UNIT, [1.0])


def test_the_step_cost_counts_padded_decode_prefill_and_context_tokens():
    # Step 1 prefills 40 tokens (context 0); steps 2-3 decode one token with 40 and 41
    # tokens of context, padded to the capture size 2.
    cost = VllmStepCost(0.5, 0.25, 0.125, 0.0625)
    summary = every_core(sessions([(40, 3, 0.0)]), vllm(16, capture=(2, 4)), cost)
    expected = 0.0
    for step in (cost.step_s(0, 40, 0), cost.step_s(2, 0, 40), cost.step_s(2, 0, 41)):
        expected = expected + step
    assert summary["device_s"] == summary["makespan_s"] == expected


# ---- interfaces ----------------------------------------------------------------------


def test_a_plan_longer_than_the_pool_is_refused_in_one_line():
    plan = sessions([(500, 30, 0.0)])  # 529 tokens at the last step: 34 blocks of 16
    simulate_vllm(plan, vllm(35), UNIT)
    with pytest.raises(VllmPlanError) as caught:
        simulate_vllm(plan, vllm(34), UNIT, source="p.json")
    message = str(caught.value)
    assert "p.json" in message and "at least 35" in message and "\n" not in message


def test_the_configuration_refuses_a_budget_below_max_num_seqs():
    with pytest.raises(ConfigurationError, match="max_num_batched_tokens"):
        vllm(16, seqs=8, budget=4)


@pytest.mark.parametrize("text", ["1,2", "a,b,c", "1,2,3,4,5", "-1,0,0", "0,0,0"])
def test_bad_step_costs_are_refused(text):
    with pytest.raises(VllmProfileError, match="--step-cost"):
        parse_step_cost(text)


def test_step_cost_parses_three_or_four_numbers():
    assert parse_step_cost("0.004,1e-4,2e-5") == VllmStepCost(0.004, 1e-4, 2e-5, 0.0)
    assert parse_step_cost("1,2,3,4").as_tuple() == (1.0, 2.0, 3.0, 4.0)


PROFILE = """\
profile_version: "vllm-tiny-qwen3-cpu/1"
substrate: vllm
model_id: "rearrival/tiny-qwen3"
vllm_version: "0.32.0"
device: cpu
step_cost:
  base_s: {value: 0.004, ci: [0.0038, 0.0042], provenance: "intercept of the step fit"}
  per_decode_token_s: {value: 1.0e-4, ci: [0.9e-4, 1.1e-4], provenance: "generation tokens"}
  per_prefill_token_s: {value: 2.0e-5, ci: [1.9e-5, 2.1e-5], provenance: "context tokens"}
  per_kv_token_s: {value: 0.0, provenance: "assumed: not resolved by the fit"}
kv:
  bytes_per_token: {value: 1024, provenance: "2 x 2 layers x 1 kv head x 64 x 4 B"}
"""


def test_a_vllm_profile_loads_and_names_its_file_and_field_in_errors(tmp_path):
    path = tmp_path / "vllm.yaml"
    path.write_text(PROFILE)
    profile = load_vllm_profile(path)
    assert profile.step_cost == VllmStepCost(0.004, 1.0e-4, 2.0e-5, 0.0)
    assert (profile.device, profile.kv_bytes_per_token, profile.vllm_version) == (
        "cpu",
        1024,
        "0.32.0",
    )
    for broken, field in (
        (PROFILE.replace("substrate: vllm", "substrate: rbln"), "substrate"),
        (PROFILE.replace("device: cpu", "device: tpu"), "device"),
        (PROFILE.replace(', provenance: "context tokens"', ""), "step_cost.per_prefill_token_s"),
        (PROFILE.replace("per_kv_token_s", "per_kv_s"), "step_cost.per_kv_token_s"),
        (PROFILE.replace("value: 1024", "value: 0"), "kv.bytes_per_token"),
    ):
        path.write_text(broken)
        with pytest.raises(VllmProfileError) as caught:
            load_vllm_profile(path)
        assert str(path) in str(caught.value) and field in str(caught.value)


def _cli(args: list[str]):
    from rearrival.cli import app

    return CliRunner().invoke(app, args)


@pytest.fixture
def plan_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.json"
    rows = [
        {
            "session": i,
            "start_s": 0.1 * i,
            "rounds": [
                {"new_tokens": 300 + 40 * i, "gen_tokens": 12, "gap_after_s": 0.3},
                {"new_tokens": 20, "gen_tokens": 6, "gap_after_s": 0.0},
            ],
        }
        for i in range(3)
    ]
    path.write_text(json.dumps({"sessions": rows}))
    return path


KNOBS = [
    "--substrate",
    "vllm",
    "--block-size",
    "16",
    "--num-blocks",
    "48",
    "--max-num-seqs",
    "4",
    "--max-num-batched-tokens",
    "256",
]


def test_cli_prints_the_vllm_summary(plan_file):
    from rearrival.model.plans.plan import load_plan

    result = _cli(["simulate", str(plan_file), *KNOBS, "--step-cost", "0.01,1e-3,1e-4", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert set(summary) == SUMMARY_KEYS and all(set(r) == ROW_KEYS for r in summary["requests"])
    expected = simulate_vllm(load_plan(plan_file), vllm(48), VllmStepCost(0.01, 1e-3, 1e-4))
    assert summary == json.loads(json.dumps(expected.summary()))
    text = _cli(["simulate", str(plan_file), *KNOBS, "--step-cost", "0.01,1e-3,1e-4"])
    assert text.exit_code == 0 and text.output.count("\n") == 1 and "lost=" in text.output


def test_cli_reads_the_step_cost_from_a_vllm_profile(plan_file, tmp_path):
    profile = tmp_path / "vllm.yaml"
    profile.write_text(PROFILE)
    with_profile = _cli(["simulate", str(plan_file), *KNOBS, "--profile", str(profile), "--json"])
    cost = ["--step-cost", "0.004,1e-4,2e-5,0", "--json"]
    with_cost = _cli(["simulate", str(plan_file), *KNOBS, *cost])
    assert with_profile.exit_code == 0, with_profile.output
    assert with_profile.stdout == with_cost.stdout
    assert f"profile: vLLM profile {profile} " in with_profile.stderr
    assert with_cost.stderr == ""  # no profile read, none named


def test_cli_prices_with_the_shipped_cpu_profile_by_default(plan_file):
    shipped = shipped_vllm_profile()
    cost = ",".join(repr(x) for x in shipped.step_cost.as_tuple())
    default = _cli(["simulate", str(plan_file), *KNOBS, "--json"])
    given = _cli(["simulate", str(plan_file), *KNOBS, "--step-cost", cost, "--json"])
    assert default.exit_code == 0, default.output
    assert default.stdout == given.stdout
    profile_line, note = default.stderr.splitlines()
    assert profile_line.endswith("the shipped vLLM profile")
    assert DEFAULT_VLLM_PROFILE in profile_line and "not GPU seconds" in note


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([*KNOBS, "--step-cost", "1,0,0", "--profile", "p.yaml"], "pass one of them"),
        ([*KNOBS[:2], "--step-cost", "1,0,0"], "--block-size"),
        ([*KNOBS, "--step-cost", "1,0,0", "--buckets", "1,2"], "--buckets"),
        (["--num-blocks", "8", "--step-cost", "1,0,0"], "--substrate vllm"),
        ([*KNOBS[:-1], "2", "--step-cost", "1,0,0"], "--max-num-batched-tokens"),
        ([*KNOBS, "--step-cost", "1,0,0", "--capture-sizes", "4,2"], "--capture-sizes"),
        (["--substrate", "tpu"], "--substrate"),
    ],
)
def test_cli_bad_vllm_options_raise_one_line_errors(plan_file, args, needle):
    result = _cli(["simulate", str(plan_file), *args, "--json"])
    assert isinstance(result.exception, RearrivalError), result.output
    assert needle in str(result.exception) and "\n" not in str(result.exception)


def test_cli_refuses_a_plan_the_pool_cannot_hold(plan_file):
    args = [*KNOBS, "--step-cost", "1,0,0"]
    args[args.index("48")] = "20"
    result = _cli(["simulate", str(plan_file), *args, "--json"])
    assert isinstance(result.exception, VllmPlanError)
    assert str(plan_file) in str(result.exception)


def test_cli_fixed_arrivals_come_from_a_run_directory(plan_file, tmp_path):
    from rearrival.measure.records import read_run
    from rearrival.model.plans.plan import load_plan

    run_dir = tmp_path / "run"
    made = _cli(["run", str(plan_file), "--backend", "emulated", "--out", str(run_dir)])
    assert made.exit_code == 0, made.output
    requests = read_run(run_dir).requests
    sent = requests[requests["turn"] > 0].sort_values(["session", "turn"])["send_s"].tolist()
    args = [*KNOBS, "--step-cost", "0.01,1e-3,1e-4", "--fixed-arrivals", str(run_dir), "--json"]
    result = _cli(["simulate", str(plan_file), *args])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["requests"]
    assert [r["arrival_s"] for r in rows if r["round"] > 0] == sent
    expected = simulate_vllm(load_plan(plan_file), vllm(48), VllmStepCost(0.01, 1e-3, 1e-4), sent)
    assert json.loads(result.output) == json.loads(json.dumps(expected.summary()))
