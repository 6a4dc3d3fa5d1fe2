"""Compiled event loop of the ``vllm`` rule set (docs/DESIGN.md §15).

The loop of ``event.run_event`` (full ``engine.Engine`` steps, pure decode stretches
fast-forwarded) written on flat arrays and compiled with numba (``cache=True``: the
machine code is kept on disk beside this file). Every rule, every choice and the order of
every floating-point operation are those of the Python cores, so the results are the same
bits; ``tests/test_vllm_cores.py`` holds the three cores to each other and
``tests/test_vllm_oracle.py`` to vLLM's own scheduler.

State, as ``blockpool.BlockPool`` and ``engine.Engine`` keep it:

* the free queue as ``nxt``/``prv`` links over block ids, sentinel ``num_blocks``;
  ``refs`` holders per block (the null block 0 is held forever); ``bkey`` a block's
  chain identity (-1: none); the blocks caching identity k as a list in cache order,
  ``khead[k]``/``ktail[k]`` with ``knext``/``kprev`` per block;
* per request: tokens (prompt + sampled), computed tokens, sampled tokens, blocks held
  (``table[off[r]:off[r] + nblk[r]]``) and how many of them are cached (``hashed``);
  block j's identity is ``prefix_key_base[r] + j`` for j < ``shared[r]`` (a shared prefix's full
  blocks, docs/DESIGN.md §16), else ``key_base[r] + j`` (``inputs.VllmInputs.block_key``);
* ``waiting`` a ring buffer (a preempted request goes to its front), ``running`` an array
  in admission order, ``pend`` a heap of sends ordered by (time, request id)
  (``rearrival.model.simulator.heaps``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from rearrival.model.simulator.heaps import pop_arrival, push_arrival

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
def _cache(bkey, khead, ktail, knext, kprev, block, key):
    """A full block gets identity ``key``, behind the blocks already caching it."""
    bkey[block] = key
    last = ktail[key]
    kprev[block] = last
    knext[block] = NO
    if last == NO:
        khead[key] = block
    else:
        knext[last] = block
    ktail[key] = block


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
def _cache_filled(keys, bkey, table, start, hashed, key_base, shared, prefix_base, upto_blocks):
    """Cache the request's blocks ``hashed .. upto_blocks - 1``; returns the new count."""
    khead, ktail, knext, kprev = keys
    while hashed < upto_blocks:
        key = (prefix_base if hashed < shared else key_base) + hashed
        _cache(bkey, khead, ktail, knext, kprev, table[start + hashed], key)
        hashed += 1
    return hashed


@njit(cache=True, inline="always")
def _held_prefix_blocks(khead, knext, refs, first_key, count):
    """``event.held_prefix_blocks``: the positions of the chain of identities first_key
    .. first_key + count - 1 (a missing one ends it) with any copy held."""
    held = 0
    for j in range(count):
        block = khead[first_key + j]
        if block == NO:
            break
        while block != NO:
            if refs[block] > 0:
                held += 1
                break
            block = knext[block]
    return held


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


