"""Shared prefixes and session renewal in plan files (docs/DESIGN.md §2 "Open
traffic, shared prefixes and renewal"): both formats round-trip them, a plan without
them keeps its rows, bytes and hash, and every refusal is one line naming the session."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rearrival.model.plans.plan import (
    PREFIXES_KEY,
    ROUND_COLUMNS,
    After,
    MultiRoundSession,
    Plan,
    PlanError,
    PlanMeta,
    Prefix,
    Round,
    arrow_schema,
    load_plan,
    write_plan,
)
from rearrival.model.plans.plangen import generate_multi_round_plan, generate_plan
from rearrival.model.simulator.plan_arrays import plan_arrays

PREFIXES = (Prefix("agent-a", 1500), Prefix("agent-b", 40))


def _session(i: int, **links) -> MultiRoundSession:
    rounds = (Round(100 + i, 20, 1.5, "Bash"), Round(7, 30, 0.0, ""))
    return MultiRoundSession(i, rounds, **links)


def linked_plan() -> Plan:
    """Two shared prefixes, a session without one, a renewal chain 0 -> 2 -> 3."""
    sessions = (
        _session(0, start_s=0.25, prefix="agent-a", prefix_tokens=1500),
        _session(1, start_s=3.0, prefix="agent-b", prefix_tokens=40),
        _session(2, prefix="agent-a", prefix_tokens=1500, after=After(0, 2.5)),
        _session(3, after=After(2, 0.0)),
    )
    return Plan(sessions, PlanMeta(n=4), PREFIXES)


@pytest.mark.parametrize("name", ["plan.json", "plan.parquet"])
def test_both_formats_round_trip_prefixes_and_renewal(tmp_path: Path, name: str) -> None:
    plan = linked_plan()
    again = load_plan(write_plan(plan, tmp_path / name))
    assert again.sessions == plan.sessions and again.prefixes == plan.prefixes
    assert again.sha256() == plan.sha256()
    # the loader fills each session's prefix_tokens from the table
    assert [s.prefix_tokens for s in again.sessions] == [1500, 40, 1500, 0]
    assert again.sessions[0].prompts() == (1600, 1627)  # 1500 + 100; + 20 + 7


def test_the_parquet_file_holds_the_columns_and_the_table(tmp_path: Path) -> None:
    table = pq.read_table(write_plan(linked_plan(), tmp_path / "plan.parquet"))
    assert table.column_names[-3:] == ["prefix", "after_session", "after_gap_s"]
    rows = table.to_pylist()
    assert [r["prefix"] for r in rows] == ["agent-a"] * 2 + ["agent-b"] * 2 + ["agent-a"] * 2 + [
        None
    ] * 2
    assert [r["after_session"] for r in rows[::2]] == [None, None, 0, 2]
    assert json.loads(table.schema.metadata[PREFIXES_KEY]) == [
        {"id": "agent-a", "tokens": 1500},
        {"id": "agent-b", "tokens": 40},
    ]


def test_columns_appear_only_for_what_the_plan_uses(tmp_path: Path) -> None:
    only_after = Plan((_session(0), _session(1, after=After(0, 1.0))))
    table = pq.read_table(write_plan(only_after, tmp_path / "after.parquet"))
    assert table.column_names[-2:] == ["after_session", "after_gap_s"]
    assert "prefix" not in table.column_names and PREFIXES_KEY not in table.schema.metadata
    only_prefix = Plan((_session(0, prefix="p", prefix_tokens=9),), prefixes=(Prefix("p", 9),))
    table = pq.read_table(write_plan(only_prefix, tmp_path / "prefix.parquet"))
    assert table.column_names[-1] == "prefix" and "after_session" not in table.column_names


def test_a_plan_without_them_keeps_rows_bytes_and_hash(tmp_path: Path) -> None:
    plan = generate_multi_round_plan(4, study_seed=3, replicate=0, block=0)
    rows = plan.rows()
    assert set(rows[0]) == {name for name in arrow_schema(ROUND_COLUMNS).names}
    table = pq.read_table(write_plan(plan, tmp_path / "plan.parquet"))
    assert table.schema.remove_metadata() == arrow_schema(ROUND_COLUMNS) and PREFIXES_KEY not in (
        table.schema.metadata
    )
    # the hash is the one rows alone give, as before prefixes existed
    canonical = json.dumps(rows, sort_keys=True, separators=(",", ":"))
    assert plan.sha256() == hashlib.sha256(canonical.encode()).hexdigest()
    body = json.loads(write_plan(plan, tmp_path / "plan.json").read_text())
    assert set(body) == {"meta", "sessions"}
    assert set(body["sessions"][0]) == {"session", "start_s", "rounds"}


def test_the_hash_covers_the_table_each_prefix_and_each_link() -> None:
    plan = linked_plan()
    hashes = {plan.sha256()}
    longer = (Prefix("agent-a", 1501), PREFIXES[1])
    sessions = tuple(
        replace(s, prefix_tokens=1501) if s.prefix == "agent-a" else s for s in plan.sessions
    )
    hashes.add(Plan(sessions, plan.meta, longer).sha256())
    sessions = list(plan.sessions)
    sessions[3] = replace(sessions[3], after=After(2, 0.5))
    hashes.add(Plan(tuple(sessions), plan.meta, plan.prefixes).sha256())
    sessions[3] = replace(sessions[3], after=After(1, 0.0))
    hashes.add(Plan(tuple(sessions), plan.meta, plan.prefixes).sha256())
    sessions[3] = replace(sessions[3], prefix="agent-b", prefix_tokens=40)
    hashes.add(Plan(tuple(sessions), plan.meta, plan.prefixes).sha256())
    assert len(hashes) == 5


def test_variants_keep_prefixes_and_renewal_gaps() -> None:
    plan = linked_plan()
    control = plan.variant("control")
    assert control.prefixes == plan.prefixes
    assert [s.after for s in control.sessions] == [s.after for s in plan.sessions]
    assert [s.prefix for s in control.sessions] == [s.prefix for s in plan.sessions]
    assert all(r.gap_after_s == 0 for s in control.sessions for r in s.rounds)
    assert control.sessions[2].after == After(0, 2.5)  # the renewal gap is no tool gap


def test_the_simulator_inputs_see_the_links() -> None:
    arrays = plan_arrays(linked_plan())
    assert arrays.prefix_of == [0, 1, 0, -1] and arrays.prefix_tokens == [1500, 40, 1500, 0]
    assert arrays.leader == [-1, -1, 0, 2]
    assert arrays.follower[1] == 4 and arrays.follower[5] == 6
    assert arrays.follow_gap[1] == 2.5


def _json_plan(tmp_path: Path, sessions: list, prefixes=None) -> Path:
    body: dict = {"sessions": sessions}
    if prefixes is not None:
        body["prefixes"] = prefixes
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(body))
    return path


ROUNDS = [{"new_tokens": 10, "gen_tokens": 4, "gap_after_s": 0.0}]
ONE_PREFIX = [{"id": "agent-a", "tokens": 1500}]


def _multi(i: int, **extra) -> dict:
    return {"session": i, "start_s": 0.0, "rounds": ROUNDS} | extra


def _follower(i: int, leader, gap=0.0) -> dict:
    return {"session": i, "after": {"session": leader, "gap_s": gap}, "rounds": ROUNDS}


TWO_ROUND = {
    "session": 0,
    "prompt_tokens": 900,
    "gen_tokens": 50,
    "followup_gen_tokens": 60,
    "appended_tokens": 8,
    "tool_wait_s": 1.0,
    "tool_name": "Bash",
}

REFUSALS = {
    "unknown prefix id": (
        [_multi(0, prefix="agent-z")],
        ONE_PREFIX,
        ["session 0", "'agent-z'", "'agent-a'", "add it"],
    ),
    "after a missing session": (
        [_multi(0), _follower(1, 7)],
        None,
        ["session 1", "after.session", "names no session", "0..1"],
    ),
    "after itself": ([_multi(0), _follower(1, 1)], None, ["session 1", "itself"]),
    "a cycle": (
        [_multi(0), _follower(1, 2), _follower(2, 1)],
        None,
        ["session 1", "cycle", "1 -> 2 -> 1", "start_s"],
    ),
    "start_s with after": (
        [_multi(0), _follower(1, 0) | {"start_s": 3.0}],
        None,
        ["session 1", "'start_s' and 'after'", "drop 'start_s'"],
    ),
    "a negative gap": ([_multi(0), _follower(1, 0, -1.0)], None, ["session 1", "after.gap_s"]),
    "two followers": (
        [_multi(0), _follower(1, 0), _follower(2, 0)],
        None,
        ["session 2", "already has follower 1", "at most one follower"],
    ),
    "duplicate prefix ids": (
        [_multi(0)],
        ONE_PREFIX * 2,
        ["prefixes[1]", "'agent-a' appears twice"],
    ),
    "zero prefix tokens": ([_multi(0)], [{"id": "p", "tokens": 0}], ["prefixes[0]", "tokens"]),
    "negative prefix tokens": ([_multi(0)], [{"id": "p", "tokens": -5}], ["prefixes[0]"]),
    "a malformed prefix": ([_multi(0)], [{"id": "p"}], ["prefixes[0]", '"tokens"']),
    "a malformed after": (
        [_multi(0), {"session": 1, "after": 0, "rounds": ROUNDS}],
        None,
        ["session 1", "field 'after' must be an object"],
    ),
    "prefix on a paper row": (
        [TWO_ROUND | {"prefix": "agent-a"}],
        None,
        ["session row 0", "'prefix'", "multi-round sessions"],
    ),
    "after on a paper row": (
        [TWO_ROUND | {"after": {"session": 0}}],
        None,
        ["session row 0", "'after'", "multi-round"],
    ),
    "a misspelt paper key": ([TWO_ROUND | {"tool_wiat_s": 1}], None, ["'tool_wiat_s'"]),
    "a misspelt session key": ([_multi(0, prefx="agent-a")], ONE_PREFIX, ["session 0", "'prefx'"]),
    "prefixes on a paper plan": ([TWO_ROUND], ONE_PREFIX, ["'prefixes'", "two-round"]),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refusal_is_one_line_naming_the_file_and_session(tmp_path: Path, case: str) -> None:
    sessions, prefixes, needles = REFUSALS[case]
    path = _json_plan(tmp_path, sessions, prefixes)
    with pytest.raises(PlanError) as caught:
        load_plan(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path))
    for needle in needles:
        assert needle in message, (needle, message)


def test_parquet_refuses_links_that_differ_within_a_session(tmp_path: Path) -> None:
    path = write_plan(linked_plan(), tmp_path / "plan.parquet")
    table = pq.read_table(path)
    rows = table.to_pylist()
    # an edited file: the table stays, the stored hash goes (else that refusal comes first)
    schema = table.schema.with_metadata({PREFIXES_KEY: table.schema.metadata[PREFIXES_KEY]})
    rows[1]["prefix"] = "agent-b"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "bad.parquet")
    with pytest.raises(PlanError, match=r"row 1 .*differ from the session's round 0"):
        load_plan(tmp_path / "bad.parquet")
    rows[1]["prefix"] = "agent-a"
    rows[4]["after_gap_s"] = None
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "bad.parquet")
    with pytest.raises(PlanError, match="'after_session' and 'after_gap_s' are set together"):
        load_plan(tmp_path / "bad.parquet")


def test_parquet_without_the_table_refuses_the_prefix_column(tmp_path: Path) -> None:
    table = pq.read_table(write_plan(linked_plan(), tmp_path / "plan.parquet"))
    pq.write_table(table.replace_schema_metadata({}), tmp_path / "bare.parquet")
    with pytest.raises(PlanError, match="'agent-a' is not in the plan's 'prefixes' \\(ids: none"):
        load_plan(tmp_path / "bare.parquet")


def test_in_memory_plans_are_checked_too() -> None:
    with pytest.raises(PlanError, match="prefix_tokens 10 differs from prefix 'agent-a'"):
        Plan((_session(0, prefix="agent-a", prefix_tokens=10),), prefixes=PREFIXES)
    with pytest.raises(PlanError, match="names no prefix"):
        Plan((_session(0, prefix_tokens=10),))
    with pytest.raises(PlanError, match=r"both 'start_s' \(2.0\) and 'after'"):
        Plan((_session(0), _session(1, start_s=2.0, after=After(0))))
    with pytest.raises(PlanError, match="two-round"):
        Plan(generate_plan(2, study_seed=1, replicate=0).sessions, prefixes=PREFIXES)


def test_a_long_chain_is_checked_in_linear_time() -> None:
    n = 50_000
    sessions = (_session(0), *(_session(i, after=After(i - 1)) for i in range(1, n)))
    assert Plan(sessions).renews


def test_a_prefix_is_part_of_round_0_s_prompt_for_the_simulator() -> None:
    """The same session with its prefix written into round 0's new tokens sends the same
    prompts: on the RBLN rule sets a prefix changes nothing else (docs/DESIGN.md §2)."""
    plan = linked_plan()
    inlined = tuple(
        replace(
            s,
            rounds=(
                replace(s.rounds[0], new_tokens=s.rounds[0].new_tokens + s.prefix_tokens),
                *s.rounds[1:],
            ),
            prefix=None,
            prefix_tokens=0,
        )
        for s in plan.sessions
    )
    assert [s.prompts() for s in inlined] == [s.prompts() for s in plan.sessions]
    assert plan_arrays(Plan(inlined)).prompt == plan_arrays(plan).prompt
