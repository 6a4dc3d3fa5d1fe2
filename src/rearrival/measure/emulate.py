"""The ``emulated`` measurement backend: a virtual-time twin of the measured RBLN stack.

SPEC section 6, paper Sections II-III. The predictor (``rearrival.model.sim``) is validated
against runs of this backend when no hardware is attached, so the twin is deliberately
richer than the predictor: it follows the measured stack's scheduler rules (immediate
slot release and the dummy padding block, SPEC section 5 variants b/c) rather than the
predictor's base rules, uses a true f(b) that is not the predictor's linear
interpolation, adds log-normal step and prefill noise, client send jitter and
turnaround, and per-request HTTP/scheduler latency that only channel B can see. Every
value comes from ``data/emulator_truth.yaml`` with its reason.

Two layers, kept apart so the HTTP server (``rearrival emulate-server``) can drive the
same engine from a real clock:

- :class:`Engine` is the server: a waiting queue, admission, KV slots with FIFO
  eviction, exclusive prefill/decode steps and their true durations. It is advanced
  one step at a time by whoever owns the clock (``submit`` then ``step(now)``).
- The in-process driver (:func:`run_emulated`, :func:`run_injection`) is the client and
  the clock: one deterministic discrete-event loop in virtual time that sends the
  plan's requests, applies HTTP latency, tool waits and turnaround, and turns what the
  engine did into the run records of SPEC section 7.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import math
from collections.abc import Hashable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rearrival.errors import RearrivalError
from rearrival.measure.steplog import format_bucket_line
from rearrival.model.plans import Plan
from rearrival.model.profile import Profile, bucket_set_problem, measured_profile, select_bucket
from rearrival.provenance import field_value, read_mapping, shipped_mapping

EMULATOR_VERSION = "rearrival-emulate/1"
DEFAULT_TRUTH = "emulator_truth.yaml"
RELEASES = ("immediate", "deferred")
DUMMY_BLOCKS = ("pre-evict", "off")
# An arrival at t counts at a step boundary >= t - EPS (SPEC section 5), so float
# round-off in "completion + wait" never delays an admission by a whole step.
EPS = 1e-12
METRIC_NAMES = (
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_cached_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
)


class EmulateError(RearrivalError, ValueError):
    """Arguments or a truth file the emulated backend cannot run; names field and fix."""


# ---------------------------------------------------------------------------- truth


@dataclass(frozen=True)
class Truth:
    """The emulated stack's ground truth (times in seconds); see emulator_truth.yaml."""

    version: str
    bucket_cost_s: tuple[tuple[int, float], ...]
    convexity_s_per_bucket2: float
    alpha_s: float
    beta_s: float
    step_noise_sigma: float
    prefill_noise_sigma: float
    release: str
    dummy_block: str
    first_send_spread_s: tuple[float, float]
    turnaround_s: tuple[float, float]
    ingress_median_s: float
    egress_median_s: float
    latency_sigma: float
    # True prefill law ceil(q/chunk) * (per_chunk + per_token * q); None: the profile's fit
    # (the shipped truth), so only a truth file that says otherwise departs from it.
    prefill_per_chunk_s: float | None = None
    prefill_per_token_s: float | None = None

    def __post_init__(self) -> None:
        points = [b for b, _ in self.bucket_cost_s]
        if len(points) < 2 or points != sorted(set(points)) or points[0] < 1:
            raise EmulateError("truth field 'decode.bucket_cost_ms' needs two or more "
                               "distinct positive buckets")
        costs = [c for _, c in self.bucket_cost_s]
        if any(b <= a for a, b in itertools.pairwise(costs)):
            raise EmulateError("truth field 'decode.bucket_cost_ms' must increase with the "
                               "bucket (a monotone f(b) is what PCHIP preserves)")
        if self.release not in RELEASES:
            raise EmulateError(f"truth field 'scheduler.release' is {self.release!r}; "
                               f"use one of {', '.join(RELEASES)}")
        if self.dummy_block not in DUMMY_BLOCKS:
            raise EmulateError(f"truth field 'scheduler.dummy_block' is {self.dummy_block!r}; "
                               f"use one of {', '.join(DUMMY_BLOCKS)}")
        nonnegative = {
            "decode.convexity_above_largest_ms_per_bucket2": self.convexity_s_per_bucket2,
            "decode.alpha_ms": self.alpha_s, "decode.beta_ms_per_request": self.beta_s,
            "decode.step_noise_sigma": self.step_noise_sigma,
            "prefill.noise_sigma": self.prefill_noise_sigma,
            "http.ingress_median_ms": self.ingress_median_s,
            "http.egress_median_ms": self.egress_median_s,
            "http.latency_sigma": self.latency_sigma,
            "prefill.per_chunk_ms": self.prefill_per_chunk_s or 0.0,
            "prefill.per_token_ms": self.prefill_per_token_s or 0.0,
        }
        if (self.prefill_per_chunk_s is None) != (self.prefill_per_token_s is None):
            raise EmulateError("truth fields 'prefill.per_chunk_ms' and 'prefill.per_token_ms' "
                               "go together: give both or neither")
        for name, value in nonnegative.items():
            if not value >= 0:  # also rejects NaN
                raise EmulateError(f"truth field '{name}' must be a number >= 0, got {value}")
        for name, (low, high) in (("client.first_send_spread_ms", self.first_send_spread_s),
                                  ("client.turnaround_ms", self.turnaround_s)):
            if not 0 <= low <= high:
                raise EmulateError(f"truth field '{name}' must be [low, high] with "
                                   f"0 <= low <= high, got {[low, high]}")

    def with_changes(self, **changes: Any) -> Truth:
        """A variant of this truth (e.g. ``release="deferred"``), validated again."""
        return replace(self, **changes)


