"""``least_loaded`` (docs/DESIGN.md §16): the replica with the fewest outstanding requests (routed
there and not finished at the routing instant), ties to the lowest index."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rearrival.model.fleet.state import FleetState


def least_loaded(state: FleetState, replicas: Iterable[int] | None = None) -> int:
    """The least loaded of ``replicas`` (default: all), ties to the lowest index; the other
    routers' tie-break."""
    candidates = range(state.replicas) if replicas is None else replicas
    return min(candidates, key=lambda r: (state.outstanding[r], r))


class LeastLoaded:
    def route(self, rid: int, state: FleetState) -> int:
        return least_loaded(state)
