"""Compiled event loops of the RBLN predictor (paper Section IV): one engine (``run``, for
``sim`` and the search's ``run_batch``) and a fleet of R engines behind a router
(``run_fleet``, for ``compiled_fleet``; docs/DESIGN.md §16).

``run`` is the loop of ``event.simulate_python`` written on flat numpy arrays and compiled
with numba (``cache=True``: the machine code is kept on disk next to this file, so only
the first process after an install pays the compile). The rules, the documented choices
and the order of every floating-point operation are the same as the Python core, so both
give the same bits; ``reference`` is the plain oracle both are tested against
(``tests/test_sim_equivalence.py``).

State (see ``slots`` for the cache model it writes out):

* int heaps on arrays (``rearrival.model.simulator.heaps``): ``free`` slots (lowest index
  first), ``evictable`` eviction keys ``allocation order * slots + slot``, ``running``
  keys ``completion clock << shift | rid``; the ``arrivals`` heap holds request ids
  ordered by (arrival time, rid): every session's round 0 from the start, each later
  round once the round before completes, a renewed session's round 0 once its leader's
  last round completes (docs/DESIGN.md §16). Request ids run in (session, round) order,
  so rid order is session index order.
* ``owner[slot]`` is the request id whose KV the slot holds (-1: none). Each request's
  owner entry is unique, so "round j's KV still sits in its slot" is
  ``owner[slot_of[j]] == j`` (the Python core compares the entry's identity).
* the waiting queue is a heap of request ids in the same (arrival time, rid) order:
  first in, first out, except that a fixed arrival time earlier than the completion that
  let the request be queued places it by that time (``sim`` variant a).

No validation happens here: ``sim`` validates plan and configuration once and converts
them to arrays (cached per plan and per configuration), and checks that the integer keys
cannot overflow (``fits_int64``), else it runs the Python core.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rearrival.model.simulator.heaps import pop, pop_arrival, push, push_arrival
from rearrival.vocabulary import ARRIVAL_TOLERANCE_S

NO_OWNER = -1
# result codes of the kernel
OK = 0
STRETCHES_FULL = 1  # the caller retries with more room for stretch/eviction rows
INT64_SAFE = 1 << 62


def fits_int64(total_gen_tokens: int, requests: int, slots: int) -> bool:
    """True when the kernel's packed integer keys cannot overflow int64 on this input.

    The running heap packs ``clock << shift | rid`` with clock <= total generated tokens,
    and eviction keys reach (admissions + 1) x slots.
    """
    shift = requests.bit_length()
    return ((total_gen_tokens + 1) << shift) < INT64_SAFE and (requests + 2) * slots < INT64_SAFE


@njit(cache=True, inline="always")
def _evict_oldest(evictable, n_evictable, owner, slots):
    """FIFO eviction by allocation order: the oldest evictable slot loses its KV."""
    value, n_evictable = pop(evictable, n_evictable)
    slot = value % slots
    victim = owner[slot]
    owner[slot] = NO_OWNER
    return slot, victim, n_evictable


@njit(cache=True, inline="always")
def _log_eviction(ev_f, ev_i, n_ev, t, slot, victim, cause):
    """One eviction row (time; slot, victim, cause); the caller checks the capacity."""
    ev_f[n_ev] = t
    ev_i[0, n_ev] = slot
    ev_i[1, n_ev] = victim
    ev_i[2, n_ev] = cause
    return n_ev + 1


@njit(cache=True, inline="always")
def _release_deferred(evictable, n_evictable, key, pending, n_pending):
    """Deferred release: every finished slot in ``pending[:n_pending]`` becomes evictable
    (the pending list is then empty); returns the new evictable count."""
    for i in range(n_pending):
        n_evictable = push(evictable, n_evictable, key[pending[i]])
    return n_evictable


@njit(cache=True, inline="always")
def _finish_slot(deferred, slot, pending, n_pending, evictable, n_evictable, key):
    """A request in ``slot`` finished: its slot waits for the next admission's choice
    (deferred release) or is evictable at once; returns (n_pending, n_evictable)."""
    if deferred:
        pending[n_pending] = slot
        return n_pending + 1, n_evictable
    return n_pending, push(evictable, n_evictable, key[slot])


@njit(cache=True, inline="always")
def _look_up(owner, slot_of, rounds, pair_off, pair_reuse, pair_cost, miss_cost, rid):
    """The session's latest earlier round whose KV still sits in its slot gives the
    largest cached prefix (``inputs.request_tables``); returns (cached tokens, T(L - C))."""
    for d in range(1, rounds[rid] + 1):
        if owner[slot_of[rid - d]] == rid - d:
            pair = pair_off[rid] + d - 1
            return pair_reuse[pair], pair_cost[pair]
    return 0, miss_cost[rid]


@njit(cache=True, inline="always")
def _steps_to_see(due, t, dt, eps):
    """Decode steps from ``t`` to the first boundary ``t + k * dt`` that sees an arrival
    at ``due > t + eps`` (the exact test the loop applies: due <= boundary + eps); the
    estimate is >= 1 and the loops only correct its rounding."""
    k = int((due - t) / dt) + 1
    while k > 1 and due <= t + (k - 1) * dt + eps:
        k -= 1
    while due > t + k * dt + eps:
        k += 1
    return k


@njit(cache=True)
def run(
    gen,
    gap,
    rounds,
    next_fixed,
    start,
    follower,
    follow_gap,
    starts,
    fixed,
    miss_cost,
    pair_off,
    pair_reuse,
    pair_cost,
    step_s,
    batch,
    slots,
    deferred,
    pad_below,
    reserve_below,
    req_f,
    req_i,
    work,
    hist,
    st_i,
    st_f,
    ev_f,
    ev_i,
    record,
):
    """One simulation. Inputs (read only):

    per request id (``rearrival.model.simulator.plan_arrays.PlanArrays``): gen, gap (tool gap after
    the round), rounds (round index), next_fixed (index into ``fixed`` of the next round's
    time, -1 on a session's last round), start (round 0: the session's start), follower
    (on a session's last round: the round 0 rid of the session renewing it, else -1) and
    follow_gap (its gap after this round), starts (1: round 0 of a session sent at its
    start; a renewed session's round 0 is sent by its leader's last round, docs/DESIGN.md §16);
    fixed (empty: re-arrival = completion + gap; it never covers a renewed round 0);
    miss_cost, pair_off and the flat pair_reuse/pair_cost
    (``inputs.request_tables``); step_s[n] for n = 0..batch.
    Outputs are written into the caller's arrays:

    req_f rows: arrival, admit, complete, prefill (per rid); req_i rows: cached, slot,
    evicted tag, running at admission; hist[n] decode steps; with ``record``, stretch
    rows (st_i: n, steps; st_f: start, end) and eviction rows (ev_f: time; ev_i: slot,
    victim rid, cause: 0 admission / 1 dummy block, the index into
    ``rearrival.vocabulary.EVICTION_CAUSES``). ``work`` is scratch (7 rows).

    Returns (code, prefill_total, interference, makespan, stretches, evictions).
    """
    requests = gen.shape[0]
    has_fixed = fixed.shape[0] > 0
    eps = ARRIVAL_TOLERANCE_S
    inf = np.inf
    arrival = req_f[0]
    admit_s = req_f[1]
    complete_s = req_f[2]
    prefill_s = req_f[3]
    cached = req_i[0]
    slot_of = req_i[1]
    evicted_tag = req_i[2]
    running_at = req_i[3]
    free = work[0]
    evictable = work[1]
    pending = work[2]
    key = work[3]
    owner = work[4]
    running = work[5]
    arrivals_heap = work[6]
    waiting = work[7]
    n_arrivals = 0
    for rid in range(requests):
        arrival[rid] = 0.0
        cached[rid] = 0
        evicted_tag[rid] = NO_OWNER
        complete_s[rid] = 0.0
        if starts[rid]:  # round 0 arrives at the session's start
            arrival[rid] = start[rid]
            n_arrivals = push_arrival(arrivals_heap, n_arrivals, rid, arrival)
    for n in range(hist.shape[0]):
        hist[n] = 0
    for slot in range(slots):
        free[slot] = slot  # ascending is a valid heap
        owner[slot] = NO_OWNER
        key[slot] = 0
    n_free = slots
    n_evictable = 0
    n_pending = 0
    next_key = 0
    n_running = 0
    n_waiting = 0
    shift = 0
    while (1 << shift) <= requests:
        shift += 1
    rid_mask = (1 << shift) - 1
    st_cap = st_i.shape[1]
    ev_cap = ev_f.shape[0]
    n_st = 0
    n_ev = 0
    t = 0.0
    clock = 0
    prefill_total = 0.0
    interference = 0.0
    stretch_n = 0
    due = arrival[arrivals_heap[0]] if n_arrivals else inf

    while True:
        while due <= t + eps:
            rid, n_arrivals = pop_arrival(arrivals_heap, n_arrivals, arrival)
            n_waiting = push_arrival(waiting, n_waiting, rid, arrival)
            due = arrival[arrivals_heap[0]] if n_arrivals else inf
        nrun = n_running
        if n_waiting and nrun < batch:
            reserved = 1 if 0 < nrun < reserve_below else 0
            if n_free - reserved + n_evictable >= 1:
                rid, n_waiting = pop_arrival(waiting, n_waiting, arrival)
                if n_free > reserved:
                    slot, n_free = pop(free, n_free)
                else:
                    for _ in range(reserved - n_free):  # the padding block's slot
                        slot, victim, n_evictable = _evict_oldest(
                            evictable, n_evictable, owner, slots
                        )
                        n_free = push(free, n_free, slot)
                        if record:
                            if n_ev == ev_cap:
                                return STRETCHES_FULL, 0.0, 0.0, 0.0, n_st, n_ev
                            n_ev = _log_eviction(ev_f, ev_i, n_ev, t, slot, victim, 0)
                    slot, victim, n_evictable = _evict_oldest(evictable, n_evictable, owner, slots)
                    evicted_tag[rid] = victim
                    if record:
                        if n_ev == ev_cap:
                            return STRETCHES_FULL, 0.0, 0.0, 0.0, n_st, n_ev
                        n_ev = _log_eviction(ev_f, ev_i, n_ev, t, slot, victim, 0)
                n_evictable = _release_deferred(evictable, n_evictable, key, pending, n_pending)
                n_pending = 0
                reused, cost = _look_up(
                    owner, slot_of, rounds, pair_off, pair_reuse, pair_cost, miss_cost, rid
                )
                cached[rid] = reused
                owner[slot] = rid
                key[slot] = next_key + slot
                next_key += slots
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
                    n_running = push(running, n_running, (clock + steps) << shift | rid)
                else:
                    complete_s[rid] = t
                    n_pending, n_evictable = _finish_slot(
                        deferred, slot, pending, n_pending, evictable, n_evictable, key
                    )
                    nf = next_fixed[rid]
                    if nf >= 0:
                        when = t + gap[rid] if not has_fixed else fixed[nf]
                        arrival[rid + 1] = when
                        n_arrivals = push_arrival(arrivals_heap, n_arrivals, rid + 1, arrival)
                        if when < due:
                            due = when
                    nf = follower[rid]
                    if nf >= 0:  # the renewing session's round 0 (docs/DESIGN.md §16)
                        when = t + follow_gap[rid]
                        arrival[nf] = when
                        n_arrivals = push_arrival(arrivals_heap, n_arrivals, nf, arrival)
                        if when < due:
                            due = when
                continue
            n_evictable = _release_deferred(evictable, n_evictable, key, pending, n_pending)
            n_pending = 0
            if not nrun:
                continue
        elif not nrun:
            if due == inf:
                break
            t = due
            continue

        if nrun < pad_below and not n_free and n_evictable:  # dummy block (S9)
            slot, victim, n_evictable = _evict_oldest(evictable, n_evictable, owner, slots)
            n_free = push(free, n_free, slot)
            if record:
                if n_ev == ev_cap:
                    return STRETCHES_FULL, 0.0, 0.0, 0.0, n_st, n_ev
                n_ev = _log_eviction(ev_f, ev_i, n_ev, t, slot, victim, 1)
        dt = step_s[nrun]
        k = (running[0] >> shift) - clock
        end = t + k * dt
        if n_waiting:
            if nrun < batch and n_free - reserved + n_evictable >= 1:
                k = 1
                end = t + dt
        elif due <= end + eps and nrun < batch:
            k = _steps_to_see(due, t, dt, eps)
            end = t + k * dt
        clock += k
        hist[nrun] += k
        if record:
            if nrun == stretch_n:
                st_i[1, n_st - 1] += k
                st_f[1, n_st - 1] = end
            else:
                if n_st == st_cap:
                    return STRETCHES_FULL, 0.0, 0.0, 0.0, n_st, n_ev
                st_i[0, n_st] = nrun
                st_i[1, n_st] = k
                st_f[0, n_st] = t
                st_f[1, n_st] = end
                n_st += 1
                stretch_n = nrun
        t = end
        done = (clock + 1) << shift
        while n_running and running[0] < done:
            value, n_running = pop(running, n_running)
            rid = value & rid_mask
            complete_s[rid] = t
            n_pending, n_evictable = _finish_slot(
                deferred, slot_of[rid], pending, n_pending, evictable, n_evictable, key
            )
            nf = next_fixed[rid]
            if nf >= 0:
                when = t + gap[rid] if not has_fixed else fixed[nf]
                arrival[rid + 1] = when
                n_arrivals = push_arrival(arrivals_heap, n_arrivals, rid + 1, arrival)
                if when < due:
                    due = when
            nf = follower[rid]
            if nf >= 0:
                when = t + follow_gap[rid]
                arrival[nf] = when
                n_arrivals = push_arrival(arrivals_heap, n_arrivals, nf, arrival)
                if when < due:
                    due = when
    return OK, prefill_total, interference, t, n_st, n_ev


@njit(cache=True)
def decode_total(hist, step_s):
    """D's decode part: sum over n (ascending, as the Python core) of steps x t(n)."""
    total = 0.0
    for n in range(1, hist.shape[0]):
        if hist[n]:
            total += hist[n] * step_s[n]
    return total


@njit(cache=True)
def run_batch(
    ints,
    floats,
    pair_reuse,
    pair_cost,
    step_table,
    batches,
    slot_counts,
    deferred,
    dummy,
    out_f,
    out_i,
):
    """Many configurations of one plan in one call (the search's inner loop).

    One rule set for all (``deferred`` release or immediate; ``dummy`` block 0 off,
    1 pre-evict, 2 reserved, the index into ``rearrival.vocabulary.DUMMY_BLOCKS``),
    re-arrival = completion + gap. ``ints``/``floats``/``pair_*`` as in ``run_summary``.
    Configuration c has batch size
    ``batches[c]``, ``slot_counts[c]`` slots and step times
    ``step_table[c, :batches[c] + 1]``. Writes per configuration
    out_f[c] = (device_s, decode_s, prefill_s, interference_s, makespan_s) and
    out_i[c] = (reuse_hits, computed_prefill_tokens of re-arrivals, decode steps).
    Scratch arrays are allocated once for the largest configuration.
    """
    requests = ints.shape[1]
    max_batch = 0
    max_slots = 0
    for c in range(batches.shape[0]):
        max_batch = max(max_batch, batches[c])
        max_slots = max(max_slots, slot_counts[c])
    req_f, req_i, work, hist = _scratch(requests, max_slots, max_batch)
    no_records = _record_tables(1)
    no_fixed = np.empty(0)
    for c in range(batches.shape[0]):
        batch = batches[c]
        step_s = step_table[c, : batch + 1]
        h = hist[: batch + 1]
        _, prefill_total, interference, makespan, _, _ = run_plan(
            ints,
            floats,
            pair_reuse,
            pair_cost,
            no_fixed,
            step_s,
            batch,
            slot_counts[c],
            deferred,
            batch if dummy == 1 else 0,
            batch if dummy == 2 else 0,
            (req_f, req_i, work, h),
            no_records,
            False,
        )
        decode = decode_total(h, step_s)
        hits, computed = _reuse_counts(ints, req_i)
        steps = 0
        for n in range(batch + 1):
            steps += h[n]
        out_f[c, 0] = decode + prefill_total
        out_f[c, 1] = decode
        out_f[c, 2] = prefill_total
        out_f[c, 3] = interference
        out_f[c, 4] = makespan
        out_i[c, 0] = hits
        out_i[c, 1] = computed
        out_i[c, 2] = steps


@njit(cache=True, inline="always")
def run_plan(
    ints,
    floats,
    pair_reuse,
    pair_cost,
    fixed,
    step_s,
    batch,
    slots,
    deferred,
    pad_below,
    reserve_below,
    scratch,
    records,
    record,
):
    """``run`` on a plan's arrays (``inputs.core_inputs``: ints rows
    prompt, gen, round, pair_off, next_fixed, follower, starts; floats rows gap, miss_cost,
    start, follow_gap; the flat pair_reuse and pair_cost), with the per-request scratch
    (req_f, req_i, work, hist) and the record tables (st_i, st_f, ev_f, ev_i) as tuples."""
    req_f, req_i, work, hist = scratch
    st_i, st_f, ev_f, ev_i = records
    return run(
        ints[1],
        floats[0],
        ints[2],
        ints[4],
        floats[2],
        ints[5],
        floats[3],
        ints[6],
        fixed,
        floats[1],
        ints[3],
        pair_reuse,
        pair_cost,
        step_s,
        batch,
        slots,
        deferred,
        pad_below,
        reserve_below,
        req_f,
        req_i,
        work,
        hist,
        st_i,
        st_f,
        ev_f,
        ev_i,
        record,
    )


@njit(cache=True)
def _record_tables(cap):
    """Stretch and eviction tables with room for ``cap`` rows each (1 when not recording:
    ``run`` never writes them then)."""
    return (
        np.empty((2, cap), dtype=np.int64),
        np.empty((2, cap)),
        np.empty(cap),
        np.empty((3, cap), dtype=np.int64),
    )


@njit(cache=True)
def _scratch(requests, slots, batch):
    req_f = np.empty((4, requests))
    req_i = np.empty((4, requests), dtype=np.int64)
    work = np.empty((8, max(requests, slots, 1)), dtype=np.int64)
    hist = np.empty(batch + 1, dtype=np.int64)
    return req_f, req_i, work, hist


@njit(cache=True)
def _reuse_counts(ints, req_i):
    """(reuse hits, computed prefill tokens) over re-arrivals (rounds >= 1)."""
    hits = 0
    reused = 0
    prompt_sum = 0
    for rid in range(ints.shape[1]):
        if ints[2, rid] == 0:
            continue
        prompt_sum += ints[0, rid]
        if req_i[0, rid] > 0:
            hits += 1
            reused += req_i[0, rid]
    return hits, prompt_sum - reused


@njit(cache=True)
def run_summary(
    ints,
    floats,
    pair_reuse,
    pair_cost,
    fixed,
    step_s,
    batch,
    slots,
    deferred,
    pad_below,
    reserve_below,
    bucket_of,
):
    """One simulation, scalars and histogram only (what ``summary()`` reads).

    ``ints``, ``floats``, ``pair_reuse``, ``pair_cost`` as ``run_plan`` reads them
    (``inputs.core_inputs``); ``bucket_of[n]`` is b(n). Returns (hist,
    prefill_total, interference, makespan, decode_total, reuse_hits, computed prefill
    tokens of re-arrivals, decode steps, sum of b x steps, sum of n x steps).
    """
    requests = ints.shape[1]
    req_f, req_i, work, hist = _scratch(requests, slots, batch)
    _, prefill_total, interference, makespan, _, _ = run_plan(
        ints,
        floats,
        pair_reuse,
        pair_cost,
        fixed,
        step_s,
        batch,
        slots,
        deferred,
        pad_below,
        reserve_below,
        (req_f, req_i, work, hist),
        _record_tables(1),
        False,
    )
    hits, computed = _reuse_counts(ints, req_i)
    steps = 0
    padded = 0
    used = 0
    for n in range(1, batch + 1):
        steps += hist[n]
        padded += bucket_of[n] * hist[n]
        used += n * hist[n]
    return (
        hist,
        prefill_total,
        interference,
        makespan,
        decode_total(hist, step_s),
        hits,
        computed,
        steps,
        padded,
        used,
    )


@njit(cache=True)
def run_records(
    ints,
    floats,
    pair_reuse,
    pair_cost,
    fixed,
    step_s,
    batch,
    slots,
    deferred,
    pad_below,
    reserve_below,
    bucket_of,
):
    """The same simulation with every record kept, in arrays allocated here.

    Stretch and eviction rows start with room for 4 per request and double until they
    fit (a full table restarts the run, so a result is never cut short).
    Returns (req_f, req_i, st_i, st_f, ev_f, ev_i), the row tables trimmed to their use.
    """
    requests = ints.shape[1]
    req_f, req_i, work, hist = _scratch(requests, slots, batch)
    cap = 4 * requests + 16
    while True:
        records = _record_tables(cap)
        code, _, _, _, n_st, n_ev = run_plan(
            ints,
            floats,
            pair_reuse,
            pair_cost,
            fixed,
            step_s,
            batch,
            slots,
            deferred,
            pad_below,
            reserve_below,
            (req_f, req_i, work, hist),
            records,
            True,
        )
        if code == OK:
            break
        cap *= 2
    st_i, st_f, ev_f, ev_i = records
    return req_f, req_i, st_i[:, :n_st], st_f[:, :n_st], ev_f[:n_ev], ev_i[:, :n_ev]


# --- the fleet -----------------------------------------------------------------------
# indices into rearrival.model.fleet.routers.ROUTERS (tests/test_rbln_fleet_core.py checks)
ROUND_ROBIN, LEAST_LOADED, SESSION_AFFINITY, PREFIX_AWARE = 0, 1, 2, 3


@njit(cache=True, inline="always")
def _route(router, rid, routed, replicas, outstanding, placement, owner, slot_of, ints, pairs):
    """The router's replica for ``rid`` (``rearrival.model.fleet.routers``; ties to the
    lowest index): round robin, least loaded, session affinity (round 0 by load) or
    prefix aware (the most held, ``RblnEngine.cached_prefix``: what the replica's latest
    surviving earlier round of the session gives, ties by load). ``pairs``: pair_reuse,
    pair_cost, miss_cost."""
    round_of = ints[2]
    if router == ROUND_ROBIN:
        return routed % replicas
    if router == SESSION_AFFINITY and round_of[rid] > 0:
        return placement[rid - round_of[rid]]
    most = -1
    best = 0
    for q in range(replicas):
        held = 0
        if router == PREFIX_AWARE:
            held, _ = _look_up(
                owner[q], slot_of, round_of, ints[3], pairs[0], pairs[1], pairs[2], rid
            )
        if held > most or (held == most and outstanding[q] < outstanding[best]):
            most = held
            best = q
    return best


@njit(cache=True)
def run_fleet(
    ints,
    floats,
    pair_reuse,
    pair_cost,
    fixed,
    step_s,
    batch,
    slots,
    deferred,
    pad_below,
    reserve_below,
    replicas,
    router,
    req_f,
    req_i,
    hist,
    rep_f,
    st_i,
    st_f,
    ev_f,
    ev_i,
):
    """One plan on ``replicas`` RBLN engines behind ``router`` (an index into ``ROUTERS``):
    ``rearrival.model.fleet.loop.run_fleet`` driving ``RblnEngine`` replicas, on arrays.

    Inputs as ``run_plan`` reads them (``inputs.core_inputs``); ``fixed`` empty: a next
    round is sent at finish + gap. Per replica q its own slot pool, waiting and running
    heaps, clock, decode clock and totals (rows q of the 2-D state); a request lives on one
    replica once routed, so its columns are one row for the fleet. Writes req_f rows
    (arrival, admit, complete, prefill), req_i rows (cached, slot, evicted tag, running at
    admission, replica), hist[q, n] decode steps, rep_f rows per replica (prefill total,
    interference, clock), stretch rows (st_i: replica, n, steps; st_f: start, end) and
    eviction rows (ev_f: time; ev_i: replica, slot, victim, cause), each in time order
    within a replica. Returns (code, stretches, evictions); STRETCHES_FULL asks the
    caller for larger row tables.
    """
    gen, round_of, pair_off = ints[1], ints[2], ints[3]
    next_fixed, follower, starts = ints[4], ints[5], ints[6]
    gap, miss_cost, start, follow_gap = floats[0], floats[1], floats[2], floats[3]
    requests = gen.shape[0]
    has_fixed = fixed.shape[0] > 0
    eps = ARRIVAL_TOLERANCE_S
    inf = np.inf
    arrival, admit_s, complete_s, prefill_s = req_f[0], req_f[1], req_f[2], req_f[3]
    cached, slot_of, evicted_tag, running_at, placement = (
        req_i[0],
        req_i[1],
        req_i[2],
        req_i[3],
        req_i[4],
    )
    width = max(requests, 1)
    free = np.empty((replicas, slots), dtype=np.int64)
    evictable = np.empty((replicas, slots), dtype=np.int64)
    pending = np.empty((replicas, slots), dtype=np.int64)
    key = np.zeros((replicas, slots), dtype=np.int64)
    owner = np.full((replicas, slots), NO_OWNER, dtype=np.int64)
    running = np.empty((replicas, width), dtype=np.int64)
    waiting = np.empty((replicas, width), dtype=np.int64)
    finishing = np.empty((replicas, width))  # finish times not yet seen by a routing
    n_free = np.full(replicas, slots, dtype=np.int64)
    n_evictable = np.zeros(replicas, dtype=np.int64)
    n_pending = np.zeros(replicas, dtype=np.int64)
    next_key = np.zeros(replicas, dtype=np.int64)
    n_running = np.zeros(replicas, dtype=np.int64)
    n_waiting = np.zeros(replicas, dtype=np.int64)
    fhead = np.zeros(replicas, dtype=np.int64)
    ftail = np.zeros(replicas, dtype=np.int64)
    outstanding = np.zeros(replicas, dtype=np.int64)
    decode_clock = np.zeros(replicas, dtype=np.int64)
    stretch_n = np.zeros(replicas, dtype=np.int64)
    last_stretch = np.zeros(replicas, dtype=np.int64)
    prefill_total, interference, clock = rep_f[0], rep_f[1], rep_f[2]
    finished = np.empty(width, dtype=np.int64)
    sends = np.empty(width, dtype=np.int64)
    for q in range(replicas):
        for slot in range(slots):
            free[q, slot] = slot  # ascending is a valid heap
        prefill_total[q] = 0.0
        interference[q] = 0.0
        clock[q] = 0.0
        for n in range(hist.shape[1]):
            hist[q, n] = 0
    n_sends = 0
    for rid in range(requests):
        arrival[rid] = np.nan
        admit_s[rid] = 0.0
        complete_s[rid] = 0.0
        prefill_s[rid] = 0.0
        cached[rid] = 0
        slot_of[rid] = 0
        evicted_tag[rid] = NO_OWNER
        running_at[rid] = 0
        placement[rid] = NO_OWNER
        if starts[rid]:  # round 0 of a session sent at its start
            arrival[rid] = start[rid]
            n_sends = push_arrival(sends, n_sends, rid, arrival)
    shift = 0
    while (1 << shift) <= requests:
        shift += 1
    rid_mask = (1 << shift) - 1
    st_cap = st_i.shape[1]
    ev_cap = ev_f.shape[0]
    n_st = 0
    n_ev = 0
    routed = 0

    while True:
        due = arrival[sends[0]] if n_sends else inf
        actor = NO_OWNER
        for q in range(replicas):
            if (n_running[q] or n_waiting[q]) and (actor < 0 or clock[q] < clock[actor]):
                actor = q
        if actor >= 0 and not due <= clock[actor] + eps:
            q = actor
            bound = due  # the earliest time a request could be routed here
            for p in range(replicas):
                if p != q and (n_running[p] or n_waiting[p]) and clock[p] < bound:
                    bound = clock[p]
            t = clock[q]
            fr, ev, pend, ky, ow = free[q], evictable[q], pending[q], key[q], owner[q]
            run_q, wait_q = running[q], waiting[q]
            nfree, nevict, npend = n_free[q], n_evictable[q], n_pending[q]
            nrun, nwait = n_running[q], n_waiting[q]
            nfin = 0
            # --- RblnEngine.advance: an admission's prefill, or one decode stretch
            admit = False
            while True:
                reserved = 1 if 0 < nrun < reserve_below else 0
                if nwait and nrun < batch:
                    if nfree - reserved + nevict >= 1:
                        admit = True
                        break
                    nevict = _release_deferred(ev, nevict, ky, pend, npend)
                    npend = 0  # then a decode step
                    if not nrun:
                        continue
                break
            if admit:
                rid, nwait = pop_arrival(wait_q, nwait, arrival)
                if nfree > reserved:
                    slot, nfree = pop(fr, nfree)
                else:
                    for _ in range(reserved - nfree):  # the padding block's slot
                        slot, victim, nevict = _evict_oldest(ev, nevict, ow, slots)
                        nfree = push(fr, nfree, slot)
                        if n_ev == ev_cap:
                            return STRETCHES_FULL, n_st, n_ev
                        ev_i[0, n_ev] = q
                        n_ev = _log_eviction(ev_f, ev_i[1:], n_ev, t, slot, victim, 0)
                    slot, victim, nevict = _evict_oldest(ev, nevict, ow, slots)
                    evicted_tag[rid] = victim
                    if n_ev == ev_cap:
                        return STRETCHES_FULL, n_st, n_ev
                    ev_i[0, n_ev] = q
                    n_ev = _log_eviction(ev_f, ev_i[1:], n_ev, t, slot, victim, 0)
                nevict = _release_deferred(ev, nevict, ky, pend, npend)
                npend = 0
                reused, cost = _look_up(
                    ow, slot_of, round_of, pair_off, pair_reuse, pair_cost, miss_cost, rid
                )
                cached[rid] = reused
                ow[slot] = rid
                ky[slot] = next_key[q] + slot
                next_key[q] += slots
                admit_s[rid] = t
                prefill_s[rid] = cost
                slot_of[rid] = slot
                running_at[rid] = nrun
                interference[q] += nrun * cost
                prefill_total[q] += cost
                t += cost
                stretch_n[q] = 0
                steps = gen[rid] - 1
                if steps:
                    nrun = push(run_q, nrun, (decode_clock[q] + steps) << shift | rid)
                else:
                    complete_s[rid] = t
                    npend, nevict = _finish_slot(deferred, slot, pend, npend, ev, nevict, ky)
                    finished[nfin] = rid
                    nfin += 1
            else:  # a decode stretch cut at the first boundary that sees ``bound``
                if nrun < pad_below and not nfree and nevict:  # dummy block (S9)
                    slot, victim, nevict = _evict_oldest(ev, nevict, ow, slots)
                    nfree = push(fr, nfree, slot)
                    if n_ev == ev_cap:
                        return STRETCHES_FULL, n_st, n_ev
                    ev_i[0, n_ev] = q
                    n_ev = _log_eviction(ev_f, ev_i[1:], n_ev, t, slot, victim, 1)
                dt = step_s[nrun]
                k = (run_q[0] >> shift) - decode_clock[q]
                end = t + k * dt
                if nwait:
                    if nrun < batch and nfree - reserved + nevict >= 1:
                        k = 1
                        end = t + dt
                elif bound <= end + eps and nrun < batch:
                    k = _steps_to_see(bound, t, dt, eps)
                    end = t + k * dt
                if nrun == stretch_n[q]:
                    st_i[2, last_stretch[q]] += k
                    st_f[1, last_stretch[q]] = end
                else:
                    if n_st == st_cap:
                        return STRETCHES_FULL, n_st, n_ev
                    st_i[0, n_st] = q
                    st_i[1, n_st] = nrun
                    st_i[2, n_st] = k
                    st_f[0, n_st] = t
                    st_f[1, n_st] = end
                    last_stretch[q] = n_st
                    n_st += 1
                    stretch_n[q] = nrun
                decode_clock[q] += k
                hist[q, nrun] += k
                t = end
                done = (decode_clock[q] + 1) << shift
                while nrun and run_q[0] < done:
                    value, nrun = pop(run_q, nrun)
                    rid = value & rid_mask
                    complete_s[rid] = t
                    npend, nevict = _finish_slot(
                        deferred, slot_of[rid], pend, npend, ev, nevict, ky
                    )
                    finished[nfin] = rid
                    nfin += 1
            clock[q] = t
            n_free[q] = nfree
            n_evictable[q] = nevict
            n_pending[q] = npend
            n_running[q] = nrun
            n_waiting[q] = nwait
            for i in range(nfin):  # the loop sends what follows each finish
                rid = finished[i]
                finishing[q, ftail[q]] = t
                ftail[q] += 1
                nf = next_fixed[rid]
                if nf >= 0:
                    arrival[rid + 1] = t + gap[rid] if not has_fixed else fixed[nf]
                    n_sends = push_arrival(sends, n_sends, rid + 1, arrival)
                elif follower[rid] >= 0:  # the renewing session's round 0
                    arrival[follower[rid]] = t + follow_gap[rid]
                    n_sends = push_arrival(sends, n_sends, follower[rid], arrival)
            continue
        if not n_sends:
            break
        rid, n_sends = pop_arrival(sends, n_sends, arrival)
        when = arrival[rid]
        for q in range(replicas):
            while fhead[q] < ftail[q] and finishing[q, fhead[q]] <= when:
                fhead[q] += 1
                outstanding[q] -= 1
        q = _route(
            router,
            rid,
            routed,
            replicas,
            outstanding,
            placement,
            owner,
            slot_of,
            ints,
            (pair_reuse, pair_cost, miss_cost),
        )
        routed += 1
        placement[rid] = q
        outstanding[q] += 1
        # RblnEngine.add: an idle replica whose clock is earlier jumps to the arrival
        if not (n_running[q] or n_waiting[q]) and not when <= clock[q] + eps:
            clock[q] = when
        n_waiting[q] = push_arrival(waiting[q], n_waiting[q], rid, arrival)
    return OK, n_st, n_ev


@njit(cache=True)
def fleet_records(
    ints,
    floats,
    pair_reuse,
    pair_cost,
    fixed,
    step_s,
    batch,
    slots,
    deferred,
    pad_below,
    reserve_below,
    replicas,
    router,
):
    """``run_fleet`` with its arrays allocated here; the stretch and eviction tables start
    with room for 4 rows per request and double until the run fits (as ``run_records``).
    Returns (req_f, req_i, hist, rep_f, st_i, st_f, ev_f, ev_i), the row tables trimmed."""
    requests = ints.shape[1]
    req_f = np.empty((4, requests))
    req_i = np.empty((5, requests), dtype=np.int64)
    hist = np.empty((replicas, batch + 1), dtype=np.int64)
    rep_f = np.empty((3, replicas))
    cap = 4 * requests + 16
    while True:
        st_i = np.empty((3, cap), dtype=np.int64)
        st_f = np.empty((2, cap))
        ev_f = np.empty(cap)
        ev_i = np.empty((4, cap), dtype=np.int64)
        code, n_st, n_ev = run_fleet(
            ints,
            floats,
            pair_reuse,
            pair_cost,
            fixed,
            step_s,
            batch,
            slots,
            deferred,
            pad_below,
            reserve_below,
            replicas,
            router,
            req_f,
            req_i,
            hist,
            rep_f,
            st_i,
            st_f,
            ev_f,
            ev_i,
        )
        if code == OK:
            break
        cap *= 2
    return req_f, req_i, hist, rep_f, st_i[:, :n_st], st_f[:, :n_st], ev_f[:n_ev], ev_i[:, :n_ev]


def warm_up() -> None:
    """Compile every kernel once for the argument types ``sim``, the search pass and the
    fleet (``compiled_fleet``), filling the on-disk cache (``make`` runs this after
    installing)."""
    # one session of two rounds (rearrival.model.simulator.rbln.inputs.core_inputs's layout)
    ints = np.array([[130, 140], [2, 3], [0, 1], [0, 0], [0, -1], [-1, -1], [1, 0]], dtype=np.int64)
    floats = np.array([[0.5, 0.0], [0.03, 0.04], [0.0, 0.0], [0.0, 0.0]])
    pairs = (np.array([128], dtype=np.int64), np.array([0.02]))
    steps = np.array([0.0, 0.011])
    buckets = np.array([0, 1], dtype=np.int64)
    for fixed in (np.empty(0), np.array([0.1])):
        for deferred in (True, False):
            args = (ints, floats, *pairs, fixed, steps, 1, 1, deferred, 0, 0, buckets)
            run_summary(*args)
            run_records(*args)
            fleet_records(*args[:-1], 2, PREFIX_AWARE)
    run_batch(
        ints,
        floats,
        *pairs,
        steps.reshape(1, -1),
        np.array([1], dtype=np.int64),
        np.array([1], dtype=np.int64),
        True,
        0,
        np.empty((1, 5)),
        np.empty((1, 3), dtype=np.int64),
    )
