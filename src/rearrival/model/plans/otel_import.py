"""Multi-round plans from OpenTelemetry GenAI spans (OTLP JSON, paper Section II-C).

Agent frameworks that follow the OpenTelemetry GenAI semantic conventions export one
span per model call and one per tool execution. The OpenTelemetry Collector's file
exporter writes them as OTLP JSON: one ``{"resourceSpans": [...]}`` object a line (a
single pretty-printed object is read too), spans under ``scopeSpans[].spans[]`` with
``startTimeUnixNano``/``endTimeUnixNano`` and ``attributes`` as ``{"key", "value":
{"stringValue" | "intValue" | "doubleValue" | "boolValue"}}``.

What is read (GenAI semantic conventions v1.37, the first with
``gen_ai.conversation.id``):

- an **inference span** (``gen_ai.operation.name`` ``chat``, ``text_completion`` or
  ``generate_content``) is one round: ``gen_ai.usage.input_tokens`` and
  ``gen_ai.usage.output_tokens``; instrumentations on conventions before v1.27 write
  ``gen_ai.usage.prompt_tokens`` and ``gen_ai.usage.completion_tokens``, read as the same;
- an **execute_tool span** (``gen_ai.operation.name`` ``execute_tool``, tool in
  ``gen_ai.tool.name``) that starts after one inference span and before the next is a
  tool call of that gap, costing its duration; several combine as in TraceLab
  (``trace_plans.combine_calls``);
- **sessions**, one rule for every span: a span belongs to its own
  ``gen_ai.conversation.id``; a span without one (the OpenAI instrumentation's chat spans
  carry none) to the conversation that the other spans of its trace carry (an agent's
  ``invoke_agent`` or ``execute_tool`` spans, or any span); a trace in which no span
  carries one is a session of its own, keyed by its ``traceId`` (one trace per agent
  run). Traces of one conversation (one per user turn, say) join into one session. A
  trace that carries several conversation ids cannot place a span that carries none, and
  is refused naming the trace;
- **failed calls**: an inference span with ``error.type`` set or status ``ERROR`` (a
  refused or broken request: no reply, usually no usage) is skipped and counted, as
  ``trace_plans`` says for every importer; a failed ``execute_tool`` span still cost the
  agent its duration and stays.

Tokens, think time, context limits and scaling then follow ``trace_plans``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.model.plans.trace_plans import (
    FailedCalls,
    ToolCall,
    TraceError,
    TraceImporter,
    TraceRound,
    TraceSession,
    read_json_lines,
)

SOURCE = "otel"
SEMCONV_VERSION = "1.37.0"
INFERENCE_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATION = "execute_tool"
# Attribute read -> the name instrumentations before GenAI semconv v1.27 used for it.
OLDER_NAMES = {
    "gen_ai.usage.input_tokens": "gen_ai.usage.prompt_tokens",
    "gen_ai.usage.output_tokens": "gen_ai.usage.completion_tokens",
}
NANO = 1e-9
CONVERSATION = "gen_ai.conversation.id"
STATUS_ERROR = (2, "STATUS_CODE_ERROR")  # OTLP JSON writes the enum as 2; proto JSON by name


@dataclass(frozen=True)
class _Span:
    """The fields of one GenAI span this importer uses."""

    where: str
    operation: str
    trace: str | None
    conversation: str | None  # the span's own gen_ai.conversation.id
    start_s: float
    end_s: float
    attributes: dict[str, Any]
    failed: bool


@dataclass
class _Read:
    """Every GenAI span of a file, and the conversation ids each trace carries (on any
    span, GenAI or not)."""

    spans: list[_Span]
    conversations_of: dict[str, set[str]]


def _value(raw: Any) -> Any:
    """An OTLP ``AnyValue`` as Python; int64 arrives as a JSON string or number."""
    if not isinstance(raw, dict):
        return None
    if "intValue" in raw:
        value = raw["intValue"]
        try:
            return int(value)
        except (TypeError, ValueError):
            return value
    for key in ("stringValue", "doubleValue", "boolValue"):
        if key in raw:
            return raw[key]
    return None


def _attributes(span: dict[str, Any], where: str) -> dict[str, Any]:
    raw = span.get("attributes", [])
    if not isinstance(raw, list):
        raise TraceError(f"{where}: field 'attributes' must be a list of key/value objects")
    out = {}
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = _value(item.get("value"))
    return out


def _nanos(span: dict[str, Any], name: str, where: str) -> float:
    raw = span.get(name)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise TraceError(
            f"{where}: field '{name}' missing or not an integer of nanoseconds"
        ) from None
    if value < 0:
        raise TraceError(f"{where}: field '{name}' is negative")
    return value * NANO


def _failed(span: dict[str, Any], attributes: dict[str, Any]) -> bool:
    status = span.get("status")
    code = status.get("code") if isinstance(status, dict) else None
    return bool(attributes.get("error.type")) or code in STATUS_ERROR


def _spans(document: Any, where: str, read: _Read) -> None:
    """Add the spans of one OTLP export request to ``read``."""
    if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
        raise TraceError(
            f"{where}: missing field 'resourceSpans'; expected OTLP JSON from the "
            "OpenTelemetry Collector's file exporter"
        )
    for i, resource in enumerate(document["resourceSpans"]):
        for j, scope in enumerate((resource or {}).get("scopeSpans") or []):
            for k, span in enumerate((scope or {}).get("spans") or []):
                here = f"{where}: resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                if not isinstance(span, dict):
                    raise TraceError(f"{here}: a span must be an object")
                _read_span(span, f"{here} ('{span.get('name', '')}')", read)


def _read_span(span: dict[str, Any], where: str, read: _Read) -> None:
    """Note the conversation id any span lends its trace; keep a GenAI span."""
    attributes = _attributes(span, where)
    trace = span.get("traceId") if isinstance(span.get("traceId"), str) else None
    conversation = attributes.get(CONVERSATION)
    if not isinstance(conversation, str) or not conversation:
        conversation = None
    if trace and conversation:
        read.conversations_of.setdefault(trace, set()).add(conversation)
    operation = attributes.get("gen_ai.operation.name")
    if operation not in INFERENCE_OPERATIONS and operation != TOOL_OPERATION:
        return
    start = _nanos(span, "startTimeUnixNano", where)
    end = _nanos(span, "endTimeUnixNano", where)
    if end < start:
        raise TraceError(
            f"{where}: field 'endTimeUnixNano' is before 'startTimeUnixNano'; "
            "timestamps must not decrease"
        )
    if conversation is None and not trace:
        raise TraceError(
            f"{where}: missing field '{CONVERSATION}' (and no traceId); "
            "the span belongs to no session"
        )
    failed = _failed(span, attributes)
    read.spans.append(_Span(where, operation, trace, conversation, start, end, attributes, failed))


def _session_key(span: _Span, conversations_of: dict[str, set[str]]) -> tuple[str, str]:
    """(session key, how it was found): the span's own conversation id, else its trace's
    only one, else its trace id (see the module docstring)."""
    if span.conversation is not None:
        return span.conversation, "own"
    assert span.trace is not None  # _spans refused a span with neither
    carried = conversations_of.get(span.trace, set())
    if len(carried) > 1:
        raise TraceError(
            f"{span.where}: missing field '{CONVERSATION}', and its trace {span.trace} "
            f"carries several ({', '.join(sorted(carried))}), so the span belongs to none "
            f"of them for sure; set '{CONVERSATION}' on every span of that trace"
        )
    if carried:
        return next(iter(carried)), "trace conversation"
    return span.trace, "trace id"


def _tokens(span: _Span, name: str) -> int:
    value = span.attributes.get(name, span.attributes.get(OLDER_NAMES[name]))
    if value is None:
        raise TraceError(
            f"{span.where}: missing field '{name}' (or the older '{OLDER_NAMES[name]}'); "
            "enable token usage in the instrumentation (a streamed OpenAI call reports it "
            "only with stream_options={'include_usage': True})"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{span.where}: field '{name}' must be an integer, got {value!r}")
    if value < 0:
        raise TraceError(f"{span.where}: field '{name}' is negative ({value})")
    return value


def _session(key: str, spans: list[_Span]) -> TraceSession:
    """One conversation: inference spans in time order, tool spans in the gaps."""
    order = sorted(spans, key=lambda s: (s.start_s, s.end_s, s.where))
    calls_of: list[list[ToolCall]] = []
    inference: list[_Span] = []
    for span in order:
        if span.operation in INFERENCE_OPERATIONS:
            inference.append(span)
            calls_of.append([])
        elif inference:  # a tool before the first model call has no round to follow
            name = span.attributes.get("gen_ai.tool.name")
            if not isinstance(name, str):
                raise TraceError(f"{span.where}: missing field 'gen_ai.tool.name'")
            calls_of[-1].append(ToolCall(name, span.start_s, span.end_s, span.end_s - span.start_s))
    if not inference:
        raise TraceError(
            f"{order[0].where}: conversation {key} has execute_tool spans but no inference "
            "span (gen_ai.operation.name chat or text_completion)"
        )
    rounds = []
    for k, span in enumerate(inference):
        following = inference[k + 1].start_s if k + 1 < len(inference) else span.end_s
        rounds.append(
            TraceRound(
                _tokens(span, "gen_ai.usage.input_tokens"),
                _tokens(span, "gen_ai.usage.output_tokens"),
                tuple(calls_of[k]),
                max(0.0, following - span.end_s),
            )
        )
    return TraceSession(key, inference[0].start_s, tuple(rounds))


def _grouped(read: _Read) -> tuple[dict[str, list[_Span]], dict[str, Any]]:
    """The spans of each session key, and notes on how the keys were found."""
    grouped: dict[str, list[_Span]] = {}
    found_by = dict.fromkeys(("own", "trace conversation", "trace id"), 0)
    by_trace: set[str] = set()
    for span in read.spans:
        key, how = _session_key(span, read.conversations_of)
        grouped.setdefault(key, []).append(span)
        found_by[how] += 1
        if how == "trace id":
            by_trace.add(key)
    notes = {
        "sessions_by_trace_id": len(by_trace),
        "spans_by_trace_conversation": found_by["trace conversation"],
    }
    return grouped, notes


def read_otel(path: Path) -> tuple[list[TraceSession], dict[str, Any]]:
    """Every conversation of an OTLP JSON file, and notes on how it was read."""
    read = _Read([], {})
    for where, document in _documents(path):
        _spans(document, where, read)
    if not read.spans:
        raise TraceError(
            f"{path}: no GenAI spans (gen_ai.operation.name chat, text_completion or "
            "execute_tool); is the instrumentation emitting the GenAI semantic conventions?"
        )
    grouped, grouping = _grouped(read)
    failed = FailedCalls(
        llm_calls=sum(s.failed and s.operation in INFERENCE_OPERATIONS for s in read.spans),
        tool_calls=sum(s.failed and s.operation == TOOL_OPERATION for s in read.spans),
    )
    sessions = []
    for key, group in grouped.items():
        usable = [s for s in group if not (s.failed and s.operation in INFERENCE_OPERATIONS)]
        if len(usable) < len(group) and not any(
            s.operation in INFERENCE_OPERATIONS for s in usable
        ):
            failed.sessions_dropped.append(key)
            continue
        sessions.append(_session(key, usable))
    if not sessions:
        raise TraceError(
            f"{path}: every one of the {failed.llm_calls} inference spans failed (error.type "
            "or status ERROR); there is no round to import"
        )
    used_older = any(old in s.attributes for s in read.spans for old in OLDER_NAMES.values())
    notes = {
        "semconv": f"OpenTelemetry GenAI semantic conventions {SEMCONV_VERSION}",
        "older_attribute_names": used_older,
        **grouping,
        "failed_calls": failed.as_dict(),
    }
    return sessions, notes


def _documents(path: Path) -> list[tuple[str, Any]]:
    """One pretty-printed JSON document, or one OTLP object a line."""
    if path.suffix == ".json" and path.is_file():
        try:
            return [(f"{path}", json.loads(path.read_text(encoding="utf-8")))]
        except (json.JSONDecodeError, UnicodeDecodeError):
            pass  # not one document: read it as JSON lines, which names the bad line
    documents = [(f"{path}: line {n}", doc) for n, doc in read_json_lines(path)]
    if not documents:
        raise TraceError(f"{path}: the file is empty; pass the Collector file exporter's output")
    return documents


# A multi-round plan from OTLP JSON GenAI spans; the same flags and rules as
# ``tracelab_import.plans_from_trace``. Nothing is written.
plans_from_otel = TraceImporter(read_otel, SOURCE)