def _field(tree: dict[str, Any], dotted: str, source: str) -> Any:
    return field_value(tree, dotted, source, error=EmulateError, reference=DEFAULT_TRUTH,
                       require_value=True)


def truth_from_mapping(tree: dict[str, Any], source: str = "<truth>") -> Truth:
    """Build a Truth from the parsed YAML tree; milliseconds in the file, seconds here."""
    def ms(dotted: str) -> float:
        return float(_field(tree, dotted, source)) / 1000

    def ms_pair(dotted: str) -> tuple[float, float]:
        low, high = _field(tree, dotted, source)
        return float(low) / 1000, float(high) / 1000

    try:
        costs = _field(tree, "decode.bucket_cost_ms", source)
        values = dict(
            version=str(tree.get("truth_version", "unversioned")),
            bucket_cost_s=tuple(sorted((int(b), float(v) / 1000) for b, v in costs.items())),
            convexity_s_per_bucket2=ms("decode.convexity_above_largest_ms_per_bucket2"),
            alpha_s=ms("decode.alpha_ms"),
            beta_s=ms("decode.beta_ms_per_request"),
            step_noise_sigma=float(_field(tree, "decode.step_noise_sigma", source)),
            prefill_noise_sigma=float(_field(tree, "prefill.noise_sigma", source)),
            release=str(_field(tree, "scheduler.release", source)),
            dummy_block=str(_field(tree, "scheduler.dummy_block", source)),
            first_send_spread_s=ms_pair("client.first_send_spread_ms"),
            turnaround_s=ms_pair("client.turnaround_ms"),
            ingress_median_s=ms("http.ingress_median_ms"),
            egress_median_s=ms("http.egress_median_ms"),
            latency_sigma=float(_field(tree, "http.latency_sigma", source)),
        )
        prefill = tree.get("prefill") or {}
        if "per_chunk_ms" in prefill or "per_token_ms" in prefill:
            values["prefill_per_chunk_s"] = ms("prefill.per_chunk_ms")
            values["prefill_per_token_s"] = ms("prefill.per_token_ms")
    except (AttributeError, TypeError, ValueError) as exc:
        if isinstance(exc, EmulateError):
            raise
        raise EmulateError(f"{source}: unusable truth value ({exc}); see {DEFAULT_TRUTH}") \
            from exc
    try:
        return Truth(**values)
    except EmulateError as exc:
        raise EmulateError(f"{source}: {exc}") from exc


