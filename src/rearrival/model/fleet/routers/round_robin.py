"""``round_robin`` (docs/DESIGN.md §16): the k-th routed request goes to replica k mod R, whatever
the session (vllm-router's round_robin policy)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rearrival.model.fleet.state import FleetState


class RoundRobin:
    def __init__(self) -> None:
        self.routed = 0

    def route(self, rid: int, state: FleetState) -> int:
        replica = self.routed % state.replicas
        self.routed += 1
        return replica
