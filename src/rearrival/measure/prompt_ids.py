"""The prompt token ids a replay sends (paper Section II-C): drawn per (plan, session,
round) so prefix identity holds by construction and no two sessions share a prefix, every
id inside the served model's vocabulary."""

from __future__ import annotations

import hashlib
import json
import random

from rearrival.measure.client_http import ClientError
from rearrival.model.plans.plan import Plan

# Prompt ids start here: below it most tokenizers keep their control and byte tokens.
TOKEN_ID_LOW = 1_000
# A server that takes any non-negative id (emulate-server) gets ids below this bound:
# Qwen3's ordinary vocabulary (its special tokens start at 151643), the model the twin
# stands for. A real engine's bound is its model's vocab_size (ReplayOptions.vocab_size).
ANY_ID_HIGH = 150_000


def _rng(*parts: object) -> random.Random:
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def plan_key(plan: Plan) -> str:
    """What prompt ids derive from: the plan seed when known, else the plan's content hash."""
    return f"seed:{plan.meta.seed}" if plan.meta.seed is not None else f"sha:{plan.sha256()}"


def new_ids(
    key: str, session: int, round_index: int, count: int, high: int = ANY_ID_HIGH
) -> list[int]:
    """Deterministic ids of the tokens round ``round_index`` appends to the transcript.

    Round 0's first id encodes the session number, so two sessions differ at position 0
    and never share a cached prefix, whatever the random ids after it are. Rounds 0 and
    1 draw from the streams the two-round client always used (the first prompt, then
    the tool result appended before the re-arrival), so the paper's plans send the same
    ids as before multi-round plans existed; later rounds get a stream each. Every id
    lies in [TOKEN_ID_LOW, high): ``high`` is the served model's vocabulary (an id at or
    above it crashes a real engine), ``ANY_ID_HIGH`` for a server that takes any id.
    """
    if round_index == 0:
        head = TOKEN_ID_LOW + session
        if head >= high:
            raise ClientError(
                f"session {session}: too many sessions for distinct prompt heads below "
                f"the model's vocabulary of {high} (at most {high - TOKEN_ID_LOW})"
            )
        rng = _rng("prompt", key, session)
        return [head, *(rng.randrange(TOKEN_ID_LOW, high) for _ in range(count - 1))]
    rng = (
        _rng("append", key, session)
        if round_index == 1
        else _rng("append", key, session, round_index)
    )
    return [rng.randrange(TOKEN_ID_LOW, high) for _ in range(count)]


def prefix_ids(key: str, prefix: str, count: int, high: int = ANY_ID_HIGH) -> list[int]:
    """The token ids of a shared prefix (docs/DESIGN.md §2): the same for every session of
    the plan that names ``prefix``, so its full blocks are one cached chain any of them can
    hit, as the predictor's prefix blocks are; the session's own ids follow it (round 0's
    first new id encodes the session, so two sessions part right after the prefix)."""
    rng = _rng("prefix", key, prefix)
    return [rng.randrange(TOKEN_ID_LOW, high) for _ in range(count)]
