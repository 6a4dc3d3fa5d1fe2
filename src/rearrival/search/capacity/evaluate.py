"""One fleet at one rate, and one fleet's whole capacity search (docs/DESIGN.md §17
"Capacity").

At a rate, the open plan is exactly the one ``rearrival plans open --pool POOL --rate R
--horizon H --seed S`` writes (the same library call on the same pool), served by the
fleet (``rearrival.model.fleet.simulate.simulate_fleet``); the run meets the SLO when the
attainment over the requests arriving in [warm-up, horizon] is at least the required share.
Its cost: device-seconds per session = the replicas' busy device time over the whole plan
divided by its sessions; its cache hit share = cached prompt tokens over prompt tokens of
the measured requests. Attainment is ``latency.attainment``'s share, each request's latency
computed once (``latency.latency``) for it and the p90s.

A fleet's search: the goodput by bisection (``rearrival.search.capacity.bisection``) from
a start rate of about four sessions in the measured window (doubled while its plan has none
there), then ``grid`` rates from a quarter to twice the goodput (those whose plan has a
session in the window), so the attainment curve is seen whole and a non-monotone one is
flagged (``monotone``), never hidden.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rearrival.limits import (
    MAX_WORKLOAD_REQUESTS,
    MAX_WORKLOAD_SESSIONS,
)
from rearrival.model.fleet.latency import (
    Slo,
    latency,
    latency_columns,
    measured,
    measured_mask,
)
from rearrival.model.fleet.routers import ROUTERS
from rearrival.model.simulator.rbln.config import SimConfig
from rearrival.model.simulator.vllm.open_kernel import OpenKernelPlans
from rearrival.search.capacity.bisection import Trial, find_goodput, is_monotone, rounded
from rearrival.search.capacity.space import Fleet

START_SESSIONS = 4  # sessions expected in the measured window at the start rate
GRID_LOW, GRID_HIGH = 0.25, 2.0  # the grid spans these multiples of the goodput


@dataclass(frozen=True)
class Workload:
    """What every run of a capacity search shares: the pool, the open traffic's horizon
    and seed, the measured window, the SLO, the substrate's cost model and (RBLN) rule
    set."""

    pool: Any  # rearrival.model.plans.plan.Plan, multi-round
    horizon_s: float
    warmup_s: float
    seed: int
    slo: Slo
    cost: Any  # VllmStepCost (vLLM) or Profile (RBLN)
    rules: str = "base"
    _plans: dict[float, Any] = field(default_factory=dict, compare=False, repr=False)
    _open: list[OpenKernelPlans] = field(default_factory=list, compare=False, repr=False)

    @property
    def open_plans(self) -> OpenKernelPlans:
        """The pool's open plans at any rate, drawn once (``open_kernel``)."""
        if not self._open:
            self._open.append(OpenKernelPlans(self.pool, self.horizon_s, self.seed))
        return self._open[0]

    def plan(self, rate: float) -> Any:
        """The open plan at ``rate`` (``plans open``'s, byte for byte); the last few kept,
        since every fleet starts its bracket at the same rates."""
        from rearrival.model.plans.workloads_open import open_plan

        if rate not in self._plans:
            if len(self._plans) > 32:
                self._plans.clear()
            self._plans[rate] = open_plan(
                self.pool.sessions, self.pool.prefixes, rate, self.horizon_s, self.seed
            )
        return self._plans[rate]

    @property
    def start_rate(self) -> float:
        return rounded(START_SESSIONS / (self.horizon_s - self.warmup_s))

    def first_rate(self) -> float:
        """The bracket's first rate: ``start_rate``, doubled while its plan has no session
        starting in the measured window (a run with nothing measured cannot meet)."""
        rate = self.start_rate
        while not self.measures(rate) and 2 * rate <= self.ceiling:
            rate = rounded(2 * rate)
        return rate

    def measures(self, rate: float) -> bool:
        """Whether the plan at ``rate`` has a session starting in [warm-up, horizon]."""
        from rearrival.model.plans.workloads_open import WorkloadError

        try:
            starts = self.open_plans.starts(rate)
        except WorkloadError:  # over the bounds
            return False
        return any(self.warmup_s <= start <= self.horizon_s for start in starts)

    @property
    def ceiling(self) -> float:
        """The largest rate ``plans open`` accepts on this pool and horizon (its bounds on
        sessions and expected requests), a little under."""
        rounds = sum(len(s.rounds) for s in self.pool.sessions) / self.pool.n
        most = min(MAX_WORKLOAD_SESSIONS, MAX_WORKLOAD_REQUESTS / rounds) - 1
        return rounded(most / self.horizon_s * (1 - 1e-5))


@dataclass(frozen=True)
class Point:
    """One fleet at one rate."""

    rate: float
    sessions: int
    measured_requests: int
    attainment: float
    meets: bool
    device_s: float
    device_s_per_session: float
    cache_hit_share: float
    ttft_p90_s: float | None
    tpot_p90_s: float | None


