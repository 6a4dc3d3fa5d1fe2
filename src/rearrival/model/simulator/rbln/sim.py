"""The predictor simulator (docs/DESIGN.md §4, paper Section IV): cost of a plan on a configuration.

Given the fixed inputs of a replicate (per session: its start and, per round, the new
tokens, the generation length and the tool gap after it; the paper's two-round session is
the K = 2 case) and a compile-time configuration (bucket set, batch_size, KV slots), it replays
admission, prefill, decode, completion, re-arrival and KV eviction/reuse in time order,
and reports the device time D (decode + prefill), the prefill interference W, the
decode histogram h(n) and reuse. Re-arrival times are recomputed from completion times
because a configuration change moves them (paper Section III-D), unless the
fixed-arrival variant pins them (Table XI).

Semantics (docs/DESIGN.md §4 rules 1-6; the KV rules live in ``slots``):

1. Requests enter a FIFO waiting queue in arrival order; simultaneous arrivals in session
   index order (then round order). The queue is kept in (arrival time, session, round)
   order, which is FIFO except in the fixed-arrival variant (a). Arrivals are seen at
   step boundaries: an arrival at ``a`` counts at the first boundary ``t >= a - 1e-12``.
2. A step is one prefill or one decode. If a request waits, fewer than batch_size run and
   a slot can be had, the head of the queue is admitted and its prefill owns the step.
   If a request waits and fewer than batch_size run but no slot is free or evictable,
   the deferred releases are applied and one decode step runs instead (with nothing
   running, admission is retried at once). Otherwise all running requests decode one
   token at bucket b(n); with nothing running, time jumps to the next arrival.
3. Admission secures a slot first (evicting the oldest evictable by allocation order),
   then looks up the session's surviving KV: the largest C = profile.reusable_tokens(P,
   L) among the session's surviving slots, P the prompt each slot's prefill wrote (every
   earlier round's prompt is a prefix of this one's, so the latest surviving round
   gives it); q = L - C is computed at cost T(q).
4. Prefill emits the first token; a request generating G tokens then needs G-1 decode
   steps. Round 0 of a session arrives at its ``start_s``; round k+1 at round k's
   completion + round k's gap (client delay 0); a renewed session's round 0 (``after``,
   docs/DESIGN.md §16) at its leader's last round's completion + its gap (gap 0: the authors'
   ``successor``). A shared prefix is part of round 0's prompt (``prompts()``) and only
   the session's own slots are looked up: no cross-session reuse (docs/DESIGN.md §16).
5. D = sum of decode step times + sum of prefill times; W = sum over prefills of
   (requests running at admission) x T(q), in session-seconds, never added to D.

Summary: ``prefill_steps`` counts every request, ``re_arrivals`` every round after a
session's first; ``reuse_hits`` and ``computed_prefill_tokens`` are over rounds >= 1.
Records carry the round index (``PredictedRequest.turn``, alias ``round``).

Variants: (a) ``fixed_arrivals`` gives one time per re-arrival (every round k >= 1, in
(session, round) order; for a two-round plan that is one per session, as in Table XI).
The fixed time is the request's arrival time and its place in the queue, but a round
cannot be queued before the round it extends has completed: a time that falls earlier
queues it at that completion's boundary, ahead of requests that arrived later (as the
authors' simulator does, which records the fixed time as the arrival).
(b) ``dummy_block="pre-evict"``: before every decode step with 0 < running <
batch_size, if no slot is free, the oldest evictable slot is evicted and left free (what
the measured stack does). (c) ``release``: "deferred" (paper's base simulator) or
"immediate" (measured stack). (d) ``dummy_block="reserved"``
(the rule of the paper's Supplementary S9 simulator): at every admission attempt while
0 < running < batch_size one slot counts as held by the padding block, so the free count
is S - allocated - 1; admission is possible iff free + evictable >= 1 and evicts the
oldest evictable slots until one is free (the first victims' slots stay free for the
padding block; the admission takes the last one's).

Under deferred release "pre-evict" gives exactly the base results ("off"): the slot it
frees is the oldest evictable one, which is the victim the next admission would have
chosen, and no look-up happens in between (the deferred releases that could add an
older candidate are applied only after an admission's choice). Only the eviction
records' cause and time differ; ``tests/test_sim_equivalence.py`` checks the summaries on
random plans. S9's dummy-block predictions therefore use deferred + "reserved".

Choices the design leaves open (identical in ``reference``): a reuse hit is a
re-arrival with C > 0 (a surviving slot with a prompt under 128 tokens reuses nothing,
which a server's cached-token counter cannot tell from a miss); deferred releases are
applied after every admission's slot choice, including one that took a free slot; a hit
copies the prefix into the new slot and leaves the source slot cached with its old
allocation order; decode steps run back to back with no prefill in between and the same
n form one stretch. "Simultaneous" arrivals have equal times; the authors' simulator
compares arrival times rounded to the nanosecond, which orders two arrivals differently
only when they are less than 1 ns apart yet unequal (none did in 10,800 random
comparisons against it, two-round and multi-round, every rule set).

The event core advances whole stretches of identical decode steps at once: n only
changes at a completion, an arrival or an admission, so it jumps straight to the next
such boundary. ``reference`` is the plain per-step version used by the
tests and the benchmark to check this one.

The loop exists twice, with the same operations in the same order: in plain Python
(``event.simulate_python``, the readable statement and the
fallback) and compiled with numba
on flat arrays (``core``, machine code cached on disk), which
``simulate`` runs once a process has made a few calls, and which the search runs over many
configurations of one plan per call (``core.run_batch``). Tests hold both to the
reference and to each other bit for bit.

Modules: ``config`` (SimConfig), ``result`` (SimResult and its records),
``inputs`` (the per-plan and per-configuration tables the cores read, cached),
``event`` (the Python loop), ``core`` (the compiled loop); this one picks the core.
"""

