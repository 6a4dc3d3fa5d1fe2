"""Multi-round plans from OpenTelemetry GenAI spans in OTLP JSON (the Collector's file
exporter): rounds, tool gaps, conversations, older attribute names, malformed spans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rearrival.cli import app
from rearrival.model.cost.memory import context_cost, device_memory
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.otel_import import plans_from_otel
from rearrival.model.plans.plan import load_plan
from rearrival.model.plans.trace_plans import TraceError

runner = CliRunner()
EPOCH_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"key": key, "value": {"stringValue": value}}
    return {"key": key, "value": {"intValue": str(value)}}  # OTLP JSON writes int64 as text


def _span(name: str, start: float, end: float, trace: str = "t1", **attrs: Any) -> dict:
    return {
        "traceId": trace,
        "spanId": f"{name}{start}",
        "name": name,
        "startTimeUnixNano": str(EPOCH_NS + round(start * 1e9)),
        "endTimeUnixNano": str(EPOCH_NS + round(end * 1e9)),
        "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()],
    }


def _chat(start: float, end: float, conv: str | None, tokens_in: int, tokens_out: int, **kw):
    extra = {} if conv is None else {"gen_ai__conversation__id": conv}
    return _span(
        "chat model",
        start,
        end,
        gen_ai__operation__name="chat",
        gen_ai__usage__input_tokens=tokens_in,
        gen_ai__usage__output_tokens=tokens_out,
        **extra,
        **kw,
    )


def _tool(start: float, end: float, conv: str | None, name: str, **kw) -> dict:
    extra = {} if conv is None else {"gen_ai__conversation__id": conv}
    return _span(
        f"execute_tool {name}",
        start,
        end,
        gen_ai__operation__name="execute_tool",
        gen_ai__tool__name=name,
        **extra,
        **kw,
    )


def _export(spans: list[dict]) -> dict:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {}, "spans": spans}]}]}


def _write_lines(path: Path, *batches: list[dict]) -> Path:
    path.write_text("".join(json.dumps(_export(b)) + "\n" for b in batches))
    return path


def _conversations(path: Path) -> Path:
    """Conversation c1: parallel tools, then sequential tools, then a last round; c2 (by
    traceId, older attribute names): a human-waiting tool; an unrelated HTTP span."""
    c1 = [
        _chat(0.0, 1.0, "c1", 1000, 50),
        _tool(1.0, 3.0, "c1", "bash"),
        _tool(1.5, 6.0, "c1", "search"),
        _chat(6.0, 7.0, "c1", 1200, 40),
        _tool(7.0, 8.0, "c1", "read"),
        _tool(8.5, 10.0, "c1", "grep"),
        _chat(10.0, 11.0, "c1", 1300, 30),
        _span("GET /", 2.0, 2.1, **{"http__method": "GET"}),
    ]
    older = _span(
        "chat old",
        5.0,
        5.5,
        trace="t2",
        gen_ai__operation__name="chat",
        gen_ai__usage__prompt_tokens=400,
        gen_ai__usage__completion_tokens=20,
    )
    later = _span(
        "chat old",
        30.0,
        30.5,
        trace="t2",
        gen_ai__operation__name="chat",
        gen_ai__usage__prompt_tokens=450,
        gen_ai__usage__completion_tokens=10,
    )
    c2 = [older, _tool(5.5, 25.0, None, "AskUserQuestion", trace="t2"), later]
    c2[1]["traceId"] = "t2"
    return _write_lines(path, c1, c2)


def test_spans_become_rounds_with_combined_tool_gaps(tmp_path: Path) -> None:
    result = plans_from_otel(_conversations(tmp_path / "spans.jsonl"))
    plan = result.plan
    assert plan.n == 2 and plan.requests == 5
    c1, c2 = plan.sessions
    assert c1.prompts() == (1000, 1200, 1300)
    assert [r.gen_tokens for r in c1.rounds] == [50, 40, 30]
    # parallel bash (2 s) and search (4.5 s): 4.5; sequential read (1) then grep (1.5): 2.5
    assert [r.gap_after_s for r in c1.rounds] == pytest.approx([4.5, 2.5, 0.0])
    assert c1.rounds[0].tool_name == "bash+search"
    # older names read as input/output tokens; a human-waiting tool is not tool time
    assert c2.prompts() == (400, 450) and c2.rounds[0].gap_after_s == 0.0
    assert c2.start_s == pytest.approx(5.0)
    notes = plan.meta.notes
    assert notes["older_attribute_names"] is True and notes["sessions_by_trace_id"] == 1
    assert notes["semconv"].endswith("1.37.0") and plan.meta.source == "otel"
    assert notes["think_rounds"] == 1 and notes["human_tool_calls"] == 1


def test_one_pretty_printed_document_and_cli(tmp_path: Path) -> None:
    lines = _conversations(tmp_path / "spans.jsonl").read_text().splitlines()
    merged = _export([s for line in lines for s in json.loads(line)["resourceSpans"][0]
                      ["scopeSpans"][0]["spans"]])  # fmt: skip
    single = tmp_path / "spans.json"
    single.write_text(json.dumps(merged, indent=2))
    out = tmp_path / "out"
    result = runner.invoke(app, ["plans", "from-otel", str(single), "--out", str(out)])
    assert result.exit_code == 0, result.output
    plan = load_plan(out / "plan.parquet")
    assert plan.sessions == plans_from_otel(tmp_path / "spans.jsonl").plan.sessions
    assert [s.prompts() for s in plan.sessions] == [(1000, 1200, 1300), (400, 450)]


def test_context_overflow_names_kv_cost(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "long.jsonl", [_chat(0.0, 1.0, "c", 20_000, 100)])
    with pytest.raises(TraceError) as info:
        plans_from_otel(path)
    cost = context_cost(measured_profile(), device_memory(), 24_576)
    assert cost.slot_gib == pytest.approx(3.375)  # 24,576 tokens x 144 KiB
    assert cost.max_slots == int((4 * 15.7 - 7.45) // 3.375)
    assert "--max-context 24,576" in str(info.value) and "3.375 GiB" in str(info.value)


@pytest.mark.parametrize(
    ("spans", "expected"),
    [
        ([_chat(0.0, 1.0, "c", 10, 5)], None),
        (
            [_span("chat", 0.0, 1.0, gen_ai__operation__name="chat", gen_ai__conversation__id="c")],
            "missing field 'gen_ai.usage.input_tokens'",
        ),
        ([_chat(2.0, 1.0, "c", 10, 5)], "'endTimeUnixNano' is before 'startTimeUnixNano'"),
        ([_chat(0.0, 1.0, "c", -10, 5)], "'gen_ai.usage.input_tokens' is negative"),
        (
            [
                _chat(0.0, 1.0, "c", 10, 5),
                _span(
                    "t",
                    1.0,
                    2.0,
                    gen_ai__operation__name="execute_tool",
                    gen_ai__conversation__id="c",
                ),
                _chat(2.0, 3.0, "c", 20, 5),
            ],
            "missing field 'gen_ai.tool.name'",
        ),
    ],
)
def test_malformed_spans_name_line_and_field(
    tmp_path: Path, spans: list[dict], expected: str | None
) -> None:
    path = _write_lines(tmp_path / "s.jsonl", [_chat(0.0, 1.0, "ok", 10, 5)], spans)
    out = tmp_path / "out"
    result = runner.invoke(app, ["plans", "from-otel", str(path), "--out", str(out)])
    if expected is None:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2
    assert f"{path}: line 2: resourceSpans[0].scopeSpans[0].spans[" in result.output
    assert expected in result.output and not out.exists()


def test_not_otlp_and_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(TraceError, match="empty"):
        plans_from_otel(empty)
    other = tmp_path / "other.jsonl"
    other.write_text('{"spans": []}\n')
    with pytest.raises(TraceError, match="line 1: missing field 'resourceSpans'"):
        plans_from_otel(other)
