"""The ``vllm`` rule set as an engine a fleet can drive (docs/DESIGN.md §16).

``engine.Engine`` in driven mode sends nothing itself: the fleet routes each request when
it arrives and ``add`` queues it; ``advance`` runs one action (one full scheduler step, or
a stretch of pure decode steps fast-forwarded as ``event`` does, cut at the first boundary
at or after ``due``) and returns the requests it finished. A pure decode stretch changes the
pool step by step (a request whose last block is full allocates one, evicting the oldest
free cached block), which the prefix-aware router reads, so unlike the RBLN engine it
always stops where a request could be routed here. One replica driven by the fleet takes
exactly the steps of ``event.run_event``; with ``stepwise`` it takes them one at a time
(the step-by-step reference).
"""

from __future__ import annotations

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.simulator.vllm.engine import Engine
from rearrival.model.simulator.vllm.event import fast_forward, pure_decode_ahead
from rearrival.model.simulator.vllm.inputs import VllmInputs


class VllmFleetEngine:
    """One replica of the ``vllm`` rule set."""

    tolerance_s = 0.0  # vLLM counts an arrival at the first boundary at or after it

    def __init__(
        self,
        inputs: VllmInputs,
        configuration: VllmConfiguration,
        step_cost: VllmStepCost,
        stepwise: bool = False,
    ) -> None:
        self.inputs = inputs
        self.engine = Engine(inputs, configuration, step_cost, None, driven=True)
        self.stepwise = stepwise

    @property
    def t(self) -> float:
        return self.engine.t

    def has_work(self) -> bool:
        return bool(self.engine.running or self.engine.waiting)

    def add(self, rid: int, when: float) -> None:
        """A request routed here at ``when``; an idle engine jumps to it."""
        engine = self.engine
        if not self.has_work() and when > engine.t:
            engine.t = when
        engine.queue(rid)
        engine.requests[rid].arrival_s = when

    def cached_prefix(self, rid: int) -> int:
        """Leading full blocks of ``rid``'s prompt cached in this pool now (the
        prefix-aware router's score): vLLM keeps a freed block's hash until the block is
        allocated again, so a block in the free queue counts."""
        cached, inputs = self.engine.pool.cached, self.inputs
        full = self.engine.requests[rid].prompt // inputs.block_size
        j = 0
        while j < full and cached.get(inputs.block_key(rid, j)):
            j += 1
        return j

    def advance(self, due: float) -> list[int]:
        """One action at the current boundary (module docstring); the finished requests."""
        engine = self.engine
        if not self.stepwise and pure_decode_ahead(engine):
            fast_forward(engine, due)
        else:
            engine.step()
        return [r.rid for r in engine.just_finished]
