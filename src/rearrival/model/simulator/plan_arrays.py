"""A plan as per-request lists, the form every core of both rule sets reads (docs/DESIGN.md
§4, §15, §16): ``PlanArrays`` and ``plan_arrays``, cached per plan object. The RBLN cores
(``rbln``), the vLLM cores (``vllm.inputs``) and the fleet (``rearrival.model.fleet``) read
the same lists; each rule set checks its own fixed arrivals against them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PlanArrays:
    """A plan as per-request lists, request id ``rid`` in (session, round) order.

    ``first[s]`` is session s's round 0 (``first[N]`` = requests); ``next_fixed[rid]`` is
    the index into the fixed re-arrival times (RBLN: ``SimConfig.fixed_arrivals``; vLLM:
    ``simulate_vllm``'s ``fixed_arrivals``) of the round after ``rid`` (the re-arrival
    index ``rid - session``), or -1 on a session's last round. Callers must treat the
    lists as read-only (they are cached per plan).
    """

    prompt: list[int]
    gen: list[int]
    gap: list[float]  # tool gap after the round (0 on the last)
    round_of: list[int]
    session_of: list[int]
    next_fixed: list[int]
    start: list[float]  # per session: when round 0 is sent (unused for a follower)
    first: list[int]
    # Shared prefixes and renewal (docs/DESIGN.md §2); every plan without them has
    # prefix_of = [-1] * N, prefix_tokens = [0] * N, leader = [-1] * N and
    # follower = [-1] * requests, follow_gap = [0.0] * requests.
    prefix_of: list[int]  # per session: index into the plan's prefixes, or -1
    prefix_tokens: list[int]  # per session: its prefix's tokens (0 without one)
    leader: list[int]  # per session: the session it follows (``after``), or -1
    follower: list[int]  # per request: on a session's last round, its follower's round 0 rid
    follow_gap: list[float]  # per request: the follower's gap after this round finishes

    @property
    def sessions(self) -> int:
        return len(self.start)

    @property
    def requests(self) -> int:
        return len(self.prompt)


_PLAN_ARRAYS: dict[int, tuple[Any, PlanArrays]] = {}


def plan_arrays(plan: Any) -> PlanArrays:
    """The plan's per-request lists (two-round and multi-round plans alike: only
    ``s.start_s``, ``s.rounds``, ``s.prompts()`` and the prefix and renewal links are read).

    Cached per plan object (the search runs each plan on 2,077 candidates).
    """
    entry = _PLAN_ARRAYS.get(id(plan))
    if entry is not None and entry[0] is plan:
        return entry[1]
    prompt: list[int] = []
    gen: list[int] = []
    gap: list[float] = []
    round_of: list[int] = []
    session_of: list[int] = []
    next_fixed: list[int] = []
    start: list[float] = []
    first: list[int] = []
    for index, s in enumerate(plan.sessions):
        first.append(len(prompt))
        start.append(float(s.start_s))
        rounds = s.rounds
        for k, (r, tokens) in enumerate(zip(rounds, s.prompts(), strict=True)):
            prompt.append(tokens)
            gen.append(r.gen_tokens)
            gap.append(float(r.gap_after_s))
            round_of.append(k)
            session_of.append(index)
            next_fixed.append(len(prompt) - 1 - index if k + 1 < len(rounds) else -1)
    first.append(len(prompt))
    arrays = PlanArrays(
        prompt, gen, gap, round_of, session_of, next_fixed, start, first, *_links(plan, first)
    )
    if len(_PLAN_ARRAYS) > 256:
        _PLAN_ARRAYS.clear()
    _PLAN_ARRAYS[id(plan)] = (plan, arrays)
    return arrays


def _links(
    plan: Any, first: list[int]
) -> tuple[list[int], list[int], list[int], list[int], list[float]]:
    """Per session its prefix index and tokens and the session it follows; per request
    the follower its finish sends (on a session's last round) and the follower's gap."""
    ids = {prefix.id: index for index, prefix in enumerate(getattr(plan, "prefixes", ()))}
    sessions = plan.sessions
    prefix_of = [ids.get(getattr(s, "prefix", None), -1) for s in sessions]
    prefix_tokens = [getattr(s, "prefix_tokens", 0) for s in sessions]
    leader = [-1] * len(sessions)
    follower = [-1] * first[-1]
    follow_gap = [0.0] * first[-1]
    for index, s in enumerate(sessions):
        after = getattr(s, "after", None)
        if after is not None:
            leader[index] = after.session
            last = first[after.session + 1] - 1
            follower[last] = first[index]
            follow_gap[last] = float(after.gap_s)
    return prefix_of, prefix_tokens, leader, follower, follow_gap
