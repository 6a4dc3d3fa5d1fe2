"""Seeded input-plan generator (paper Section II-C; docs/DESIGN.md "Plans").

Every draw of a replicate's plan comes from a seed derived with SHA-256 from the study
seed, replicate, block and session index, so the same arguments give byte-identical
plan files on any machine and Python version, and conditions of a replicate can be
re-run independently without sharing generator state.

Two generators share that rule: ``generate_plan`` makes the paper's two-round sessions,
``generate_multi_round_plan`` agent sessions with several tool calls, a growing
transcript and staggered starts (``MultiRoundSpec``).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rearrival.errors import RearrivalError
from rearrival.model.cost.profile import measured_profile
from rearrival.model.plans.plan import (
    APPENDED_TOKENS,
    MULTI_ROUND_VERSION,
    MultiRoundSession,
    Plan,
    PlanMeta,
    Round,
    Session,
)
from rearrival.model.plans.tools import CAP_S, ToolTable, default_tool_table

SEED_SCHEME = "rearrival-plan-seed/1"
# Waits are stored at 1 us: far below any scheduler effect, and it keeps a last-ulp
# difference between platforms' libm exp/log from changing the plan's bytes.
WAIT_DECIMALS = 6


class PlanGenError(RearrivalError, ValueError):
    """Arguments that cannot define a plan; the message names the argument and the fix.

    ``argument`` is that argument's name (when one is at fault), so the CLI can name its
    option."""

    def __init__(self, message: str, argument: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument


def _check_range(name: str, bounds: tuple[int, int], low: int) -> None:
    lo, hi = bounds
    if not (isinstance(lo, int) and isinstance(hi, int) and low <= lo <= hi):
        raise PlanGenError(
            f"PlanSpec field '{name}' must be integers ({low} <= lo <= hi), got {bounds!r}"
        )


@dataclass(frozen=True)
class PlanSpec:
    """What a session looks like; defaults are the paper's (Section II-C)."""

    prompt_tokens: tuple[int, int] = (800, 1600)
    gen_tokens: tuple[int, int] = (32, 256)
    followup_gen_tokens: tuple[int, int] = (32, 256)
    appended_tokens: int = APPENDED_TOKENS
    tool_cap_s: float = CAP_S

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "gen_tokens", "followup_gen_tokens"):
            _check_range(name, getattr(self, name), 1)
        if not isinstance(self.appended_tokens, int) or self.appended_tokens < 0:
            raise PlanGenError("PlanSpec field 'appended_tokens' must be an integer >= 0")
        if not self.tool_cap_s > 0:
            raise PlanGenError("PlanSpec field 'tool_cap_s' must be > 0 seconds")


