"""Multi-round plans from TraceLab round traces: tokens, gaps, think time, context limits,
sampling, determinism and malformed input (paper Section II-C; docs/DESIGN.md "Plans")."""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import TRACELAB_SAMPLE
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.model.cost.memory import context_cost, device_memory
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import load_plan
from rearrival.model.plans.trace_plans import ToolCall, TraceError, combine_calls
from rearrival.model.plans.tracelab_import import plans_from_trace

runner = CliRunner()


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _iso(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _call(name: str, start: float, wall_s: float, internal_s: float | None = None) -> dict:
    return {
        "tool_name": name,
        "tool_call_id": f"{name}-{start}",
        "emitted_at": _iso(start),
        "result_at": _iso(start + wall_s),
        "tool_wall_latency_ms": round(wall_s * 1000),
        "tool_internal_latency_ms": None if internal_s is None else round(internal_s * 1000),
    }


def _round(
    session: str, k: int, start: float, tokens_in: int, tokens_out: int, calls=()
) -> dict[str, Any]:
    return {
        "session_id": session,
        "round_index": k,
        "input_tokens_total": tokens_in,
        "output_tokens": tokens_out,
        "timing_events": [{"event_type": "user_message", "timestamp": _iso(start)}],
        "tools": list(calls),
    }


def _write(path: Path, rounds: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    return path


def _three_sessions(path: Path) -> Path:
    """Three sessions: parallel calls, sequential calls, a human-waiting tool, a user turn."""
    return _write(
        path,
        [
            _round("a", 0, 100.0, 1000, 50, [_call("Bash", 101.0, 2.0), _call("Read", 101.5, 4.0)]),
            _round("a", 1, 106.0, 1100, 40, [_call("Bash", 107.0, 1.0), _call("Grep", 109.0, 3.0)]),
            _round("a", 2, 113.0, 1200, 30),
            _round("b", 0, 102.5, 500, 20, [_call("AskUserQuestion", 103.0, 90.0)]),
            _round("b", 1, 200.0, 530, 10),
            _round("c", 0, 150.0, 700, 70),
            _round("c", 1, 190.0, 800, 60, [_call("Bash", 191.0, 0.5, internal_s=0.0)]),
            _round("c", 2, 192.0, 900, 5),
        ],
    )


def test_combine_calls_parallel_take_the_longest_sequential_add() -> None:
    parallel = [ToolCall("a", 0.0, 2.0, 2.0), ToolCall("b", 1.0, 5.0, 4.0)]
    assert combine_calls(parallel) == 4.0
    sequential = [ToolCall("a", 0.0, 1.0, 1.0), ToolCall("b", 2.0, 5.0, 3.0)]
    assert combine_calls(sequential) == 4.0
    # two parallel groups one after the other: max of each, summed
    mixed = [*parallel, ToolCall("c", 6.0, 7.0, 1.0), ToolCall("d", 6.5, 9.0, 2.5)]
    assert combine_calls(mixed) == 6.5
    assert combine_calls([]) == 0.0


def test_rounds_tokens_gaps_and_think_time(tmp_path: Path) -> None:
    result = plans_from_trace(_three_sessions(tmp_path / "t.jsonl"))
    plan = result.plan
    assert plan.multi_round and plan.n == 3 and plan.requests == 8
    a, b, c = plan.sessions  # start order: a (100 s), b (102.5 s), c (150 s)
    assert [s.start_s for s in plan.sessions] == [0.0, 2.5, 50.0]
    # new tokens are the growth beyond the previous transcript (input + output)
    assert [r.new_tokens for r in a.rounds] == [1000, 1100 - 1050, 1200 - 1140]
    assert a.prompts() == (1000, 1100, 1200)
    assert [r.gen_tokens for r in a.rounds] == [50, 40, 30]
    # parallel Bash/Read: the longer; sequential Bash then Grep: the sum; last round 0
    assert [r.gap_after_s for r in a.rounds] == [4.0, 4.0, 0.0]
    assert a.rounds[0].tool_name == "Bash+Read"
    # a human-waiting tool is think time: the next round follows at once
    assert b.rounds[0].gap_after_s == 0.0 and b.rounds[0].tool_name == ""
    # a round with no tool waits for the user: gap 0; internal 0 ms means wall clock
    assert [r.gap_after_s for r in c.rounds] == [0.0, 0.5, 0.0]
    notes = plan.meta.notes
    assert notes["think_rounds"] == 2 and notes["human_tool_calls"] == 1
    assert notes["think_s_removed"] == pytest.approx((200.0 - 193.0) + (190.0 - 150.0))
    assert notes["tool_rounds"] == 3


def test_time_origin_zero_and_sampling_are_seeded(tmp_path: Path) -> None:
    path = _three_sessions(tmp_path / "t.jsonl")
    zero = plans_from_trace(path, time_origin="zero").plan
    assert {s.start_s for s in zero.sessions} == {0.0}
    picks = {
        seed: tuple(plans_from_trace(path, sessions=2, seed=seed).plan.meta.notes["trace_sessions"])
        for seed in range(8)
    }
    assert all(len(p) == 2 for p in picks.values()) and len(set(picks.values())) > 1
    again = plans_from_trace(path, sessions=2, seed=3).plan
    assert tuple(again.meta.notes["trace_sessions"]) == picks[3]
    assert again.meta.seed == 3 and again.meta.import_flags["sessions"] == 2
    with pytest.raises(TraceError, match="has 3 sessions"):
        plans_from_trace(path, sessions=4)


def test_overflow_truncates_and_counts_or_refuses(tmp_path: Path) -> None:
    path = _three_sessions(tmp_path / "t.jsonl")
    # a: transcripts 1050, 1140, 1230; b: 520, 540; c: 770, 860, 905
    result = plans_from_trace(path, max_seq_len=1100)
    a = result.plan.sessions[0]
    assert len(a.rounds) == 1 and a.rounds[-1].gap_after_s == 0.0
    over = result.plan.meta.notes["overflow"]
    assert over["truncated_sessions"] == 1 and over["dropped_rounds"] == 2
    assert over["dropped_sessions"] == 0 and result.truncated_sessions == 1
    assert over["longest_transcript_tokens"] == 1230
    # keeping every round needs one profile slot length (8,192): its KV cost is stated
    assert over["longer_context"].startswith("a maximum sequence length of 8,192 tokens")
    assert "1.125 GiB of KV per slot" in over["longer_context"]
    assert any("to keep every round" in line for line in result.summary_lines())
    # the limit counts a prompt plus its generated tokens, and the longer length is explained
    lines = result.summary_lines()
    assert any("a round's prompt plus the tokens it generates" in line for line in lines)
    assert any("the longest transcript" in line and "1,230 tokens" in line for line in lines)
    dropped = plans_from_trace(path, max_seq_len=1000)
    assert dropped.plan.n == 2 and dropped.plan.meta.notes["overflow"]["dropped"] == ["a"]
    with pytest.raises(TraceError, match=r"1 of 3 sessions exceed .* 1,100"):
        plans_from_trace(path, max_seq_len=1100, on_overflow="refuse")


def test_fitting_scale_keeps_every_round() -> None:
    from rearrival.model.plans.trace_plans import ImportOptions, fitting_scale

    assert fitting_scale(ImportOptions(), 49_157) == 0.16  # 8,192 / 49,157 = 0.1666
    assert fitting_scale(ImportOptions(), 2_000_000) == 0.0040  # 0.0041 rounded down
    assert fitting_scale(ImportOptions(token_scale=0.5), 8_192) == 0.5


def test_token_scale_is_a_labelled_what_if(tmp_path: Path) -> None:
    path = _three_sessions(tmp_path / "t.jsonl")
    result = plans_from_trace(path, token_scale=0.5)
    a = result.plan.sessions[0]
    assert [r.new_tokens for r in a.rounds] == [500, 25, 30]
    assert [r.gen_tokens for r in a.rounds] == [25, 20, 15]
    assert result.plan.meta.import_flags["token_scale"] == 0.5
    assert "what-if" in result.plan.meta.notes["token_scale_label"]
    assert any(line.startswith("WHAT-IF") for line in result.summary_lines())


def test_real_sample_nothing_fits_without_scale(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = runner.invoke(app, ["plans", "from-trace", str(TRACELAB_SAMPLE), "--out", str(out)])
    assert result.exit_code == 2
    message = result.output
    assert "nothing fits a maximum sequence length of 8,192" in message
    assert "--token-scale 0.16" in message and "no plan was written" in message
    cost = context_cost(measured_profile(), device_memory(), 57_344)
    assert f"{cost.slot_gib:.3f} GiB of KV per slot" in message  # 7.875 GiB: 7 x 1.125
    assert f"at most {cost.max_slots} slots fit" in message
    assert not out.exists()


def test_real_sample_imports_with_token_scale(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["plans", "from-trace", str(TRACELAB_SAMPLE), "--out", str(out), "--token-scale", "0.15"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 sessions, 19 rounds" in result.output and "WHAT-IF" in result.output
    first = (out / "plan.parquet").read_bytes()
    assert runner.invoke(app, args).exit_code == 0
    assert (out / "plan.parquet").read_bytes() == first  # byte-identical
    plan = load_plan(out / "plan.parquet")
    assert plan.requests == 19 and [len(s.rounds) for s in plan.sessions] == [9, 10]
    meta = plan.meta
    assert meta.source == "tracelab"
    assert meta.trace_sha256 == hashlib.sha256(TRACELAB_SAMPLE.read_bytes()).hexdigest()
    assert meta.import_flags == {
        "sessions": None,
        "seed": 0,
        "max_seq_len": 8192,
        "on_overflow": "truncate",
        "time_origin": "first",
        "token_scale": 0.15,
        "prefixes": True,  # the CLI fills shared prefixes unless --no-prefixes
    }
    assert all(
        p + r.gen_tokens <= 8192
        for s in plan.sessions
        for p, r in zip(s.prompts(), s.rounds, strict=True)
    )


def test_real_sample_prompts_follow_the_trace_input(tmp_path: Path) -> None:
    """Unscaled at a long context, every round's prompt is the trace's input_tokens_total,
    except where the input shrank (then the whole previous transcript is resent)."""
    rows = [json.loads(line) for line in TRACELAB_SAMPLE.read_text().splitlines() if line.strip()]
    result = plans_from_trace(TRACELAB_SAMPLE, max_seq_len=65_536)
    by_key = dict(zip(result.plan.meta.notes["trace_sessions"], result.plan.sessions, strict=True))
    shrinks = 0
    for key, session in by_key.items():
        trace = sorted((r for r in rows if r["session_id"] == key), key=lambda r: r["round_index"])
        transcript = 0
        for prompt, r, row in zip(session.prompts(), session.rounds, trace, strict=True):
            assert prompt == max(row["input_tokens_total"], transcript)
            assert r.gen_tokens == row["output_tokens"]
            shrinks += row["input_tokens_total"] < transcript
            transcript = prompt + r.gen_tokens
    assert shrinks == result.plan.meta.notes["context_shrinks"] == 3
    claude = by_key["claude:claude-public-example"]
    # round 0: Bash (860 ms wall) and WebSearch (19,287 ms internal) overlap -> the longer
    assert claude.rounds[0].gap_after_s == pytest.approx(19.287)
    assert claude.rounds[0].tool_name == "Bash+WebSearch"
    assert claude.rounds[4].gap_after_s == 0.0  # no tool: the user's turn follows


def _malformed(tmp_path: Path, body: str | bytes, name: str = "bad.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    out = tmp_path / "out"
    result = runner.invoke(app, ["plans", "from-trace", str(path), "--out", str(out)])
    assert result.exit_code == 2, result.output  # a user error, as everywhere else
    assert not out.exists()
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0]
    return lines[0]


def _good(**change: Any) -> str:
    row = _round("a", 0, 0.0, 100, 10, [_call("Bash", 1.0, 1.0)])
    row.update(change)
    return json.dumps(_round("a", 1, 5.0, 120, 10)) + "\n" + json.dumps(row) + "\n"


def test_malformed_missing_field(tmp_path: Path) -> None:
    good = json.loads(_good().splitlines()[1])
    del good["output_tokens"]
    line = _malformed(tmp_path, _good().splitlines()[0] + "\n" + json.dumps(good) + "\n")
    assert "line 2" in line and "'output_tokens'" in line


def test_malformed_negative_tokens(tmp_path: Path) -> None:
    line = _malformed(tmp_path, _good(input_tokens_total=-5))
    assert "line 2" in line and "'input_tokens_total' is negative" in line


def test_malformed_non_monotone_timestamps(tmp_path: Path) -> None:
    events = [
        {"event_type": "user_message", "timestamp": _iso(3.0)},
        {"event_type": "text", "timestamp": _iso(2.0)},
    ]
    line = _malformed(tmp_path, _good(timing_events=events))
    assert "line 2" in line and "timing_events[1].timestamp" in line and "back in time" in line
    late = _malformed(tmp_path, _good(timing_events=[{"timestamp": _iso(9.0)}]))
    assert "line 1" in late and "starts before round 0" in late


def test_malformed_empty_and_truncated_gzip(tmp_path: Path) -> None:
    assert "empty" in _malformed(tmp_path, "")
    packed = gzip.compress((_good() * 200).encode())
    line = _malformed(tmp_path, packed[: len(packed) // 2], "cut.jsonl.gz")
    assert "gzip stream is truncated" in line and "line " in line
    assert "not valid JSON" in _malformed(tmp_path, '{"session_id": \n')


def test_a_cut_off_last_line_says_the_trace_is_truncated(tmp_path: Path) -> None:
    """A trace whose copy stopped mid-line gave "not valid JSON (Unterminated string
    starting at)", cut off itself (issue 29): the line, the column and the likely cause."""
    cut = _good() + '{"session_id": "a", "round_ind'
    line = _malformed(tmp_path, cut)
    assert "line 3: the last line is cut off mid-JSON" in line
    assert "Unterminated string starting at: column 21" in line
    assert "truncated" in line and "drop the partial last line" in line
    # a bad line with its newline is not called truncated, and names its column too
    middle = _malformed(tmp_path, '{"session_id": }\n' + _good())
    assert "line 1: not valid JSON (Expecting value: column 16)" in middle
    assert "truncated" not in middle


def test_an_unreadable_imported_plan_names_the_import_that_wrote_it(tmp_path: Path) -> None:
    """A damaged DIR/plan.parquet from `plans from-trace` suggested `rearrival plan`,
    which draws synthetic sessions (issue 29): it names the import again."""
    from rearrival.model.plans.plan import PlanError

    out = tmp_path / "mine"
    args = ["plans", "from-trace", str(_three_sessions(tmp_path / "t.jsonl")), "--out", str(out)]
    assert runner.invoke(app, args).exit_code == 0
    plan = out / "plan.parquet"
    data = plan.read_bytes()
    plan.write_bytes(data[: len(data) // 2])
    with pytest.raises(PlanError) as caught:
        load_plan(plan)
    message = str(caught.value)
    assert message.startswith(f"{plan}: not a readable Parquet plan")
    assert "`rearrival plans from-trace` or `rearrival plans from-otel`" in message
    assert "`rearrival plan`" not in message
    generated = tmp_path / "generated.parquet"
    args = ["plan", "--n", "2", "--study-seed", "1", "--replicate", "0", "--out", str(generated)]
    made = runner.invoke(app, args)
    assert made.exit_code == 0, made.output
    generated.write_bytes(generated.read_bytes()[:100])
    with pytest.raises(PlanError, match="regenerate it with `rearrival plan`"):
        load_plan(generated)