def evaluate(workload: Workload, fleet: Fleet, rate: float, plan: Any = None) -> Point:
    """``fleet`` on the open plan at ``rate`` (or on ``plan`` when given: a resampled pool).
    On vLLM without ``plan``, the compiled kernel reads the open plan's rows straight from
    the pool (``open_kernel``) and the Point is computed on its columns (``_compiled``):
    the same bits as the plan built and run by ``simulate_fleet``, without a Python object
    per session or request (``tests/test_capacity_fast.py``)."""
    if plan is None and fleet.configuration.substrate == "vllm":
        return _compiled(workload, fleet, rate)
    from rearrival.model.fleet.simulate import simulate_fleet

    plan = workload.plan(rate) if plan is None else plan
    configuration = fleet.configuration
    if configuration.substrate == "rbln":
        configuration = SimConfig.of(configuration, workload.rules)
    result = simulate_fleet(plan, configuration, workload.cost, fleet.replicas, fleet.router)
    window = measured(result.requests, workload.warmup_s, workload.horizon_s)
    values = [latency(r) for r in window]  # once: attainment and the p90s both read them
    share = sum(map(workload.slo.met, values)) / len(values) if values else 0.0
    device = math.fsum(result.replica_device_s)
    prompt = sum(r.prompt_tokens for r in window)
    cached = sum(r.cached_tokens for r in window)
    return Point(
        rate,
        plan.n,
        len(window),
        share,
        share >= workload.slo.attainment,
        device,
        device / plan.n,
        cached / prompt if prompt else 0.0,
        _p90([v.ttft_s for v in values]),
        _p90([v.tpot_s for v in values if v.tpot_s is not None]),
    )


def _compiled(workload: Workload, fleet: Fleet, rate: float) -> Point:
    """``evaluate`` on vLLM's compiled kernel, from the pool's rows and the kernel's
    columns (``evaluate``'s docstring)."""
    from rearrival.model.simulator.vllm import core  # numba: loaded on first use

    opened = workload.open_plans.at(rate, fleet.configuration, "plan")
    run = core.run_kernel(
        opened.kernel,
        fleet.configuration,
        workload.cost,
        fleet.replicas,
        ROUTERS.index(fleet.router),
        None,
    )
    arrival, first_scheduled, first_token, finish = run.req_f
    window = measured_mask(arrival, workload.warmup_s, workload.horizon_s)
    values = latency_columns(
        arrival[window],
        first_scheduled[window],
        first_token[window],
        finish[window],
        opened.gen[window],
    )
    measured_requests = int(np.count_nonzero(window))
    met = int(np.count_nonzero(workload.slo.met_columns(values)))
    share = met / measured_requests if measured_requests else 0.0
    device = math.fsum(run.rep_f[0].tolist())
    prompt = int(opened.prompt[window].sum())
    cached = int(run.req_i[0][window].sum())
    return Point(
        rate,
        opened.sessions,
        measured_requests,
        share,
        share >= workload.slo.attainment,
        device,
        device / opened.sessions,
        cached / prompt if prompt else 0.0,
        _p90(values.ttft_s),
        _p90(values.tpot_s[values.has_tpot]),
    )


def _p90(series: Sequence[float] | np.ndarray) -> float | None:
    """The 90th percentile as ``latency.percentiles`` gives it (numpy's default)."""
    return float(np.quantile(series, 0.9)) if len(series) else None


@dataclass(frozen=True)
class FleetCapacity:
    """One fleet's answer: its goodput and the point there, the check just above, every
    rate evaluated, and whether the curve is monotone."""

    fleet: Fleet
    goodput_rate: float
    at_goodput: Point | None  # None when even the start rate fails
    above_rate: float
    above: Point | None
    bounded: bool
    tolerance: float
    monotone: bool
    points: tuple[Point, ...]
    roles: dict[float, str]


def fleet_capacity(
    workload: Workload, fleet: Fleet, tolerance: float, grid: int = 6
) -> FleetCapacity:
    """The goodput of ``fleet`` and its curve (module docstring)."""
    points: dict[float, Point] = {}

    def meets(rate: float) -> bool:
        if rate not in points:
            points[rate] = evaluate(workload, fleet, rate)
        return points[rate].meets

    found = find_goodput(
        meets, start=workload.first_rate(), tolerance=tolerance, ceiling=workload.ceiling
    )
    roles = {t.rate: "bisection" for t in found.trials}
    if math.isfinite(found.above) and found.above in points:
        roles[found.above] = "check above"
    for rate in grid_rates(found.rate, grid, workload.ceiling):
        if rate not in points and workload.measures(rate):
            meets(rate)
            roles[rate] = "grid"
    trials = [Trial(p.rate, p.meets) for p in points.values()]
    return FleetCapacity(
        fleet,
        found.rate,
        points.get(found.rate),
        found.above,
        points.get(found.above),
        found.bounded,
        tolerance,
        is_monotone(trials),
        tuple(points[r] for r in sorted(points)),
        roles,
    )


def grid_rates(goodput: float, count: int, ceiling: float) -> tuple[float, ...]:
    """``count`` rates from GRID_LOW to GRID_HIGH times the goodput, in equal ratios."""
    if goodput <= 0 or count < 1:
        return ()
    if count == 1:
        return (rounded(goodput * GRID_HIGH),)
    step = math.log(GRID_HIGH / GRID_LOW) / (count - 1)
    rates = (rounded(goodput * GRID_LOW * math.exp(step * i)) for i in range(count))
    return tuple(sorted({r for r in rates if r <= ceiling}))
