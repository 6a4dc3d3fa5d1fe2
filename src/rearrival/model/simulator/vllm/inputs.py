"""A plan as the vLLM cores read it (docs/DESIGN.md §15): per-request lists in (session,
round) order, the prefix-cache chain identities of every session's blocks, and the two
checks made before any core runs (the pool holds the longest transcript; one fixed
arrival per re-arrival).

Chain identity. vLLM hashes a full block as a chain over its tokens and its parent's
hash. Every request of a session holds a prefix of one transcript (round k's prompt is
round k-1's prompt, its generated tokens and the new ones) and no two sessions share a
token prefix, so block j of session s has one identity wherever it appears: the integer
``key_base[s] + j``. The cores compare these integers where vLLM compares hashes.

Shared prefixes (docs/DESIGN.md §16): a session that names a prefix of P tokens starts its
transcript with the prefix's tokens, so its first ``P // block_size`` blocks (the blocks that hold
prefix tokens only) have the prefix's identities ``prefix_key_base + j``, the same in every session
naming it; the block that straddles the prefix's end and every later block are the session's own.
Prefix identities are numbered after every session's, so a plan without
prefixes keeps its numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rearrival.errors import RearrivalError
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.simulator.plan_arrays import PlanArrays, plan_arrays


class VllmPlanError(RearrivalError, ValueError):
    """A plan this vLLM configuration can never serve, or fixed arrivals that do not fit
    the plan; the message names the request and the fix."""


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class VllmInputs:
    """One plan on one block size. ``held[rid]`` is the most tokens request ``rid`` ever
    holds KV for (prompt + generation - 1: the last sampled token is never fed back);
    ``key_base[rid]`` its session's first chain identity; ``keys`` the number of
    identities over all sessions."""

    arrays: PlanArrays
    block_size: int
    key_base: list[int]
    held: list[int]
    keys: int
    shared_blocks: list[int]  # per request: leading blocks with the prefix's identities
    prefix_key_base: list[int]  # per request: its prefix's first identity (-1: no prefix)

    def block_key(self, rid: int, j: int) -> int:
        """The chain identity of block ``j`` of request ``rid``'s transcript."""
        if j < self.shared_blocks[rid]:
            return self.prefix_key_base[rid] + j
        return self.key_base[rid] + j

    @property
    def requests(self) -> int:
        return self.arrays.requests

    def blocks_needed(self) -> int:
        """Blocks the longest request needs at its last step."""
        return max(cdiv(tokens, self.block_size) for tokens in self.held)

    def cacheable_tokens(self, rid: int) -> int:
        """What request ``rid`` hits on a pool that never evicts: the full blocks of the
        round before it (prompt + generation - 1 tokens: the last sampled token never
        entered the cache); 0 for a session's first round. Below its prompt, so the
        at-least-one-token cap never binds."""
        a, bs = self.arrays, self.block_size
        if a.round_of[rid] == 0:
            return 0
        return (a.prompt[rid - 1] + a.gen[rid - 1] - 1) // bs * bs

    def never_evicting_blocks(self) -> int:
        """A pool (null block included) so large that no cached block is ever evicted:
        every request's blocks fit beside every other's."""
        return 1 + sum(cdiv(tokens, self.block_size) for tokens in self.held)


_VLLM_INPUTS: dict[tuple[int, int], tuple[PlanArrays, VllmInputs]] = {}


def vllm_inputs(plan: Any, block_size: int) -> VllmInputs:
    """The plan's per-request lists (``rearrival.model.simulator.plan_arrays``, cached per
    plan) and its chain identities for ``block_size``, cached per plan and block size (a
    search runs each plan on many configurations); callers treat them as read-only."""
    arrays = plan_arrays(plan)
    entry = _VLLM_INPUTS.get((id(plan), block_size))
    if entry is not None and entry[0] is arrays:
        return entry[1]
    if len(_VLLM_INPUTS) > 256:
        _VLLM_INPUTS.clear()
    inputs = _chain_identities(arrays, block_size)
    _VLLM_INPUTS[(id(plan), block_size)] = (arrays, inputs)
    return inputs


