"""The routers of docs/DESIGN.md §16, one policy per module behind a registry (as vllm-router keeps
a policy object that picks a worker per request). Every router is deterministic and breaks ties to
the lowest replica index; it reads the fleet as it stands at the arrival
(``rearrival.model.fleet.loop.FleetState``).

A new router is one module with a class whose ``route(rid, state)`` returns a replica
index, and one entry in ``ROUTERS``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from rearrival.errors import RearrivalError

if TYPE_CHECKING:
    from rearrival.model.fleet.state import FleetState


class Router(Protocol):
    def route(self, rid: int, state: FleetState) -> int: ...


class RouterError(RearrivalError, ValueError):
    """A router name that does not exist."""


def make_router(name: str) -> Router:
    """A fresh router of the policy ``name`` (one per simulation: routers keep state)."""
    from rearrival.model.fleet.routers.least_loaded import LeastLoaded
    from rearrival.model.fleet.routers.prefix_aware import PrefixAware
    from rearrival.model.fleet.routers.round_robin import RoundRobin
    from rearrival.model.fleet.routers.session_affinity import SessionAffinity

    routers: dict[str, type] = {
        "round_robin": RoundRobin,
        "least_loaded": LeastLoaded,
        "session_affinity": SessionAffinity,
        "prefix_aware": PrefixAware,
    }
    if name not in routers:
        raise RouterError(f"router {name!r}: use one of {', '.join(ROUTERS)}")
    return routers[name]()


ROUTERS = ("round_robin", "least_loaded", "session_affinity", "prefix_aware")
