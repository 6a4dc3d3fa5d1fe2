"""Multi-round plans from a real agent trace: the rules every trace importer shares.

An importer (``tracelab_import``, ``otel_import``) reads its format into ``TraceSession``
rows: per LLM round the trace's total input tokens, its output tokens and the tool calls
between this round's response and the next round. This module turns those into the
multi-round plan shape (paper Section II-C generalised; docs/DESIGN.md "Plans"):

- **new tokens** of round k = the growth of its input beyond the previous transcript
  (round 0: its whole input), so the plan's prompt of every round equals the trace's
  input. When the trace's input is shorter than the previous transcript (the agent
  compacted or dropped context, or did not resend reasoning), the growth is 0 and the
  round is counted as a context shrink: the plan resends the whole transcript there,
  never a shorter one, and follows the trace's input again once it has grown past it.
- **generated tokens** = the round's output tokens (a round logged with 0 output tokens
  generates 1, counted).
- **gap after a round** = its tool calls combined (``combine_calls``): calls whose
  intervals overlap ran in parallel and cost the longest of their latencies; calls that
  start after every earlier call finished ran one after another and add up. Each call
  costs its effective latency (the executor's own latency when the trace has it, else
  the wall clock, as the tool table uses). Human-waiting tools (AskUserQuestion,
  ExitPlanMode, request_user_input, TaskOutput) and the user's turn after a round with no
  tool call are think time, not tool time: they add nothing, so the next round follows
  the previous one at once (gap 0), and the time they took is counted and reported.
- **failed calls**: an LLM call the trace marks as failed (refused or broken: no reply
  for the next round to build on) is no round; the importer skips it, and a session
  with no successful call is dropped. A failed tool call still made the agent wait and
  stays tool time. Both are counted, printed and stored (``FailedCalls``), never fatal.
- **start** of a session = its first timestamp; ``time_origin="first"`` measures every
  start from the earliest selected session, ``"zero"`` starts them all at t = 0.
- **context limit**: a round whose transcript (prompt + generated) exceeds
  ``max_seq_len`` cannot be served; ``on_overflow="truncate"`` ends the session before
  it, ``"refuse"`` stops the import. Either way the affected sessions and rounds are
  counted, printed and stored in the plan's metadata; a session whose first round
  already overflows is dropped and counted, and an import where nothing fits is refused
  with the way forward (``token_scale`` or a longer context with its KV cost).
- **shared prefixes** (``prefixes=True``, docs/DESIGN.md §2): one prefix per agent from
  round 0's cached prefix (``trace_prefixes``); every prompt stays the trace's input.
- **token_scale** multiplies every token count (new and generated, rounded half up, at
  least 1 where the plan needs 1): a labelled what-if for studying a long-context trace
  on a profile measured at a shorter maximum sequence length.

Same trace and flags give the same plan, byte for byte; sampling is seeded.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.model.cost.memory import context_cost, device_memory
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.plans.plan import (
    MULTI_ROUND_VERSION,
    MultiRoundSession,
    Plan,
    PlanMeta,
    Prefix,
    Round,
)
from rearrival.model.plans.tools import HUMAN_WAITING_TOOLS
from rearrival.model.plans.trace_prefixes import prefix_line, shared_prefixes

OVERFLOW_CHOICES = ("truncate", "refuse")
TIME_ORIGINS = ("first", "zero")
TOOL_NAME_JOIN = "+"
LISTED = 20  # session keys listed per overflow kind in the notes (all are counted)


class TraceError(RearrivalError, ValueError):
    """A trace that cannot be imported; the message names file, line and field."""


@dataclass(frozen=True)
class ToolCall:
    """One tool call between two rounds: when it started and ended (epoch seconds) and
    the latency it costs (the executor's own when known, else the wall clock)."""

    name: str
    start_s: float
    end_s: float
    latency_s: float


@dataclass(frozen=True)
class TraceRound:
    """One LLM round as a trace records it."""

    input_tokens: int
    output_tokens: int
    calls: tuple[ToolCall, ...] = ()
    # Seconds between this round's response and the next round's first event when the
    # next round waited for a person (no tool call, or only human-waiting tools).
    think_s: float = 0.0


@dataclass(frozen=True)
class TraceSession:
    """One agent session of a trace: an identifier, its first timestamp and its rounds;
    where the format says so, the agent that ran it and the tokens its round 0 read from
    the provider's prompt cache (``trace_prefixes``)."""

    key: str
    start_epoch_s: float
    rounds: tuple[TraceRound, ...]
    agent: str = ""
    cached_prefix_tokens: int = 0


def combine_calls(calls: Sequence[ToolCall]) -> float:
    """Tool time of one round: parallel groups cost their longest call, groups add up.

    Calls are taken in start order; a call joins the current group when it starts before
    every earlier call has ended (they overlapped, so the agent ran them in parallel) and
    opens a new group otherwise (it waited for the earlier ones).
    """
    total, group_max, group_end = 0.0, 0.0, -math.inf
    for call in sorted(calls, key=lambda c: (c.start_s, c.end_s, c.name)):
        if call.start_s >= group_end:
            total += group_max
            group_max, group_end = 0.0, call.end_s
        group_max = max(group_max, call.latency_s)
        group_end = max(group_end, call.end_s)
    return total + group_max


@dataclass
class FailedCalls:
    """What an importer skipped or kept of the calls a trace marks as failed."""

    llm_calls: int = 0  # skipped: no round
    tool_calls: int = 0  # kept: the agent waited for them
    sessions_dropped: list[str] = field(default_factory=list)  # no successful LLM call

    def as_dict(self) -> dict[str, Any]:
        return {
            "llm_calls_skipped": self.llm_calls,
            "tool_calls_kept": self.tool_calls,
            "sessions_dropped": len(self.sessions_dropped),
            "dropped": self.sessions_dropped[:LISTED],
        }


@dataclass(frozen=True)
class ImportOptions:
    """The flags of an import, recorded in the plan's metadata as given."""

    sessions: int | None = None
    seed: int = 0
    max_seq_len: int | None = None  # None: the tokens a slot of the shipped profile holds
    on_overflow: str = "truncate"
    time_origin: str = "first"
    token_scale: float = 1.0
    prefixes: bool = False  # shared prefixes from round 0's cached prefix (trace_prefixes)

    def __post_init__(self) -> None:
        if self.max_seq_len is None:
            object.__setattr__(self, "max_seq_len", measured_profile().slot_tokens)
        if self.sessions is not None and self.sessions < 1:
            raise TraceError(f"sessions {self.sessions}: sample at least one session")
        if self.max_seq_len < 2:
            raise TraceError(f"max_seq_len {self.max_seq_len}: give the tokens a slot holds")
        if self.on_overflow not in OVERFLOW_CHOICES:
            raise TraceError(
                f"on_overflow {self.on_overflow!r}: use one of {', '.join(OVERFLOW_CHOICES)}"
            )
        if self.time_origin not in TIME_ORIGINS:
            raise TraceError(
                f"time_origin {self.time_origin!r}: use one of {', '.join(TIME_ORIGINS)}"
            )
        if not (math.isfinite(self.token_scale) and self.token_scale > 0):
            raise TraceError(f"token_scale {self.token_scale}: give a factor > 0, e.g. 0.15")

    def as_dict(self) -> dict[str, Any]:
        """The flags; ``prefixes`` only when set, so imports without it keep their bytes."""
        flags = {
            "sessions": self.sessions,
            "seed": self.seed,
            "max_seq_len": self.max_seq_len,
            "on_overflow": self.on_overflow,
            "time_origin": self.time_origin,
            "token_scale": self.token_scale,
        }
        return flags | ({"prefixes": True} if self.prefixes else {})


@dataclass(frozen=True)
class ImportResult:
    """The plan an import wrote plus every count it printed (also in ``plan.meta.notes``)."""

    plan: Plan
    source: str
    trace_sha256: str
    sessions_in_trace: int
    rounds_in_trace: int
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def truncated_sessions(self) -> int:
        return int(self.notes["overflow"]["truncated_sessions"])

    @property
    def dropped_sessions(self) -> int:
        return int(self.notes["overflow"]["dropped_sessions"])

    @property
    def dropped_rounds(self) -> int:
        return int(self.notes["overflow"]["dropped_rounds"])

    def summary_lines(self) -> list[str]:
        """What the import did, one fact a line (the CLI prints these)."""
        n = self.notes
        over = n["overflow"]
        lines = [
            f"{self.source} trace sha256 {self.trace_sha256[:12]}: {self.sessions_in_trace} "
            f"sessions, {self.rounds_in_trace} rounds; plan: {self.plan.n} sessions, "
            f"{self.plan.requests} rounds (sha256 {self.plan.sha256()[:12]})",
            f"context limit {over['max_seq_len']:,} tokens (a round's prompt plus the tokens "
            f"it generates): {over['truncated_sessions']} sessions truncated, "
            f"{over['dropped_sessions']} dropped (first round too long), "
            f"{over['dropped_rounds']} rounds removed",
            f"tool gaps: {n['tool_rounds']} rounds; parallel calls cost their longest, "
            "sequential ones add up",
            f"think time (not tool time, gap 0): {n['think_rounds']} rounds waited for the "
            f"user ({n['think_s_removed']:.1f} s removed), {n['human_tool_calls']} "
            "human-waiting tool calls left out",
        ]
        if over.get("longer_context"):
            lines.append(
                f"to keep every round (the longest transcript, a prompt plus the tokens it "
                f"generates, is {over['longest_transcript_tokens']:,} tokens): "
                f"{over['longer_context']}"
            )
        failed = n.get("failed_calls")
        if failed and (failed["llm_calls_skipped"] or failed["tool_calls_kept"]):
            lines.append(
                f"failed calls: {failed['llm_calls_skipped']} failed LLM calls skipped (no "
                f"round), {failed['sessions_dropped']} sessions with no successful call "
                f"dropped, {failed['tool_calls_kept']} failed tool calls kept as tool time"
            )
        if n["context_shrinks"]:
            lines.append(
                f"context shrinks: {n['context_shrinks']} rounds sent less than the previous "
                f"transcript (up to {n['largest_shrink_tokens']:,} tokens); the plan resends "
                "the whole transcript there (new tokens 0)"
            )
        starts = [x.start_s for x in self.plan.sessions]
        lines.append(
            f"session starts: over {max(starts) - min(starts):,.1f} s "
            f"(--time-origin {n['time_origin']})"
        )
        if "prefixes" in n:
            lines.append(prefix_line(n["prefixes"]))
        if n["token_scale"] != 1.0:
            lines.append(
                f"WHAT-IF: every token count scaled by {n['token_scale']} (--token-scale); "
                "the trace's own contexts are longer"
            )
        return lines


def file_sha256(path: Path) -> str:
    """sha256 of the trace file's bytes, the provenance every imported plan records."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line of a JSONL or JSONL.gz file.

    A truncated or corrupt gzip stream, bad UTF-8 or bad JSON is one ``TraceError``
    naming the file and the line where reading stopped.
    """
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file; check the path")
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield lineno, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(_json_problem(path, lineno, line, exc)) from exc
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(
            f"{path}: line {lineno + 1}: the gzip stream is truncated or corrupt ({exc}); "
            "download or copy the file again"
        ) from exc
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: line {lineno + 1}: not UTF-8 text ({exc.reason})") from exc


def _json_problem(path: Path, lineno: int, line: str, exc: json.JSONDecodeError) -> str:
    """One line for a line that is not JSON; a last line without its newline that stops
    mid-object is a cut-off copy, and says so."""
    where = f"{exc.msg}: column {exc.colno}"
    if not line.endswith("\n"):
        return (
            f"{path}: line {lineno}: the last line is cut off mid-JSON ({where}, no newline "
            "at the end); the trace looks truncated: copy it again, or drop the partial "
            "last line"
        )
    return f"{path}: line {lineno}: not valid JSON ({where}); one JSON object a line is expected"


def _scaled(value: int, scale: float, low: int) -> int:
    """``value * scale`` rounded half up (no banker's rounding), at least ``low``."""
    if scale == 1.0:
        return max(low, value)
    return max(low, math.floor(value * scale + 0.5))


@dataclass
class _Counts:
    """Running totals of what the conversion changed, reported in the plan's notes."""

    tool_rounds: int = 0
    think_rounds: int = 0
    think_s: float = 0.0
    shrinks: int = 0
    largest_shrink: int = 0
    zero_output: int = 0
    human_calls: int = 0
    truncated: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    dropped_rounds: int = 0
    longest_transcript: int = 0
    shortest_first: int = 0


def _plan_rounds(session: TraceSession, scale: float, counts: _Counts) -> list[Round]:
    """The session's rounds in the plan's terms (growth, output, combined tool gap)."""
    rounds: list[Round] = []
    previous = 0
    last = len(session.rounds) - 1
    for k, raw in enumerate(session.rounds):
        growth = raw.input_tokens - previous
        if k and growth < 0:
            counts.shrinks += 1
            counts.largest_shrink = max(counts.largest_shrink, -growth)
        counts.zero_output += raw.output_tokens == 0
        previous += max(growth, 0) + raw.output_tokens  # the transcript the plan holds
        agent = [c for c in raw.calls if c.name not in HUMAN_WAITING_TOOLS]
        counts.human_calls += len(raw.calls) - len(agent)
        if k == last:
            agent = []
        elif agent:
            counts.tool_rounds += 1
        else:  # the next round waited for a person, not for a tool
            counts.think_rounds += 1
            counts.think_s += raw.think_s
        rounds.append(
            Round(
                _scaled(max(growth, 0), scale, 1 if k == 0 else 0),
                _scaled(raw.output_tokens, scale, 1),
                combine_calls(agent),
                TOOL_NAME_JOIN.join(c.name for c in agent),
            )
        )
    return rounds


def _transcripts(rounds: Sequence[Round]) -> list[int]:
    """Tokens a slot holds at the end of each round (prompt + generated)."""
    out, transcript = [], 0
    for r in rounds:
        transcript += r.new_tokens + r.gen_tokens
        out.append(transcript)
    return out


def _fit(rounds: list[Round], max_seq_len: int) -> list[Round]:
    """The rounds before the first whose transcript exceeds ``max_seq_len``; the last
    kept round becomes the session's last (gap 0, no tool)."""
    reach = _transcripts(rounds)
    keep = next((k for k, t in enumerate(reach) if t > max_seq_len), len(rounds))
    kept = rounds[:keep]
    if keep < len(rounds) and kept:
        kept[-1] = Round(kept[-1].new_tokens, kept[-1].gen_tokens, 0.0, "")
    return kept


def _select(
    sessions: Sequence[TraceSession], options: ImportOptions, path: Path
) -> list[TraceSession]:
    """All sessions, or a seeded sample without replacement, in start order."""
    ordered = sorted(sessions, key=lambda s: (s.start_epoch_s, s.key))
    if options.sessions is None:
        return ordered
    if options.sessions > len(ordered):
        raise TraceError(
            f"{path}: --sessions {options.sessions} but the trace has {len(ordered)} "
            "sessions; ask for at most that many or omit --sessions to take all"
        )
    picked = set(random.Random(options.seed).sample(range(len(ordered)), options.sessions))
    return [s for i, s in enumerate(ordered) if i in picked]


def fitting_scale(options: ImportOptions, longest_transcript: int) -> float:
    """The largest --token-scale (two significant digits, rounded down) at which the
    longest transcript fits ``max_seq_len``, so every round of every session is kept."""
    exact = options.token_scale * options.max_seq_len / longest_transcript
    digits = max(2, 1 - math.floor(math.log10(exact)))
    return math.floor(exact * 10**digits) / 10**digits


# A longer context for ``need`` tokens: how to ask for it and what it costs, e.g.
# ("import with --max-seq-len 16,384", "a maximum sequence length of ... needs ...").
LongerContext = Callable[[int], tuple[str, str]]


def slot_context(profile: Profile) -> LongerContext:
    """The RBLN slot's: the maximum sequence length that holds ``need`` tokens (a
    multiple of the profile's) and its KV memory per slot and the slots that fit."""

    def longer_context(need: int) -> tuple[str, str]:
        step = profile.slot_tokens
        longer = max(step, -(-need // step) * step)
        cost = context_cost(profile, device_memory(profile), longer).sentence()
        return f"import with --max-seq-len {longer:,}", cost

    return longer_context


def _nothing_fits(
    path: Path, counts: _Counts, options: ImportOptions, longer_context: LongerContext
) -> str:
    """The refusal when no session's first round fits, with both ways forward."""
    need = counts.longest_transcript
    how, cost = longer_context(need)
    return (
        f"{path}: nothing fits a maximum sequence length of {options.max_seq_len:,} "
        f"tokens: every session's first round is longer (shortest "
        f"{counts.shortest_first:,}, longest transcript {need:,}), so no plan was written; "
        f"study it as a labelled what-if with --token-scale "
        f"{fitting_scale(options, need):g} (every round fits) or {how}, where {cost}"
    )


def build_plan(
    trace_sessions: Sequence[TraceSession],
    *,
    path: Path,
    source: str,
    trace_sha256: str,
    options: ImportOptions,
    profile: Profile | None = None,
    extra_notes: dict[str, Any] | None = None,
    longer_context: LongerContext | None = None,
) -> ImportResult:
    """The plan of a parsed trace under ``options`` (see the module docstring);
    ``longer_context`` says what a longer context costs (default: the RBLN slot of
    ``profile``)."""
    longer_context = longer_context or slot_context(profile or measured_profile())
    if not trace_sessions:
        raise TraceError(f"{path}: the trace holds no LLM rounds; nothing to import")
    chosen = _select(trace_sessions, options, path)
    counts = _Counts()
    kept: list[tuple[TraceSession, list[Round]]] = []
    for session in chosen:
        rounds = _plan_rounds(session, options.token_scale, counts)
        first = rounds[0].new_tokens + rounds[0].gen_tokens
        counts.shortest_first = min(counts.shortest_first or first, first)
        fitted = _fit(rounds, options.max_seq_len)
        counts.longest_transcript = max(counts.longest_transcript, _transcripts(rounds)[-1])
        if len(fitted) < len(rounds):
            counts.dropped_rounds += len(rounds) - len(fitted)
            (counts.truncated if fitted else counts.dropped).append(session.key)
        if fitted:
            kept.append((session, fitted))
    affected = len(counts.truncated) + len(counts.dropped)
    if affected and options.on_overflow == "refuse":
        raise TraceError(
            f"{path}: {affected} of {len(chosen)} sessions exceed the maximum sequence "
            f"length {options.max_seq_len:,} with a round's prompt plus its generated tokens "
            f"({counts.dropped_rounds} rounds, longest transcript "
            f"{counts.longest_transcript:,}); pass --on-overflow truncate to end "
            "them before that round, or --token-scale to study a scaled what-if"
        )
    if not kept:
        raise TraceError(_nothing_fits(path, counts, options, longer_context))
    origin = min(s.start_epoch_s for s, _ in kept)
    sessions = tuple(
        MultiRoundSession(
            i,
            tuple(rounds),
            0.0 if options.time_origin == "zero" else round(s.start_epoch_s - origin, 6),
        )
        for i, (s, rounds) in enumerate(kept)
    )
    notes = _notes(counts, options, chosen, kept) | (extra_notes or {})
    prefixes: tuple[Prefix, ...] = ()
    if options.prefixes:
        cached = [
            (s.agent, _scaled(s.cached_prefix_tokens, options.token_scale, 0)) for s, _ in kept
        ]
        shared = shared_prefixes(cached, sessions)
        sessions, prefixes = shared.sessions, shared.prefixes
        notes["prefixes"] = shared.notes
    if affected:
        notes["overflow"]["longer_context"] = longer_context(counts.longest_transcript)[1]
    meta = PlanMeta(
        seed=options.seed if options.sessions is not None else None,
        variant="wait",
        generator_version=MULTI_ROUND_VERSION,
        source=source,
        trace_sha256=trace_sha256,
        import_flags=options.as_dict(),
        notes=notes,
    )
    return ImportResult(
        Plan(sessions, meta, prefixes),
        source,
        trace_sha256,
        len(trace_sessions),
        sum(len(s.rounds) for s in trace_sessions),
        notes,
    )


# A format's reader: the sessions of a trace file and notes on how it was read.
TraceReader = Callable[[Path], tuple[list[TraceSession], dict[str, Any]]]


@dataclass(frozen=True)
class TraceImporter:
    """``plans_from_<format>(path, **flags)`` for one format: read the file with ``read``
    and build the plan under the shared rules; nothing is written. One class serves every
    importer, so flags, defaults and the recorded source and hash stay the same for all."""

    read: TraceReader
    source: str

    def __call__(
        self,
        path: str | Path,
        *,
        sessions: int | None = None,
        seed: int = 0,
        max_seq_len: int | None = None,
        on_overflow: str = "truncate",
        time_origin: str = "first",
        token_scale: float = 1.0,
        prefixes: bool = False,
        profile: Profile | None = None,
        longer_context: LongerContext | None = None,
    ) -> ImportResult:
        path = Path(path)
        options = ImportOptions(
            sessions, seed, max_seq_len, on_overflow, time_origin, token_scale, prefixes
        )
        parsed, notes = self.read(path)
        return build_plan(
            parsed,
            path=path,
            source=self.source,
            trace_sha256=file_sha256(path),
            options=options,
            profile=profile,
            extra_notes=notes,
            longer_context=longer_context,
        )


def _notes(
    counts: _Counts,
    options: ImportOptions,
    chosen: Sequence[TraceSession],
    kept: Sequence[tuple[TraceSession, list[Round]]],
) -> dict[str, Any]:
    return {
        "trace_sessions": [s.key for s, _ in kept],
        "sessions_selected": len(chosen),
        "overflow": {
            "max_seq_len": options.max_seq_len,
            "on_overflow": options.on_overflow,
            "truncated_sessions": len(counts.truncated),
            "dropped_sessions": len(counts.dropped),
            "dropped_rounds": counts.dropped_rounds,
            "truncated": counts.truncated[:LISTED],
            "dropped": counts.dropped[:LISTED],
            "longest_transcript_tokens": counts.longest_transcript,
        },
        "tool_rounds": counts.tool_rounds,
        "tool_combination": "parallel calls (overlapping intervals): longest latency; "
        "sequential groups: sum; latency = executor's own when present, else wall clock",
        "think_rounds": counts.think_rounds,
        "human_tool_calls": counts.human_calls,
        "think_s_removed": round(counts.think_s, 6),
        "think_rule": "human-waiting tools and the user's turn after a round without a "
        "tool call are not tool time: gap 0",
        "context_shrinks": counts.shrinks,
        "largest_shrink_tokens": counts.largest_shrink,
        "zero_output_rounds": counts.zero_output,
        "time_origin": options.time_origin,
        "token_scale": options.token_scale,
        "token_scale_label": None
        if options.token_scale == 1.0
        else f"what-if: token counts x{options.token_scale}",
    }
