"""Plain step-by-step reference of the predictor simulator (docs/DESIGN.md §4).

Used ONLY by the tests and ``benchmarks/bench_sim.py`` to check the event core in
``sim``: it executes one prefill or one decode step per loop iteration,
runs the KV slots through the readable cache model ``slots.SlotPool``
(which the core writes out inline for speed), and is written to be obviously right, not fast.
Both must agree exactly on every integer output and to 1e-9 relative on times (the core
multiplies a step time by a stretch length where this adds it per step).

It applies the same rules and the same documented choices as ``sim`` (see
that module's docstring): FIFO queue with session-index ties, arrivals seen at step
boundaries with 1e-12 s tolerance, slot secured before the KV look-up, FIFO eviction by
allocation order without refresh, deferred or immediate release, the optional
pre-evicted or reserved dummy block, a hit leaving its source slot cached, the look-up
taking the largest prefix among all the session's surviving slots, round 0 of a session
sent at its start and every later round arriving at the previous round's completion +
its gap (or at its fixed time, queued no earlier than that completion, in the
fixed-arrival variant); a renewed session's round 0 arriving at its leader's last
completion + its gap (docs/DESIGN.md §2; fixed arrivals never cover it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rearrival.model.buckets import select_bucket
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.simulator.rbln.config import SimConfig
from rearrival.model.simulator.rbln.inputs import checked_arrays
from rearrival.model.simulator.rbln.result import REQUEST_COLUMNS, SimResult
from rearrival.model.simulator.rbln.slots import NO_OWNER, SlotPool
from rearrival.vocabulary import (
    ARRIVAL_TOLERANCE_S,
    EVICTED_BY_ADMISSION,
    EVICTED_BY_DUMMY_BLOCK,
)


@dataclass
class _Request:
    rid: int  # request id, (session, round) order
    session: int
    turn: int  # round index within the session
    prompt_tokens: int
    gen_tokens: int
    gap_after_s: float
    arrival_s: float | None = None  # None until the session's previous round completes
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


def simulate_reference(plan: Any, config: SimConfig, profile: Profile | None = None) -> SimResult:
    """Step-by-step simulation with the same inputs and result type as ``sim.simulate``."""
    if profile is None:
        profile = measured_profile()
    arrays = checked_arrays(plan, config)
    requests = [
        _Request(rid, *fields)
        for rid, fields in enumerate(
            zip(
                arrays.session_of,
                arrays.round_of,
                arrays.prompt,
                arrays.gen,
                arrays.gap,
                strict=True,
            )
        )
    ]
    for session, rid in enumerate(arrays.first[:-1]):  # round 0 is sent at the session start
        if arrays.leader[session] < 0:  # unless the session renews another one
            requests[rid].arrival_s = arrays.start[session]
    pool = SlotPool(config.slots, config.release)
    waiting: list[_Request] = []
    running: list[_Request] = []
    histogram: dict[tuple[int, int], int] = {}
    stretches: list[list[Any]] = []
    evictions: list[tuple[float, int, int, str]] = []
    t = 0.0
    decode_s = prefill_s = interference_s = 0.0
    last_was_decode = False

    def complete(request: _Request) -> None:
        request.state = "done"
        request.complete_s = t
        pool.finish(request.slot)
        rid = request.rid
        if rid + 1 < arrays.first[request.session + 1]:  # the session's next round
            follow_up = requests[rid + 1]
            if config.fixed_arrivals is None:
                follow_up.arrival_s = t + request.gap_after_s
            else:  # re-arrival index: the re-arrivals of earlier sessions come first
                follow_up.arrival_s = config.fixed_arrivals[rid - request.session]
        if arrays.follower[rid] >= 0:  # the session renewing this one (docs/DESIGN.md §16)
            requests[arrays.follower[rid]].arrival_s = t + arrays.follow_gap[rid]

    while not all(r.state == "done" for r in requests):
        arrived = [
            r
            for r in requests
            if r.state == "future"
            and r.arrival_s is not None
            and r.arrival_s <= t + ARRIVAL_TOLERANCE_S
        ]
        for request in sorted(arrived, key=lambda r: (r.arrival_s, r.session, r.turn)):
            request.state = "waiting"
            waiting.append(request)
        # the queue in (arrival, session, round) order: FIFO unless a fixed arrival time
        # precedes the completion that let its request be queued
        waiting.sort(key=lambda r: (r.arrival_s, r.session, r.turn))

        if waiting and len(running) < config.batch_size:
            # dummy-block rule "reserved": the padding block holds a slot while 0 < n < batch
            reserved = int(
                config.dummy_block == "reserved" and 0 < len(running) < config.batch_size
            )
            if pool.can_secure(reserved):
                request = waiting.pop(0)
                tag = request.rid
                slot, victim, cached, _, destroyed = pool.admit(
                    request.session, tag, request.prompt_tokens, profile.reusable_tokens, reserved
                )
                request.evicted_tag = victim
                for freed_slot, freed_tag in destroyed:
                    evictions.append((t, freed_slot, freed_tag, EVICTED_BY_ADMISSION))
                request.slot = slot
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
            pool.release_deferred()
            if not running:
                continue
        elif not running:
            t = min(
                r.arrival_s for r in requests if r.state == "future" and r.arrival_s is not None
            )
            continue

        n = len(running)
        if config.dummy_block == "pre-evict" and n < config.batch_size:
            freed = pool.pre_evict()
            if freed is not None:
                evictions.append((t, *freed, EVICTED_BY_DUMMY_BLOCK))
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
    return SimResult(
        config,
        arrays,
        dict(sorted(histogram.items())),
        decode_s,
        prefill_s,
        interference_s,
        t,
        columns,
        stretches,
        evictions,
    )