def load_truth(path: str | Path | None = None) -> Truth:
    """Read a truth file; ``None`` gives the shipped twin of the measured RBLN stack."""
    if path is None:
        return default_truth()
    tree = read_mapping(Path(path), error=EmulateError, reference=DEFAULT_TRUTH)
    return truth_from_mapping(tree, str(path))


@cache
def default_truth() -> Truth:
    return truth_from_mapping(shipped_mapping(DEFAULT_TRUTH), DEFAULT_TRUTH)


@cache
def _cost_curve(points: tuple[tuple[int, float], ...],
                convexity: float) -> tuple[Any, float]:
    from scipy.interpolate import PchipInterpolator

    x = np.log2([b for b, _ in points])
    y = np.array([c for _, c in points])
    curve = PchipInterpolator(x, y, extrapolate=False)
    top = points[-1][0]
    # d f / d b at the largest measured bucket, from the curve's log2-space slope.
    end_slope = float(curve.derivative()(x[-1])) / (top * math.log(2))
    return curve, end_slope


def true_prefill_s(truth: Truth, profile: Profile, computed_tokens: int) -> float:
    """The twin's noise-free prefill time: the truth file's own law when it has one, else
    the profile's fitted T(q) (paper Section III-C), both with T(0) = 0."""
    if truth.prefill_per_chunk_s is None or truth.prefill_per_token_s is None:
        return profile.prefill_s(computed_tokens)
    if computed_tokens <= 0:
        return 0.0
    chunks = math.ceil(computed_tokens / profile.prefill_chunk_tokens)
    return chunks * (truth.prefill_per_chunk_s + truth.prefill_per_token_s * computed_tokens)


def true_bucket_cost_s(truth: Truth, bucket: int) -> float:
    """The twin's true f(b): the measured value where measured (paper Table VII), a
    monotone cubic (PCHIP) in log2(b) between them, and above the largest measured
    bucket the curve's end slope plus a gentle quadratic term (emulator_truth.yaml)."""
    points = truth.bucket_cost_s
    for b, cost in points:
        if b == bucket:
            return cost
    if bucket < points[0][0]:
        raise EmulateError(f"bucket {bucket} is below the smallest measured bucket "
                           f"{points[0][0]}; the truth has no cost for it")
    curve, end_slope = _cost_curve(points, truth.convexity_s_per_bucket2)
    top, top_cost = points[-1]
    if bucket > top:
        excess = bucket - top
        return top_cost + end_slope * excess + truth.convexity_s_per_bucket2 * excess**2
    return float(curve(math.log2(bucket)))


# ---------------------------------------------------------------------------- engine


@dataclass(frozen=True)
class EngineConfig:
    """A compiled configuration (bucket set, batch_size, KV slots; SPEC section 1)."""

    buckets: tuple[int, ...]
    batch_size: int
    slots: int | None = None

    def __post_init__(self) -> None:
        buckets = tuple(self.buckets)
        problem = bucket_set_problem(buckets, self.batch_size)
        if problem is not None:
            raise EmulateError(f"options --buckets/--batch-size: {problem}")
        if self.slots is not None and self.slots < 1:
            raise EmulateError(f"option --slots must be >= 1, got {self.slots}")
        object.__setattr__(self, "buckets", buckets)

    @property
    def slot_count(self) -> int:
        """S defaults to batch_size: one 8,192-token block per sequence (paper II-B)."""
        return self.batch_size if self.slots is None else self.slots


