"""The structural upper bound of the prefix-cache hit rate (docs/DESIGN.md §15 "Search
and advice"): what a static analyzer of the workload says, without simulating.

Every re-arrival is taken to find the whole transcript of the round before it cached,
on a pool that never evicts: it hits the full blocks of that round's prompt and
generated tokens but the last (never fed back), floor((P + G - 1) / bs) * bs tokens, and
a session's first round hits nothing. That is the most vLLM's prefix cache can serve a
session's own history (vLLM RFC 47993's ``vllm analyze-prefix-cache`` reports the same
kind of bound: full-block prefixes reused, no eviction, no timing). The simulated hit
rate is at most this, and equal to it on a pool that never evicts, where nothing is
preempted either; the gap between the two is what tool waits (and preemptions) cost.

Prefixes shared between sessions (a common system prompt) are not in the plans, so
neither the bound nor the simulation counts them: both are per-session reuse.
"""

from __future__ import annotations

from dataclasses import dataclass

from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.vllm.inputs import vllm_inputs


@dataclass(frozen=True)
class PrefixBound:
    """Prompt tokens of every request and the most of them the prefix cache can serve."""

    prompt_tokens: int
    cacheable_tokens: int

    @property
    def hit_rate(self) -> float:
        return self.cacheable_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def __add__(self, other: PrefixBound) -> PrefixBound:
        return PrefixBound(
            self.prompt_tokens + other.prompt_tokens,
            self.cacheable_tokens + other.cacheable_tokens,
        )


def prefix_bound(plan: Plan, block_size: int) -> PrefixBound:
    """The bound of one plan at one block size (module docstring)."""
    inputs = vllm_inputs(plan, block_size)
    rids = range(inputs.requests)
    return PrefixBound(
        sum(inputs.arrays.prompt[rid] for rid in rids),
        sum(inputs.cacheable_tokens(rid) for rid in rids),
    )
