"""``session_affinity`` (docs/DESIGN.md §16): a session's round 0 goes to the least loaded replica
and every later round to round 0's replica, so a re-arrival finds the KV its session left
(vllm-router's consistent_hash on a session header pins a session the same way, by a hash instead of
by load)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rearrival.model.fleet.routers.least_loaded import least_loaded

if TYPE_CHECKING:
    from rearrival.model.fleet.state import FleetState


class SessionAffinity:
    def route(self, rid: int, state: FleetState) -> int:
        a = state.arrays
        if a.round_of[rid] == 0:
            return least_loaded(state)
        return state.placement[a.first[a.session_of[rid]]]