def _sha_seed(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def derive_seed(study_seed: int, replicate: int, n: int | None, block: int, stream: str) -> int:
    """64-bit seed from a canonical string: stable across machines (never ``hash()``).

    ``n=None`` marks a stream that must not depend on N (the plan's session draws).
    """
    return _sha_seed(
        f"{SEED_SCHEME}|study={study_seed}|replicate={replicate}|"
        f"n={'*' if n is None else n}|block={block}|stream={stream}"
    )


def session_seed(plan_seed: int, session: int) -> int:
    """Seed of one session's draws, so sessions never share generator state."""
    return _sha_seed(f"{SEED_SCHEME}|plan={plan_seed}|session={session}")


def _uniform_int(rng: random.Random, bounds: tuple[int, int]) -> int:
    # Built on random(), whose sequence Python guarantees across versions (randint's
    # internals carry no such promise).
    lo, hi = bounds
    return lo + min(int(rng.random() * (hi - lo + 1)), hi - lo)


def _check_arg(name: str, value: int, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise PlanGenError(f"{name} must be an integer >= {low}, got {value!r}", name)


def _checked_plan_seed(n: int, study_seed: int, replicate: int, block: int, stream: str) -> int:
    """The plan seed of (study seed, replicate, N, block) in ``stream``, after checking
    each; both generators seed this way (docs/DESIGN.md §2)."""
    _check_arg("n", n, 1)
    _check_arg("study_seed", study_seed, 0)
    _check_arg("replicate", replicate, 0)
    _check_arg("block", block, 0)
    return derive_seed(study_seed, replicate, n, block, stream)


SessionT = TypeVar("SessionT")  # a two-round Session or a MultiRoundSession


def _draw_sessions(
    n: int, seed: int, draw: Callable[[int, random.Random], tuple[SessionT, int]]
) -> tuple[list[SessionT], int]:
    """Sessions 0..n-1, each drawn from its own generator seeded by (plan seed, index),
    and how many tool waits hit the cap in all."""
    sessions: list[SessionT] = []
    capped = 0
    for i in range(n):
        session, hit = draw(i, random.Random(session_seed(seed, i)))
        sessions.append(session)
        capped += hit
    return sessions, capped


def _two_round_session(
    index: int, rng: random.Random, spec: PlanSpec, table: ToolTable
) -> tuple[Session, int]:
    """One two-round session's draws in a fixed order (prompt, G0, G1, tool wait), and
    whether its wait hit the cap."""
    prompt = _uniform_int(rng, spec.prompt_tokens)
    gen = _uniform_int(rng, spec.gen_tokens)
    followup = _uniform_int(rng, spec.followup_gen_tokens)
    wait = table.draw(rng, spec.tool_cap_s)
    latency = round(wait.latency_s, WAIT_DECIMALS)
    session = Session(index, prompt, gen, followup, spec.appended_tokens, latency, wait.tool)
    return session, int(wait.capped)


def generate_plan(
    n: int,
    *,
    study_seed: int,
    replicate: int,
    block: int = 0,
    tool_table: ToolTable | None = None,
    spec: PlanSpec | None = None,
) -> Plan:
    """N sessions of one replicate: L0, G0, G1 uniform, one capped tool wait each.

    The plan seed comes from (study seed, replicate, N, block) as docs/DESIGN.md §2 fixes,
    so plans of different N are independent draws rather than prefixes of one another
    (the mechanisms sweep compares N, and nested plans would correlate its points). Each
    session's seed comes from (plan seed, session index), so sessions never share
    generator state. The stored ``meta.seed`` reproduces the plan.
    """
    seed = _checked_plan_seed(n, study_seed, replicate, block, "sessions")
    table = tool_table or default_tool_table()
    chosen = spec or PlanSpec()
    sessions, capped = _draw_sessions(
        n, seed, lambda i, rng: _two_round_session(i, rng, chosen, table)
    )
    meta = PlanMeta(
        seed=seed,
        n=n,
        study_seed=study_seed,
        replicate=replicate,
        block=block,
        tool_table=table.source,
        cap_fraction=capped / n,
    )
    return Plan(tuple(sessions), meta)


# The multi-round stream has its own seed name, so a study's multi-round plans are never
# correlated with the two-round plans of the same (study seed, replicate, N, block).
MULTI_ROUND_STREAM = "multi-round-sessions"


@dataclass(frozen=True)
class MultiRoundSpec:
    """What an agent session looks like: K rounds, each after one tool call.

    Round 0 sends a first prompt; every later round appends the previous tool's result
    (``new_tokens``) to the transcript; every round generates ``gen_tokens``; the gap
    after each non-last round is one capped draw from the tool table; a session starts
    uniformly in [0, ``start_spread_s``]. Ranges are inclusive integer bounds. The
    defaults are a coding agent's: tool results of 50-600 tokens (file snippets,
    command output), 4-8 calls, the paper's first prompts and generations, and a
    transcript that always fits ``max_seq_len`` (the largest possible session is
    checked, so no seed can draw a session a slot cannot hold; None: the tokens a slot of
    the shipped profile holds, the paper's maximum sequence length).
    """

    rounds: tuple[int, int] = (4, 8)
    first_prompt_tokens: tuple[int, int] = (800, 1600)
    new_tokens: tuple[int, int] = (50, 600)
    gen_tokens: tuple[int, int] = (32, 256)
    start_spread_s: float = 0.0
    tool_cap_s: float = CAP_S
    max_seq_len: int | None = None

    def __post_init__(self) -> None:
        _check_range("rounds", self.rounds, 1)
        _check_range("first_prompt_tokens", self.first_prompt_tokens, 1)
        _check_range("new_tokens", self.new_tokens, 0)
        _check_range("gen_tokens", self.gen_tokens, 1)
        if not (isinstance(self.start_spread_s, int | float) and 0 <= self.start_spread_s < 1e6):
            raise PlanGenError(
                "MultiRoundSpec field 'start_spread_s' must be seconds in [0, 1e6)",
                "start_spread_s",
            )
        if not self.tool_cap_s > 0:
            raise PlanGenError("MultiRoundSpec field 'tool_cap_s' must be > 0 seconds")
        if self.max_seq_len is None:
            object.__setattr__(self, "max_seq_len", measured_profile().slot_tokens)
        if self.longest_transcript() > self.max_seq_len:
            raise PlanGenError(
                f"MultiRoundSpec: a session of {self.rounds[1]} rounds can reach "
                f"{self.longest_transcript()} tokens (first prompt {self.first_prompt_tokens[1]}"
                f" + {self.rounds[1] - 1} x new {self.new_tokens[1]} + {self.rounds[1]} x gen "
                f"{self.gen_tokens[1]}), over the maximum sequence length "
                f"{self.max_seq_len}; lower rounds, new_tokens or gen_tokens",
                "rounds",
            )

    def longest_transcript(self) -> int:
        """Tokens of the largest session the ranges allow (prompt + every generation)."""
        most = self.rounds[1]
        return (
            self.first_prompt_tokens[1]
            + (most - 1) * self.new_tokens[1]
            + most * self.gen_tokens[1]
        )

    def as_dict(self) -> dict[str, object]:
        """The spec as stored in a plan's metadata notes (what drew the sessions)."""
        return {
            "rounds": list(self.rounds),
            "first_prompt_tokens": list(self.first_prompt_tokens),
            "new_tokens": list(self.new_tokens),
            "gen_tokens": list(self.gen_tokens),
            "start_spread_s": self.start_spread_s,
            "tool_cap_s": self.tool_cap_s,
        }


def _agent_session(
    index: int, rng: random.Random, spec: MultiRoundSpec, table: ToolTable
) -> tuple[MultiRoundSession, int]:
    """One session's draws in a fixed order (rounds, start, then round by round), and how
    many of its tool waits hit the cap."""
    count = _uniform_int(rng, spec.rounds)
    start = round(rng.random() * spec.start_spread_s, WAIT_DECIMALS)
    rounds, capped = [], 0
    for k in range(count):
        new = _uniform_int(rng, spec.first_prompt_tokens if k == 0 else spec.new_tokens)
        gen = _uniform_int(rng, spec.gen_tokens)
        if k == count - 1:
            rounds.append(Round(new, gen))
            continue
        wait = table.draw(rng, spec.tool_cap_s)
        capped += wait.capped
        rounds.append(Round(new, gen, round(wait.latency_s, WAIT_DECIMALS), wait.tool))
    return MultiRoundSession(index, tuple(rounds), start), capped


def generate_multi_round_plan(
    n: int,
    *,
    study_seed: int,
    replicate: int,
    block: int = 0,
    tool_table: ToolTable | None = None,
    spec: MultiRoundSpec | None = None,
) -> Plan:
    """N agent sessions of one replicate (``MultiRoundSpec``), seeded like ``generate_plan``:
    the plan seed from (study seed, replicate, N, block), each session's draws from (plan
    seed, session index). ``meta.cap_fraction`` is over tool calls; ``meta.notes`` holds
    the spec and the call count."""
    seed = _checked_plan_seed(n, study_seed, replicate, block, MULTI_ROUND_STREAM)
    table = tool_table or default_tool_table()
    chosen = spec or MultiRoundSpec()
    sessions, capped = _draw_sessions(n, seed, lambda i, rng: _agent_session(i, rng, chosen, table))
    calls = sum(len(s.rounds) - 1 for s in sessions)
    meta = PlanMeta(
        seed=seed,
        n=n,
        study_seed=study_seed,
        replicate=replicate,
        block=block,
        tool_table=table.source,
        cap_fraction=capped / calls if calls else 0.0,
        generator_version=MULTI_ROUND_VERSION,
        source="generator",
        notes={"spec": chosen.as_dict(), "tool_calls": calls},
    )
    return Plan(tuple(sessions), meta)
