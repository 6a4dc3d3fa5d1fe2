"""The predictor's event loop in plain Python (``sim``, paper Section IV).

The readable statement of the loop and the fallback of ``simulate``:
``core`` compiles the same operations in the same order on flat
arrays, and ``reference`` is the per-step oracle both are held to bit
for bit. The rules it applies are in ``sim``'s docstring.
"""

from __future__ import annotations

import math
from heapq import heapify, heappop, heappush
from typing import Any

from rearrival.model.cost.profile import Profile
from rearrival.model.simulator.rbln.config import SimConfig
from rearrival.model.simulator.rbln.inputs import checked_arrays, request_tables, step_table
from rearrival.model.simulator.rbln.result import SimResult
from rearrival.model.simulator.rbln.slots import NO_OWNER, SlotPool
from rearrival.vocabulary import (
    ARRIVAL_TOLERANCE_S,
    EVICTED_BY_ADMISSION,
    EVICTED_BY_DUMMY_BLOCK,
)


def simulate_python(plan: Any, config: SimConfig, profile: Profile) -> SimResult:
    """The event core in plain Python: the fallback of ``simulate`` and the readable
    statement of what ``core`` compiles (same operations, same order)."""
    # Per-plan and per-configuration work is cached (plan_arrays, request_tables,
    # step_table) and the loop below works on locals.
    arrays = checked_arrays(plan, config)
    gen, round_of = arrays.gen, arrays.round_of
    next_fixed, follower = arrays.next_fixed, arrays.follower
    gap, fixed, follow_gap = arrays.gap, config.fixed_arrivals, arrays.follow_gap
    miss_cost, pair_off, pair_reuse, pair_cost, owners = request_tables(plan, arrays, profile)
    step_s, bucket_of = step_table(config, profile)
    batch = config.batch_size
    eps = ARRIVAL_TOLERANCE_S

    # KV slots: rearrival.model.simulator.rbln.slots is the model. SlotPool.admit is written
    # out below on the pool's public state instead of called (as in the compiled core): it
    # runs once per request of every simulation, and the call with its generic per-session
    # look-up took about a quarter of a simulation.
    slots = config.slots
    pool = SlotPool(slots, config.release)
    deferred, release_deferred = pool.deferred, pool.release_deferred
    pad_below = batch if config.dummy_block == "pre-evict" else 0  # dummy block when n < this
    reserve_below = batch if config.dummy_block == "reserved" else 0  # reserved when n < this
    # "free - reserved + evictable >= 1" is the cheap form of pool.can_secure(reserved)
    free, evictable, pending = pool.free, pool.evictable, pool.pending
    slot_owner, slot_key = pool.owner, pool.key

    columns = _request_columns(arrays.requests)
    arrival, admit_s, complete_s, cached, prefill_s, slot_of, evicted_tag, running_at = columns
    # heap of (arrival time, rid) of the queued requests: FIFO in arrival order, except
    # that a fixed arrival time before the completion that queued it orders it by that time
    waiting: list[tuple[float, int]] = []
    arrivals = _first_arrivals(arrays, arrival)
    # Heap of ``decode clock at completion << shift | rid``: ordered like (clock, rid)
    # pairs, but plain ints, so a push builds no tuple and the heap compares ints.
    running: list[int] = []
    shift = arrays.requests.bit_length()
    rid_mask = (1 << shift) - 1
    hist = [0] * (batch + 1)
    stretches: list[list[Any]] = []
    evictions: list[tuple[float, int, int, str]] = []
    t, clock = 0.0, 0  # the time; decode steps so far
    prefill_total = interference = 0.0
    stretch_n = 0  # n of the stretch a decode step would extend (0: a prefill came after it)
    inf = math.inf
    due = arrivals[0][0] if arrivals else inf  # earliest pending arrival

    while True:
        while due <= t + eps:
            heappush(waiting, heappop(arrivals))
            due = arrivals[0][0] if arrivals else inf
        nrun = len(running)
        if waiting and nrun < batch:
            # The padding block's reserved slot (variant d) while 0 < n < batch_size.
            reserved = 1 if 0 < nrun < reserve_below else 0
            if len(free) - reserved + len(evictable) >= 1:
                rid = heappop(waiting)[1]
                # SlotPool.admit: secure a slot (a free one, else the FIFO victims), apply
                # the deferred releases, look up, occupy. The look-up walks the session's
                # earlier rounds from the latest: a round's prompt contains every earlier
                # one, so the latest whose owner entry still sits in its slot gives the
                # largest cached prefix (request_tables holds C and T(L - C) per pair).
                if len(free) > reserved:
                    slot = heappop(free)
                else:
                    for _ in range(reserved - len(free)):  # the padding block's slot
                        slot = heappop(evictable) % slots
                        victim = slot_owner[slot][0]
                        slot_owner[slot] = None
                        heappush(free, slot)
                        evictions.append((t, slot, victim, EVICTED_BY_ADMISSION))
                    slot = heappop(evictable) % slots
                    victim = slot_owner[slot][0]
                    slot_owner[slot] = None  # its KV is gone, even if it was the prefix
                    evicted_tag[rid] = victim
                    evictions.append((t, slot, victim, EVICTED_BY_ADMISSION))
                if pending:
                    for finished in pending:
                        heappush(evictable, slot_key[finished])
                    pending.clear()
                cost = miss_cost[rid]
                for d in range(1, round_of[rid] + 1):
                    if slot_owner[slot_of[rid - d]] is owners[rid - d]:
                        pair = pair_off[rid] + d - 1
                        cached[rid] = pair_reuse[pair]
                        cost = pair_cost[pair]
                        break
                slot_owner[slot] = owners[rid]
                key = pool.next_key
                slot_key[slot] = key + slot
                pool.next_key = key + slots
                admit_s[rid] = t
                prefill_s[rid] = cost
                slot_of[rid] = slot
                running_at[rid] = nrun
                interference += nrun * cost
                prefill_total += cost
                t += cost
                stretch_n = 0
                steps = gen[rid] - 1
                if steps:
                    heappush(running, (clock + steps) << shift | rid)
                else:  # done with its prefill
                    complete_s[rid] = t
                    if deferred:  # SlotPool.finish
                        pending.append(slot)
                    else:
                        heappush(evictable, slot_key[slot])
                    nf = next_fixed[rid]
                    if nf >= 0:  # the session's next round, after the tool gap
                        when = t + gap[rid] if fixed is None else fixed[nf]
                        arrival[rid + 1] = when
                        heappush(arrivals, (when, rid + 1))
                        if when < due:
                            due = when
                    nf = follower[rid]
                    if nf >= 0:  # the renewing session's round 0, after its gap
                        when = t + follow_gap[rid]
                        arrival[nf] = when
                        heappush(arrivals, (when, nf))
                        if when < due:
                            due = when
                continue
            release_deferred()
            if not nrun:
                continue
        elif not nrun:
            if due == inf:
                break
            t = due
            continue

        if nrun < pad_below and not free and evictable:  # SlotPool.pre_evict
            slot = heappop(evictable) % slots
            victim = slot_owner[slot][0]
            slot_owner[slot] = None
            heappush(free, slot)
            evictions.append((t, slot, victim, EVICTED_BY_DUMMY_BLOCK))
        dt = step_s[nrun]
        k = (running[0] >> shift) - clock  # steps to the next completion
        end = t + k * dt
        if waiting:
            # The head of the queue is blocked (batch full, or no slot even after the
            # releases): later arrivals queue behind it and change nothing before the
            # next completion, unless this step's release or dummy block freed a slot.
            if nrun < batch and len(free) - reserved + len(evictable) >= 1:
                k = 1
                end = t + dt
        elif due <= end + eps and nrun < batch:
            # The arrival is seen before the next completion: stop at the first boundary
            # t + j*dt that sees it, by the exact test the next loop applies (arrival <=
            # boundary + eps); it is admitted there. due > t + eps here, so the estimate
            # is >= 1 and the loops only correct its rounding.
            k = int((due - t) / dt) + 1
            while k > 1 and due <= t + (k - 1) * dt + eps:
                k -= 1
            while due > t + k * dt + eps:
                k += 1
            end = t + k * dt
        clock += k
        hist[nrun] += k
        if nrun == stretch_n:
            last = stretches[-1]
            last[1] += k
            last[3] = end
        else:
            stretches.append([nrun, k, t, end])
            stretch_n = nrun
        t = end
        done = (clock + 1) << shift  # heap entries below this complete now
        while running and running[0] < done:
            rid = heappop(running) & rid_mask
            complete_s[rid] = t
            if deferred:  # SlotPool.finish
                pending.append(slot_of[rid])
            else:
                heappush(evictable, slot_key[slot_of[rid]])
            nf = next_fixed[rid]
            if nf >= 0:
                when = t + gap[rid] if fixed is None else fixed[nf]
                arrival[rid + 1] = when
                heappush(arrivals, (when, rid + 1))
                if when < due:
                    due = when
            nf = follower[rid]
            if nf >= 0:
                when = t + follow_gap[rid]
                arrival[nf] = when
                heappush(arrivals, (when, nf))
                if when < due:
                    due = when

    totals = (prefill_total, interference, t)
    return _result(config, arrays, (step_s, bucket_of), hist, totals, columns, stretches, evictions)


