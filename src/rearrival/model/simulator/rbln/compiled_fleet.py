"""The RBLN fleet on the compiled core (docs/DESIGN.md §16): ``core.run_fleet`` runs the
loop of ``rearrival.model.fleet.loop.run_fleet`` over R ``engine.RblnEngine`` replicas in
one numba call, and this module turns what it writes into the fleet's ``SimResult`` the
way ``rearrival.model.substrates`` merges the Python replicas' results: each request's
columns from its replica, the decode histograms summed (decode time priced from the summed
histogram, in n order), prefill time and interference summed in replica order, the latest
replica's clock as the makespan, stretches and evictions replica by replica. So the
compiled fleet and the Python fleet give the same bits (``tests/test_rbln_fleet_core.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rearrival.model.cost.profile import Profile
from rearrival.model.simulator.rbln.config import SimConfig, SimConfigError
from rearrival.model.simulator.rbln.inputs import core_inputs, step_entry
from rearrival.model.simulator.rbln.result import SimResult
from rearrival.model.simulator.rbln.sim import compiled_core


@dataclass(frozen=True)
class CompiledFleet:
    """The fleet's merged result, each request's replica and each replica's device time."""

    result: SimResult
    placement: list[int]
    replica_device_s: tuple[float, ...]


def run_compiled_fleet(
    plan: Any,
    config: SimConfig,
    profile: Profile,
    replicas: int,
    router: int,
    fixed_arrivals: Sequence[float] | None,
) -> CompiledFleet | None:
    """One plan on ``replicas`` replicas behind ``router`` (an index into ``ROUTERS``), or
    None when numba is missing or the plan is too large for the kernel's int64 keys (the
    caller then runs the Python fleet)."""
    core = compiled_core()
    inputs = core_inputs(plan, profile)
    arrays = inputs.arrays
    if (
        core is None
        or not inputs.compiled_ok
        or not core.fits_int64(0, arrays.requests, config.slots)
    ):
        return None
    fixed = _fixed(arrays.requests - arrays.sessions, fixed_arrivals)
    _, step_list, bucket_of, step_s, _, _ = step_entry(config, profile)
    batch = config.batch_size
    req_f, req_i, hist, rep_f, st_i, st_f, ev_f, ev_i = core.fleet_records(
        inputs.ints,
        inputs.floats,
        inputs.pair_reuse,
        inputs.pair_cost,
        fixed,
        step_s,
        batch,
        config.slots,
        config.release == "deferred",
        batch if config.dummy_block == "pre-evict" else 0,
        batch if config.dummy_block == "reserved" else 0,
        replicas,
        router,
    )
    arrival, admit, complete, prefill = req_f.tolist()
    cached, slot, tag, running, placement = req_i.tolist()
    columns = (arrival, admit, complete, arrays.prompt, cached, prefill, slot, tag, running)
    steps_by_replica = hist.tolist()
    prefill_by_replica, interference_by_replica, clocks = rep_f.tolist()
    replica_decode = [_decode_total(steps, step_list) for steps in steps_by_replica]
    summed = [sum(column) for column in zip(*steps_by_replica, strict=True)]
    histogram = {(n, bucket_of[n]): k for n, k in enumerate(summed) if n and k}
    result = SimResult(
        config,
        arrays,
        histogram,
        _decode_total(summed, step_list),
        sum(prefill_by_replica),
        sum(interference_by_replica),
        max(clocks),
        columns,
        None,
        None,
        raw=(FleetRows(req_f, req_i[:4], st_i, st_f, ev_f, ev_i), ()),
    )
    device = tuple(d + p for d, p in zip(replica_decode, prefill_by_replica, strict=True))
    return CompiledFleet(result, placement, device)


def _fixed(re_arrivals: int, fixed_arrivals: Sequence[float] | None) -> Any:
    """The fixed re-arrival times as float64 (empty: finish + gap), one per re-arrival."""
    if fixed_arrivals is None:
        return np.empty(0)
    if len(fixed_arrivals) != re_arrivals:
        raise SimConfigError(
            f"fixed_arrivals has {len(fixed_arrivals)} times for a plan of {re_arrivals} "
            "re-arrivals; give one time per re-arrival in (session, round) order"
        )
    return np.array(fixed_arrivals, dtype=np.float64)


def _decode_total(steps_at: list[int], step_s: list[float]) -> float:
    """Decode time of a histogram, summed in n order as ``RblnEngine.result`` sums it."""
    total = 0.0
    for n in range(1, len(steps_at)):
        if steps_at[n]:
            total += steps_at[n] * step_s[n]
    return total


@dataclass(frozen=True)
class FleetRows:
    """The kernel's tables, read by ``SimResult`` only when a caller asks for stretches or
    evictions (``run_records`` is the call its ``raw`` makes): the rows were written in
    time order across replicas and are regrouped replica by replica, each replica's rows
    in their order, as the Python fleet lists its engines' rows."""

    req_f: Any
    req_i: Any
    st_i: Any  # replica, n, steps
    st_f: Any
    ev_f: Any
    ev_i: Any  # replica, slot, victim, cause

    def run_records(self) -> tuple[Any, ...]:
        stretches = np.argsort(self.st_i[0], kind="stable")
        evictions = np.argsort(self.ev_i[0], kind="stable")
        return (
            self.req_f,
            self.req_i,
            self.st_i[1:, stretches],
            self.st_f[:, stretches],
            self.ev_f[evictions],
            self.ev_i[1:, evictions],
        )
