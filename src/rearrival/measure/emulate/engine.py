"""The server side of the emulated twin: admission, KV slots, exclusive steps, true durations.

docs/DESIGN.md §4-5, paper Section II-B. The engine is advanced one step at a time by
whoever owns the clock (``submit`` then ``step(now)``), so the in-process driver
(virtual time, :mod:`rearrival.measure.emulate.driver`) and the HTTP server
(``rearrival emulate-server``, a real clock) run the very same scheduler rules.
"""

from __future__ import annotations

import hashlib
import heapq
import math
from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from rearrival.measure.emulate.truth import (
    EmulateError,
    Truth,
    default_truth,
    true_bucket_cost_s,
    true_prefill_s,
)
from rearrival.measure.steplog import format_bucket_line
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.simulator.rbln.slots import Eviction
from rearrival.vocabulary import (
    ARRIVAL_TOLERANCE_S,
    EVICTED_BY_ADMISSION,
    EVICTED_BY_DUMMY_BLOCK,
)

EMULATOR_VERSION = "rearrival-emulate/1"
METRIC_NAMES = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_cached_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


@dataclass(frozen=True, slots=True)
class Admission:
    """What the engine decided when it admitted a request (its prefill step)."""

    request_id: Hashable
    session_key: Hashable
    slot: int
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    prefill_s: float
    running_at_admission: int
    reported_hit_tokens: int


@dataclass(frozen=True, slots=True)
class Finished:
    """A request that produced its last token at the end of this step."""

    request_id: Hashable
    session_key: Hashable
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    generated_tokens: int
    prefill_s: float


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """One engine step. Its effects (tokens, completions) happen at ``end_s``."""

    kind: str  # "prefill" | "decode"
    start_s: float
    duration_s: float
    n: int
    b: int | None
    emitted: tuple[Hashable, ...]
    finished: tuple[Finished, ...]
    evictions: tuple[Eviction, ...]
    admission: Admission | None

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(slots=True)
class _Request:
    request_id: Hashable
    session_key: Hashable
    prompt_tokens: int
    max_tokens: int
    arrival_s: float
    order: int
    slot: int = -1
    generated: int = 0
    cached: int = 0
    computed: int = 0
    prefill_s: float = 0.0

    def __lt__(self, other: _Request) -> bool:
        return (self.arrival_s, self.order) < (other.arrival_s, other.order)


_FREE, _RUNNING, _PENDING, _EVICTABLE = range(4)


@dataclass(slots=True)
class _Slot:
    state: int = _FREE
    session_key: Hashable = None
    cached_tokens: int = 0
    allocated: int = -1  # allocation sequence number: FIFO order, never refreshed


class _Noise:
    """Log-normal factors of median 1 drawn in blocks (one numpy call per 4,096 steps)."""

    def __init__(self, rng: np.random.Generator, sigma: float) -> None:
        self._rng, self._sigma = rng, sigma
        self._block: list[float] = []
        self._next = 0

    def factor(self) -> float:
        if self._sigma == 0:
            return 1.0
        if self._next == len(self._block):
            self._block = np.exp(self._sigma * self._rng.standard_normal(4096)).tolist()
            self._next = 0
        self._next += 1
        return self._block[self._next - 1]


