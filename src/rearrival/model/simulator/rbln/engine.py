"""The RBLN rule sets as an engine a fleet can drive (docs/DESIGN.md §16;
docs/DESIGN.md §4 for the rules).

``event.simulate_python`` runs a whole plan in one loop and
sends every request itself. A fleet needs the same engine in pieces: the router decides
which replica a request goes to when it arrives, so the engine is *driven*: ``add`` queues
a routed request, ``advance`` runs one action (one prefill step, or one stretch of decode
steps with the same n) and returns the requests it finished, and the fleet sends every
later round. The operations and their order are those of ``simulate_python`` (slot pool,
FIFO eviction, release timing, dummy-block rules, the 1e-12 s arrival tolerance), so one
replica driven by the fleet gives that loop's results bit for bit; with ``stepwise`` every
decode step is its own action and the clock adds one step time at a time, as
``reference`` does (the fleet's step-by-step reference).

A decode stretch with fewer than batch_size running stops at the first boundary that sees
``due`` (the earliest time a request could be routed here; an admission could take it
there). With the batch full nothing can be admitted before the stretch's next completion,
and nothing a router reads changes inside it (slots change only at admissions and the
dummy block, which acts before the stretch; a finish is counted at its own time), so such
a stretch runs to its completion whatever arrives meanwhile.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
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


class RblnEngine:
    """One replica of the RBLN rule set under ``config`` (a ``SimConfig``)."""

    tolerance_s = ARRIVAL_TOLERANCE_S  # an arrival at a counts at a boundary >= a - this

    def __init__(self, plan: Any, config: SimConfig, profile: Profile, stepwise: bool = False):
        arrays = checked_arrays(plan, config)
        self.arrays = arrays
        self.config = config
        self.stepwise = stepwise
        self.miss_cost, self.pair_off, self.pair_reuse, self.pair_cost, self.owners = (
            request_tables(plan, arrays, profile)
        )
        self.step_s, self.bucket_of = step_table(config, profile)
        self.reusable = profile.reusable_tokens
        requests = arrays.requests
        self.batch = config.batch_size
        self.pad_below = self.batch if config.dummy_block == "pre-evict" else 0
        self.reserve_below = self.batch if config.dummy_block == "reserved" else 0
        self.pool = SlotPool(config.slots, config.release)
        self.arrival = [math.nan] * requests
        self.admit_s = [0.0] * requests
        self.complete_s = [0.0] * requests
        self.cached = [0] * requests
        self.prefill_s = [0.0] * requests
        self.slot_of = [0] * requests
        self.evicted_tag = [NO_OWNER] * requests
        self.running_at = [0] * requests
        self.waiting: list[tuple[float, int]] = []  # (arrival, rid): FIFO, session ties
        self.running: list[int] = []  # (clock at completion) << shift | rid
        self.shift = requests.bit_length()
        self.hist = [0] * (self.batch + 1)
        self.stretches: list[list[Any]] = []
        self.evictions: list[tuple[float, int, int, str]] = []
        self.t = 0.0
        self.clock = 0
        self.prefill_total = 0.0
        self.interference = 0.0
        self.stretch_n = 0

    # --- what the fleet reads ---------------------------------------------------------
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, rid: int, when: float) -> None:
        """A request routed here at ``when``; an idle engine whose clock is earlier than
        ``when`` (beyond the tolerance) jumps to it, as the single engine's loop does."""
        if not self.has_work() and not when <= self.t + self.tolerance_s:
            self.t = when
        self.arrival[rid] = when
        heappush(self.waiting, (when, rid))

    def cached_prefix(self, rid: int) -> int:
        """What an admission here would reuse for ``rid`` now: the largest cached prefix
        among its session's surviving slots (the prefix-aware router's score)."""
        owner, slot_of, round_of = self.pool.owner, self.slot_of, self.arrays.round_of
        for d in range(1, round_of[rid] + 1):
            if owner[slot_of[rid - d]] is self.owners[rid - d]:
                return self.pair_reuse[self.pair_off[rid] + d - 1]
        return 0

    # --- one action -------------------------------------------------------------------
    def advance(self, due: float) -> list[int]:
        """Run one action at the current boundary: an admission's prefill, or a decode
        stretch cut at the first boundary that sees ``due`` (module docstring). Returns
        the requests finished, at ``self.t``."""
        pool, batch = self.pool, self.batch
        while True:
            nrun = len(self.running)
            reserved = 1 if 0 < nrun < self.reserve_below else 0
            if self.waiting and nrun < batch:
                if len(pool.free) - reserved + len(pool.evictable) >= 1:
                    return self._admit(reserved)
                pool.release_deferred()
                if not nrun:
                    continue
            return self._decode(due, reserved)

    def _admit(self, reserved: int) -> list[int]:
        """SlotPool.admit written out as ``simulate_python`` does, then the prefill."""
        pool, t = self.pool, self.t
        slots, owner = pool.slots, pool.owner
        rid = heappop(self.waiting)[1]
        if len(pool.free) > reserved:
            slot = heappop(pool.free)
        else:
            for _ in range(reserved - len(pool.free)):  # the padding block's slot
                slot = heappop(pool.evictable) % slots
                victim = owner[slot][0]
                owner[slot] = None
                heappush(pool.free, slot)
                self.evictions.append((t, slot, victim, EVICTED_BY_ADMISSION))
            slot = heappop(pool.evictable) % slots
            victim = owner[slot][0]
            owner[slot] = None
            self.evicted_tag[rid] = victim
            self.evictions.append((t, slot, victim, EVICTED_BY_ADMISSION))
        if pool.pending:
            for finished in pool.pending:
                heappush(pool.evictable, pool.key[finished])
            pool.pending.clear()
        cost = self.miss_cost[rid]
        for d in range(1, self.arrays.round_of[rid] + 1):
            if owner[self.slot_of[rid - d]] is self.owners[rid - d]:
                pair = self.pair_off[rid] + d - 1
                self.cached[rid] = self.pair_reuse[pair]
                cost = self.pair_cost[pair]
                break
        owner[slot] = self.owners[rid]
        key = pool.next_key
        pool.key[slot] = key + slot
        pool.next_key = key + slots
        nrun = len(self.running)
        self.admit_s[rid] = t
        self.prefill_s[rid] = cost
        self.slot_of[rid] = slot
        self.running_at[rid] = nrun
        self.interference += nrun * cost
        self.prefill_total += cost
        self.t = t + cost
        self.stretch_n = 0
        steps = self.arrays.gen[rid] - 1
        if steps:
            heappush(self.running, (self.clock + steps) << self.shift | rid)
            return []
        self._finish(rid)
        return [rid]

    def _decode(self, due: float, reserved: int) -> list[int]:
        pool, t, eps, nrun = self.pool, self.t, self.tolerance_s, len(self.running)
        if nrun < self.pad_below and not pool.free and pool.evictable:  # SlotPool.pre_evict
            slot = heappop(pool.evictable) % pool.slots
            victim = pool.owner[slot][0]
            pool.owner[slot] = None
            heappush(pool.free, slot)
            self.evictions.append((t, slot, victim, EVICTED_BY_DUMMY_BLOCK))
        dt = self.step_s[nrun]
        k = (self.running[0] >> self.shift) - self.clock  # steps to the next completion
        end = t + k * dt
        if self.waiting:
            if nrun < self.batch and len(pool.free) - reserved + len(pool.evictable) >= 1:
                k, end = 1, t + dt
        elif due <= end + eps and nrun < self.batch:
            k = int((due - t) / dt) + 1
            while k > 1 and due <= t + (k - 1) * dt + eps:
                k -= 1
            while due > t + k * dt + eps:
                k += 1
            end = t + k * dt
        if self.stepwise:
            k, end = 1, t + dt
        self._record_stretch(nrun, k, t, end)
        self.clock += k
        self.hist[nrun] += k
        self.t = end
        done = (self.clock + 1) << self.shift
        finished = []
        mask = (1 << self.shift) - 1
        while self.running and self.running[0] < done:
            rid = heappop(self.running) & mask
            self._finish(rid)
            finished.append(rid)
        return finished

    def _record_stretch(self, n: int, k: int, start: float, end: float) -> None:
        if n == self.stretch_n:
            last = self.stretches[-1]
            last[1] += k
            last[3] = end
        else:
            self.stretches.append([n, k, start, end])
            self.stretch_n = n

    def _finish(self, rid: int) -> None:
        self.complete_s[rid] = self.t
        if self.pool.deferred:  # SlotPool.finish
            self.pool.pending.append(self.slot_of[rid])
        else:
            heappush(self.pool.evictable, self.pool.key[self.slot_of[rid]])

    # --- the outcome ------------------------------------------------------------------
    def result(self) -> SimResult:
        """This replica's ``SimResult``: its decode histogram and totals, and per-request
        columns in which a request served by another replica keeps its initial values."""
        histogram = {}
        decode_total = 0.0
        for n in range(1, self.batch + 1):
            steps = self.hist[n]
            if steps:
                histogram[(n, self.bucket_of[n])] = steps
                decode_total += steps * self.step_s[n]
        columns = (
            self.arrival,
            self.admit_s,
            self.complete_s,
            self.arrays.prompt,
            self.cached,
            self.prefill_s,
            self.slot_of,
            self.evicted_tag,
            self.running_at,
        )
        return SimResult(
            self.config,
            self.arrays,
            histogram,
            decode_total,
            self.prefill_total,
            self.interference,
            self.t,
            columns,
            self.stretches,
            self.evictions,
        )
