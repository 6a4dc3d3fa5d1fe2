"""The ``vllm`` rule set's event core in Python (docs/DESIGN.md §15): ``Engine`` steps,
except that a stretch of pure decode steps is run without the scheduling logic.

In a *pure decode* step every running request has sampled at least one token and has
exactly one token to compute, the budget covers them all, their new blocks fit the free
queue, and nothing is admitted. The step then only allocates a block for each request
whose last block is full, caches each block it fills and samples a token everywhere; its
cost is ``step_s(D_pad(n), 0, C)`` with C growing by n per step. Once such a step is
known to be pure decode the next one is too, unless a request finishes, a send comes
due, or the blocks run short: admission stays impossible because the free queue only
shrinks (a blocked head of the queue stays blocked, a full batch stays full).

The clock still advances one step at a time, ``t = t + step_s``, exactly as the
step-by-step reference and vLLM's own harness do, so every time and every arrival
comparison is the same bit for bit; only the scheduling work per step is skipped.
The head of the waiting queue is blocked when its whole sequence needs more blocks
than are free: its own session's cached blocks cannot help, because they all sit in the
free queue (a session has one live request at a time), so they count as free blocks
either way. Only the blocks of a shared prefix (SPEC 17) can be held by another running
request; each such block of its hit needs no free block, so the head needs
ceil(tokens / bs) - held. Pure decode steps never free a block and never cache a prefix
block (decode fills blocks past the prompt), but an allocation may evict a free copy of a
prefix block whose other copy is held, so the bound counts every position of the hit
where any copy is held (``held_prefix_blocks``): that count can only fall while the free
blocks only shrink, so a head blocked by it stays blocked.
"""

from __future__ import annotations

import math

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.vllm.engine import Engine, Request
from rearrival.model.simulator.vllm.inputs import VllmInputs, cdiv
from rearrival.model.simulator.vllm.result import RawRun


def pure_decode_ahead(engine: Engine) -> bool:
    """Whether the next step is a pure decode step (module docstring)."""
    running, bs = engine.running, engine.block_size
    n = len(running)
    if not n or n > engine.budget:
        return False
    new_blocks = 0
    for r in running:
        if r.outputs == 0 or r.computed != r.tokens - 1:
            return False
        new_blocks += cdiv(r.computed + 1, bs) - len(r.blocks)
    free = engine.pool.free_count
    if new_blocks > free:
        return False
    if engine.waiting and n < engine.max_num_seqs and engine.budget > n:
        head = engine.waiting[0]
        return cdiv(head.tokens, bs) - held_prefix_blocks(engine, head) > free - new_blocks
    return True


def held_prefix_blocks(engine: Engine, r: Request) -> int:
    """An upper bound on the blocks of waiting request ``r``'s prefix hit that other
    requests hold, now and through a pure decode stretch: the positions of its shared
    prefix's cached chain (capped as the look-up is) with any copy out of the free queue
    (0 without a prefix; the module docstring says why)."""
    pool, held = engine.pool, 0
    for j in range(min(r.shared, (r.tokens - 1) // engine.block_size)):
        holders = pool.cached.get(r.prefix_key_base + j)
        if not holders:
            break
        held += any(pool.refs[block] > 0 for block in holders)
    return held


def fast_forward(engine: Engine, due: float) -> None:
    """Run pure decode steps until a request finishes, a send comes due (the first
    boundary at or after ``due``) or the next step's new blocks would not fit (then the
    full step decides)."""
    running, bs, pool = engine.running, engine.block_size, engine.pool
    n = len(running)
    decode_padded = engine.configuration.padded(n)
    context = sum(r.computed for r in running)
    left = min(r.gen - r.outputs for r in running)
    while True:
        for r in running:
            need = cdiv(r.computed + 1, bs) - len(r.blocks)
            if need:
                r.blocks += pool.allocate(need)
            r.computed += 1
            engine.cache_filled(r, r.computed)
            r.outputs += 1
            r.tokens += 1
            r.steps += 1
        engine.advance_clock(decode_padded, 0, context)
        engine.decode_tokens += n
        context += n
        left -= 1
        if left == 0:
            engine.finish([r for r in running if r.outputs == r.gen])
            return
        if due <= engine.t:
            return
        if sum(cdiv(r.computed + 1, bs) - len(r.blocks) for r in running) > pool.free_count:
            return


def run_event(
    inputs: VllmInputs,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed: list[float] | None,
) -> RawRun:
    """One simulation: full steps where scheduling decides, fast-forward elsewhere."""
    engine = Engine(inputs, configuration, step_cost, fixed)
    while engine.advance_to_work():
        if pure_decode_ahead(engine):
            fast_forward(engine, engine.pending[0][0] if engine.pending else math.inf)
        else:
            engine.step()
    return engine.raw()
