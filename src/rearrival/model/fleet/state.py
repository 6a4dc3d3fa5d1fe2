"""What a router reads of the fleet at an arrival (docs/DESIGN.md §16): the replicas' engines, where
each request went, and how many requests each replica has outstanding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rearrival.model.fleet.engine import FleetEngine
from rearrival.model.simulator.plan_arrays import PlanArrays


@dataclass
class FleetState:
    """What routers read: the replicas, each request's replica (-1 until routed) and the
    requests routed to each replica and not finished by the routing instant."""

    engines: Sequence[FleetEngine]
    arrays: PlanArrays
    placement: list[int]
    outstanding: list[int]

    @property
    def replicas(self) -> int:
        return len(self.engines)
