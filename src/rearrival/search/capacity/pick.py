"""The cheapest fleet for a target rate, with its spread over resampled session pools
(docs/DESIGN.md §17 "Capacity", the pick).

Every fleet is run at the target rate itself (not read off its goodput, which a
non-monotone curve would make wrong). Of those that meet the SLO the pick has the fewest
replicas (devices), then the lowest device-seconds per session, then the configuration's
own tiebreak (smaller pool, fewer sequences, ...) and the router's order in
``rearrival.model.fleet.routers.ROUTERS``.

The spread, as ``advise --trace`` gives its saving's: the pick is run again on open plans
at the same rate drawn from ``resamples`` pools, each the pool's sessions drawn with
replacement by a seeded generator (a bootstrap over sessions); the attainment's and the
cost's 5 %, 50 % and 95 % nearest-rank quantiles and the share of pools that meet the SLO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rearrival.model.fleet.routers import ROUTERS
from rearrival.search.capacity.evaluate import Point, Workload, evaluate
from rearrival.search.capacity.space import Fleet

SPREAD = (0.05, 0.5, 0.95)


@dataclass(frozen=True)
class Pick:
    """The chosen fleet at ``rate`` (None: no fleet meets the SLO there) and every fleet's
    point at that rate, in the order the fleets were given."""

    rate: float
    fleet: Fleet | None
    point: Point | None
    points: tuple[tuple[Fleet, Point], ...]


def choose(rate: float, points: Sequence[tuple[Fleet, Point]]) -> Pick:
    """The cheapest fleet meeting the SLO at ``rate`` (module docstring)."""
    meeting = [(f, p) for f, p in points if p.meets]
    if not meeting:
        return Pick(rate, None, None, tuple(points))
    fleet, point = min(
        meeting,
        key=lambda fp: (
            fp[0].replicas,
            fp[1].device_s_per_session,
            fp[0].configuration.tiebreak(),
            ROUTERS.index(fp[0].router),
        ),
    )
    return Pick(rate, fleet, point, tuple(points))


def resampled_pool(pool: Any, seed: int, index: int) -> list[Any]:
    """The pool's sessions drawn with replacement (as many as it holds), seeded."""
    from rearrival.model.plans.workloads_open import stream

    draws = stream(seed, f"capacity-resample-{index}").integers(0, pool.n, pool.n)
    return [pool.sessions[int(j)] for j in draws]


def spread(
    workload: Workload, fleet: Fleet, rate: float, resamples: int, progress: Any = None
) -> dict[str, Any]:
    """The pick over ``resamples`` resampled pools (module docstring)."""
    from rearrival.model.plans.workloads_open import open_plan

    indices = range(resamples)
    if progress is not None:
        indices = progress(indices, resamples, "capacity: spread of the pick", "pool")
    points = []
    for b in indices:
        sessions = resampled_pool(workload.pool, workload.seed, b)
        plan = open_plan(sessions, workload.pool.prefixes, rate, workload.horizon_s, workload.seed)
        points.append(evaluate(workload, fleet, rate, plan))
    return {
        "resamples": resamples,
        "seed": workload.seed,
        "meets_share": sum(p.meets for p in points) / len(points),
        "attainment": quantiles([p.attainment for p in points]),
        "device_s_per_session": quantiles([p.device_s_per_session for p in points]),
    }


def quantiles(values: Sequence[float]) -> dict[str, float]:
    """The 5 %, 50 % and 95 % nearest-rank quantiles (as ``advise``'s spread)."""
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    low, median, high = (at(q) for q in SPREAD)
    return {"p05": low, "median": median, "p95": high}