@dataclass(frozen=True, slots=True)
class Eviction:
    """A KV slot whose cached prefix was dropped: by an admission or as the padding block."""

    time_s: float
    slot: int
    session_key: Hashable
    cached_tokens: int
    reason: str  # "admission" | "dummy-block"


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

    Scheduling (paper II-B, SPEC sections 5-6): FIFO waiting queue by arrival at the
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
    """

    def __init__(self, config: EngineConfig, *, truth: Truth | None = None,
                 profile: Profile | None = None, seed: int = 0) -> None:
        self.config = config
        self.truth = truth or default_truth()
        self.profile = profile or measured_profile()
        self._cost = {b: true_bucket_cost_s(self.truth, b) for b in config.buckets}
        self._step_noise = _Noise(np.random.default_rng(stream_seed(seed, "engine-steps")),
                                  self.truth.step_noise_sigma)
        self._prefill_noise = _Noise(
            np.random.default_rng(stream_seed(seed, "engine-prefill")),
            self.truth.prefill_noise_sigma)
        self._slots = [_Slot() for _ in range(config.slot_count)]
        self._free = config.slot_count
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

    def submit(self, request_id: Hashable, session_key: Hashable, prompt_tokens: int,
               max_tokens: int, arrival_s: float) -> None:
        """Queue a request that reaches the scheduler at ``arrival_s`` (may be future)."""
        if request_id in self._known:
            raise EmulateError(f"request id {request_id!r} was already submitted; "
                               "request ids must be unique within a run")
        if prompt_tokens < 1 or max_tokens < 1:
            raise EmulateError(f"request {request_id!r}: prompt_tokens and max_tokens must "
                               f"be >= 1, got {prompt_tokens} and {max_tokens}")
        limit = self.profile.slot_tokens
        if prompt_tokens + max_tokens > limit:
            raise EmulateError(f"request {request_id!r}: prompt_tokens + max_tokens = "
                               f"{prompt_tokens + max_tokens} exceeds max_seq_len {limit}; "
                               "shorten the prompt or max_tokens")
        self._known.add(request_id)
        request = _Request(request_id, session_key, prompt_tokens, max_tokens,
                           float(arrival_s), self._submissions)
        self._submissions += 1
        heapq.heappush(self._waiting, request)

    @property
    def idle(self) -> bool:
        """Nothing running and nothing queued: the engine waits for a submission."""
        return not self._running and not self._waiting

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
            raise EmulateError(f"step at {now_s:.6f} s starts before the previous step "
                               f"ended ({self._busy_until:.6f} s); advance the clock first")
        outcome = self._try_admit(now_s)
        if outcome is None and self._running:
            outcome = self._decode(now_s)
        if outcome is not None:
            self._busy_until = outcome.end_s
        return outcome

    # -- slots ---------------------------------------------------------------------

    def _evict_oldest(self, now_s: float, reason: str) -> tuple[int, Eviction] | None:
        best = -1
        for index, slot in enumerate(self._slots):
            if slot.state == _EVICTABLE and (
                    best < 0 or slot.allocated < self._slots[best].allocated):
                best = index
        if best < 0:
            return None
        slot = self._slots[best]
        eviction = Eviction(now_s, best, slot.session_key, slot.cached_tokens, reason)
        self._slots[best] = _Slot()
        self._free += 1
        self.log_lines.append(f"INFO t={now_s:.6f} [emulate.kv] evict slot={best} "
                              f"session={slot.session_key} cached_tokens={slot.cached_tokens} "
                              f"reason={reason}")
        return best, eviction

    def _secure_slot(self, now_s: float) -> tuple[int, Eviction | None] | None:
        if self._free:
            return next(i for i, s in enumerate(self._slots) if s.state == _FREE), None
        evicted = self._evict_oldest(now_s, "admission")
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
                best = max(best, self.profile.reusable_tokens(slot.cached_tokens,
                                                              request.prompt_tokens))
        return best

    # -- steps ---------------------------------------------------------------------

    def _try_admit(self, now_s: float) -> StepOutcome | None:
        waiting = self._waiting
        if (not waiting or waiting[0].arrival_s > now_s + EPS
                or len(self._running) >= self.config.batch_size):
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

    def _prefill(self, now_s: float, request: _Request, index: int,
                 eviction: Eviction | None) -> StepOutcome:
        key, prompt = request.session_key, request.prompt_tokens
        cached = self._lookup(request)
        reported = (self.profile.reusable_tokens(self._ever_cached[key], prompt)
                    if key in self._ever_cached else 0)
        computed = prompt - cached
        duration = true_prefill_s(self.truth, self.profile, computed) \
            * self._prefill_noise.factor()
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
            f"computed_tokens={computed} running={running_before}")
        finished: tuple[Finished, ...] = ()
        if request.max_tokens == 1:
            finished = (self._finish(request),)
        else:
            self._running.append(request)
        admission = Admission(request.request_id, key, index, prompt, cached, computed,
                              duration, running_before, reported)
        return StepOutcome("prefill", now_s, duration, 1, None, (request.request_id,),
                           finished, () if eviction is None else (eviction,), admission)

    def _finish(self, request: _Request) -> Finished:
        self._release(request)
        return Finished(request.request_id, request.session_key, request.prompt_tokens,
                        request.cached, request.computed, request.generated,
                        request.prefill_s)

    def _decode(self, now_s: float) -> StepOutcome:
        running = self._running
        n = len(running)
        evictions: tuple[Eviction, ...] = ()
        if (self.truth.dummy_block == "pre-evict" and n < self.config.batch_size
                and not self._free):
            evicted = self._evict_oldest(now_s, "dummy-block")
            if evicted is not None:
                evictions = (evicted[1],)
        b = select_bucket(n, self.config.buckets)
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
        self.log_lines.append(f"DEBUG t={now_s:.6f} [model_base.py] "
                              f"{format_bucket_line(n, b, round(now_s * 1e9))}")
        return StepOutcome("decode", now_s, duration, n, b, emitted, finished, evictions,
                           None)


def stream_seed(seed: int, stream: str) -> int:
    """A 64-bit seed per randomness stream, from SHA-256 (never Python's ``hash()``).

    Separate streams keep client jitter and HTTP latency identical across the
    conditions of a replicate run with the same seed (common random numbers), while
    engine noise follows the steps each condition actually runs.
    """
    text = f"{EMULATOR_VERSION}|seed={seed}|stream={stream}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


# ---------------------------------------------------------------------------- driver


@dataclass(frozen=True)
class _Script:
    """What the client sends: first requests at fixed times, follow-ups after a wait."""

    prompts: tuple[tuple[int, ...], ...]  # per session, per turn
    gens: tuple[tuple[int, ...], ...]
    waits_s: tuple[float, ...]  # tool wait before each follow-up (sessions with turns)
    first_send_s: tuple[float, ...]


@dataclass
class EmulatedRun:
    """Everything one emulated run produced, as plain data (SPEC section 7 contents).

    ``requests`` and ``steps`` follow the run-record contract of TEAM.md exactly;
    ``tokens`` holds every token's arrival at the client (session, turn, index, t_s;
    server_s is its emission by the engine) and ``evictions`` every dropped KV slot,
    for timelines and the injection study.
    """

    requests: pd.DataFrame
    steps: pd.DataFrame
    tokens: pd.DataFrame
    evictions: pd.DataFrame
    server_log: str
    metrics: dict[str, dict[str, float]]
    counts: dict[str, int]
    configuration: dict[str, Any]
    variant: str
    seed: int
    plan_sha256: str | None
    truth_version: str


class _Client:
    """The client and the HTTP front end around one engine, in virtual time.

    The front end is one asyncio process, so requests reach the scheduler in the order
    they were sent (each after its own ingress latency, never overtaking an earlier
    send): simultaneous first sends are admitted in actual send order (II-C). Tokens
    reach the client after the request's egress latency. Latencies and turnarounds are
    drawn per (session, turn) up front, so every condition run with the same seed sees
    the same client-side draws (common random numbers across paired conditions).
    """

    def __init__(self, script: _Script, truth: Truth, seed: int, engine: Engine) -> None:
        self.script, self.engine = script, engine
        shape = (len(script.prompts), max(len(p) for p in script.prompts))
        http = np.random.default_rng(stream_seed(seed, "http"))
        self.ingress = _latency(http, truth.ingress_median_s, truth.latency_sigma, shape)
        self.egress = _latency(http, truth.egress_median_s, truth.latency_sigma, shape)
        client = np.random.default_rng(stream_seed(seed, "client-turnaround"))
        self.turnaround = client.uniform(*truth.turnaround_s, size=shape)
        self.sends: list[tuple[float, int, int]] = []
        self.last_arrival_s = -math.inf
        self.step_rows: list[tuple[str, int, int | None, float, float]] = []
        self.token_rows: list[tuple[int, int, int, float, float]] = []
        self.eviction_rows: list[tuple[float, int, Hashable, int, str]] = []
        self.requests: dict[tuple[int, int], dict[str, Any]] = {}
        for session, send_s in enumerate(script.first_send_s):
            self.schedule(session, 0, send_s)

    def schedule(self, session: int, turn: int, send_s: float) -> None:
        self.requests[(session, turn)] = {"send_s": send_s, "tokens": 0}
        heapq.heappush(self.sends, (send_s, session, turn))

    @property
    def next_send_s(self) -> float | None:
        return self.sends[0][0] if self.sends else None

    def deliver(self, until_s: float) -> None:
        """Hand every request sent by ``until_s`` to the engine, in send order."""
        while self.sends and self.sends[0][0] <= until_s + EPS:
            send_s, session, turn = heapq.heappop(self.sends)
            arrival = max(send_s + float(self.ingress[session, turn]), self.last_arrival_s)
            self.last_arrival_s = arrival
            self.engine.submit((session, turn), session, self.script.prompts[session][turn],
                               self.script.gens[session][turn], arrival)

    def observe(self, outcome: StepOutcome) -> None:
        """Record a step; completed first requests schedule their follow-up."""
        end = outcome.end_s
        self.step_rows.append((outcome.kind, outcome.n, outcome.b, outcome.start_s, end))
        if outcome.admission is not None:
            adm = outcome.admission
            self.requests[adm.request_id].update(admitted_s=outcome.start_s,
                                                 reported_hit_tokens=adm.reported_hit_tokens)
        for ev in outcome.evictions:
            self.eviction_rows.append((ev.time_s, ev.slot, ev.session_key, ev.cached_tokens,
                                       ev.reason))
        for session, turn in outcome.emitted:
            row = self.requests[(session, turn)]
            t_s = end + float(self.egress[session, turn])
            self.token_rows.append((session, turn, row["tokens"], t_s, end))
            if row["tokens"] == 0:
                row["first_token_s"] = t_s
            row["tokens"] += 1
        for done in outcome.finished:
            session, turn = done.request_id
            row = self.requests[(session, turn)]
            row.update(complete_s=end + float(self.egress[session, turn]),
                       prompt_tokens=done.prompt_tokens, cached_tokens=done.cached_tokens,
                       computed_tokens=done.computed_tokens,
                       generated_tokens=done.generated_tokens, prefill_s=done.prefill_s)
            if turn + 1 < len(self.script.prompts[session]):
                self.schedule(session, turn + 1, row["complete_s"]
                              + self.script.waits_s[session]
                              + float(self.turnaround[session, turn]))


def _latency(rng: np.random.Generator, median: float, sigma: float, size: Any) -> np.ndarray:
    return median * np.exp(sigma * rng.standard_normal(size))


def _drive(script: _Script, config: EngineConfig, truth: Truth, seed: int,
           profile: Profile) -> tuple[_Client, Engine]:
    """One discrete-event loop: deliver due sends, run a step, jump over idle time."""
    engine = Engine(config, truth=truth, profile=profile, seed=seed)
    client = _Client(script, truth, seed, engine)
    now = 0.0
    while True:
        client.deliver(now)
        outcome = engine.step(now)
        if outcome is not None:
            now = outcome.end_s
            client.observe(outcome)
            continue
        upcoming = [t for t in (engine.next_arrival_s, client.next_send_s) if t is not None]
        if not upcoming:
            return client, engine
        if min(upcoming) <= now:
            raise RuntimeError(f"engine stalled at {now:.6f} s with a due request")
        now = min(upcoming)


def _frames(rec: _Client) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    keys = sorted(rec.requests)
    rows = [rec.requests[k] for k in keys]
    requests = pd.DataFrame({
        "session": pd.array([k[0] for k in keys], dtype="int64"),
        "turn": pd.array([k[1] for k in keys], dtype="int64"),
        "send_s": np.array([r["send_s"] for r in rows], dtype="float64"),
        "first_token_s": np.array([r["first_token_s"] for r in rows], dtype="float64"),
        "complete_s": np.array([r["complete_s"] for r in rows], dtype="float64"),
        "prompt_tokens": pd.array([r["prompt_tokens"] for r in rows], dtype="int64"),
        "cached_tokens": pd.array([r["cached_tokens"] for r in rows], dtype="Int64"),
        "computed_tokens": pd.array([r["computed_tokens"] for r in rows], dtype="Int64"),
        "generated_tokens": pd.array([r["generated_tokens"] for r in rows], dtype="int64"),
        "prefill_s": np.array([r["prefill_s"] for r in rows], dtype="float64"),
    })
    kinds, ns, bs, starts, ends = zip(*rec.step_rows, strict=True) if rec.step_rows \
        else ((), (), (), (), ())
    steps = pd.DataFrame({
        "step": pd.array(range(len(kinds)), dtype="int64"),
        "kind": pd.array(kinds, dtype="string"),
        "n": pd.array(ns, dtype="int64"),
        "b": pd.array(bs, dtype="Int64"),
        "start_s": np.array(starts, dtype="float64"),
        "end_s": np.array(ends, dtype="float64"),
    })
    tokens = pd.DataFrame(rec.token_rows,
                          columns=["session", "turn", "index", "t_s", "server_s"]).astype(
        {"session": "int64", "turn": "int64", "index": "int64", "t_s": "float64",
         "server_s": "float64"})
    evictions = pd.DataFrame(rec.eviction_rows,
                             columns=["time_s", "slot", "session", "cached_tokens", "reason"])
    return requests, steps, tokens, evictions


def _check_seed(seed: int) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise EmulateError(f"option --seed must be an integer >= 0, got {seed!r}")


def _first_sends(seed: int, truth: Truth, count: int) -> tuple[float, ...]:
    """Sessions start together, but real first sends spread over a few ms (II-C)."""
    rng = np.random.default_rng(stream_seed(seed, "client-first-send"))
    width = rng.uniform(*truth.first_send_spread_s)
    return tuple(float(t) for t in rng.uniform(0.0, width, size=count))


def run_emulated(plan: Plan, *, buckets: tuple[int, ...] | list[int], batch_size: int,
                 slots: int | None = None, variant: str = "wait", seed: int,
                 truth: Truth | None = None, profile: Profile | None = None) -> EmulatedRun:
    """One run of ``plan`` under one condition on the emulated stack (SPEC 6-7).

    Each session sends its first request at t = first-send jitter, receives the
    response (engine completion + HTTP egress), waits the variant's tool wait plus the
    client turnaround, and sends the follow-up L1 = L0 + G0 + appended tokens. Same
    arguments give identical records; the run seed alone sets every random draw.
    """
    _check_seed(seed)
    config = EngineConfig(tuple(buckets), batch_size, slots)
    truth = truth or default_truth()
    profile = profile or measured_profile()
    conditioned = plan.variant(variant)
    script = _Script(
        prompts=tuple((s.prompt_tokens, s.followup_prompt_tokens)
                      for s in conditioned.sessions),
        gens=tuple((s.gen_tokens, s.followup_gen_tokens) for s in conditioned.sessions),
        waits_s=tuple(s.tool_wait_s for s in conditioned.sessions),
        first_send_s=_first_sends(seed, truth, conditioned.n),
    )
    rec, engine = _drive(script, config, truth, seed, profile)
    requests, steps, tokens, evictions = _frames(rec)
    follow = requests[requests["turn"] == 1]
    reported = sum(1 for (_, turn), row in rec.requests.items()
                   if turn == 1 and row["reported_hit_tokens"] > 0)
    counts = {
        "reuse_hits": int((follow["cached_tokens"] > 0).sum()),
        "re_arrivals": len(follow),
        "reported_hits": int(reported),
        "evictions": len(evictions),
        "dummy_evictions": int((evictions["reason"] == "dummy-block").sum()),
        "decode_steps": int((steps["kind"] == "decode").sum()),
        "prefill_steps": int((steps["kind"] == "prefill").sum()),
    }
    return EmulatedRun(
        requests=requests, steps=steps, tokens=tokens, evictions=evictions,
        server_log="\n".join(engine.log_lines) + "\n",
        metrics={"before": dict.fromkeys(METRIC_NAMES, 0.0), "after": dict(engine.counters)},
        counts=counts,
        configuration={"buckets": list(config.buckets), "batch_size": config.batch_size,
                       "slots": config.slot_count},
        variant=variant, seed=seed, plan_sha256=plan.sha256(), truth_version=truth.version,
    )


# --------------------------------------------------------------- prefill injection


def run_injection(*, background_sessions: int, injected_prompt_tokens: int,
                  inject_at_s: float, gen_tokens: int, buckets: tuple[int, ...] | list[int],
                  batch_size: int, seed: int, background_prompt_tokens: int = 1024,
                  window: int = 5, truth: Truth | None = None,
                  profile: Profile | None = None) -> pd.DataFrame:
    """Inter-token gaps of streaming background sessions around one injected prefill.

    Paper Section III-C / SPEC 11 item 5: prefill and decode never share a step, so a
    prefill admitted while others stream stalls every one of them for its whole
    duration. ``background_sessions`` stream ``gen_tokens`` each; at ``inject_at_s``
    the client sends one request of ``injected_prompt_tokens`` (no cached prefix,
    one generated token so only its prefill acts). Returns one row per background
    gap within ``window`` gaps of the one spanning the injection: session, index (the
    token ending the gap), gap_start_s, gap_end_s, gap_s, relative (0 = the gap
    containing the injected prefill), injected_prompt_tokens, injected_prefill_s.
    Choose ``inject_at_s`` after the background prefills (about 0.18 s each for 1,024
    tokens, plus ~85 ms HTTP ingress) so that the gaps before it are plain decode gaps.
    """
    _check_seed(seed)
    config = EngineConfig(tuple(buckets), batch_size)
    if not 1 <= background_sessions < config.slot_count:
        raise EmulateError(f"background_sessions must be between 1 and batch_size - 1 = "
                           f"{config.slot_count - 1} so the injected request is admitted "
                           f"at once, got {background_sessions}")
    truth = truth or default_truth()
    profile = profile or measured_profile()
    injected = background_sessions
    sends = (*_first_sends(seed, truth, background_sessions), float(inject_at_s))
    script = _Script(
        prompts=((background_prompt_tokens,),) * background_sessions
        + ((injected_prompt_tokens,),),
        gens=((gen_tokens,),) * background_sessions + ((1,),),
        waits_s=(0.0,) * (background_sessions + 1),
        first_send_s=sends,
    )
    rec, _ = _drive(script, config, truth, seed, profile)
    _, _, tokens, _ = _frames(rec)
    injection = rec.requests[(injected, 0)]
    prefill_end = injection["admitted_s"] + injection["prefill_s"]
    tokens = tokens[tokens["session"] != injected]
    gaps = tokens.assign(gap_start_s=tokens.groupby("session")["t_s"].shift(),
                         gap_end_s=tokens["t_s"]).dropna(subset=["gap_start_s"])
    # The gap spanning the injection ends with each session's first token emitted
    # after the injected prefill (server time, free of the session's HTTP latency).
    after = gaps[gaps["server_s"] >= prefill_end - EPS]
    anchor = after.groupby("session")["index"].min()
    if anchor.empty:
        raise EmulateError(f"inject_at_s={inject_at_s} is after the background sessions "
                           "stopped streaming; lower inject_at_s or raise gen_tokens")
    gaps = gaps[gaps["session"].isin(anchor.index)]
    relative = gaps["index"] - gaps["session"].map(anchor)
    out = gaps.assign(gap_s=gaps["gap_end_s"] - gaps["gap_start_s"], relative=relative,
                      injected_prompt_tokens=injected_prompt_tokens,
                      injected_prefill_s=float(injection["prefill_s"]))
    out = out[relative.abs() <= window]
    columns = ["session", "index", "gap_start_s", "gap_end_s", "gap_s", "relative",
               "injected_prompt_tokens", "injected_prefill_s"]
    out = out.sort_values(["session", "index"])
    return out[columns].reset_index(drop=True).astype(
        {"session": "int64", "index": "int64", "relative": "int64",
         "injected_prompt_tokens": "int64"})
