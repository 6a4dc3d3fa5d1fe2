"""One engine step of vLLM 0.32.0's synchronous scheduler, as the ``vllm`` rule set states
it (docs/DESIGN.md §15 rules 4-7), on our block pool model (``blockpool``).

The state is per request (tokens, computed tokens, blocks held) plus the queues: a
``pending`` heap of sends not yet seen (round 0 at the session's start, every later round
once the round before it has finished), the FCFS ``waiting`` deque and the ``running``
list in admission order. ``reference`` runs one ``step`` per loop iteration;
``event`` runs the same steps but fast-forwards stretches of pure decode steps.

A step (``Engine.step``):

1. Running requests first, in order, while token budget is left: each takes
   min(tokens not yet computed, budget left) tokens (a decode is one). If its blocks
   cannot be allocated, the last running request is preempted (its blocks freed, its
   computed tokens reset, back to the front of ``waiting``), repeatedly, until the
   allocation fits or the victim is the request itself, which ends this phase.
2. Unless a request was preempted this step: waiting requests first come first served
   while budget is left and fewer than ``max_num_seqs`` run. The head's prefix hit is the
   longest chain of cached blocks of its tokens, capped at tokens - 1; it is admitted only
   if its whole current sequence fits (ceil(tokens / bs) - hit blocks + hit blocks still
   in the free queue <= free blocks), else admission stops for this step.
3. Each scheduled request allocates its new blocks and caches the blocks its chunk fills
   (up to the tokens it holds). A chunk that reaches the end of the request's tokens
   samples one token; a request that has sampled its planned generation finishes, its
   blocks freed in the order the requests were scheduled.
4. The step costs ``VllmStepCost.step_s(D_pad, P, C)`` and the clock advances by it; the
   step returns its counts as vLLM's iteration log writes them, with the C it read.

A *driven* engine sends nothing itself: its caller queues each request (``queue``) at the
step where an observed run admitted it (``replay``, the calibration's replay of a real
run); everything else is the same.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.vllm.blockpool import BlockPool
from rearrival.model.simulator.vllm.inputs import VllmInputs, cdiv
from rearrival.model.simulator.vllm.result import RawRun


@dataclass(frozen=True, slots=True)
class StepCounts:
    """One step as vLLM's iteration log counts it (context requests have sampled nothing
    yet, generation requests have), and C: the tokens its requests had computed before it
    (docs/DESIGN.md §15 rule 7)."""

    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    context_read: int

    def logged(self) -> tuple[int, int, int, int]:
        """The four counts the iteration line holds."""
        return (
            self.context_requests,
            self.context_tokens,
            self.generation_requests,
            self.generation_tokens,
        )


@dataclass
class Request:
    """One (session, round) request and its state in the engine."""

    rid: int
    prompt: int
    gen: int
    gap_after_s: float
    key_base: int
    shared: int = 0  # leading blocks with the shared prefix's identities (SPEC 17)
    prefix_key_base: int = -1  # the prefix's first identity (-1: no prefix)
    tokens: int = 0  # prompt + sampled so far: what vLLM calls num_tokens
    computed: int = 0
    outputs: int = 0
    blocks: list[int] = field(default_factory=list)
    hashed: int = 0  # leading blocks that carry their chain identity
    arrival_s: float = math.nan
    cached_tokens: int = -1  # prefix hit at the first admission (-1: not admitted yet)
    preemptions: int = 0
    steps: int = 0
    first_scheduled_s: float = math.nan
    finish_s: float = math.nan

    def block_key(self, j: int) -> int:
        """Block j's chain identity (``VllmInputs.block_key``)."""
        return (self.prefix_key_base if j < self.shared else self.key_base) + j