@njit(cache=True)
def run(
    prompt,
    gen,
    round_of,
    gap,
    start_s,
    starts,
    key_base,
    shared,
    prefix_key_base,
    next_fixed,
    follower,
    follow_gap,
    fixed,
    capture,
    block_size,
    num_blocks,
    max_num_seqs,
    max_batched,
    keys_total,
    cost,
    req_i,
    req_f,
):
    """One simulation. Per request (in (session, round) order): prompt, gen, round_of,
    gap (after the round), start_s (round 0: the session's start), starts (1: sent at
    start_s; 0: sent by the round before it or, for a renewed session's round 0, by its
    leader's last round), key_base (the session's first chain identity), shared and
    prefix_key_base (its shared prefix's full blocks and their first identity), next_fixed
    (index into ``fixed`` of the next round's send, -1 on the last round), follower (on a
    session's last round: the renewing session's round 0, else -1) and follow_gap (its
    gap); ``fixed`` empty: a send is finish + gap (a renewed round 0 always is). ``cost``
    holds (base, per decode token, per prefill token, per kv token).

    Writes req_i rows (cached tokens at first admission, preemptions, steps) and req_f
    rows (arrival, first scheduled, first token, finish); returns (steps, decode tokens,
    prefill tokens, device seconds, makespan).
    """
    requests = prompt.shape[0]
    bs = block_size
    sentinel = num_blocks
    base, per_decode, per_prefill, per_kv = cost[0], cost[1], cost[2], cost[3]
    # the pool
    nxt = np.empty(num_blocks + 1, dtype=np.int64)
    prv = np.empty(num_blocks + 1, dtype=np.int64)
    previous = sentinel
    for block in range(1, num_blocks):
        nxt[previous] = block
        prv[block] = previous
        previous = block
    nxt[previous] = sentinel
    prv[sentinel] = previous
    free = num_blocks - 1
    refs = np.zeros(num_blocks, dtype=np.int64)
    refs[0] = 1
    bkey = np.full(num_blocks, NO, dtype=np.int64)
    knext = np.full(num_blocks, NO, dtype=np.int64)
    kprev = np.full(num_blocks, NO, dtype=np.int64)
    khead = np.full(keys_total, NO, dtype=np.int64)
    ktail = np.full(keys_total, NO, dtype=np.int64)
    pool = (nxt, prv, refs, bkey)
    keys = (khead, ktail, knext, kprev)
    # the requests
    off = np.zeros(requests + 1, dtype=np.int64)
    widest = 1
    for r in range(requests):
        blocks = _cdiv(prompt[r] + gen[r] - 1, bs)
        off[r + 1] = off[r] + blocks
        widest = max(widest, blocks)
    table = np.empty(max(off[requests], 1), dtype=np.int64)
    hit = np.empty(widest, dtype=np.int64)
    tokens = prompt.copy()
    computed = np.zeros(requests, dtype=np.int64)
    outputs = np.zeros(requests, dtype=np.int64)
    nblk = np.zeros(requests, dtype=np.int64)
    hashed = np.zeros(requests, dtype=np.int64)
    cached = req_i[0]
    preempts = req_i[1]
    steps = req_i[2]
    arrival = req_f[0]
    first_s = req_f[1]
    token_s = req_f[2]
    finish_s = req_f[3]
    # the queues
    pend = np.empty(requests, dtype=np.int64)
    npend = 0
    for r in range(requests):
        cached[r] = NO
        preempts[r] = 0
        steps[r] = 0
        first_s[r] = np.nan
        token_s[r] = np.nan
        finish_s[r] = np.nan
        arrival[r] = np.nan
        if starts[r]:
            arrival[r] = start_s[r]
            npend = push_arrival(pend, npend, r, arrival)
    waiting = np.empty(requests, dtype=np.int64)
    whead = 0
    wcount = 0
    running = np.empty(requests, dtype=np.int64)
    nrun = 0
    sched = np.empty(requests, dtype=np.int64)
    chunk = np.empty(requests, dtype=np.int64)
    finished = np.empty(requests, dtype=np.int64)
    sampled_first = np.empty(requests, dtype=np.int64)
    has_fixed = fixed.shape[0] > 0
    t = 0.0
    device = 0.0
    total_steps = 0
    decode_total = 0
    prefill_total = 0
    zero = 0

    while True:
        while npend > 0 and arrival[pend[0]] <= t:
            r, npend = pop_arrival(pend, npend, arrival)
            waiting[(whead + wcount) % requests] = r
            wcount += 1
        if nrun == 0 and wcount == 0:
            if npend == 0:
                break
            t = arrival[pend[0]]
            continue

        # --- is the next step a pure decode step? (event.pure_decode_ahead)
        pure = 0 < nrun <= max_batched
        new_blocks = 0
        if pure:
            for i in range(nrun):
                r = running[i]
                if outputs[r] == 0 or computed[r] != tokens[r] - 1:
                    pure = False
                    break
                new_blocks += _cdiv(computed[r] + 1, bs) - nblk[r]
        if pure and new_blocks > free:
            pure = False
        if pure and wcount > 0 and nrun < max_num_seqs and max_batched > nrun:
            r = waiting[whead]
            held = 0
            if shared[r] > 0:
                held = _held_prefix_blocks(
                    khead, knext, refs, prefix_key_base[r], min(shared[r], (tokens[r] - 1) // bs)
                )
            pure = _cdiv(tokens[r], bs) - held > free - new_blocks
        nfin = 0
        if pure:  # --- event.fast_forward
            decode_padded = _padded(nrun, capture)
            context = 0
            left = gen[running[0]] - outputs[running[0]]
            for i in range(nrun):
                r = running[i]
                context += computed[r]
                left = min(left, gen[r] - outputs[r])
            while True:
                for i in range(nrun):
                    r = running[i]
                    if _cdiv(computed[r] + 1, bs) > nblk[r]:
                        free -= _allocate(pool, keys, table, off[r] + nblk[r], 1, sentinel)
                        nblk[r] += 1
                    computed[r] += 1
                    hashed[r] = _cache_filled(
                        keys,
                        bkey,
                        table,
                        off[r],
                        hashed[r],
                        key_base[r],
                        shared[r],
                        prefix_key_base[r],
                        computed[r] // bs,
                    )
                    outputs[r] += 1
                    tokens[r] += 1
                    steps[r] += 1
                step_s = base + per_decode * decode_padded + per_prefill * zero + per_kv * context
                t = t + step_s
                device = device + step_s
                total_steps += 1
                decode_total += nrun
                context += nrun
                left -= 1
                if left == 0:
                    for i in range(nrun):
                        if outputs[running[i]] == gen[running[i]]:
                            finished[nfin] = running[i]
                            nfin += 1
                    break
                if npend > 0 and arrival[pend[0]] <= t:
                    break
                new_blocks = 0
                for i in range(nrun):
                    new_blocks += _cdiv(computed[running[i]] + 1, bs) - nblk[running[i]]
                if new_blocks > free:
                    break
        else:  # --- engine.Engine.step
            budget = max_batched
            nsched = 0
            preempted = False
            i = 0
            while i < nrun and budget > 0:
                r = running[i]
                take = min(tokens[r] - computed[r], budget)
                need = _cdiv(computed[r] + take, bs) - nblk[r]
                itself = False
                while need > free:
                    victim = running[nrun - 1]
                    nrun -= 1
                    free += _release(pool, table, off[victim], nblk[victim], sentinel)
                    nblk[victim] = 0
                    hashed[victim] = 0
                    computed[victim] = 0
                    preempts[victim] += 1
                    whead = (whead - 1 + requests) % requests
                    waiting[whead] = victim
                    wcount += 1
                    preempted = True
                    if victim == r:
                        itself = True
                        break
                if itself:
                    break
                free -= _allocate(pool, keys, table, off[r] + nblk[r], need, sentinel)
                nblk[r] += need
                upto = min(computed[r] + take, tokens[r]) // bs
                hashed[r] = _cache_filled(
                    keys,
                    bkey,
                    table,
                    off[r],
                    hashed[r],
                    key_base[r],
                    shared[r],
                    prefix_key_base[r],
                    upto,
                )
                sched[nsched] = r
                chunk[nsched] = take
                nsched += 1
                budget -= take
                i += 1
            if not preempted:
                while budget > 0 and wcount > 0 and nrun < max_num_seqs:
                    r = waiting[whead]
                    cap = (tokens[r] - 1) // bs
                    h = 0
                    while h < cap:
                        block = khead[(prefix_key_base[r] if h < shared[r] else key_base[r]) + h]
                        if block == NO:
                            break
                        hit[h] = block
                        h += 1
                    in_free = 0
                    for j in range(h):
                        if refs[hit[j]] == 0:
                            in_free += 1
                    if _cdiv(tokens[r], bs) - h + in_free > free:
                        break
                    done_tokens = h * bs
                    take = min(tokens[r] - done_tokens, budget)
                    for j in range(h):  # the hit leaves the free queue first
                        block = hit[j]
                        if refs[block] == 0:
                            _unlink(nxt, prv, block)
                            free -= 1
                        refs[block] += 1
                        table[off[r] + j] = block
                    need = _cdiv(done_tokens + take, bs) - h
                    free -= _allocate(pool, keys, table, off[r] + h, need, sentinel)
                    nblk[r] = h + need
                    upto = min(done_tokens + take, tokens[r]) // bs
                    hashed[r] = _cache_filled(
                        keys,
                        bkey,
                        table,
                        off[r],
                        h,
                        key_base[r],
                        shared[r],
                        prefix_key_base[r],
                        upto,
                    )
                    whead = (whead + 1) % requests
                    wcount -= 1
                    running[nrun] = r
                    nrun += 1
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
            step_s = base + per_decode * decode_padded + per_prefill * prefill + per_kv * context
            t = t + step_s
            for j in range(nfirst):
                token_s[sampled_first[j]] = t
            device = device + step_s
            total_steps += 1
            decode_total += decode
            prefill_total += prefill

        # --- engine.Engine.finish
        for j in range(nfin):
            r = finished[j]
            free += _release(pool, table, off[r], nblk[r], sentinel)
            nblk[r] = 0
            finish_s[r] = t
            follow = next_fixed[r]
            if follow >= 0:
                arrival[r + 1] = t + gap[r] if not has_fixed else fixed[follow]
                npend = push_arrival(pend, npend, r + 1, arrival)
            elif follower[r] >= 0:  # the renewing session's round 0 (docs/DESIGN.md §16)
                arrival[follower[r]] = t + follow_gap[r]
                npend = push_arrival(pend, npend, follower[r], arrival)
        if nfin:
            kept = 0
            for i in range(nrun):
                r = running[i]
                if outputs[r] < gen[r]:
                    running[kept] = r
                    kept += 1
            nrun = kept
    return total_steps, decode_total, prefill_total, device, t


def warm_up() -> None:
    """Compile the kernel once into its on-disk cache."""
    ints = np.array([20, 3, 0, 0, 0, -1, 1], dtype=np.int64)
    run(
        ints[:1] + 0,
        ints[1:2] + 0,
        ints[2:3] + 0,
        np.zeros(1),
        np.zeros(1),
        ints[6:7] + 0,
        ints[3:4] + 0,
        ints[3:4] + 0,
        ints[5:6] + 0,
        ints[5:6] + 0,
        ints[5:6] + 0,
        np.zeros(1),
        np.empty(0),
        np.empty(0, dtype=np.int64),
        16,
        4,
        2,
        16,
        2,
        np.array([0.01, 0.001, 0.0001, 0.0]),
        np.empty((3, 1), dtype=np.int64),
        np.empty((4, 1)),
    )
