"""A plan on a fleet of R identical replicas behind a router (docs/DESIGN.md §16), either substrate.

``simulate_fleet`` builds R engines of the configuration's rule set (the substrate's entry
in ``rearrival.model.substrates``), runs them through the one event loop
(``rearrival.model.fleet.loop``) and returns every request's outcome with its replica, the
substrate's own summary over the whole fleet (summed over replicas; the makespan is the
latest replica's), each replica's device time, and the latency percentiles. With R = 1 the
substrate's summary is the single engine's, exactly.

``core`` picks how: "python" the engines driven by the loop (the readable reference),
"compiled" the substrate's compiled fleet (one numba kernel for 1..R replicas, the same
bits: ``rearrival.model.simulator.vllm.core.run_fleet``,
``rearrival.model.simulator.rbln.core.run_fleet``), "auto" the compiled fleet where the
substrate has one and the run is not step by step, else the Python one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rearrival.errors import RearrivalError
from rearrival.model.fleet.latency import Slo, attainment, measured, percentiles
from rearrival.model.fleet.loop import run_fleet
from rearrival.model.fleet.records import RequestOutcome
from rearrival.model.fleet.routers import ROUTERS, Router, make_router
from rearrival.model.simulator.cores import CORES
from rearrival.model.substrates import substrate_of


class FleetCoreError(RearrivalError, ValueError):
    """A fleet core choice that does not exist or cannot run this fleet."""


@dataclass(frozen=True)
class FleetResult:
    """One plan on one fleet. ``prediction`` is the substrate's result over the whole fleet
    (``SimResult`` on RBLN, ``VllmResult`` on vLLM), ``requests`` every request's outcome in
    (session, round) order."""

    replicas: int
    router: str
    requests: tuple[RequestOutcome, ...]
    replica_device_s: tuple[float, ...]
    prediction: Any

    @property
    def device_s(self) -> float:
        return self.prediction.device_s

    def latency(self, warmup_s: float = 0.0, horizon_s: float = math.inf) -> dict[str, Any]:
        """p50/p90/p99 of ttft_s, tpot_s, e2e_s and queue_s over the measured window."""
        return percentiles(measured(self.requests, warmup_s, horizon_s))

    def attainment(self, slo: Slo, warmup_s: float = 0.0, horizon_s: float = math.inf) -> float:
        return attainment(measured(self.requests, warmup_s, horizon_s), slo)

    def summary(
        self, slo: Slo | None = None, warmup_s: float = 0.0, horizon_s: float = math.inf
    ) -> dict[str, Any]:
        """The substrate's summary, then the fleet's: replicas, router, per-replica device
        time, latency percentiles over the measured window, the attainment and whether the
        SLO is met when one is given, and one row per request (with its replica and
        first-token time)."""
        window = measured(self.requests, warmup_s, horizon_s)
        summary = {k: v for k, v in self.prediction.summary().items() if k != "requests"}
        summary |= {
            "replicas": self.replicas,
            "router": self.router,
            "replica_device_s": list(self.replica_device_s),
            "measured_requests": len(window),
            "window_s": [warmup_s, None if math.isinf(horizon_s) else horizon_s],
            "latency": percentiles(window),
        }
        if slo is not None:
            share = attainment(window, slo)
            summary["slo"] = {
                "ttft_s": slo.ttft_s,
                "tpot_s": slo.tpot_s,
                "e2e_s": slo.e2e_s,
                "attainment_required": slo.attainment,
                "attainment": share,
                "met": share >= slo.attainment,
            }
        summary["requests"] = [r.row() for r in self.requests]
        return summary


def simulate_fleet(
    plan: Any,
    configuration: Any,
    cost: Any,
    replicas: int = 1,
    router: str = "round_robin",
    fixed_arrivals: Sequence[float] | None = None,
    stepwise: bool = False,
    source: str = "plan",
    core: str = "auto",
) -> FleetResult:
    """Serve ``plan`` on ``replicas`` copies of ``configuration`` behind ``router``.

    ``configuration`` is a ``SimConfig`` (RBLN, its rule set included) or a
    ``VllmConfiguration``; ``cost`` that substrate's cost model (a ``Profile``, or a
    ``VllmStepCost``). ``stepwise`` runs every engine step by step (the fleet's reference,
    used by the tests); ``fixed_arrivals`` pins every re-arrival to an observed send time;
    ``core`` as the module docstring says.
    """
    if core not in CORES:
        raise FleetCoreError(f"simulate_fleet core {core!r}: use one of {', '.join(CORES)}")
    substrate = substrate_of(configuration)
    policy = make_router(router)
    compiled = substrate.compiled
    if core == "compiled" and (compiled is None or stepwise):
        why = "runs step by step" if stepwise else f"has no compiled {substrate.name} fleet"
        raise FleetCoreError(f"simulate_fleet core 'compiled': this run {why}; use auto or python")
    if compiled is not None and not stepwise and core != "python":
        prediction, outcomes, device = compiled(
            plan, configuration, cost, replicas, ROUTERS.index(router), fixed_arrivals, source
        )
        return FleetResult(replicas, router, outcomes, device, prediction)
    fleet = substrate.fleet(plan, configuration, cost, replicas, stepwise, source)
    return fleet_result(fleet, replicas, router, policy, fixed_arrivals)


def fleet_result(
    fleet: Any,
    replicas: int,
    name: str,
    router: Router,
    fixed_arrivals: Sequence[float] | None = None,
) -> FleetResult:
    """Run a built fleet (``Substrate.fleet``) behind ``router`` (called ``name``): the
    step a caller takes itself when it routes by a router of its own (the observed
    placement of a real fleet, ``routers.observed``) or watches the engines."""
    state = run_fleet(fleet.arrays, fleet.engines, router, fixed_arrivals)
    prediction, outcomes, device = fleet.outcome(state.placement)
    return FleetResult(replicas, name, outcomes, device, prediction)