def _chain_identities(arrays: PlanArrays, block_size: int) -> VllmInputs:
    """``vllm_inputs`` uncached: every session's and every shared prefix's identities."""
    key_base = [0] * arrays.requests
    held = [p + g - 1 for p, g in zip(arrays.prompt, arrays.gen, strict=True)]
    keys = 0
    for s in range(arrays.sessions):
        first, last = arrays.first[s], arrays.first[s + 1] - 1
        for rid in range(first, last + 1):
            key_base[rid] = keys
        keys += cdiv(held[last], block_size)
    prefix_base: dict[int, int] = {}
    shared = [0] * arrays.requests
    prefix_key_base = [-1] * arrays.requests
    for s, prefix in enumerate(arrays.prefix_of):
        if prefix < 0:
            continue
        full = arrays.prefix_tokens[s] // block_size
        if prefix not in prefix_base:
            prefix_base[prefix] = keys
            keys += full
        for rid in range(arrays.first[s], arrays.first[s + 1]):
            shared[rid] = full
            prefix_key_base[rid] = prefix_base[prefix]
    return VllmInputs(arrays, block_size, key_base, held, keys, shared, prefix_key_base)


@dataclass(frozen=True)
class KernelPlan:
    """A plan as ``core.run_fleet`` reads it: ``plan_i`` its ten int64 rows per request (in
    ``run_fleet``'s order), ``gap``, ``follow_gap`` and ``start`` (a round 0's send, 0
    elsewhere) per request, ``keys`` the chain identities over the plan (at least 1)."""

    plan_i: np.ndarray
    gap: np.ndarray
    follow_gap: np.ndarray
    start: np.ndarray
    keys: int


def kernel_plan(inputs: VllmInputs) -> KernelPlan:
    """``inputs`` as the kernel reads them."""
    a = inputs.arrays
    requests = a.requests
    start = np.zeros(requests)
    starts = np.zeros(requests, dtype=np.int64)
    for s, rid in enumerate(a.first[:-1]):
        if a.leader[s] < 0:  # a renewed session is sent by its leader's last round
            start[rid] = a.start[s]
            starts[rid] = 1
    plan_i = np.array(
        [
            a.prompt,
            a.gen,
            a.round_of,
            [a.first[s] for s in a.session_of],
            starts,
            inputs.key_base,
            inputs.shared_blocks,
            inputs.prefix_key_base,
            a.next_fixed,
            a.follower,
        ],
        dtype=np.int64,
    )
    gap = np.array(a.gap, dtype=np.float64)
    follow_gap = np.array(a.follow_gap, dtype=np.float64)
    return KernelPlan(plan_i, gap, follow_gap, start, max(inputs.keys, 1))


def check_pool(inputs: VllmInputs, configuration: VllmConfiguration, source: str) -> None:
    """Refuse a plan whose longest request cannot fit the pool alone (docs/DESIGN.md §15
    rule 6): vLLM would preempt it forever rather than finish it (and refuses to start a
    server whose max_model_len does not fit)."""
    bs = configuration.block_size
    usable = configuration.usable_blocks
    for rid, tokens in enumerate(inputs.held):
        if cdiv(tokens, bs) > usable:
            a = inputs.arrays
            raise pool_refusal(
                source,
                a.session_of[rid],
                a.round_of[rid],
                tokens,
                configuration,
                inputs.blocks_needed(),
            )


def pool_refusal(
    source: str,
    session: int,
    round_: int,
    tokens: int,
    configuration: VllmConfiguration,
    blocks_needed: int,
) -> VllmPlanError:
    """``check_pool``'s refusal of the first request (in request order) that cannot fit:
    it holds ``tokens`` of KV at its last step; the longest request needs
    ``blocks_needed``."""
    bs = configuration.block_size
    return VllmPlanError(
        f"{source}: session {session} round {round_} holds "
        f"{tokens} tokens of KV at its last step ({cdiv(tokens, bs)} blocks of {bs}) but the "
        f"pool has {configuration.usable_blocks} usable blocks (num_blocks "
        f"{configuration.num_blocks} minus the null block); set num_blocks to at least "
        f"{blocks_needed + 1} or shorten the plan's sessions"
    )


def fixed_times(inputs: VllmInputs, fixed_arrivals: Sequence[float] | None) -> list[float] | None:
    """One send time per re-arrival in (session, round) order, checked."""
    if fixed_arrivals is None:
        return None
    times = [float(t) for t in fixed_arrivals]
    re_arrivals = inputs.arrays.requests - inputs.arrays.sessions
    if len(times) != re_arrivals:
        raise VllmPlanError(
            f"fixed_arrivals has {len(times)} times for a plan of {re_arrivals} re-arrivals; "
            "give one send time per re-arrival in (session, round) order"
        )
    if not all(math.isfinite(t) and t >= 0 for t in times):
        raise VllmPlanError("fixed_arrivals: every time must be a finite number of seconds >= 0")
    return times