class Engine:
    """The server side of the twin, advanced one step at a time by an external clock.

    Scheduling (paper II-B, docs/DESIGN.md §4-5): FIFO waiting queue by arrival at the
    engine; each step is one prefill or one decode, never both. A waiting request is
    admitted when fewer than batch_size run and a slot can be had: admission first
    secures a slot (a free one, else FIFO-evicting the oldest evictable slot by
    allocation order), then looks up the session's surviving KV, so a request can
    evict its own prefix. Prefill emits the first token; every decode step emits one
    token per running request at bucket b(n). Release is immediate on the measured
    stack (a finished request's slot is evictable at once); ``deferred`` is the
    predictor's base rule, kept to show the difference. With the dummy block rule,
    before a decode step with 0 < running < batch_size and no free slot, the oldest
    evictable slot is evicted to serve as the padding block.

    Prefix identity is by ``session_key``: a request reuses
    ``profile.reusable_tokens(P, prompt)`` from the session's surviving slot with the
    largest cached prompt P (the HTTP layer maps token-id prefixes to session keys).
    Every round of a multi-round session takes a slot of its own, so earlier rounds'
    slots stay evictable beside it; a later round looks among all that survive.
    """

    def __init__(
        self,
        config: RblnConfiguration,
        *,
        truth: Truth | None = None,
        profile: Profile | None = None,
        seed: int = 0,
    ) -> None:
        self.config = config
        self.truth = truth or default_truth()
        self.profile = profile or measured_profile()
        self._cost = {b: true_bucket_cost_s(self.truth, b) for b in config.buckets}
        self._step_noise = _Noise(
            np.random.default_rng(stream_seed(seed, "engine-steps")), self.truth.step_noise_sigma
        )
        self._prefill_noise = _Noise(
            np.random.default_rng(stream_seed(seed, "engine-prefill")),
            self.truth.prefill_noise_sigma,
        )
        self._slots = [_Slot() for _ in range(config.slots)]
        self._free = config.slots
        self._pending: list[int] = []
        self._allocations = 0
        self._submissions = 0
        self._waiting: list[_Request] = []
        self._running: list[_Request] = []
        self._known: set[Hashable] = set()
        self._ever_cached: dict[Hashable, int] = {}
        self._busy_until = -math.inf
        self.counters = dict.fromkeys(METRIC_NAMES, 0.0)
        self.log_lines: list[str] = []

    # -- client-facing -----------------------------------------------------------

    def submit(
        self,
        request_id: Hashable,
        session_key: Hashable,
        prompt_tokens: int,
        max_tokens: int,
        arrival_s: float,
    ) -> None:
        """Queue a request that reaches the scheduler at ``arrival_s`` (may be future)."""
        if request_id in self._known:
            raise EmulateError(
                f"request id {request_id!r} was already submitted; "
                "request ids must be unique within a run"
            )
        if prompt_tokens < 1 or max_tokens < 1:
            raise EmulateError(
                f"request {request_id!r}: prompt_tokens and max_tokens must "
                f"be >= 1, got {prompt_tokens} and {max_tokens}"
            )
        limit = self.profile.slot_tokens
        if prompt_tokens + max_tokens > limit:
            raise EmulateError(
                f"request {request_id!r}: prompt_tokens + max_tokens = "
                f"{prompt_tokens + max_tokens} exceeds max_seq_len {limit}; "
                "shorten the prompt or max_tokens"
            )
        self._known.add(request_id)
        request = _Request(
            request_id, session_key, prompt_tokens, max_tokens, float(arrival_s), self._submissions
        )
        self._submissions += 1
        heapq.heappush(self._waiting, request)

    @property
    def next_arrival_s(self) -> float | None:
        """When the earliest queued request reaches the scheduler (None: queue empty)."""
        return self._waiting[0].arrival_s if self._waiting else None

    @property
    def running(self) -> int:
        return len(self._running)

    def step(self, now_s: float) -> StepOutcome | None:
        """Run one step starting at ``now_s``; None when there is nothing to run yet.

        The caller advances its clock to ``outcome.end_s`` before the next call; a
        request whose arrival is after ``now_s`` waits for a later step boundary.
        """
        if now_s < self._busy_until - 1e-9:
            raise EmulateError(
                f"step at {now_s:.6f} s starts before the previous step "
                f"ended ({self._busy_until:.6f} s); advance the clock first"
            )
        outcome = self._try_admit(now_s)
        if outcome is None and self._running:
            outcome = self._decode(now_s)
        if outcome is not None:
            self._busy_until = outcome.end_s
        return outcome

    # -- slots ---------------------------------------------------------------------

    def _evict_oldest(self, now_s: float, cause: str) -> tuple[int, Eviction] | None:
        best = -1
        for index, slot in enumerate(self._slots):
            if slot.state == _EVICTABLE and (
                best < 0 or slot.allocated < self._slots[best].allocated
            ):
                best = index
        if best < 0:
            return None
        slot = self._slots[best]
        eviction = Eviction(now_s, best, slot.session_key, slot.cached_tokens, cause)
        self._slots[best] = _Slot()
        self._free += 1
        self.log_lines.append(
            f"INFO t={now_s:.6f} [emulate.kv] evict slot={best} "
            f"session={slot.session_key} cached_tokens={slot.cached_tokens} "
            f"reason={cause}"
        )
        return best, eviction

    def _secure_slot(self, now_s: float) -> tuple[int, Eviction | None] | None:
        if self._free:
            return next(i for i, s in enumerate(self._slots) if s.state == _FREE), None
        evicted = self._evict_oldest(now_s, EVICTED_BY_ADMISSION)
        return None if evicted is None else evicted

    def _apply_pending(self) -> None:
        for index in self._pending:
            self._slots[index].state = _EVICTABLE
        self._pending.clear()

    def _release(self, request: _Request) -> None:
        slot = self._slots[request.slot]
        if self.truth.release == "immediate":
            slot.state = _EVICTABLE
        else:
            slot.state = _PENDING
            self._pending.append(request.slot)

    def _lookup(self, request: _Request) -> int:
        """Largest reusable prefix among the session's surviving slots (0 if none)."""
        best = 0
        for slot in self._slots:
            if slot.state != _FREE and slot.session_key == request.session_key:
                best = max(
                    best, self.profile.reusable_tokens(slot.cached_tokens, request.prompt_tokens)
                )
        return best

    # -- steps ---------------------------------------------------------------------

    def _try_admit(self, now_s: float) -> StepOutcome | None:
        waiting = self._waiting
        if (
            not waiting
            or waiting[0].arrival_s > now_s + ARRIVAL_TOLERANCE_S
            or len(self._running) >= self.config.batch_size
        ):
            return None
        secured = self._secure_slot(now_s)
        if secured is None and self._pending:
            # No slot is free or evictable only because releases are deferred: apply
            # them and decode once instead; with nothing running, retry at once.
            self._apply_pending()
            if self._running:
                return None
            secured = self._secure_slot(now_s)
        if secured is None:
            return None  # S < batch_size and every slot runs: decode until one frees
        index, eviction = secured
        request = heapq.heappop(waiting)
        self._apply_pending()  # deferred releases become evictable after the victim
        return self._prefill(now_s, request, index, eviction)

    def _prefill(
        self, now_s: float, request: _Request, index: int, eviction: Eviction | None
    ) -> StepOutcome:
        key, prompt = request.session_key, request.prompt_tokens
        cached = self._lookup(request)
        reported = (
            self.profile.reusable_tokens(self._ever_cached[key], prompt)
            if key in self._ever_cached
            else 0
        )
        computed = prompt - cached
        duration = true_prefill_s(self.truth, self.profile, computed) * self._prefill_noise.factor()
        running_before = len(self._running)
        self._slots[index] = _Slot(_RUNNING, key, prompt, self._allocations)
        self._allocations += 1
        self._free -= 1
        self._ever_cached[key] = max(self._ever_cached.get(key, 0), prompt)
        request.slot, request.generated = index, 1
        request.cached, request.computed, request.prefill_s = cached, computed, duration
        counters = self.counters
        counters["vllm:prompt_tokens_total"] += prompt
        counters["vllm:generation_tokens_total"] += 1
        counters["vllm:prompt_tokens_cached_total"] += cached
        counters["vllm:prefix_cache_queries_total"] += prompt
        # As on the real stack, the hit counter trusts the prefix index, which keeps a
        # session's prefix after its slot was evicted: it over-reports (paper II-D).
        counters["vllm:prefix_cache_hits_total"] += reported
        self.log_lines.append(
            f"INFO t={now_s:.6f} [emulate.scheduler] prefill request={request.request_id} "
            f"slot={index} prompt_tokens={prompt} cached_tokens={cached} "
            f"computed_tokens={computed} running={running_before}"
        )
        finished: tuple[Finished, ...] = ()
        if request.max_tokens == 1:
            finished = (self._finish(request),)
        else:
            self._running.append(request)
        admission = Admission(
            request.request_id,
            key,
            index,
            prompt,
            cached,
            computed,
            duration,
            running_before,
            reported,
        )
        return StepOutcome(
            "prefill",
            now_s,
            duration,
            1,
            None,
            (request.request_id,),
            finished,
            () if eviction is None else (eviction,),
            admission,
        )

    def _finish(self, request: _Request) -> Finished:
        self._release(request)
        return Finished(
            request.request_id,
            request.session_key,
            request.prompt_tokens,
            request.cached,
            request.computed,
            request.generated,
            request.prefill_s,
        )

    def _decode(self, now_s: float) -> StepOutcome:
        running = self._running
        n = len(running)
        evictions: tuple[Eviction, ...] = ()
        if self.truth.dummy_block == "pre-evict" and n < self.config.batch_size and not self._free:
            evicted = self._evict_oldest(now_s, EVICTED_BY_DUMMY_BLOCK)
            if evicted is not None:
                evictions = (evicted[1],)
        b = self.config.padded(n)
        base = self._cost[b] + self.truth.alpha_s + self.truth.beta_s * n
        duration = base * self._step_noise.factor()
        emitted = tuple(r.request_id for r in running)
        done = []
        for request in running:
            request.generated += 1
            if request.generated >= request.max_tokens:
                done.append(request)
        finished: tuple[Finished, ...] = ()
        if done:
            self._running = [r for r in running if r.generated < r.max_tokens]
            finished = tuple(self._finish(r) for r in done)
        self.counters["vllm:generation_tokens_total"] += n
        # The patch's monotonic reading at the step's start (virtual clock, ns).
        self.log_lines.append(
            f"DEBUG t={now_s:.6f} [model_base.py] {format_bucket_line(n, b, round(now_s * 1e9))}"
        )
        return StepOutcome("decode", now_s, duration, n, b, emitted, finished, evictions, None)


def stream_seed(seed: int, stream: str) -> int:
    """A 64-bit seed per randomness stream, from SHA-256 (never Python's ``hash()``).

    Separate streams keep client jitter and HTTP latency identical across the
    conditions of a replicate run with the same seed (common random numbers), while
    engine noise follows the steps each condition actually runs.
    """
    text = f"{EMULATOR_VERSION}|seed={seed}|stream={stream}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")
