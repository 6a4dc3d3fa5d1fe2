"""Multi-round plans from OpenTelemetry GenAI spans in OTLP JSON (the Collector's file
exporter): rounds, tool gaps, conversations, older attribute names, malformed spans."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
    assert "--max-seq-len 24,576" in str(info.value) and "3.375 GiB" in str(info.value)


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


# --- sessions: one rule for every span of a trace; failed calls skipped and counted -----


def _in_trace(trace: str, *spans: dict) -> list[dict]:
    for span in spans:
        span["traceId"] = trace
    return list(spans)


def _failed(span: dict, error: str) -> dict:
    """A span as the instrumentation ends a call that raised: error.type and status ERROR."""
    span["attributes"].append(_attr("error.type", error))
    span["status"] = {"code": 2, "message": f"{error}: refused"}
    return span


def _by_key(result) -> dict[str, Any]:
    plan = result.plan
    return dict(zip(plan.meta.notes["trace_sessions"], plan.sessions, strict=True))


def test_chat_spans_join_the_conversation_their_trace_carries(tmp_path: Path) -> None:
    """The OpenAI instrumentation's chat spans carry no gen_ai.conversation.id while the
    agent's execute_tool (or invoke_agent) spans in the same trace do: one session each,
    whichever span carries the id; a later trace of the same conversation joins it."""
    run0 = _in_trace(
        "a0",
        _chat(0.0, 1.0, None, 500, 20),
        _tool(1.0, 3.0, "conv-0", "search"),
        _chat(3.0, 4.0, None, 600, 30),
        _tool(4.0, 5.0, "conv-0", "read"),
        _chat(5.0, 6.0, None, 700, 10),
    )
    handler = _span("POST /turn", 19.9, 21.5, http__method="POST")  # no GenAI span, yet it says
    handler["attributes"].append(_attr("gen_ai.conversation.id", "conv-0"))
    next_turn = _in_trace("a1", handler, _chat(20.0, 21.0, None, 800, 10))
    agent = _span("invoke_agent", 0.5, 9.0, gen_ai__operation__name="invoke_agent")
    agent["attributes"].append(_attr("gen_ai.conversation.id", "conv-1"))
    run1 = _in_trace(
        "b0",
        agent,
        _chat(0.5, 1.5, None, 300, 5),
        _tool(1.5, 2.0, None, "grep"),
        _chat(2.0, 3.0, None, 350, 5),
    )
    lone = _in_trace("c0", _chat(0.2, 1.0, None, 100, 5))
    result = plans_from_otel(_write_lines(tmp_path / "s.jsonl", run0, next_turn, run1, lone))
    sessions = _by_key(result)
    assert set(sessions) == {"conv-0", "conv-1", "c0"}
    assert sessions["conv-0"].prompts() == (500, 600, 700, 800)
    # tools 2 s and 1 s; then the user's turn (a new trace, no tool): think time, gap 0
    assert [r.gap_after_s for r in sessions["conv-0"].rounds] == pytest.approx([2, 1, 0, 0])
    assert sessions["conv-1"].prompts() == (300, 350)
    assert sessions["conv-1"].rounds[0].tool_name == "grep"
    assert sessions["c0"].prompts() == (100,)
    notes = result.plan.meta.notes
    assert notes["sessions_by_trace_id"] == 1
    assert notes["spans_by_trace_conversation"] == 4 + 3  # conv-0's chats; conv-1's three


def test_failed_calls_are_skipped_and_counted_not_fatal(tmp_path: Path) -> None:
    """A refused chat call (error.type, status ERROR, no usage) is no round; a failed tool
    call still cost its time; a conversation whose only call failed is dropped."""
    run = _in_trace(
        "a0",
        _chat(0.0, 1.0, None, 500, 20),
        _tool(1.0, 2.0, "conv-0", "search"),
        _failed(_tool(2.0, 2.5, "conv-0", "fetch"), "TimeoutError"),
        _failed(_span("chat m", 2.5, 2.6, gen_ai__operation__name="chat"), "BadRequestError"),
        _chat(2.7, 3.7, None, 560, 10),
    )
    only_failure = _in_trace(
        "z0", _failed(_span("chat m", 5.0, 5.1, gen_ai__operation__name="chat"), "APIError")
    )
    path = _write_lines(tmp_path / "s.jsonl", run, only_failure)
    out = tmp_path / "out"
    cli = runner.invoke(app, ["plans", "from-otel", str(path), "--out", str(out)])
    assert cli.exit_code == 0, cli.output
    assert (
        "failed calls: 2 failed LLM calls skipped (no round), 1 sessions with no successful "
        "call dropped, 1 failed tool calls kept as tool time"
    ) in cli.output
    plan = load_plan(out / "plan.parquet")
    (session,) = plan.sessions
    assert session.prompts() == (500, 560)
    assert session.rounds[0].gap_after_s == pytest.approx(1.5)  # search, then the failed fetch
    assert session.rounds[0].tool_name == "search+fetch"
    failed = plan.meta.notes["failed_calls"]
    assert failed == {
        "llm_calls_skipped": 2,
        "tool_calls_kept": 1,
        "sessions_dropped": 1,
        "dropped": ["z0"],
    }
    everything_failed = _write_lines(tmp_path / "f.jsonl", only_failure)
    with pytest.raises(TraceError, match="every one of the 1 inference spans failed"):
        plans_from_otel(everything_failed)


def test_a_span_in_a_trace_of_several_conversations_is_refused(tmp_path: Path) -> None:
    spans = _in_trace(
        "shared",
        _tool(1.0, 2.0, "conv-0", "search"),
        _tool(1.0, 2.0, "conv-1", "search"),
        _chat(0.0, 1.0, None, 10, 5),
    )
    with pytest.raises(TraceError) as info:
        plans_from_otel(_write_lines(tmp_path / "s.jsonl", spans))
    message = str(info.value)
    assert "its trace shared carries several (conv-0, conv-1)" in message
    assert "set 'gen_ai.conversation.id' on every span of that trace" in message


# --- spans from the real instrumentation around a real emulate-server ----------------------


@contextmanager
def _emulate_server(tmp_path: Path) -> Iterator[str]:
    from rearrival.measure import serve
    from rearrival.measure.emulate.server import server_argv
    from rearrival.model.configuration import RblnConfiguration

    port = serve.free_port()
    argv = server_argv(RblnConfiguration((1, 2, 4, 8), 8), port=port, seed=3, time_scale=0.01)
    url = f"http://127.0.0.1:{port}"
    with serve.running_server(argv, url, tmp_path / "server.log", ready_timeout_s=60, grace_s=5):
        yield url


TOOL_S = 0.05
GENERATED = (12, 7, 9)


def _agent(client: Any, handler: Any, conversation: str, *, stream: bool) -> list[int]:
    """Three chat rounds with a search tool between them, as an agent loop would run
    them; returns the prompt tokens the server reported for each round."""
    from openai import BadRequestError

    words = 150 + 20 * int(conversation[-1])
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful research assistant."},
        {"role": "user", "content": " ".join(f"fact{i}" for i in range(words))},
    ]
    prompts = []
    for k, generated in enumerate(GENERATED):
        if k == 1 and not stream:  # a call the emulator refuses: a failed chat span
            with pytest.raises(BadRequestError, match="'n' = 2"):
                client.chat.completions.create(
                    model="m", messages=messages, max_completion_tokens=generated, n=2
                )
        kwargs = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        reply = client.chat.completions.create(
            model="m", messages=messages, max_completion_tokens=generated, **kwargs
        )
        if stream:
            chunks = list(reply)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            usage = chunks[-1].usage
        else:
            text, usage = reply.choices[0].message.content, reply.usage
        assert usage.completion_tokens == generated
        prompts.append(usage.prompt_tokens)
        messages.append({"role": "assistant", "content": text})
        if k + 1 < len(GENERATED):
            with handler.tool("search") as tool:
                if not stream:  # the other conversation's id is on its invoke_agent span
                    tool.attributes["gen_ai.conversation.id"] = conversation
                time.sleep(TOOL_S)
            messages.append({"role": "user", "content": f"search result {k}: nothing found"})
    return prompts


def test_spans_from_the_real_openai_instrumentation_import_whole(tmp_path: Path) -> None:
    """opentelemetry-instrumentation-openai-v2 traces the official openai client talking
    to a real emulate-server; the SDK's OTLP JSON file exporter writes the spans; the
    import gives every conversation whole, with the refused call counted."""
    from openai import OpenAI
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.util.genai.handler import TelemetryHandler

    spans = tmp_path / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(spans)))
    handler = TelemetryHandler(tracer_provider=provider)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with _emulate_server(tmp_path) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            with provider.get_tracer("agent").start_as_current_span("agent run"):
                first = _agent(client, handler, "conv-0", stream=False)
            with handler.invoke_local_agent(agent_name="researcher") as agent:
                agent.conversation_id = "conv-1"
                second = _agent(client, handler, "conv-1", stream=True)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()

    out = tmp_path / "plans"
    cli = runner.invoke(app, ["plans", "from-otel", str(spans), "--out", str(out)])
    assert cli.exit_code == 0, cli.output
    assert "failed calls: 1 failed LLM calls skipped" in cli.output
    plan = load_plan(out / "plan.parquet")
    assert plan.meta.notes["trace_sessions"] == ["conv-0", "conv-1"]
    for session, prompts in zip(plan.sessions, (first, second), strict=True):
        assert session.prompts() == tuple(prompts)  # the emulator's exact usage
        assert [r.gen_tokens for r in session.rounds] == list(GENERATED)
        assert [r.tool_name for r in session.rounds] == ["search", "search", ""]
        assert all(r.gap_after_s >= TOOL_S for r in session.rounds[:2])
    assert plan.meta.notes["sessions_by_trace_id"] == 0
    assert plan.meta.notes["failed_calls"]["llm_calls_skipped"] == 1
