"""The predictor's ``vllm`` rule set (docs/DESIGN.md §15): a plan on a vLLM configuration.

``simulate_vllm`` replays a plan (two-round or multi-round sessions, staggered starts,
renewed sessions and shared prefixes as docs/DESIGN.md §16 states them, optionally fixed re-arrival
times from an observed run) on vLLM 0.32.0's synchronous
scheduler as the rules of docs/DESIGN.md §15 state it: a paged pool with a null block and
an LRU free queue (``blockpool``), prefix caching of full blocks, the scheduler's step
with chunked prefill, the full-sequence admission gate and recompute preemption
(``engine``), and the step cost of ``rearrival.model.cost.vllm_profile``. It returns
per-request records and the summary (``result``), with the prefill tokens recomputed
because the pool evicted (against the same plan and knobs on a pool that never evicts,
``result.VllmResult.never_evicted_prefill``).

Three cores run the same rules: the step-by-step ``reference`` (tests only), the Python
``event`` core (which fast-forwards pure decode stretches) and the compiled ``core``.
vLLM's own scheduler, driven by ``oracle_driver``, is the oracle they are held to.
Asynchronous scheduling (vLLM's GPU default) is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rearrival.errors import RearrivalError
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.cores import CORES, CoreChoice
from rearrival.model.simulator.vllm.event import run_event
from rearrival.model.simulator.vllm.inputs import (
    VllmInputs,
    check_pool,
    fixed_times,
    vllm_inputs,
)
from rearrival.model.simulator.vllm.result import RawRun, VllmResult

# A process's first calls run the Python core (rearrival.model.simulator.cores): loading
# numba and the cached machine code costs more than a one-off `rearrival simulate` spends
# simulating.
PYTHON_FIRST_CALLS = 8
CORE_CHOICE = CoreChoice("rearrival.model.simulator.vllm.core", PYTHON_FIRST_CALLS)

Run = Callable[[VllmInputs, VllmConfiguration, VllmStepCost, list[float] | None], RawRun]
_PLAN_COLUMNS: dict[int, tuple[VllmInputs, tuple[Any, ...]]] = {}


def plan_columns(inputs: VllmInputs) -> tuple[Any, ...]:
    """The compiled core's per-request arrays of a plan (``core.run``'s arguments prompt
    .. follow_gap), converted once per ``VllmInputs`` (which ``vllm_inputs`` caches)."""
    entry = _PLAN_COLUMNS.get(id(inputs))
    if entry is not None and entry[0] is inputs:
        return entry[1]
    a = inputs.arrays
    start = np.zeros(a.requests)
    starts = np.zeros(a.requests, dtype=np.int64)
    for s, rid in enumerate(a.first[:-1]):
        start[rid] = a.start[s]
        starts[rid] = a.leader[s] < 0  # a renewed session is sent by its leader's finish
    ints = np.array(
        [
            a.prompt,
            a.gen,
            a.round_of,
            inputs.key_base,
            inputs.shared_blocks,
            inputs.prefix_key_base,
            a.next_fixed,
            a.follower,
        ],
        dtype=np.int64,
    ).reshape(8, -1)
    floats = np.array([a.gap, a.follow_gap], dtype=np.float64).reshape(2, -1)
    prompt, gen, round_of, key_base, shared, prefix_key_base, next_fixed, follower = ints
    columns = (prompt, gen, round_of, floats[0], start, starts, key_base, shared)
    columns += (prefix_key_base, next_fixed, follower, floats[1])
    if len(_PLAN_COLUMNS) > 256:
        _PLAN_COLUMNS.clear()
    _PLAN_COLUMNS[id(inputs)] = (inputs, columns)
    return columns


def run_compiled(
    inputs: VllmInputs,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed: list[float] | None,
) -> RawRun:
    """One simulation on the compiled core."""
    from rearrival.model.simulator.vllm import core  # numba: loaded on first use

    requests = inputs.requests
    req_i = np.empty((3, requests), dtype=np.int64)
    req_f = np.empty((4, requests))
    steps, decode, prefill, device_s, makespan_s = core.run(
        *plan_columns(inputs),
        np.array(fixed if fixed is not None else [], dtype=np.float64),
        np.array(configuration.buckets, dtype=np.int64),
        configuration.block_size,
        configuration.num_blocks,
        configuration.batch_size,
        configuration.max_num_batched_tokens,
        max(inputs.keys, 1),
        np.array(step_cost.as_tuple()),
        req_i,
        req_f,
    )
    cached, preemptions, per_request_steps = req_i.tolist()
    arrival, first, first_token, finish = req_f.tolist()
    return RawRun(
        cached,
        preemptions,
        per_request_steps,
        arrival,
        first,
        first_token,
        finish,
        int(steps),
        int(decode),
        int(prefill),
        float(device_s),
        float(makespan_s),
    )


class VllmSimError(RearrivalError, ValueError):
    """A core choice that does not exist."""


def run_with(
    run: Run,
    plan: Any,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed_arrivals: Sequence[float] | None,
    source: str = "plan",
) -> VllmResult:
    """Check the plan against the pool and the fixed arrivals, then run it with ``run``."""
    inputs = vllm_inputs(plan, configuration.block_size)
    check_pool(inputs, configuration, source)
    fixed = fixed_times(inputs, fixed_arrivals)
    return VllmResult(inputs, configuration, run(inputs, configuration, step_cost, fixed))


def simulate_vllm(
    plan: Any,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed_arrivals: Sequence[float] | None = None,
    core: str = "auto",
    source: str = "plan",
) -> VllmResult:
    """Predict one plan on one vLLM configuration (module docstring).

    ``plan`` is a ``rearrival.model.plans.plan.Plan``; ``fixed_arrivals`` one send time
    per re-arrival in (session, round) order (an observed run's), else a re-arrival is
    sent at the previous round's finish plus its gap. ``core``: "compiled" the numba
    core, "python" the event core, "auto" the Python core for a process's first calls
    (unless the compiled one is loaded already), then the compiled one; without numba the
    event core, with one warning (``rearrival.model.simulator.cores``). ``source`` names
    the plan in errors. A plan whose longest request cannot fit the pool is refused.
    """
    if core not in CORES:
        raise VllmSimError(f"simulate_vllm core {core!r}: use one of {', '.join(CORES)}")
    python = CORE_CHOICE.runs_python(core) or CORE_CHOICE.compiled() is None
    run: Run = run_event if python else run_compiled
    return run_with(run, plan, configuration, step_cost, fixed_arrivals, source)
