"""Shared prefixes of an imported trace (docs/DESIGN.md §2 "Open traffic, shared
prefixes and renewal"): the system prompt and tool definitions an agent sends first
in every session.

A TraceLab round records ``prefix_tokens``, the tokens of its input the provider's prompt
cache already held; on round 0 nothing of the session was sent before, so what was cached
there is what earlier sessions of the same agent sent too: its shared prefix. The import
makes one prefix per agent (TraceLab ``provider``) of the fewest tokens any of its sessions
read from the cache at round 0 (the part every one of them is seen to share), and every
session of that agent whose round 0 sends more than that names it. Round 0's new tokens
lose the prefix's tokens, so every prompt stays the trace's input (on the RBLN rule sets
nothing changes; on vLLM the prefix's full blocks are shared between sessions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rearrival.model.plans.plan import MultiRoundSession, Prefix

# The id of an agent a trace does not name (TraceLab rounds without ``provider``).
UNNAMED_AGENT = "agent"


@dataclass(frozen=True)
class SharedPrefixes:
    """The sessions naming their agent's prefix, the prefix table and what was done."""

    sessions: tuple[MultiRoundSession, ...]
    prefixes: tuple[Prefix, ...]
    notes: dict[str, Any]


def shared_prefixes(
    cached: Sequence[tuple[str, int]], sessions: tuple[MultiRoundSession, ...]
) -> SharedPrefixes:
    """Per session ``cached`` holds its agent and the (scaled) tokens its round 0 read from
    the cache; the result names one prefix per agent that any session saw cached."""
    tokens: dict[str, int] = {}
    for agent, seen in cached:
        if seen > 0:
            name = agent or UNNAMED_AGENT
            tokens[name] = min(tokens.get(name, seen), seen)
    out: list[MultiRoundSession] = []
    named = dict.fromkeys(tokens, 0)
    for (agent, _), s in zip(cached, sessions, strict=True):
        name = agent or UNNAMED_AGENT
        first = s.rounds[0]
        if name not in tokens or first.new_tokens <= tokens[name]:
            out.append(s)
            continue
        named[name] += 1
        shorter = replace(first, new_tokens=first.new_tokens - tokens[name])
        out.append(
            replace(s, rounds=(shorter, *s.rounds[1:]), prefix=name, prefix_tokens=tokens[name])
        )
    prefixes = tuple(Prefix(name, tokens[name]) for name in sorted(tokens) if named[name])
    notes = {
        "rule": "one prefix per agent (TraceLab provider): the fewest tokens any of its "
        "sessions read from the prompt cache at round 0 (prefix_tokens), token-scaled",
        "table": {p.id: {"tokens": p.tokens, "sessions": named[p.id]} for p in prefixes},
        "sessions_without": len(sessions) - sum(named.values()),
    }
    return SharedPrefixes(tuple(out), prefixes, notes)


def prefix_line(notes: dict[str, Any]) -> str:
    """What the import did with prefixes, in one line (``ImportResult.summary_lines``)."""
    table = notes["table"]
    if not table:
        return (
            "shared prefixes: none (no round 0 read cached tokens, TraceLab prefix_tokens); "
            "every session's prompt is its own"
        )
    listed = ", ".join(
        f"{name} {row['tokens']:,} tokens ({row['sessions']} session"
        f"{'' if row['sessions'] == 1 else 's'})"
        for name, row in table.items()
    )
    return (
        f"shared prefixes from round 0's cached prefix (TraceLab prefix_tokens), one per "
        f"agent: {listed}; {notes['sessions_without']} sessions without one; prompts "
        "unchanged (--no-prefixes leaves them out)"
    )
