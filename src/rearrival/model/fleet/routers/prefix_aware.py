"""``prefix_aware`` (docs/DESIGN.md §16): the replica holding the most of the request's prompt now,
ties by least_loaded. On vLLM that is the most leading full blocks of the prompt cached in
the replica's pool as it stands at the arrival (vLLM caches a step's full blocks when it
schedules the step, and a freed block keeps its hash until it is reused), so a shared
system prompt draws its sessions to the replicas that computed it; on RBLN the replica
whose surviving slot holds the session's transcript (else none holds anything, and the
least loaded wins)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rearrival.model.fleet.routers.least_loaded import least_loaded

if TYPE_CHECKING:
    from rearrival.model.fleet.state import FleetState


class PrefixAware:
    def route(self, rid: int, state: FleetState) -> int:
        held = [engine.cached_prefix(rid) for engine in state.engines]
        most = max(held)
        return least_loaded(state, [r for r, h in enumerate(held) if h == most])
