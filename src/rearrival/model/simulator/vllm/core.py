"""The compiled core of the ``vllm`` rule set (docs/DESIGN.md §15, §16): one engine or a
fleet of R of them.

The loop of ``rearrival.model.fleet.loop.run_fleet`` over R ``fleet_engine.VllmFleetEngine``
replicas, its four routers (``rearrival.model.fleet.routers``), renewal and fixed arrivals,
written on flat arrays and compiled with numba (``cache=True``: the machine code is kept on
disk beside this file). Every rule, every choice and the order of every floating-point
operation are those of the Python fleet, so every request's placement, counts and times and
every total are the same bits (``tests/test_vllm_fleet_core.py``). One replica is the single
engine (the fleet loop with R = 1 takes exactly the single engine's steps), so
``sim.simulate_vllm`` runs this core with one replica; ``tests/test_vllm_cores.py`` holds it
to the step-by-step reference and the Python event core, ``tests/test_vllm_oracle.py`` and
``tests/test_vllm_fleet_oracle.py`` to vLLM's own scheduler.

State. The pool of ``blockpool.BlockPool`` on arrays: the free queue as ``nxt``/``prv``
links over block ids with a sentinel, ``refs`` holders per block (the null block 0 is held
forever), ``bkey`` a block's chain identity (-1: none), the blocks caching identity k as a
list in cache order (``khead[k]``/``ktail[k]`` with ``knext``/``kprev`` per block). Replica
q's pool is the slice of the flat arrays that starts at ``q * (num_blocks + 1)`` (its
blocks, its sentinel last), and its identities the slice of ``khead``/``ktail`` that starts
at ``q * keys``, so the pool helpers run unchanged on global block ids and global
identities. A request lives on one replica once routed, so its tokens, blocks held and
times are one row for the whole fleet; its block table is its session's (the rounds of a
session hold blocks one after another, never at once), a tenth of one table per request
on an hour of agent traffic. Per replica: its waiting ring and running list (rows
of ``requests``), its clock, device time and counts, and the FIFO of its finish times not
yet seen by a routing (a replica's clock only grows, so the loop's heap of them is a
queue). One heap holds every pending send, ordered by (time, request id) as the loop's is.

Block identities (``inputs.VllmInputs.block_key``): block j of a request has its shared
prefix's identity ``prefix_key_base + j`` for j below its shared blocks, else its
session's own ``key_base + j``; the pure decode check discounts the prefix blocks other
requests hold (``event.held_prefix_blocks``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.heaps import pop_arrival, push_arrival
from rearrival.model.simulator.vllm.inputs import KernelPlan, VllmInputs, kernel_plan

# indices into rearrival.model.fleet.routers.ROUTERS (tests/test_vllm_fleet_core.py checks)
ROUND_ROBIN, LEAST_LOADED, SESSION_AFFINITY, PREFIX_AWARE = 0, 1, 2, 3
NO = -1


@njit(cache=True, inline="always")
def _cdiv(a, b):
    return (a + b - 1) // b


@njit(cache=True, inline="always")
def _link_after(nxt, prv, anchor, block):
    after = nxt[anchor]
    nxt[anchor] = block
    prv[block] = anchor
    nxt[block] = after
    prv[after] = block


@njit(cache=True, inline="always")
def _unlink(nxt, prv, block):
    before = prv[block]
    after = nxt[block]
    nxt[before] = after
    prv[after] = before


@njit(cache=True, inline="always")
def _evict(bkey, khead, ktail, knext, kprev, block):
    key = bkey[block]
    if key == NO:
        return
    before = kprev[block]
    after = knext[block]
    if before == NO:
        khead[key] = after
    else:
        knext[before] = after
    if after == NO:
        ktail[key] = before
    else:
        kprev[after] = before
    bkey[block] = NO


@njit(cache=True, inline="always")
def _allocate(pool, keys, table, start, count, sentinel):
    """``count`` blocks from the front of the free queue into ``table[start:]``, their
    identities evicted; returns how many were taken."""
    nxt, prv, refs, bkey = pool
    khead, ktail, knext, kprev = keys
    for j in range(count):
        block = nxt[sentinel]
        _unlink(nxt, prv, block)
        _evict(bkey, khead, ktail, knext, kprev, block)
        refs[block] = 1
        table[start + j] = block
    return count


@njit(cache=True, inline="always")
def _release(pool, table, start, count, sentinel):
    """Free a request's blocks last first: uncached ones to the front of the free queue
    (in that order), cached ones to its tail. Returns how many became free."""
    nxt, prv, refs, bkey = pool
    anchor = sentinel
    freed = 0
    for j in range(count - 1, -1, -1):
        block = table[start + j]
        refs[block] -= 1
        if refs[block] == 0:
            if bkey[block] == NO:
                _link_after(nxt, prv, anchor, block)
                anchor = block
            else:
                _link_after(nxt, prv, prv[sentinel], block)
            freed += 1
    return freed


@njit(cache=True, inline="always")
def _padded(n, capture):
    if n == 0:
        return 0
    for size in capture:
        if size >= n:
            return size
    return n


@njit(cache=True, inline="always")
def _key(j, key_base, shared, prefix_base):
    """Block j's chain identity (``VllmInputs.block_key``)."""
    return (prefix_base if j < shared else key_base) + j


