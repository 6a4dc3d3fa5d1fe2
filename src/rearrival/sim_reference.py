"""Plain step-by-step reference of the predictor simulator (SPEC section 5).

Used ONLY by the tests and ``benchmarks/bench_sim.py`` to check the event core in
``rearrival.sim``: it executes one prefill or one decode step per loop iteration, keeps
its own naive slot list instead of ``rearrival.kvslots``, and is written to be obviously
right, not fast. Both must agree exactly on every integer output and to 1e-9 relative on
times (the core multiplies a step time by a stretch length where this adds it per step).

It applies the same rules and the same documented choices as ``rearrival.sim`` (see that
module's docstring): FIFO queue with session-index ties, arrivals seen at step
boundaries with 1e-12 s tolerance, slot secured before the KV look-up, FIFO eviction by
allocation order without refresh, deferred or immediate release, the optional
pre-evicted dummy block, a hit leaving its source slot cached, and follow-ups arriving at
completion + tool wait (or max(fixed time, completion) in the fixed-arrival variant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rearrival.kvslots import NO_OWNER
from rearrival.profile import Profile, measured_profile, select_bucket
from rearrival.sim import (
    ARRIVAL_TOLERANCE_S,
    REQUEST_COLUMNS,
    SimConfig,
    SimResult,
    plan_arrays,
)


@dataclass
class _Slot:
    index: int
    state: str = "free"  # free | busy | finished (release deferred) | evictable
    session: int | None = None  # whose KV the slot holds
    turn: int | None = None
    prompt_tokens: int = 0  # tokens prefill wrote
    allocated: int = -1  # allocation order


@dataclass
class _Request:
    session: int
    turn: int
    prompt_tokens: int
    gen_tokens: int
    arrival_s: float | None = None  # None until the session's first request completes
    admit_s: float = 0.0
    first_token_s: float = 0.0
    complete_s: float = 0.0
    cached_tokens: int = 0
    computed_tokens: int = 0
    prefill_s: float = 0.0
    slot: int = 0
    evicted_tag: int = NO_OWNER
    running_at_admission: int = 0
    decodes_left: int = 0
    state: str = "future"  # future | waiting | running | done


def simulate_reference(plan: Any, config: SimConfig,
                       profile: Profile | None = None) -> SimResult:
    """Step-by-step simulation with the same inputs and result type as ``sim.simulate``."""
    if profile is None:
        profile = measured_profile()
    prompt, gen, wait = plan_arrays(plan, config)
    count = len(wait)
    requests = [_Request(rid // 2, rid % 2, prompt[rid], gen[rid]) for rid in range(2 * count)]
    for session in range(count):
        requests[2 * session].arrival_s = 0.0
    slots = [_Slot(i) for i in range(config.slots)]
    deferred = config.release == "deferred"
    allocations = 0
    waiting: list[_Request] = []
    running: list[_Request] = []
    histogram: dict[tuple[int, int], int] = {}
    stretches: list[list[Any]] = []
    evictions: list[tuple[float, int, int, str]] = []
    t = 0.0
    decode_s = prefill_s = interference_s = 0.0
    last_was_decode = False

    def evict(slot: _Slot, cause: str) -> None:
        evictions.append((t, slot.index, 2 * slot.session + slot.turn, cause))
        slot.state, slot.session, slot.turn, slot.prompt_tokens = "free", None, None, 0

    def release_deferred() -> None:
        for slot in slots:
            if slot.state == "finished":
                slot.state = "evictable"

    def complete(request: _Request) -> None:
        request.state = "done"
        request.complete_s = t
        slot = slots[request.slot]
        slot.state = "finished" if deferred else "evictable"
        if request.turn == 0:
            follow_up = requests[2 * request.session + 1]
            if config.fixed_arrivals is None:
                follow_up.arrival_s = t + wait[request.session]
            else:
                follow_up.arrival_s = max(config.fixed_arrivals[request.session], t)

    while not all(r.state == "done" for r in requests):
        arrived = [r for r in requests if r.state == "future" and r.arrival_s is not None
                   and r.arrival_s <= t + ARRIVAL_TOLERANCE_S]
        for request in sorted(arrived, key=lambda r: (r.arrival_s, r.session)):
            request.state = "waiting"
            waiting.append(request)

        if waiting and len(running) < config.batch_size:
            free = [s for s in slots if s.state == "free"]
            evictable = [s for s in slots if s.state == "evictable"]
            if free or evictable:
                request = waiting.pop(0)
                if free:
                    slot = free[0]
                else:
                    slot = min(evictable, key=lambda s: s.allocated)
                    request.evicted_tag = 2 * slot.session + slot.turn
                    evict(slot, "admission")
                if deferred:
                    release_deferred()
                cached = 0
                for other in slots:
                    if other.session == request.session:
                        cached = max(cached, profile.reusable_tokens(other.prompt_tokens,
                                                                     request.prompt_tokens))
                slot.state, slot.session, slot.turn = "busy", request.session, request.turn
                slot.prompt_tokens, slot.allocated = request.prompt_tokens, allocations
                allocations += 1
                request.slot = slot.index
                request.admit_s = t
                request.cached_tokens = cached
                request.computed_tokens = request.prompt_tokens - cached
                request.prefill_s = profile.prefill_s(request.computed_tokens)
                request.running_at_admission = len(running)
                interference_s += len(running) * request.prefill_s
                prefill_s += request.prefill_s
                t += request.prefill_s
                request.first_token_s = t
                last_was_decode = False
                request.decodes_left = request.gen_tokens - 1
                if request.decodes_left == 0:
                    complete(request)
                else:
                    request.state = "running"
                    running.append(request)
                continue
            release_deferred()
            if not running:
                continue
        elif not running:
            t = min(r.arrival_s for r in requests if r.state == "future")
            continue

        n = len(running)
        pads = config.dummy_block == "pre-evict" and n < config.batch_size
        if pads and not any(s.state == "free" for s in slots):
            evictable = [s for s in slots if s.state == "evictable"]
            if evictable:
                evict(min(evictable, key=lambda s: s.allocated), "pre-evict")
        b = select_bucket(n, config.buckets)
        step = profile.decode_step_s(n, b)
        start = t
        t += step
        decode_s += step
        histogram[(n, b)] = histogram.get((n, b), 0) + 1
        if last_was_decode and stretches[-1][0] == n:
            stretches[-1][1] += 1
            stretches[-1][3] = t
        else:
            stretches.append([n, 1, start, t])
        last_was_decode = True
        for request in list(running):
            request.decodes_left -= 1
            if request.decodes_left == 0:
                running.remove(request)
                complete(request)

    columns = tuple([getattr(r, name) for r in requests] for name in REQUEST_COLUMNS)
    for request in requests:  # the record derives first_token_s from admit_s + prefill_s
        assert request.first_token_s == request.admit_s + request.prefill_s
    return SimResult(config, count, dict(sorted(histogram.items())), decode_s, prefill_s,
                     interference_s, t, columns, stretches, evictions)