def _request_columns(requests: int) -> tuple[list[Any], ...]:
    """The per-request columns the loop writes, indexed by rid: arrival, admit, complete,
    cached tokens, prefill time, slot, evicted tag, running at admission. The first token
    time and the computed tokens are derived when records are built, so the hot loop does
    not store them."""
    zeros, ints = [0.0] * requests, [0] * requests
    return (
        zeros.copy(),
        zeros.copy(),
        zeros.copy(),
        ints.copy(),
        zeros,
        ints.copy(),
        [NO_OWNER] * requests,
        ints,
    )


def _first_arrivals(arrays: Any, arrival: list[float]) -> list[tuple[float, int]]:
    """The heap of (arrival time, rid) as the loop starts: every session's round 0 sent
    at its start (a renewed session's round 0 waits for its leader's last round, and each
    later round for the round before; docs/DESIGN.md §16; simultaneous: rid = session
    order). Each time is written into ``arrival``."""
    arrivals = [
        (when, rid)
        for when, rid, leader in zip(arrays.start, arrays.first[:-1], arrays.leader, strict=True)
        if leader < 0
    ]
    heapify(arrivals)
    for when, rid in arrivals:
        arrival[rid] = when
    return arrivals


def _result(
    config: SimConfig,
    arrays: Any,
    step_tables: tuple[list[float], list[int]],
    hist: list[int],
    totals: tuple[float, float, float],
    columns: tuple[list[Any], ...],
    stretches: list[list[Any]],
    evictions: list[tuple[float, int, int, str]],
) -> SimResult:
    """The loop's outcome as a ``SimResult``: the (n, b(n)) histogram and D's decode part
    summed in n order, the totals (prefill, interference, makespan) and the columns in the
    result's order (the plan's prompts beside them)."""
    step_s, bucket_of = step_tables
    histogram = {}
    decode_total = 0.0
    # One plain loop, not a comprehension plus a generator sum: ~5% of a simulation at
    # batch 16. The sum runs in n order.
    for n in range(1, config.batch_size + 1):
        steps = hist[n]
        if steps:
            histogram[(n, bucket_of[n])] = steps
            decode_total += steps * step_s[n]
    arrival, admit_s, complete_s, cached, prefill_s, slot_of, evicted_tag, running_at = columns
    prefill_total, interference, makespan = totals
    ordered = (
        arrival,
        admit_s,
        complete_s,
        arrays.prompt,
        cached,
        prefill_s,
        slot_of,
        evicted_tag,
        running_at,
    )
    return SimResult(
        config,
        arrays,
        histogram,
        decode_total,
        prefill_total,
        interference,
        makespan,
        ordered,
        stretches,
        evictions,
    )
