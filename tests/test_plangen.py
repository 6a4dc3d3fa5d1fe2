"""Seeded plan generator (docs/DESIGN.md §2, paper II-C): ranges, determinism, nesting, variants."""

from __future__ import annotations

from pathlib import Path

import pytest

from rearrival.model.plans.plan import load_plan, write_plan
from rearrival.model.plans.plangen import PlanGenError, PlanSpec, derive_seed, generate_plan
from rearrival.model.plans.tools import CAP_S, ToolStats, ToolTable, default_tool_table

# Content hash of generate_plan(8, study_seed=2026, replicate=0): changes only when the
# generator (seed scheme, draw order, ranges, default table, inverse CDF) changes. If
# this fails on purpose, bump plans.GENERATOR_VERSION and update the value.
GOLDEN_SHA256 = "60ba8a90b15afc6ec26a1acc6ea82eef7a0fbcf21e69555f593f3ad8c9cdfce1"


def test_derive_seed_is_stable_and_separates_every_argument() -> None:
    base = derive_seed(1, 2, 3, 4, "x")
    assert base == derive_seed(1, 2, 3, 4, "x")
    assert 0 <= base < 2**64
    variants = {
        derive_seed(9, 2, 3, 4, "x"),
        derive_seed(1, 9, 3, 4, "x"),
        derive_seed(1, 2, 9, 4, "x"),
        derive_seed(1, 2, 3, 9, "x"),
        derive_seed(1, 2, 3, 4, "y"),
        derive_seed(1, 2, None, 4, "x"),
    }
    assert base not in variants and len(variants) == 6
    # Golden: first 8 bytes of the sha256 of the canonical string, on any machine.
    assert derive_seed(0, 0, 0, 0, "plan") == 0xD84DF03D7E6B8FAD


def test_golden_plan_hash() -> None:
    assert generate_plan(8, study_seed=2026, replicate=0).sha256() == GOLDEN_SHA256


def test_sessions_follow_paper_ranges() -> None:
    plan = generate_plan(3000, study_seed=5, replicate=1)
    s = plan.sessions
    assert all(800 <= x.prompt_tokens <= 1600 for x in s)
    assert all(32 <= x.gen_tokens <= 256 and 32 <= x.followup_gen_tokens <= 256 for x in s)
    assert all(x.appended_tokens == 8 for x in s)
    assert all(x.followup_prompt_tokens == x.prompt_tokens + x.gen_tokens + 8 for x in s)
    assert all(0 <= x.tool_wait_s <= CAP_S and x.tool_name == "aggregate" for x in s)
    # Uniform means, with 5 standard errors of slack (SE = range / sqrt(12 * 3000)).
    mean_prompt = sum(x.prompt_tokens for x in s) / len(s)
    assert abs(mean_prompt - 1200) < 5 * 801 / (12 * 3000) ** 0.5
    mean_gen = sum(x.gen_tokens for x in s) / len(s)
    assert abs(mean_gen - 144) < 5 * 225 / (12 * 3000) ** 0.5
    capped = sum(x.tool_wait_s == CAP_S for x in s)
    assert plan.meta.cap_fraction == capped / len(s) > 0


def test_meta_records_provenance() -> None:
    plan = generate_plan(4, study_seed=7, replicate=2, block=1)
    m = plan.meta
    assert (m.n, m.study_seed, m.replicate, m.block, m.variant) == (4, 7, 2, 1, "wait")
    assert m.seed == derive_seed(7, 2, 4, 1, "sessions")
    assert m.tool_table == default_tool_table().source


def test_same_arguments_give_byte_identical_parquet(tmp_path: Path) -> None:
    a = write_plan(generate_plan(10, study_seed=3, replicate=0), tmp_path / "a.parquet")
    b = write_plan(generate_plan(10, study_seed=3, replicate=0), tmp_path / "b.parquet")
    assert a.read_bytes() == b.read_bytes()
    assert load_plan(a) == generate_plan(10, study_seed=3, replicate=0)


def test_replicate_block_and_seed_change_the_plan() -> None:
    base = generate_plan(6, study_seed=3, replicate=0)
    others = [
        generate_plan(6, study_seed=3, replicate=1),
        generate_plan(6, study_seed=3, replicate=0, block=1),
        generate_plan(6, study_seed=4, replicate=0),
    ]
    for other in others:
        assert other.sha256() != base.sha256()
        assert all(a != b for a, b in zip(base.sessions, other.sessions, strict=True))


def test_plans_of_different_n_are_independent() -> None:
    # N is part of the seed (docs/DESIGN.md §2): a larger plan does not extend a smaller one
    small = generate_plan(6, study_seed=11, replicate=2, block=1)
    large = generate_plan(10, study_seed=11, replicate=2, block=1)
    assert small.meta.seed != large.meta.seed
    assert all(a != b for a, b in zip(small.sessions, large.sessions[:6], strict=True))


def test_variants_keep_inputs_and_change_only_waits(tmp_path: Path) -> None:
    plan = generate_plan(12, study_seed=1, replicate=0)
    control, equal = plan.variant("control"), plan.variant("equal")
    assert all(s.tool_wait_s == 0 for s in control.sessions)
    mean = sum(s.tool_wait_s for s in plan.sessions) / plan.n
    assert all(s.tool_wait_s == pytest.approx(mean) for s in equal.sessions)
    for other in (control, equal):
        assert [(s.prompt_tokens, s.gen_tokens, s.followup_gen_tokens) for s in other.sessions] == [
            (s.prompt_tokens, s.gen_tokens, s.followup_gen_tokens) for s in plan.sessions
        ]
    loaded = load_plan(write_plan(equal, tmp_path / "equal.json"))
    assert loaded.meta.variant == "equal" and loaded.meta.seed == plan.meta.seed


def test_custom_spec_and_tool_table() -> None:
    table = ToolTable(
        (ToolStats("Read", 3, 0.01, 0.02, 0.05), ToolStats("Bash", 1, 1.0, 5.0, 100.0)), "custom"
    )
    spec = PlanSpec(
        prompt_tokens=(100, 100),
        gen_tokens=(1, 2),
        followup_gen_tokens=(5, 5),
        appended_tokens=0,
        tool_cap_s=2.0,
    )
    plan = generate_plan(200, study_seed=0, replicate=0, tool_table=table, spec=spec)
    assert {s.prompt_tokens for s in plan.sessions} == {100}
    assert {s.gen_tokens for s in plan.sessions} == {1, 2}
    assert {s.tool_name for s in plan.sessions} == {"Read", "Bash"}
    assert max(s.tool_wait_s for s in plan.sessions) == 2.0
    assert plan.meta.tool_table == "custom"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": -1},
        {"n": 0},
        {"n": True},
        {"n": 2.5},
        {"replicate": -1},
        {"block": -2},
        {"study_seed": -5},
    ],
)
def test_bad_arguments_name_the_argument(kwargs: dict) -> None:
    args = {"n": 4, "study_seed": 1, "replicate": 0} | kwargs
    with pytest.raises(PlanGenError) as info:
        generate_plan(args.pop("n"), **args)
    name = next(iter(kwargs))
    assert info.value.argument == name and str(info.value).startswith(f"{name} must")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prompt_tokens": (0, 10)},
        {"gen_tokens": (9, 3)},
        {"appended_tokens": -1},
        {"tool_cap_s": 0.0},
    ],
)
def test_bad_plan_spec(kwargs: dict) -> None:
    with pytest.raises(PlanGenError):
        PlanSpec(**kwargs)
