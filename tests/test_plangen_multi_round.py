"""Seeded multi-round generator (paper II-C extended to agent sessions): ranges, the
per-session seed rule, byte-identical files, the worst-case context check."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rearrival.model.plans.plan import MULTI_ROUND_VERSION, check_context, load_plan, write_plan
from rearrival.model.plans.plangen import (
    MULTI_ROUND_STREAM,
    MultiRoundSpec,
    PlanGenError,
    derive_seed,
    generate_multi_round_plan,
    generate_plan,
    session_seed,
)
from rearrival.model.plans.tools import CAP_S, ToolStats, ToolTable, default_tool_table

# Content hash of generate_multi_round_plan(8, study_seed=2026, replicate=0, spec with a
# 3 s start spread): changes only when the multi-round generator changes (seed scheme,
# draw order, ranges, default table). If it fails on purpose, bump MULTI_ROUND_VERSION.
GOLDEN_SHA256 = "6b2b9d52856cd8ad136ba15abc13296cb0c0614c94d23cccdb375fc1e408f6e7"
# generate_plan(8, study_seed=2026, replicate=0) from tests/test_plangen.py: the two-round
# generator is untouched by the multi-round one.
TWO_ROUND_SHA256 = "60ba8a90b15afc6ec26a1acc6ea82eef7a0fbcf21e69555f593f3ad8c9cdfce1"

SPREAD = MultiRoundSpec(start_spread_s=3.0)


def test_golden_plan_hash_and_two_round_plans_unchanged() -> None:
    plan = generate_multi_round_plan(8, study_seed=2026, replicate=0, spec=SPREAD)
    assert plan.sha256() == GOLDEN_SHA256
    assert generate_plan(8, study_seed=2026, replicate=0).sha256() == TWO_ROUND_SHA256


def test_sessions_follow_the_spec_ranges() -> None:
    plan = generate_multi_round_plan(2000, study_seed=5, replicate=1, spec=SPREAD)
    assert plan.multi_round and plan.n == 2000
    counts = [len(s.rounds) for s in plan.sessions]
    assert set(counts) == set(range(4, 9))  # every K in [4, 8] occurs, none outside
    for s in plan.sessions:
        first, *rest = s.rounds
        assert 800 <= first.new_tokens <= 1600
        assert all(50 <= r.new_tokens <= 600 for r in rest)
        assert all(32 <= r.gen_tokens <= 256 for r in s.rounds)
        assert all(
            0 <= r.gap_after_s <= CAP_S and r.tool_name == "aggregate" for r in s.rounds[:-1]
        )
        assert (s.rounds[-1].gap_after_s, s.rounds[-1].tool_name) == (0.0, "")
        assert 0 <= s.start_s <= 3.0
        # the transcript grows: round k's prompt holds every earlier round's tokens
        prompts = s.prompts()
        for k in range(1, len(s.rounds)):
            prev = s.rounds[k - 1]
            assert prompts[k] == prompts[k - 1] + prev.gen_tokens + s.rounds[k].new_tokens
    # uniform means within 5 standard errors (SE = sd / sqrt(count))
    mean_rounds = sum(counts) / len(counts)
    assert abs(mean_rounds - 6) < 5 * (24 / 12) ** 0.5 / len(counts) ** 0.5
    starts = [s.start_s for s in plan.sessions]
    assert abs(sum(starts) / len(starts) - 1.5) < 5 * 3 / (12 * len(starts)) ** 0.5
    calls = [r for s in plan.sessions for r in s.rounds[:-1]]
    assert plan.meta.notes["tool_calls"] == len(calls) == sum(counts) - plan.n
    assert plan.meta.cap_fraction == sum(r.gap_after_s == CAP_S for r in calls) / len(calls) > 0
    check_context(plan, 8192, "<test>")  # the defaults always fit a slot


def test_meta_records_provenance_and_spec() -> None:
    plan = generate_multi_round_plan(4, study_seed=7, replicate=2, block=1, spec=SPREAD)
    m = plan.meta
    assert (m.n, m.study_seed, m.replicate, m.block, m.variant) == (4, 7, 2, 1, "wait")
    assert m.seed == derive_seed(7, 2, 4, 1, MULTI_ROUND_STREAM)
    assert (m.generator_version, m.source) == (MULTI_ROUND_VERSION, "generator")
    assert m.notes["spec"]["rounds"] == [4, 8] and m.notes["spec"]["start_spread_s"] == 3.0
    assert m.tool_table == default_tool_table().source


def test_per_session_seed_rule() -> None:
    # Session i's draws come from session_seed(plan seed, i) alone: the first draw of its
    # own generator fixes its round count, whatever the other sessions drew.
    plan = generate_multi_round_plan(6, study_seed=3, replicate=0)
    for s in plan.sessions:
        rng = random.Random(session_seed(plan.meta.seed, s.session))
        assert len(s.rounds) == 4 + min(int(rng.random() * 5), 4)


@pytest.mark.parametrize("suffix", [".parquet", ".json"])
def test_same_arguments_give_byte_identical_files(tmp_path: Path, suffix: str) -> None:
    a = write_plan(
        generate_multi_round_plan(10, study_seed=3, replicate=0, spec=SPREAD),
        tmp_path / f"a{suffix}",
    )
    b = write_plan(
        generate_multi_round_plan(10, study_seed=3, replicate=0, spec=SPREAD),
        tmp_path / f"b{suffix}",
    )
    assert a.read_bytes() == b.read_bytes()
    assert load_plan(a) == generate_multi_round_plan(10, study_seed=3, replicate=0, spec=SPREAD)


def test_seed_arguments_and_n_change_every_session() -> None:
    base = generate_multi_round_plan(6, study_seed=3, replicate=0)
    others = [
        generate_multi_round_plan(6, study_seed=3, replicate=1),
        generate_multi_round_plan(6, study_seed=3, replicate=0, block=1),
        generate_multi_round_plan(6, study_seed=4, replicate=0),
        generate_multi_round_plan(7, study_seed=3, replicate=0),
    ]
    for other in others:
        assert all(
            a.rounds != b.rounds for a, b in zip(base.sessions, other.sessions, strict=False)
        )
    # and the two-round plan of the same arguments draws from another stream
    two = generate_plan(6, study_seed=3, replicate=0)
    assert two.meta.seed != base.meta.seed


def test_custom_spec_and_tool_table() -> None:
    table = ToolTable(
        (ToolStats("Read", 3, 0.01, 0.02, 0.05), ToolStats("Bash", 1, 1.0, 5.0, 100.0)), "custom"
    )
    spec = MultiRoundSpec(
        rounds=(3, 3),
        first_prompt_tokens=(100, 100),
        new_tokens=(0, 0),
        gen_tokens=(1, 2),
        tool_cap_s=2.0,
    )
    plan = generate_multi_round_plan(200, study_seed=0, replicate=0, tool_table=table, spec=spec)
    assert {len(s.rounds) for s in plan.sessions} == {3}
    assert {s.rounds[0].new_tokens for s in plan.sessions} == {100}
    assert {r.new_tokens for s in plan.sessions for r in s.rounds[1:]} == {0}
    assert {s.start_s for s in plan.sessions} == {0.0}
    assert {r.tool_name for s in plan.sessions for r in s.rounds[:-1]} == {"Read", "Bash"}
    assert max(r.gap_after_s for s in plan.sessions for r in s.rounds) == 2.0


def test_variants_of_a_multi_round_plan() -> None:
    plan = generate_multi_round_plan(5, study_seed=1, replicate=0)
    control, equal = plan.variant("control"), plan.variant("equal")
    assert all(r.gap_after_s == 0 for s in control.sessions for r in s.rounds)
    calls = [r.gap_after_s for s in plan.sessions for r in s.rounds[:-1]]
    total = sum(r.gap_after_s for s in equal.sessions for r in s.rounds)
    assert total == pytest.approx(sum(calls))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"rounds": (0, 3)}, None),
        ({"rounds": (5, 4)}, None),
        ({"new_tokens": (-1, 10)}, None),
        ({"gen_tokens": (0, 10)}, None),
        ({"start_spread_s": -1.0}, "start_spread_s"),
        ({"tool_cap_s": 0.0}, None),
        # 1600 + 19 x 600 + 20 x 256 = 18120 tokens: no slot of 8192 holds it
        ({"rounds": (4, 20)}, "rounds"),
    ],
)
def test_bad_spec_is_one_line(kwargs: dict, argument: str | None) -> None:
    with pytest.raises(PlanGenError) as info:
        MultiRoundSpec(**kwargs)
    assert info.value.argument == argument and "\n" not in str(info.value)


def test_context_check_uses_the_configured_length() -> None:
    spec = MultiRoundSpec(
        rounds=(2, 2),
        first_prompt_tokens=(10, 10),
        new_tokens=(5, 5),
        gen_tokens=(3, 3),
        max_seq_len=31,
    )
    assert spec.longest_transcript() == 10 + 5 + 2 * 3
    with pytest.raises(PlanGenError, match="maximum sequence length 20"):
        MultiRoundSpec(
            rounds=(2, 2),
            first_prompt_tokens=(10, 10),
            new_tokens=(5, 5),
            gen_tokens=(3, 3),
            max_seq_len=20,
        )


def test_plan_verb_writes_agent_sessions(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from rearrival.cli import app

    out = tmp_path / "agents.json"
    args = ["plan", "--n", "5", "--study-seed", "9", "--replicate", "1", "--out", str(out)]
    runner = CliRunner()
    result = runner.invoke(app, [*args, "--rounds", "3-5", "--start-spread-s", "2"])
    assert result.exit_code == 0, result.output
    spec = MultiRoundSpec(rounds=(3, 5), start_spread_s=2.0)
    assert load_plan(out) == generate_multi_round_plan(5, study_seed=9, replicate=1, spec=spec)
    bad = runner.invoke(app, [*args, "--rounds", "4-30"])
    assert bad.exit_code != 0 and str(bad.exception).startswith("option --rounds:")
