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


def run_compiled(
    inputs: VllmInputs,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed: list[float] | None,
) -> RawRun:
    """One simulation on the compiled core: a fleet of one replica, which is the single
    engine (``core``'s docstring)."""
    from rearrival.model.simulator.vllm import core  # numba: loaded on first use

    run = core.run(inputs, configuration, step_cost, 1, core.ROUND_ROBIN, fixed)
    return RawRun(
        run.cached_tokens,
        run.preemptions,
        run.steps,
        run.arrival_s,
        run.first_scheduled_s,
        run.first_token_s,
        run.finish_s,
        run.replica_steps[0],
        run.replica_decode_tokens[0],
        run.replica_prefill_tokens[0],
        run.replica_device_s[0],
        run.replica_t[0],
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