@njit(cache=True)
def _cache_filled(keys, bkey, table, start, hashed, key_base, shared, prefix_base, upto):
    """Cache the request's blocks ``hashed .. upto - 1`` under their identities (global:
    ``key_base`` and ``prefix_base`` carry the replica's offset); returns the new count.
    ``core._cache``'s statements are written out in the loop: called once per block, its
    array arguments cost two atomic reference counts each, a quarter of the fleet's time."""
    khead, ktail, knext, kprev = keys
    while hashed < upto:
        key = _key(hashed, key_base, shared, prefix_base)
        block = table[start + hashed]
        bkey[block] = key
        last = ktail[key]
        kprev[block] = last
        knext[block] = NO
        if last == NO:
            khead[key] = block
        else:
            knext[last] = block
        ktail[key] = block
        hashed += 1
    return hashed


@njit(cache=True, inline="always")
def _hit(khead, hit, cap, key_base, shared, prefix_base):
    """``BlockPool.lookup``: the first cached holder of each identity of the chain, at most
    ``cap``, a missing one ending it, into ``hit``; returns its length."""
    h = 0
    while h < cap:
        block = khead[_key(h, key_base, shared, prefix_base)]
        if block == NO:
            break
        hit[h] = block
        h += 1
    return h


@njit(cache=True, inline="always")
def _held_prefix(khead, knext, refs, prefix_base, count):
    """``event.held_prefix_blocks``: positions of the prefix chain (a missing identity ends
    it) with any holder out of the free queue."""
    held = 0
    for j in range(count):
        block = khead[prefix_base + j]
        if block == NO:
            break
        while block != NO:
            if refs[block] > 0:
                held += 1
                break
            block = knext[block]
    return held


@njit(cache=True, inline="always")
def _cached_prefix(khead, full, key_base, shared, prefix_base):
    """``VllmFleetEngine.cached_prefix``: leading full blocks of the prompt cached."""
    j = 0
    while j < full and khead[_key(j, key_base, shared, prefix_base)] != NO:
        j += 1
    return j


@dataclass(frozen=True)
class FleetRun:
    """What the kernel writes: per request (in (session, round) order) its columns and
    replica, per replica its totals."""

    cached_tokens: list[int]
    preemptions: list[int]
    steps: list[int]
    replica: list[int]
    arrival_s: list[float]
    first_scheduled_s: list[float]
    first_token_s: list[float]
    finish_s: list[float]
    replica_steps: list[int]
    replica_decode_tokens: list[int]
    replica_prefill_tokens: list[int]
    replica_device_s: list[float]
    replica_t: list[float]


