"""What a fleet needs of an engine (docs/DESIGN.md §16), for either rule set.

vLLM keeps its scheduler, KV cache manager and block pool as separate objects with narrow
calls between them; a fleet in vllm-router is a list of workers plus a policy that picks one
per request. The fleet here drives an engine through the same few calls, whatever its rule
set (``rearrival.model.simulator.rbln.engine.RblnEngine``,
``rearrival.model.simulator.vllm.fleet_engine.VllmFleetEngine``):

* ``t``: the engine's boundary, the end of its last step (where its next step starts);
* ``add(rid, when)``: a request the router sent here at ``when`` joins the queue (an idle
  engine whose clock is earlier jumps to ``when``);
* ``advance(due)``: one action at the boundary (a step, or a stretch of steps that changes
  nothing a router reads before ``due``); returns the requests it finished, at ``t``;
* ``has_work()``: something waits or runs;
* ``cached_prefix(rid)``: how much of the request's prompt the engine holds now (vLLM:
  leading full blocks cached in its pool; RBLN: tokens its session's surviving slot would
  give), which the prefix-aware router compares;
* ``tolerance_s``: an arrival at ``a`` counts at the first boundary ``>= a - tolerance_s``
  (1e-12 s on RBLN, docs/DESIGN.md §4; 0 on vLLM, §15 rule 6).

The engines send nothing themselves: the fleet sends every round (and every renewed
session) when the request before it finishes, and routes it when it arrives.
"""

from __future__ import annotations

from typing import Protocol


class FleetEngine(Protocol):
    """One replica, driven by ``rearrival.model.fleet.loop.run_fleet``."""

    tolerance_s: float

    @property
    def t(self) -> float: ...

    def has_work(self) -> bool: ...

    def add(self, rid: int, when: float) -> None: ...

    def advance(self, due: float) -> list[int]: ...

    def cached_prefix(self, rid: int) -> int: ...
