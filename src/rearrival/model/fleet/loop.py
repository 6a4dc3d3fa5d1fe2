"""The fleet's event loop: docs/DESIGN.md §16's event order, written once for every rule set.

At an instant t: (1) every replica whose step ends at t completes it, in replica order
(which may create arrivals at t + gap: the session's next round, or a renewed session's
round 0 after its leader's last round); (2) every arrival at or before t is routed, in
(time, session, round) order; (3) every replica with no step in flight adds what was
routed to it, in routing order, and starts its next step at t.

The loop keeps that order without stepping replicas in lockstep. A step's schedule depends
only on the state at its start, so a replica may run its next action as soon as no request
can still be routed to it at or before the action's start: when the earliest pending
arrival is not yet due at its boundary (``a > t + tolerance``) and no other busy replica's
boundary lies before it (only a finish, at the end of another replica's step, creates new
arrivals, and that end lies after that replica's boundary). The replica with the earliest
boundary (ties: the lowest index) acts; otherwise the earliest arrival is routed. An
action is a step or a stretch that stops at the first boundary that sees ``due``, the
earliest of the pending arrival and the other busy replicas' boundaries, so a router
always reads each replica as it stands at the arrival: its finishes count from their own
times (``outstanding``), its pool as its last step scheduled it.

With one replica this is the single engine's loop: the same steps in the same order, the
same float operations, so R = 1 gives the single engine's results exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heapify, heappop, heappush

from rearrival.model.fleet.engine import FleetEngine
from rearrival.model.fleet.routers import Router
from rearrival.model.fleet.state import FleetState
from rearrival.model.simulator.plan_arrays import PlanArrays


def run_fleet(
    arrays: PlanArrays,
    engines: Sequence[FleetEngine],
    router: Router,
    fixed_arrivals: Sequence[float] | None = None,
) -> FleetState:
    """Serve the plan on the replicas (module docstring); returns the placement.

    ``fixed_arrivals`` (one time per re-arrival in (session, round) order) pins every
    round after a session's first to an observed send time, as the single engine's
    fixed-arrival variant does; renewed sessions still start at their leader's finish +
    gap."""
    tolerance = engines[0].tolerance_s
    state = FleetState(engines, arrays, [-1] * arrays.requests, [0] * len(engines))
    pending = [
        (arrays.start[s], arrays.first[s]) for s in range(arrays.sessions) if arrays.leader[s] < 0
    ]  # (time, rid): rid order is (session, round) order
    heapify(pending)
    finishing: list[list[float]] = [[] for _ in engines]  # finish times not yet observed
    while True:
        due = pending[0][0] if pending else math.inf
        actor = _earliest_busy(engines)
        if actor is not None and not due <= engines[actor].t + tolerance:
            bound = min([due] + [e.t for q, e in enumerate(engines) if q != actor and e.has_work()])
            engine = engines[actor]
            for rid in engine.advance(bound):
                heappush(finishing[actor], engine.t)
                _send_next(arrays, rid, engine.t, fixed_arrivals, pending)
            continue
        if not pending:
            return state
        when, rid = heappop(pending)
        for replica, times in enumerate(finishing):
            while times and times[0] <= when:
                heappop(times)
                state.outstanding[replica] -= 1
        replica = router.route(rid, state)
        state.placement[rid] = replica
        state.outstanding[replica] += 1
        engines[replica].add(rid, when)


def _earliest_busy(engines: Sequence[FleetEngine]) -> int | None:
    """The busy replica with the earliest boundary, ties to the lowest index."""
    best = None
    for q, engine in enumerate(engines):
        if engine.has_work() and (best is None or engine.t < engines[best].t):
            best = q
    return best


def _send_next(
    arrays: PlanArrays,
    rid: int,
    t: float,
    fixed_arrivals: Sequence[float] | None,
    pending: list[tuple[float, int]],
) -> None:
    """A request finished at ``t``: send its session's next round after its gap (or at its
    fixed time), or on the last round the renewed session that follows it."""
    follow = arrays.next_fixed[rid]
    if follow >= 0:
        when = t + arrays.gap[rid] if fixed_arrivals is None else fixed_arrivals[follow]
        heappush(pending, (when, rid + 1))
    elif arrays.follower[rid] >= 0:
        heappush(pending, (t + arrays.follow_gap[rid], arrays.follower[rid]))
