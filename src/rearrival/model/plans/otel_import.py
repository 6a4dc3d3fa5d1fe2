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
- ``gen_ai.conversation.id`` groups spans into a session; a span without it belongs to
  the session of its ``traceId`` (one trace per agent run), which the notes count.

Tokens, think time, context limits and scaling then follow ``trace_plans``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rearrival.model.plans.trace_plans import (
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


@dataclass(frozen=True)
class _Span:
    """The fields of one GenAI span this importer uses."""

    where: str
    operation: str
    session: str
    by_trace: bool
    start_s: float
    end_s: float
    attributes: dict[str, Any]


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


def _spans(document: Any, where: str) -> list[_Span]:
    """The GenAI spans of one OTLP export request (other spans are skipped)."""
    if not isinstance(document, dict) or not isinstance(document.get("resourceSpans"), list):
        raise TraceError(
            f"{where}: missing field 'resourceSpans'; expected OTLP JSON from the "
            "OpenTelemetry Collector's file exporter"
        )
    out = []
    for i, resource in enumerate(document["resourceSpans"]):
        for j, scope in enumerate((resource or {}).get("scopeSpans") or []):
            for k, span in enumerate((scope or {}).get("spans") or []):
                here = f"{where}: resourceSpans[{i}].scopeSpans[{j}].spans[{k}]"
                if not isinstance(span, dict):
                    raise TraceError(f"{here}: a span must be an object")
                here += f" ('{span.get('name', '')}')"
                attributes = _attributes(span, here)
                operation = attributes.get("gen_ai.operation.name")
                if operation not in INFERENCE_OPERATIONS and operation != TOOL_OPERATION:
                    continue
                start = _nanos(span, "startTimeUnixNano", here)
                end = _nanos(span, "endTimeUnixNano", here)
                if end < start:
                    raise TraceError(
                        f"{here}: field 'endTimeUnixNano' is before 'startTimeUnixNano'; "
                        "timestamps must not decrease"
                    )
                conversation = attributes.get("gen_ai.conversation.id")
                by_trace = conversation is None
                if by_trace:
                    conversation = span.get("traceId")
                if not isinstance(conversation, str) or not conversation:
                    raise TraceError(
                        f"{here}: missing field 'gen_ai.conversation.id' (and no traceId); "
                        "the span belongs to no session"
                    )
                out.append(_Span(here, operation, conversation, by_trace, start, end, attributes))
    return out


def _tokens(span: _Span, name: str) -> int:
    value = span.attributes.get(name, span.attributes.get(OLDER_NAMES[name]))
    if value is None:
        raise TraceError(
            f"{span.where}: missing field '{name}' (or the older '{OLDER_NAMES[name]}'); "
            "enable token usage in the instrumentation"
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


def read_otel(path: Path) -> tuple[list[TraceSession], dict[str, Any]]:
    """Every conversation of an OTLP JSON file, and notes on how it was read."""
    documents = _documents(path)
    spans = [s for where, doc in documents for s in _spans(doc, where)]
    if not spans:
        raise TraceError(
            f"{path}: no GenAI spans (gen_ai.operation.name chat, text_completion or "
            "execute_tool); is the instrumentation emitting the GenAI semantic conventions?"
        )
    grouped: dict[str, list[_Span]] = {}
    for span in spans:
        grouped.setdefault(span.session, []).append(span)
    used_older = any(old in s.attributes for s in spans for old in OLDER_NAMES.values())
    notes = {
        "semconv": f"OpenTelemetry GenAI semantic conventions {SEMCONV_VERSION}",
        "older_attribute_names": used_older,
        "sessions_by_trace_id": len({s.session for s in spans if s.by_trace}),
    }
    return [_session(key, group) for key, group in grouped.items()], notes


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
