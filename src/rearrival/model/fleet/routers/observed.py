"""``observed``: the router that replays a real fleet's placement, request by request
(README "A study on a real fleet"). ``rearrival compare`` re-runs the predictor on a fleet
run with the replica every request was served by, so what the comparison checks is the
replicas' rules, never a router model's guess at vllm-router's hash or cache scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rearrival.model.fleet.state import FleetState


class Observed:
    """Request ``rid`` (the plan's (session, round) order) goes to ``placement[rid]``."""

    def __init__(self, placement: Sequence[int]) -> None:
        self.placement = tuple(int(replica) for replica in placement)

    def route(self, rid: int, state: FleetState) -> int:
        return self.placement[rid]
