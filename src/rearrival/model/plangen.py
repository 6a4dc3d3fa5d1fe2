"""Seeded input-plan generator (docs/DESIGN.md §2, paper Section II-C).

Every draw of a replicate's plan comes from a seed derived with SHA-256 from the study
seed, replicate, block and session index, so the same arguments give byte-identical
plan files on any machine and Python version, and conditions of a replicate can be
re-run independently without sharing generator state.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from rearrival.errors import RearrivalError
from rearrival.model.plans import APPENDED_TOKENS, Plan, PlanMeta, Session
from rearrival.model.tools import CAP_S, ToolTable, default_tool_table

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
    _check_arg("n", n, 1)
    _check_arg("study_seed", study_seed, 0)
    _check_arg("replicate", replicate, 0)
    _check_arg("block", block, 0)
    table = tool_table or default_tool_table()
    spec = spec or PlanSpec()
    seed = derive_seed(study_seed, replicate, n, block, "sessions")
    sessions, capped = [], 0
    for i in range(n):
        rng = random.Random(session_seed(seed, i))
        prompt = _uniform_int(rng, spec.prompt_tokens)
        gen = _uniform_int(rng, spec.gen_tokens)
        followup = _uniform_int(rng, spec.followup_gen_tokens)
        wait = table.draw(rng, spec.tool_cap_s)
        capped += wait.capped
        sessions.append(
            Session(
                i,
                prompt,
                gen,
                followup,
                spec.appended_tokens,
                round(wait.latency_s, WAIT_DECIMALS),
                wait.tool,
            )
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
