"""Multi-round plans from a TraceLab normalized round trace (paper Section II-C).

TraceLab's normalized trace (``data/tracelab`` beside the repository holds a 19-round
sample) has one LLM round a line: ``session_id``, ``round_index``,
``input_tokens_total``, ``output_tokens``, ``timing_events`` (timestamped user messages,
tool calls, tool results, text) and ``tools[]`` (``tool_name``, ``emitted_at``,
``result_at``, ``tool_wall_latency_ms``, ``tool_internal_latency_ms``), and ``provider`` and
``prefix_tokens`` (the input's tokens the prompt cache held), whose round 0 values give
the session's agent and shared prefix (``trace_prefixes``). This module
reads those fields, refuses a malformed line naming the file, the line and the field,
and hands the sessions to ``trace_plans.build_plan``, which holds the rules for tokens,
gaps, think time and context limits.

A call's interval runs from ``emitted_at`` (else its ``tool_call`` timing event) to
``result_at`` (else emitted + wall latency); overlapping intervals mean parallel calls.
Its cost is ``tool_internal_latency_ms`` when positive, else ``tool_wall_latency_ms``:
the effective latency ``rearrival tools build`` summarises, where 0 ms means "not
measured" rather than "instant".
"""

from __future__ import annotations

from datetime import datetime
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

SOURCE = "tracelab"


def parse_time(value: Any, where: str, field_name: str) -> float:
    """Epoch seconds of an ISO-8601 timestamp ('2026-06-01T05:40:20.151Z')."""
    if not isinstance(value, str):
        raise TraceError(f"{where}: field '{field_name}' must be an ISO-8601 timestamp string")
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise TraceError(
            f"{where}: field '{field_name}' {value!r} is not an ISO-8601 timestamp"
        ) from exc
    if stamp.tzinfo is None:
        raise TraceError(f"{where}: field '{field_name}' {value!r} has no time zone (add Z)")
    return stamp.timestamp()


