"""Plain step-by-step statement of the ``vllm`` rule set (docs/DESIGN.md §15), used only by
the tests and the benchmark: one ``Engine.step`` per loop iteration, nothing skipped.

The event core (``event``) and the compiled core (``core``) must agree with it exactly on
every integer and to 1e-9 relative on every time; vLLM's own scheduler
(``oracle_driver``) is the oracle all three are held to.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.vllm.engine import Engine
from rearrival.model.simulator.vllm.inputs import VllmInputs
from rearrival.model.simulator.vllm.result import RawRun, VllmResult
from rearrival.model.simulator.vllm.sim import run_with


def run_reference(
    inputs: VllmInputs,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed: list[float] | None,
) -> RawRun:
    engine = Engine(inputs, configuration, step_cost, fixed)
    while engine.advance_to_work():
        engine.step()
    return engine.raw()


def simulate_reference(
    plan: Any,
    configuration: VllmConfiguration,
    step_cost: VllmStepCost,
    fixed_arrivals: Sequence[float] | None = None,
) -> VllmResult:
    """``simulate_vllm`` with every step taken one at a time."""
    return run_with(run_reference, plan, configuration, step_cost, fixed_arrivals)