class Engine:
    """The scheduler state of one simulation, advanced a step at a time."""

    def __init__(
        self,
        inputs: VllmInputs,
        configuration: VllmConfiguration,
        step_cost: VllmStepCost,
        fixed: list[float] | None,
        driven: bool = False,
    ) -> None:
        a = inputs.arrays
        self.inputs = inputs
        self.block_size = configuration.block_size
        self.max_num_seqs = configuration.batch_size
        self.budget = configuration.max_num_batched_tokens
        self.configuration = configuration
        self.cost = step_cost
        self.fixed = fixed
        self.pool = BlockPool(configuration.num_blocks)
        self.requests = [
            Request(rid, p, g, w, kb, shared, pkb, tokens=p)
            for rid, (p, g, w, kb, shared, pkb) in enumerate(
                zip(
                    a.prompt,
                    a.gen,
                    a.gap,
                    inputs.key_base,
                    inputs.shared_blocks,
                    inputs.prefix_key_base,
                    strict=True,
                )
            )
        ]
        self.driven = driven
        self.pending: list[tuple[float, int]] = []
        if not driven:
            for s, rid in enumerate(a.first[:-1]):
                self._send(rid, a.start[s])
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.t = 0.0
        self.device_s = 0.0
        self.steps = 0
        self.decode_tokens = 0
        self.prefill_tokens = 0

    def _send(self, rid: int, when: float) -> None:
        self.requests[rid].arrival_s = when
        heapq.heappush(self.pending, (when, rid))

    def queue(self, rid: int) -> None:
        """A driven engine's arrival: request ``rid`` joins the waiting queue now."""
        self.requests[rid].arrival_s = self.t
        self.waiting.append(self.requests[rid])

    def advance_to_work(self) -> bool:
        """Queue the sends due by now (time, then (session, round) order); with nothing
        queued or running, jump to the next send. False when every request is done."""
        while True:
            while self.pending and self.pending[0][0] <= self.t:
                self.waiting.append(self.requests[heapq.heappop(self.pending)[1]])
            if self.running or self.waiting:
                return True
            if not self.pending:
                return False
            self.t = self.pending[0][0]

    # --- the pieces of a step ---------------------------------------------------------
    def cache_filled(self, r: Request, upto_tokens: int) -> None:
        """Cache the blocks of ``r`` that are full within its first ``upto_tokens``."""
        full = upto_tokens // self.block_size
        for j in range(r.hashed, full):
            self.pool.cache(r.blocks[j], r.block_key(j))
        r.hashed = max(r.hashed, full)

    def _preempt(self, victim: Request) -> None:
        self.pool.free(victim.blocks)
        victim.blocks = []
        victim.hashed = 0
        victim.computed = 0
        victim.preemptions += 1
        self.waiting.appendleft(victim)

    def _schedule_running(self, budget: int) -> tuple[list[tuple[Request, int]], bool]:
        """Phase 1: the running requests. Returns the scheduled (request, tokens) and
        whether a request was preempted."""
        scheduled: list[tuple[Request, int]] = []
        preempted = False
        i = 0
        while i < len(self.running) and budget > 0:
            r = self.running[i]
            tokens = min(r.tokens - r.computed, budget)
            need = cdiv(r.computed + tokens, self.block_size) - len(r.blocks)
            while need > self.pool.free_count:
                victim = self.running.pop()
                self._preempt(victim)
                preempted = True
                if victim is r:
                    return scheduled, preempted
            r.blocks += self.pool.allocate(need)
            self.cache_filled(r, min(r.computed + tokens, r.tokens))
            scheduled.append((r, tokens))
            budget -= tokens
            i += 1
        return scheduled, preempted

    def _schedule_waiting(self, budget: int, scheduled: list[tuple[Request, int]]) -> None:
        """Phase 2: admissions, first come first served, until one does not fit."""
        bs = self.block_size
        while budget > 0 and self.waiting and len(self.running) < self.max_num_seqs:
            r = self.waiting[0]
            hit = self.pool.lookup(r.key_base, (r.tokens - 1) // bs, r.shared, r.prefix_key_base)
            whole = cdiv(r.tokens, bs) - len(hit) + self.pool.in_free_queue(hit)
            if whole > self.pool.free_count:
                return
            computed = len(hit) * bs
            tokens = min(r.tokens - computed, budget)
            self.pool.touch(hit)
            r.blocks = hit + self.pool.allocate(cdiv(computed + tokens, bs) - len(hit))
            r.hashed = len(hit)
            self.cache_filled(r, min(computed + tokens, r.tokens))
            self.waiting.popleft()
            self.running.append(r)
            r.computed = computed
            if r.cached_tokens < 0:
                r.cached_tokens = computed
            scheduled.append((r, tokens))
            budget -= tokens

    def step(self) -> StepCounts:
        """One engine step (module docstring, 1-4)."""
        scheduled, preempted = self._schedule_running(self.budget)
        if not preempted:
            used = sum(tokens for _, tokens in scheduled)
            self._schedule_waiting(self.budget - used, scheduled)
        assert scheduled, "the pool check guarantees every step schedules a token"
        decode = prefill = context = decoding = 0
        for r, tokens in scheduled:
            context += r.computed
            if r.outputs:  # vLLM's iteration log: generation tokens
                decode += tokens
                decoding += 1
            else:  # context tokens: no output token yet
                prefill += tokens
            r.steps += 1
            if r.steps == 1:
                r.first_scheduled_s = self.t
            r.computed += tokens
        finished = []
        for r, _ in scheduled:
            if r.computed == r.tokens:  # the chunk reached the end: one token sampled
                r.outputs += 1
                r.tokens += 1
                if r.outputs == r.gen:
                    finished.append(r)
        self.advance_clock(self.configuration.padded(decode) if decode else 0, prefill, context)
        self.decode_tokens += decode
        self.prefill_tokens += prefill
        self.finish(finished)
        return StepCounts(len(scheduled) - decoding, prefill, decoding, decode, context)

    def advance_clock(self, decode_padded: int, prefill: int, context: int) -> None:
        step_s = self.cost.step_s(decode_padded, prefill, context)
        self.t = self.t + step_s
        self.device_s = self.device_s + step_s
        self.steps += 1

    def finish(self, finished: list[Request]) -> None:
        """Free the finished requests' blocks (in scheduled order) and send each one's
        next round after its gap (or at its fixed time)."""
        next_fixed = self.inputs.arrays.next_fixed
        for r in finished:
            self.pool.free(r.blocks)
            r.blocks = []
            r.finish_s = self.t
            follow = next_fixed[r.rid]  # -1 on a session's last round
            if follow >= 0 and not self.driven:
                when = self.t + r.gap_after_s if self.fixed is None else self.fixed[follow]
                self._send(r.rid + 1, when)
        if finished:
            done = {r.rid for r in finished}
            self.running = [r for r in self.running if r.rid not in done]

    def raw(self) -> RawRun:
        """The run's per-request columns and totals."""
        rs = self.requests
        return RawRun(
            cached_tokens=[r.cached_tokens for r in rs],
            preemptions=[r.preemptions for r in rs],
            steps=[r.steps for r in rs],
            arrival_s=[r.arrival_s for r in rs],
            first_scheduled_s=[r.first_scheduled_s for r in rs],
            finish_s=[r.finish_s for r in rs],
            total_steps=self.steps,
            decode_tokens=self.decode_tokens,
            prefill_tokens=self.prefill_tokens,
            device_s=self.device_s,
            makespan_s=self.t,
        )
