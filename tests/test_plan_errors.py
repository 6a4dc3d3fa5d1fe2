"""Every refusal of rearrival.model.plans.plan is one line naming the file, the field and the fix.

A plan is the fixed input of a replicate (paper Section II-C): a file the simulator, the
emulator or a server could not run must be refused before any run starts, with a message
a user can act on without reading a traceback. Both shapes are covered: the paper's
two-round rows and the multi-round sessions (JSON and Parquet, one row per round).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rearrival.model.plans.plan import (
    COLUMNS,
    ROUND_COLUMNS,
    MultiRoundSession,
    Plan,
    PlanError,
    PlanMeta,
    Round,
    Session,
    arrow_schema,
    check_context,
    load_plan,
    write_plan,
)


def _one_line(error: pytest.ExceptionInfo[PlanError], *parts: str) -> str:
    """The message is a single line holding every expected part."""
    message = str(error.value)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, message
    return message


def _row(**changes: Any) -> dict[str, Any]:
    """A valid two-round row (session 0) with some fields changed."""
    return {
        "session": 0,
        "prompt_tokens": 1000,
        "gen_tokens": 50,
        "followup_gen_tokens": 40,
        "appended_tokens": 8,
        "tool_wait_s": 1.5,
        "tool_name": "Bash",
    } | changes


def _round(**changes: Any) -> dict[str, Any]:
    return {"new_tokens": 100, "gen_tokens": 20, "gap_after_s": 0.5, "tool_name": "Bash"} | changes


def _last(**changes: Any) -> dict[str, Any]:
    return _round(gap_after_s=0.0, tool_name="") | changes


def _session(rounds: list[Any], **changes: Any) -> dict[str, Any]:
    return {"session": 0, "start_s": 0.0, "rounds": rounds} | changes


def _json(tmp_path: Path, sessions: Any) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"sessions": sessions}))
    return path


def _refused_json(tmp_path: Path, sessions: Any, *parts: str) -> str:
    path = _json(tmp_path, sessions)
    with pytest.raises(PlanError) as error:
        load_plan(path)
    return _one_line(error, str(path), *parts)


def _parquet(tmp_path: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> Path:
    """Rows written as a plan table without a stored hash (as a hand-made file would be)."""
    path = tmp_path / "plan.parquet"
    columns = {name: [row[name] for row in rows] for name in schema.names}
    pq.write_table(pa.table(columns, schema=schema), path)
    return path


def _round_rows(*rows: tuple[int, int, float]) -> list[dict[str, Any]]:
    """(session, round, start_s) rows of the multi-round Parquet shape; gap 0 throughout."""
    return [
        {"session": s, "round": k, "start_s": start} | _last(tool_name="x") for s, k, start in rows
    ]


def _refused_parquet(tmp_path: Path, rows: list[dict[str, Any]], *parts: str) -> str:
    path = _parquet(tmp_path, rows, arrow_schema(ROUND_COLUMNS))
    with pytest.raises(PlanError) as error:
        load_plan(path)
    return _one_line(error, str(path), *parts)


# --- two-round rows ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("prompt_tokens", 0, "must be a positive integer"),
        ("gen_tokens", -3, "must be a positive integer"),
        ("followup_gen_tokens", 0, "must be a positive integer"),
        ("appended_tokens", -1, "must be >= 0"),
        ("tool_wait_s", -0.5, "must be a number >= 0"),
        ("prompt_tokens", 3.5, "must be an integer, got 3.5"),
        ("gen_tokens", "7", "must be an integer, got '7'"),
        ("appended_tokens", True, "must be an integer, got True"),
        ("tool_wait_s", "soon", "must be a number of seconds, got 'soon'"),
    ],
)
def test_a_bad_two_round_field_is_named(tmp_path, field, value, expected):
    _refused_json(tmp_path, [_row(**{field: value})], "session row 0", f"'{field}'", expected)


def test_a_nan_tool_wait_is_refused():
    """NaN compares false with everything: the check must not let it through."""
    with pytest.raises(PlanError) as error:
        Plan((Session(**_row(tool_wait_s=math.nan)),))
    _one_line(error, "<plan>: session row 0", "'tool_wait_s'")


def test_a_two_round_row_without_a_field_names_it_and_the_columns(tmp_path):
    row = _row()
    del row["followup_gen_tokens"]
    _refused_json(tmp_path, [row], "lacks field 'followup_gen_tokens'", "a plan row has session")


def test_sessions_out_of_order_are_refused(tmp_path):
    _refused_json(
        tmp_path, [_row(), _row(session=2)], "session row 1", "'session' is 2, expected 1"
    )


@pytest.mark.parametrize("sessions", [[], None])
def test_no_sessions_is_refused(tmp_path, sessions):
    """An empty list is a plan with nothing to run; a missing list is not a plan."""
    expected = "plan has no sessions" if sessions == [] else "a 'sessions' list"
    _refused_json(tmp_path, sessions, expected)


# --- multi-round sessions -------------------------------------------------------------------


def test_a_session_without_rounds_is_refused(tmp_path):
    _refused_json(tmp_path, [_session([])], "session 0: has no rounds")


@pytest.mark.parametrize(
    ("rounds", "parts"),
    [
        ([_round(new_tokens=0), _last()], ("round 0", "'new_tokens' must be a positive")),
        ([_round(), _last(new_tokens=-1)], ("round 1", "'new_tokens' must be an integer >= 0")),
        ([_round(gen_tokens=0), _last()], ("round 0", "'gen_tokens' must be a positive")),
        ([_round(gen_tokens=2.5), _last()], ("round 0", "'gen_tokens' must be an integer")),
        ([_round(new_tokens="9"), _last()], ("round 0", "'new_tokens' must be an integer")),
        ([_round(gap_after_s=-1.0), _last()], ("round 0", "'gap_after_s' must be a number")),
        ([_round(gap_after_s="1s"), _last()], ("round 0", "'gap_after_s' must be a number")),
        ([_round(), _last(gen_tokens=None)], ("round 1", "'gen_tokens' must be an integer")),
    ],
)
def test_a_bad_round_count_or_gap_is_named(tmp_path, rounds, parts):
    _refused_json(tmp_path, [_session(rounds)], "session 0", *parts)


def test_a_gap_on_the_last_round_is_refused(tmp_path):
    _refused_json(
        tmp_path,
        [_session([_round(), _round(gap_after_s=2.0)])],
        "session 0 round 1",
        "'gap_after_s' is 2.0 on the session's last round",
        "set it to 0",
    )


@pytest.mark.parametrize("start", [-1.0, math.inf])
def test_a_bad_start_is_refused(start):
    session = MultiRoundSession(0, (Round(10, 5),), start_s=start)
    with pytest.raises(PlanError) as error:
        Plan((session,))
    _one_line(error, "<plan>: session 0", "'start_s' must be a number of seconds >= 0")


@pytest.mark.parametrize(
    ("rounds", "expected"),
    [("many", "'rounds' must be a list"), ([7], "a round is an object with new_tokens")],
)
def test_rounds_that_are_not_a_list_of_objects_are_refused(tmp_path, rounds, expected):
    _refused_json(tmp_path, [_session(rounds)], "session 0", expected)


def test_a_round_without_a_field_names_it(tmp_path):
    _refused_json(
        tmp_path, [_session([{"new_tokens": 4}])], "session 0 round 0", "lacks field 'gen_tokens'"
    )


@pytest.mark.parametrize("first_multi", [True, False])
def test_mixed_shapes_in_one_json_plan_are_refused(tmp_path, first_multi):
    multi, two = _session([_last()]), _row(session=1)
    sessions = [multi, two] if first_multi else [_row(), _session([_last()], session=1)]
    _refused_json(tmp_path, sessions, "session 1 has", "a plan is all two-round rows")


def test_mixed_session_objects_in_one_plan_are_refused():
    sessions = (Session(**_row()), MultiRoundSession(1, (Round(10, 5),)))
    with pytest.raises(PlanError) as error:
        Plan(sessions)
    _one_line(error, "session 1 is multi-round but session 0 is two-round", "one shape")


def test_multi_round_sessions_out_of_order_are_refused(tmp_path):
    _refused_json(
        tmp_path, [_session([_last()], session=1)], "session row 0", "'session' is 1, expected 0"
    )


# --- the multi-round Parquet shape ------------------------------------------------------------


def test_parquet_rounds_out_of_order_are_refused(tmp_path):
    _refused_parquet(
        tmp_path,
        _round_rows((0, 0, 0.0), (0, 2, 0.0)),
        "row 1 (session 0, round 2)",
        "field 'round' out of order",
    )


def test_parquet_round_of_a_session_not_started_is_refused(tmp_path):
    _refused_parquet(
        tmp_path,
        _round_rows((0, 0, 0.0), (1, 1, 0.0)),
        "row 1 (session 1, round 1)",
        "'round' out of order",
    )


def test_parquet_sessions_out_of_order_are_refused(tmp_path):
    _refused_parquet(
        tmp_path,
        _round_rows((0, 0, 0.0), (2, 0, 0.0)),
        "row 1 (session 2, round 0)",
        "'session' is 2, expected 1",
    )


def test_parquet_start_differing_within_a_session_is_refused(tmp_path):
    _refused_parquet(
        tmp_path,
        _round_rows((0, 0, 1.0), (0, 1, 2.0)),
        "row 1 (session 0, round 1)",
        "'start_s' differs from the session's round 0",
    )


def test_parquet_plan_without_rows_is_refused(tmp_path):
    _refused_parquet(tmp_path, [], "plan has no sessions")


def test_parquet_multi_round_plan_missing_a_column_is_refused(tmp_path):
    schema = pa.schema([f for f in arrow_schema(ROUND_COLUMNS) if f.name != "gen_tokens"])
    path = _parquet(tmp_path, _round_rows((0, 0, 0.0)), schema)
    with pytest.raises(PlanError) as error:
        load_plan(path)
    _one_line(error, str(path), "lacks column 'gen_tokens'", "its columns are session, round")


# --- files -----------------------------------------------------------------------------------


def test_a_missing_plan_file_is_named(tmp_path):
    with pytest.raises(PlanError) as error:
        load_plan(tmp_path / "none.parquet")
    _one_line(error, "none.parquet: no such plan file", "`rearrival plan`")


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text('{"sessions": [\n{"session": 0,,}]}')
    with pytest.raises(PlanError) as error:
        load_plan(path)
    _one_line(error, str(path), "not valid JSON", "at line 2")


def test_an_unreadable_parquet_file_is_refused(tmp_path):
    path = tmp_path / "plan.parquet"
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(PlanError) as error:
        load_plan(path)
    _one_line(error, str(path), "not a readable Parquet plan", "regenerate it")


@pytest.mark.parametrize("shape", ["two-round", "multi-round"])
def test_an_edited_parquet_plan_fails_its_stored_hash(tmp_path, shape):
    """A stored plan whose rows were edited after writing is refused, in either shape."""
    if shape == "two-round":
        plan = Plan((Session(**_row()),), PlanMeta(n=1))
    else:
        plan = Plan((MultiRoundSession(0, (Round(10, 5, 1.0), Round(4, 6))),), PlanMeta(n=1))
    path = write_plan(plan, tmp_path / "plan.parquet")
    table = pq.read_table(path)
    gen = table.column_names.index("gen_tokens")
    edited = table.set_column(gen, table.field(gen), pa.array([7] * table.num_rows, pa.int64()))
    pq.write_table(edited.replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(PlanError) as error:
        load_plan(path)
    _one_line(error, str(path), "does not match its stored sha256")


def test_a_two_round_parquet_with_a_bad_field_names_the_file(tmp_path):
    path = _parquet(tmp_path, [_row(gen_tokens=0)], arrow_schema(COLUMNS))
    with pytest.raises(PlanError) as error:
        load_plan(path)
    _one_line(error, str(path), "session row 0", "'gen_tokens' must be a positive integer")


def test_an_unknown_variant_is_refused():
    plan = Plan((Session(**_row()),))
    with pytest.raises(PlanError) as error:
        plan.variant("double")
    _one_line(error, "unknown variant 'double'", "wait")


# --- the context a configuration can hold -------------------------------------------------------


@pytest.mark.parametrize("shape", ["two-round", "multi-round"])
def test_a_transcript_over_the_maximum_sequence_length_is_refused(shape):
    """Round 1 resends the transcript: 1000 + 50 + 8 new + 40 generated = 1098 tokens."""
    if shape == "two-round":
        plan = Plan((Session(**_row()),))
    else:
        rounds = (Round(1000, 50, 1.5, "Bash"), Round(8, 40))
        plan = Plan((MultiRoundSession(0, rounds),))
    check_context(plan, 1098, "plans/p.parquet")  # exactly at the limit: allowed
    with pytest.raises(PlanError) as error:
        check_context(plan, 1097, "plans/p.parquet")
    _one_line(
        error,
        "plans/p.parquet: session 0 round 1",
        "reaches 1098 tokens, over the maximum sequence length 1097",
        "truncate the session",
    )