from __future__ import annotations

import warnings
from typing import Any

from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.simulator.cores import CORES, CoreChoice
from rearrival.model.simulator.rbln.config import SimConfig, SimConfigError
from rearrival.model.simulator.rbln.event import simulate_python
from rearrival.model.simulator.rbln.inputs import (
    checked_arrays,
    core_inputs,
    fixed_array,
    step_entry,
)
from rearrival.model.simulator.rbln.result import SimResult

__all__ = [
    "CORE_CHOICE",
    "PYTHON_FIRST_CALLS",
    "SimConfig",
    "SimConfigError",
    "SimResult",
    "compiled_core",
    "simulate",
]

# A process's first calls run the Python core (rearrival.model.simulator.cores): loading
# numba and the cached machine code costs about 1.2 s, more than a one-off
# `rearrival simulate` spends simulating.
PYTHON_FIRST_CALLS = 32
CORE_CHOICE = CoreChoice("rearrival.model.simulator.rbln.core", PYTHON_FIRST_CALLS)


def compiled_core() -> Any:
    """The compiled core module (``core``), or None (with one warning) when numba cannot
    be imported."""
    return CORE_CHOICE.compiled()


def simulate(
    plan: Any, config: SimConfig, profile: Profile | None = None, core: str = "auto"
) -> SimResult:
    """Predict one plan on one configuration (paper Section IV); see the module docstring.

    ``plan`` is a ``rearrival.model.plans.plan.Plan`` (anything with ``.sessions``); ``profile``
    defaults to the measured RBLN-CA25 profile. ``core``: "compiled" runs
    ``core``; "python" the plain event loop of ``event`` (same
    results, same bits); "auto" the Python core for a process's first
    ``PYTHON_FIRST_CALLS`` calls (unless the compiled core is already loaded), then the
    compiled one. The Python core also runs, with a warning, when numba is missing or the
    plan's token counts are too large for the compiled core's int64 keys.
    """
    if profile is None:
        profile = measured_profile()
    checked_arrays(plan, config)  # validates fixed_arrivals against the plan
    if core not in CORES:
        raise SimConfigError(f"simulate core {core!r}: use one of {', '.join(CORES)}")
    if CORE_CHOICE.runs_python(core):
        return simulate_python(plan, config, profile)
    core_module = CORE_CHOICE.compiled()
    inputs = core_inputs(plan, profile)
    if (
        core_module is None
        or not inputs.compiled_ok
        or not core_module.fits_int64(0, inputs.arrays.requests, config.slots)
    ):
        if core_module is not None:
            warnings.warn(
                "plan too large for the compiled core's int64 keys; running the "
                "Python core (same results, slower)",
                RuntimeWarning,
                stacklevel=2,
            )
        return simulate_python(plan, config, profile)
    _, _, bucket_of, step_s, bucket_array, labels = step_entry(config, profile)
    batch = config.batch_size
    args = (
        inputs.ints,
        inputs.floats,
        inputs.pair_reuse,
        inputs.pair_cost,
        fixed_array(config),
        step_s,
        batch,
        config.slots,
        config.release == "deferred",
        batch if config.dummy_block == "pre-evict" else 0,
        batch if config.dummy_block == "reserved" else 0,
        bucket_array,
    )
    hist, prefill_total, interference, makespan, decode_total, *counts = core_module.run_summary(
        *args
    )
    return SimResult(
        config,
        inputs.arrays,
        None,
        decode_total,
        prefill_total,
        interference,
        makespan,
        None,
        None,
        None,
        tuple(counts),
        (core_module, args),
        (hist, bucket_of, labels),
    )