def _count(record: dict[str, Any], name: str, where: str, low: int) -> int:
    if name not in record:
        raise TraceError(f"{where}: missing field '{name}'; TraceLab rounds carry it")
    value = record[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: field '{name}' must be an integer, got {value!r}")
    if value < low:
        kind = "negative" if value < 0 else "too small"
        raise TraceError(f"{where}: field '{name}' is {kind} ({value}); it must be >= {low}")
    return value


def _events(record: dict[str, Any], where: str) -> list[tuple[float, dict[str, Any]]]:
    """The round's timing events as (epoch s, event), checked to be in time order."""
    raw = record.get("timing_events")
    if not isinstance(raw, list) or not raw:
        raise TraceError(f"{where}: field 'timing_events' missing or empty; a round needs one")
    out: list[tuple[float, dict[str, Any]]] = []
    for i, event in enumerate(raw):
        name = f"timing_events[{i}].timestamp"
        if not isinstance(event, dict):
            raise TraceError(f"{where}: field 'timing_events[{i}]' must be an object")
        at = parse_time(event.get("timestamp"), where, name)
        if out and at < out[-1][0]:
            raise TraceError(
                f"{where}: field '{name}' goes back in time ({event['timestamp']} after "
                f"{raw[i - 1]['timestamp']}); timestamps must not decrease"
            )
        out.append((at, event))
    return out


def _latency_s(call: dict[str, Any], where: str) -> float | None:
    """The call's cost in seconds: the executor's own latency when it is positive, else
    the wall clock (a logged 0 ms means "not measured", as ``tools build`` reads it)."""
    values = {}
    for key in ("tool_internal_latency_ms", "tool_wall_latency_ms"):
        value = call.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise TraceError(f"{where}: field '{key}' must be a number of ms, got {value!r}")
        if value is not None and value < 0:
            raise TraceError(f"{where}: field '{key}' is negative ({value} ms)")
        values[key] = value
    internal, wall = values.values()
    chosen = internal if internal else wall if wall is not None else internal
    return None if chosen is None else chosen / 1000.0


def _call(
    call: Any, index: int, events: list[tuple[float, dict[str, Any]]], where: str
) -> ToolCall:
    here = f"{where}: tools[{index}]"
    if not isinstance(call, dict) or not isinstance(call.get("tool_name"), str):
        raise TraceError(f"{here}: missing field 'tool_name'")
    if call.get("emitted_at") is not None:
        start = parse_time(call["emitted_at"], here, "emitted_at")
    else:
        ident = call.get("tool_call_id")
        match = [t for t, e in events if e.get("tool_call_id") == ident and ident is not None]
        if not match:
            raise TraceError(
                f"{here}: missing field 'emitted_at' and no tool_call timing event with its "
                "tool_call_id; the call's start is unknown"
            )
        start = match[0]
    latency = _latency_s(call, here)
    wall = call.get("tool_wall_latency_ms")
    if call.get("result_at") is not None:
        end = parse_time(call["result_at"], here, "result_at")
    elif wall is not None:
        end = start + wall / 1000.0
    else:
        end = None
    if latency is None and end is None:
        raise TraceError(
            f"{here}: missing field 'tool_wall_latency_ms' (and no internal latency or "
            "result_at); the call's duration is unknown"
        )
    if end is not None and end < start:
        raise TraceError(f"{here}: field 'result_at' is before 'emitted_at'")
    if latency is None:
        latency = end - start  # type: ignore[operator]
    return ToolCall(call["tool_name"], start, start + latency if end is None else end, latency)


class _Line:
    """One parsed round: its keys, tokens, calls and time span."""

    def __init__(self, record: Any, where: str) -> None:
        if not isinstance(record, dict):
            raise TraceError(f"{where}: a line must be a JSON object (one round)")
        key = record.get("session_id")
        if not isinstance(key, str) or not key:
            raise TraceError(f"{where}: missing field 'session_id'")
        self.where = where
        self.key = key
        self.index = _count(record, "round_index", where, 0)
        self.input_tokens = _count(record, "input_tokens_total", where, 1)
        self.output_tokens = _count(record, "output_tokens", where, 0)
        # What the provider's prompt cache held of the input (absent or null: unknown, 0)
        # and which agent ran the round: round 0's give the session's shared prefix.
        cached = record.get("prefix_tokens")
        self.cached_tokens = 0 if cached is None else _count(record, "prefix_tokens", where, 0)
        provider = record.get("provider")
        self.agent = provider if isinstance(provider, str) else ""
        events = _events(record, where)
        tools = record.get("tools")
        if not isinstance(tools, list):
            raise TraceError(f"{where}: missing field 'tools' (a list, empty without tools)")
        self.calls = tuple(_call(c, i, events, where) for i, c in enumerate(tools))
        self.first_s = events[0][0]
        self.last_s = max([events[-1][0], *(c.end_s for c in self.calls)])


def _sessions(lines: list[_Line], path: Path) -> list[TraceSession]:
    """Lines grouped by session, rounds 0..K-1 in order, round starts not decreasing."""
    grouped: dict[str, dict[int, _Line]] = {}
    for line in lines:
        rounds = grouped.setdefault(line.key, {})
        if line.index in rounds:
            raise TraceError(
                f"{line.where}: field 'round_index' {line.index} repeats "
                f"{rounds[line.index].where.split(': ')[-1]} of session {line.key}"
            )
        rounds[line.index] = line
    out = []
    for key, rounds in grouped.items():
        ordered = [rounds[i] for i in sorted(rounds)]
        for k, line in enumerate(ordered):
            if line.index != k:
                raise TraceError(
                    f"{line.where}: field 'round_index' is {line.index} but session {key} "
                    f"has no round {k}; a session's rounds are numbered 0..K-1"
                )
            if k and line.first_s < ordered[k - 1].first_s:
                raise TraceError(
                    f"{line.where}: field 'timing_events[0].timestamp': round {k} of session "
                    f"{key} starts before round {k - 1}; timestamps must not decrease"
                )
        out.append(
            TraceSession(
                key,
                ordered[0].first_s,
                tuple(
                    TraceRound(
                        line.input_tokens,
                        line.output_tokens,
                        line.calls,
                        max(0.0, nxt.first_s - line.last_s),
                    )
                    for line, nxt in zip(ordered, [*ordered[1:], ordered[-1]], strict=True)
                ),
                ordered[0].agent,
                ordered[0].cached_tokens,
            )
        )
    return out


def read_tracelab(path: Path) -> tuple[list[TraceSession], dict[str, Any]]:
    """Every session of a TraceLab normalized round trace, validated line by line, and
    no reading notes (the format has one way to read it)."""
    lines = [_Line(record, f"{path}: line {n}") for n, record in read_json_lines(path)]
    if not lines:
        raise TraceError(f"{path}: the file is empty; pass a TraceLab round trace (JSONL)")
    return _sessions(lines, path), {}


# A multi-round plan from a TraceLab round trace (JSONL or JSONL.gz); see
# ``trace_plans`` for how rounds, gaps, think time and context limits are turned into
# the plan. Nothing is written; ``ImportResult.plan`` is the plan.
plans_from_trace = TraceImporter(read_tracelab, SOURCE)