@njit(cache=True, inline="always")
def _least_loaded(outstanding, candidates, count):
    best = candidates[0]
    for i in range(1, count):
        q = candidates[i]
        if outstanding[q] < outstanding[best]:
            best = q
    return best


@njit(cache=True)
def run_fleet(
    plan_i,
    gap,
    follow_gap,
    start_s,
    fixed,
    capture,
    knobs,
    cost,
    replicas,
    router,
    req_i,
    req_f,
    rep_i,
    rep_f,
):
    """One fleet. ``plan_i`` rows per request (in (session, round) order): prompt, gen,
    round, first request of its session, starts (1: sent at ``start_s`` at the start),
    key_base, shared blocks, prefix_key_base, next_fixed, follower. ``gap`` after each
    round, ``follow_gap`` before its follower; ``fixed`` empty: a next round is sent at
    finish + gap. ``knobs``: block_size, num_blocks, max_num_seqs, max_num_batched_tokens,
    identities. ``cost``: (base, per decode token, per prefill token, per kv token).
    ``router``: ROUND_ROBIN, LEAST_LOADED, SESSION_AFFINITY or PREFIX_AWARE.

    Writes req_i rows (cached tokens at first admission, preemptions, steps, replica),
    req_f rows (arrival, first scheduled, first token, finish), rep_i rows per replica
    (steps, decode tokens, prefill tokens) and rep_f rows (device seconds, clock).
    """
    prompt, gen, round_of, session_first = plan_i[0], plan_i[1], plan_i[2], plan_i[3]
    starts, key_base, shared, prefix_base = plan_i[4], plan_i[5], plan_i[6], plan_i[7]
    next_fixed, follower = plan_i[8], plan_i[9]
    bs, num_blocks, max_num_seqs, max_batched, nkeys = (
        knobs[0],
        knobs[1],
        knobs[2],
        knobs[3],
        knobs[4],
    )
    requests = prompt.shape[0]
    base, per_decode, per_prefill, per_kv = cost[0], cost[1], cost[2], cost[3]
    width = num_blocks + 1  # a replica's slice of the block arrays: its blocks, its sentinel
    # the pools
    nxt = np.empty(replicas * width, dtype=np.int64)
    prv = np.empty(replicas * width, dtype=np.int64)
    refs = np.zeros(replicas * width, dtype=np.int64)
    free = np.empty(replicas, dtype=np.int64)
    for q in range(replicas):
        sentinel = q * width + num_blocks
        previous = sentinel
        for block in range(q * width + 1, sentinel):
            nxt[previous] = block
            prv[block] = previous
            previous = block
        nxt[previous] = sentinel
        prv[sentinel] = previous
        refs[q * width] = 1  # the null block
        free[q] = num_blocks - 1
    bkey = np.full(replicas * width, NO, dtype=np.int64)
    knext = np.full(replicas * width, NO, dtype=np.int64)
    kprev = np.full(replicas * width, NO, dtype=np.int64)
    khead = np.full(replicas * nkeys, NO, dtype=np.int64)
    ktail = np.full(replicas * nkeys, NO, dtype=np.int64)
    pool = (nxt, prv, refs, bkey)
    keys = (khead, ktail, knext, kprev)
    # the requests: a session's rounds share one block table, as wide as its widest round
    # (a round is sent when the one before it has finished and released its blocks)
    off = np.empty(requests, dtype=np.int64)
    widest = 1
    width_of_tables = 0
    r = 0
    while r < requests:
        own = r
        most = 1
        while r < requests and session_first[r] == own:
            most = max(most, _cdiv(prompt[r] + gen[r] - 1, bs))
            off[r] = width_of_tables
            r += 1
        width_of_tables += most
        widest = max(widest, most)
    table = np.empty(max(width_of_tables, 1), dtype=np.int64)
    hit = np.empty(widest, dtype=np.int64)
    tokens = prompt.copy()
    computed = np.zeros(requests, dtype=np.int64)
    outputs = np.zeros(requests, dtype=np.int64)
    nblk = np.zeros(requests, dtype=np.int64)
    hashed = np.zeros(requests, dtype=np.int64)
    cached, preempts, steps, placement = req_i[0], req_i[1], req_i[2], req_i[3]
    arrival, first_s, token_s, finish_s = req_f[0], req_f[1], req_f[2], req_f[3]
    pend = np.empty(requests, dtype=np.int64)
    npend = 0
    for r in range(requests):
        cached[r] = NO
        preempts[r] = 0
        steps[r] = 0
        placement[r] = NO
        arrival[r] = np.nan
        first_s[r] = np.nan
        token_s[r] = np.nan
        finish_s[r] = np.nan
        if starts[r]:
            arrival[r] = start_s[r]
            npend = push_arrival(pend, npend, r, arrival)
    # the replicas
    waiting = np.empty(replicas * requests, dtype=np.int64)
    whead = np.zeros(replicas, dtype=np.int64)
    wcount = np.zeros(replicas, dtype=np.int64)
    running = np.empty(replicas * requests, dtype=np.int64)
    nrun = np.zeros(replicas, dtype=np.int64)
    finishing = np.empty(replicas * requests)
    fhead = np.zeros(replicas, dtype=np.int64)
    ftail = np.zeros(replicas, dtype=np.int64)
    outstanding = np.zeros(replicas, dtype=np.int64)
    clock = np.zeros(replicas)
    device = np.zeros(replicas)
    rep_steps = np.zeros(replicas, dtype=np.int64)
    rep_decode = np.zeros(replicas, dtype=np.int64)
    rep_prefill = np.zeros(replicas, dtype=np.int64)
    sched = np.empty(requests, dtype=np.int64)
    chunk = np.empty(requests, dtype=np.int64)
    finished = np.empty(requests, dtype=np.int64)
    sampled_first = np.empty(requests, dtype=np.int64)
    candidates = np.empty(replicas, dtype=np.int64)
    held = np.empty(replicas, dtype=np.int64)
    has_fixed = fixed.shape[0] > 0
    routed = 0
    zero = 0

    while True:
        due = arrival[pend[0]] if npend > 0 else np.inf
        actor = NO
        for q in range(replicas):
            if (nrun[q] > 0 or wcount[q] > 0) and (actor == NO or clock[q] < clock[actor]):
                actor = q
        if actor != NO and not due <= clock[actor]:  # vLLM's arrival tolerance is 0
            bound = due
            for q in range(replicas):
                if q != actor and (nrun[q] > 0 or wcount[q] > 0) and clock[q] < bound:
                    bound = clock[q]
            q = actor
            blocks0 = q * width
            sentinel = blocks0 + num_blocks
            keys0 = q * nkeys
            run0 = q * requests
            t = clock[q]
            n = nrun[q]
            # --- is the next step a pure decode step? (event.pure_decode_ahead)
            pure = 0 < n <= max_batched
            new_blocks = 0
            if pure:
                for i in range(n):
                    r = running[run0 + i]
                    if outputs[r] == 0 or computed[r] != tokens[r] - 1:
                        pure = False
                        break
                    new_blocks += _cdiv(computed[r] + 1, bs) - nblk[r]
            if pure and new_blocks > free[q]:
                pure = False
            if pure and wcount[q] > 0 and n < max_num_seqs and max_batched > n:
                r = waiting[run0 + whead[q]]
                own = 0
                if shared[r] > 0:
                    own = _held_prefix(
                        khead,
                        knext,
                        refs,
                        keys0 + prefix_base[r],
                        min(shared[r], (tokens[r] - 1) // bs),
                    )
                pure = _cdiv(tokens[r], bs) - own > free[q] - new_blocks
            nfin = 0
            if pure:  # --- event.fast_forward, cut at the first boundary seeing ``bound``
                decode_padded = _padded(n, capture)
                context = 0
                left = gen[running[run0]] - outputs[running[run0]]
                for i in range(n):
                    r = running[run0 + i]
                    context += computed[r]
                    left = min(left, gen[r] - outputs[r])
                while True:
                    # Per token only what changes: the pool helpers take their arrays as
                    # tuples, which numba reference-counts atomically at every call, so
                    # they run only where a block is allocated or filled.
                    for i in range(n):
                        r = running[run0 + i]
                        done = computed[r] + 1
                        if done > nblk[r] * bs:  # a running request holds ceil(computed / bs)
                            free[q] -= _allocate(pool, keys, table, off[r] + nblk[r], 1, sentinel)
                            nblk[r] += 1
                        computed[r] = done
                        if (hashed[r] + 1) * bs <= done:  # a block filled: cache to done // bs
                            hashed[r] = _cache_filled(
                                keys,
                                bkey,
                                table,
                                off[r],
                                hashed[r],
                                keys0 + key_base[r],
                                shared[r],
                                keys0 + prefix_base[r],
                                done // bs,
                            )
                        outputs[r] += 1
                        tokens[r] += 1
                        steps[r] += 1
                    step_s = (
                        base + per_decode * decode_padded + per_prefill * zero + per_kv * context
                    )
                    t = t + step_s
                    device[q] = device[q] + step_s
                    rep_steps[q] += 1
                    rep_decode[q] += n
                    context += n
                    left -= 1
                    if left == 0:
                        for i in range(n):
                            r = running[run0 + i]
                            if outputs[r] == gen[r]:
                                finished[nfin] = r
                                nfin += 1
                        break
                    if bound <= t:
                        break
                    new_blocks = 0
                    for i in range(n):
                        r = running[run0 + i]
                        if computed[r] + 1 > nblk[r] * bs:
                            new_blocks += 1
                    if new_blocks > free[q]:
                        break
            else:  # --- engine.Engine.step
                budget = max_batched
                nsched = 0
                preempted = False
                i = 0
                while i < n and budget > 0:
                    r = running[run0 + i]
                    take = min(tokens[r] - computed[r], budget)
                    need = _cdiv(computed[r] + take, bs) - nblk[r]
                    itself = False
                    while need > free[q]:
                        victim = running[run0 + n - 1]
                        n -= 1
                        free[q] += _release(pool, table, off[victim], nblk[victim], sentinel)
                        nblk[victim] = 0
                        hashed[victim] = 0
                        computed[victim] = 0
                        preempts[victim] += 1
                        whead[q] = (whead[q] - 1 + requests) % requests
                        waiting[run0 + whead[q]] = victim
                        wcount[q] += 1
                        preempted = True
                        if victim == r:
                            itself = True
                            break
                    if itself:
                        break
                    free[q] -= _allocate(pool, keys, table, off[r] + nblk[r], need, sentinel)
                    nblk[r] += need
                    upto = min(computed[r] + take, tokens[r]) // bs
                    hashed[r] = _cache_filled(
                        keys,
                        bkey,
                        table,
                        off[r],
                        hashed[r],
                        keys0 + key_base[r],
                        shared[r],
                        keys0 + prefix_base[r],
                        upto,
                    )
                    sched[nsched] = r
                    chunk[nsched] = take
                    nsched += 1
                    budget -= take
                    i += 1
                if not preempted:
                    while budget > 0 and wcount[q] > 0 and n < max_num_seqs:
                        r = waiting[run0 + whead[q]]
                        h = _hit(
                            khead,
                            hit,
                            (tokens[r] - 1) // bs,
                            keys0 + key_base[r],
                            shared[r],
                            keys0 + prefix_base[r],
                        )
                        in_free = 0
                        for j in range(h):
                            if refs[hit[j]] == 0:
                                in_free += 1
                        if _cdiv(tokens[r], bs) - h + in_free > free[q]:
                            break
                        done_tokens = h * bs
                        take = min(tokens[r] - done_tokens, budget)
                        for j in range(h):  # the hit leaves the free queue first
                            block = hit[j]
                            if refs[block] == 0:
                                _unlink(nxt, prv, block)
                                free[q] -= 1
                            refs[block] += 1
                            table[off[r] + j] = block
                        need = _cdiv(done_tokens + take, bs) - h
                        free[q] -= _allocate(pool, keys, table, off[r] + h, need, sentinel)
                        nblk[r] = h + need
                        upto = min(done_tokens + take, tokens[r]) // bs
                        hashed[r] = _cache_filled(
                            keys,
                            bkey,
                            table,
                            off[r],
                            h,
                            keys0 + key_base[r],
                            shared[r],
                            keys0 + prefix_base[r],
                            upto,
                        )
                        whead[q] = (whead[q] + 1) % requests
                        wcount[q] -= 1
                        running[run0 + n] = r
                        n += 1
                        computed[r] = done_tokens
                        if cached[r] < 0:
                            cached[r] = done_tokens
                        sched[nsched] = r
                        chunk[nsched] = take
                        nsched += 1
                        budget -= take
                decode = 0
                prefill = 0
                context = 0
                for j in range(nsched):
                    r = sched[j]
                    context += computed[r]
                    if outputs[r] > 0:
                        decode += chunk[j]
                    else:
                        prefill += chunk[j]
                    steps[r] += 1
                    if steps[r] == 1:
                        first_s[r] = t
                    computed[r] += chunk[j]
                nfirst = 0
                for j in range(nsched):
                    r = sched[j]
                    if computed[r] == tokens[r]:
                        outputs[r] += 1
                        tokens[r] += 1
                        if outputs[r] == 1:
                            sampled_first[nfirst] = r
                            nfirst += 1
                        if outputs[r] == gen[r]:
                            finished[nfin] = r
                            nfin += 1
                decode_padded = _padded(decode, capture)
                step_s = (
                    base + per_decode * decode_padded + per_prefill * prefill + per_kv * context
                )
                t = t + step_s
                device[q] = device[q] + step_s
                rep_steps[q] += 1
                rep_decode[q] += decode
                rep_prefill[q] += prefill
                for j in range(nfirst):
                    token_s[sampled_first[j]] = t
            clock[q] = t
            nrun[q] = n
            # --- engine.Engine.finish, then the loop sends what follows each finish
            for j in range(nfin):
                r = finished[j]
                free[q] += _release(pool, table, off[r], nblk[r], sentinel)
                nblk[r] = 0
                finish_s[r] = t
            if nfin:
                kept = 0
                for i in range(n):
                    r = running[run0 + i]
                    if outputs[r] < gen[r]:
                        running[run0 + kept] = r
                        kept += 1
                nrun[q] = kept
            for j in range(nfin):
                r = finished[j]
                finishing[run0 + ftail[q]] = t
                ftail[q] += 1
                follow = next_fixed[r]
                if follow >= 0:
                    arrival[r + 1] = t + gap[r] if not has_fixed else fixed[follow]
                    npend = push_arrival(pend, npend, r + 1, arrival)
                elif follower[r] >= 0:  # the renewing session's round 0
                    arrival[follower[r]] = t + follow_gap[r]
                    npend = push_arrival(pend, npend, follower[r], arrival)
            continue
        if npend == 0:
            break
        rid, npend = pop_arrival(pend, npend, arrival)
        when = arrival[rid]
        for q in range(replicas):
            while fhead[q] < ftail[q] and finishing[q * requests + fhead[q]] <= when:
                fhead[q] += 1
                outstanding[q] -= 1
        # --- the router (rearrival.model.fleet.routers)
        if router == ROUND_ROBIN:
            q = routed % replicas
            routed += 1
        elif router == SESSION_AFFINITY and round_of[rid] > 0:
            q = placement[session_first[rid]]
        elif router == PREFIX_AWARE:
            most = 0
            for p in range(replicas):
                held[p] = _cached_prefix(
                    khead,
                    prompt[rid] // bs,
                    p * nkeys + key_base[rid],
                    shared[rid],
                    p * nkeys + prefix_base[rid],
                )
                if p == 0 or held[p] > most:
                    most = held[p]
            count = 0
            for p in range(replicas):
                if held[p] == most:
                    candidates[count] = p
                    count += 1
            q = _least_loaded(outstanding, candidates, count)
        else:  # least_loaded, and session_affinity's round 0
            for p in range(replicas):
                candidates[p] = p
            q = _least_loaded(outstanding, candidates, replicas)
        placement[rid] = q
        outstanding[q] += 1
        # --- VllmFleetEngine.add: an idle replica jumps to the arrival
        if nrun[q] == 0 and wcount[q] == 0 and when > clock[q]:
            clock[q] = when
        waiting[q * requests + (whead[q] + wcount[q]) % requests] = rid
        wcount[q] += 1
    for q in range(replicas):
        rep_i[0, q] = rep_steps[q]
        rep_i[1, q] = rep_decode[q]
        rep_i[2, q] = rep_prefill[q]
        rep_f[0, q] = device[q]
        rep_f[1, q] = clock[q]


def warm_up() -> None:
    """Compile the kernel once into its on-disk cache."""
    plan_i = np.array([[20], [3], [0], [0], [1], [0], [0], [-1], [-1], [-1]], dtype=np.int64)
    run_fleet(
        plan_i,
        np.zeros(1),
        np.zeros(1),
        np.zeros(1),
        np.empty(0),
        np.empty(0, dtype=np.int64),
        np.array([16, 4, 2, 16, 2], dtype=np.int64),
        np.array([0.01, 0.001, 0.0001, 0.0]),
        2,
        PREFIX_AWARE,
        np.empty((4, 1), dtype=np.int64),
        np.empty((4, 1)),
        np.empty((3, 2), dtype=np.int64),
        np.empty((2, 2)),
    )


@dataclass(frozen=True)
class KernelRun:
    """What ``run_fleet`` writes, as it writes it (``run_fleet``'s docstring): the
    columns a caller reads without building a Python object per request."""

    req_i: np.ndarray
    req_f: np.ndarray
    rep_i: np.ndarray
    rep_f: np.ndarray


def run_kernel(
    plan: KernelPlan,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    replicas: int,
    router: int,
    fixed: list[float] | None,
) -> KernelRun:
    """One fleet on the compiled kernel; ``router`` an index into ``ROUTERS``."""
    requests = plan.plan_i.shape[1]
    knobs = np.array(
        [
            configuration.block_size,
            configuration.num_blocks,
            configuration.batch_size,
            configuration.max_num_batched_tokens,
            plan.keys,
        ],
        dtype=np.int64,
    )
    out = KernelRun(
        np.empty((4, requests), dtype=np.int64),
        np.empty((4, requests)),
        np.empty((3, replicas), dtype=np.int64),
        np.empty((2, replicas)),
    )
    run_fleet(
        plan.plan_i,
        plan.gap,
        plan.follow_gap,
        plan.start,
        np.array(fixed if fixed is not None else [], dtype=np.float64),
        np.array(configuration.buckets, dtype=np.int64),
        knobs,
        np.array(step_cost.as_tuple()),
        replicas,
        router,
        out.req_i,
        out.req_f,
        out.rep_i,
        out.rep_f,
    )
    return out


def run(
    inputs: VllmInputs,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    replicas: int,
    router: int,
    fixed: list[float] | None,
) -> FleetRun:
    """One fleet on the compiled kernel, its columns as lists."""
    out = run_kernel(kernel_plan(inputs), configuration, step_cost, replicas, router, fixed)
    cached, preemptions, steps, placement = out.req_i.tolist()
    arrival, first, first_token, finish = out.req_f.tolist()
    return FleetRun(
        cached,
        preemptions,
        steps,
        placement,
        arrival,
        first,
        first_token,
        finish,
        *out.rep_i.tolist(),
        *out.rep_f.tolist(),
    )
