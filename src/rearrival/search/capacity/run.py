"""A capacity search run end to end (docs/DESIGN.md §17 "Capacity"): every fleet's
goodput, then with a target rate every fleet at that rate and the pick's spread.

Fleets are independent, so with ``workers`` > 1 they are spread over that many processes
(forked: each inherits the pool and the cost model once, through ``_WORKLOAD``); results
come back in fleet order, so the output does not depend on the worker count. A progress
bar counts fleets on a terminal (``rearrival.progress``).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from rearrival.progress import progress
from rearrival.search.capacity.evaluate import (
    FleetCapacity,
    Point,
    Workload,
    evaluate,
    fleet_capacity,
)
from rearrival.search.capacity.pick import Pick, choose, spread
from rearrival.search.capacity.space import CapacitySpace, Fleet

T = TypeVar("T")
R = TypeVar("R")
_WORKLOAD: Workload | None = None  # the forked workers' workload (module docstring)


@dataclass(frozen=True)
class CapacityRun:
    """Every fleet's capacity, and the pick for the target rate when one was given."""

    space: CapacitySpace
    workload: Workload
    tolerance: float
    capacities: tuple[FleetCapacity, ...]
    pick: Pick | None = None
    pick_spread: dict[str, Any] | None = None


def _capacity(args: tuple[Fleet, float, int]) -> FleetCapacity:
    assert _WORKLOAD is not None
    fleet, tolerance, grid = args
    return fleet_capacity(_WORKLOAD, fleet, tolerance, grid)


def _at_rate(args: tuple[Fleet, float]) -> Point:
    assert _WORKLOAD is not None
    fleet, rate = args
    return evaluate(_WORKLOAD, fleet, rate)


def _mapped(work: Callable[[T], R], items: Sequence[T], workers: int, what: str) -> Iterator[R]:
    """``work`` over ``items`` in order, in ``workers`` forked processes (1: here)."""
    if workers <= 1 or len(items) <= 1:
        yield from progress(map(work, items), len(items), what, "fleet")
        return
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(min(workers, len(items)), mp_context=context) as pool:
        results: Iterable[R] = pool.map(work, items, chunksize=1)
        yield from progress(results, len(items), what, "fleet")


def run_capacity(
    space: CapacitySpace,
    workload: Workload,
    *,
    tolerance: float,
    grid: int = 6,
    rate: float | None = None,
    resamples: int = 20,
    workers: int = 1,
    fleets: Sequence[Fleet] | None = None,
) -> CapacityRun:
    """Every fleet's goodput (of ``fleets`` when given: a benchmark's sample of the
    space); with ``rate``, the pick there and its spread."""
    global _WORKLOAD
    _WORKLOAD = workload
    try:
        fleets = space.fleets if fleets is None else tuple(fleets)
        capacities = tuple(
            _mapped(_capacity, [(f, tolerance, grid) for f in fleets], workers, "capacity")
        )
        if rate is None:
            return CapacityRun(space, workload, tolerance, capacities)
        pick, dispersion = _pick_at(fleets, workload, rate, resamples, workers)
        return CapacityRun(space, workload, tolerance, capacities, pick, dispersion)
    finally:
        _WORKLOAD = None


def pick_at(
    fleets: Sequence[Fleet], workload: Workload, rate: float, resamples: int, workers: int = 1
) -> tuple[Pick, dict[str, Any] | None]:
    """The pick at ``rate`` alone, without the fleets' goodputs (``advise --rate``): every
    fleet run at ``rate``, the cheapest meeting the SLO, and its spread."""
    global _WORKLOAD
    _WORKLOAD = workload
    try:
        return _pick_at(tuple(fleets), workload, rate, resamples, workers)
    finally:
        _WORKLOAD = None


def _pick_at(
    fleets: Sequence[Fleet], workload: Workload, rate: float, resamples: int, workers: int
) -> tuple[Pick, dict[str, Any] | None]:
    points = list(_mapped(_at_rate, [(f, rate) for f in fleets], workers, "capacity: at rate"))
    pick = choose(rate, list(zip(fleets, points, strict=True)))
    dispersion = None
    if pick.fleet is not None and resamples > 0:
        dispersion = spread(workload, pick.fleet, rate, resamples, progress)
    return pick, dispersion
