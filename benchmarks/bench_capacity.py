"""Capacity search speed (README "Capacity for an agent fleet", "Speed"), part of
`make bench`.

The issue's workload: 500 fleet configurations, 125 vLLM configurations (5 KV pools x 5
max_num_seqs x 5 token budgets) x 2 fleet sizes x 2 routers, each by bisection on the rate
(tolerance 0.02, a 6-rate grid) over one simulated hour of open traffic (horizon 3,600 s,
warm-up 300 s) from the shipped TraceLab sample at --token-scale 0.15, SLO ttft 0.3 s,
tpot 0.03 s, 90 %, on 2 cores (``--workers 2``). Target: under 60 s wall, peak memory
under 2 GiB.

Printed: the wall time, the CPU time of this process and its workers (on a shared
machine the wall time is the CPU time stretched by the other load, so both are shown with
the load average), and the peak memory: this process's and its largest worker's peak
resident set (ru_maxrss), with their bound together, this process plus ``--workers`` times
the largest worker. By default all 500 fleets run; ``--sample K`` searches K of them
(evenly spaced in the space's order) and extrapolates, said as such.

Usage: .venv/bin/python benchmarks/bench_capacity.py [--workers 2] [--sample 500]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

from rearrival.model.cost.vllm_profile import parse_step_cost
from rearrival.model.fleet.latency import Slo
from rearrival.model.plans.tracelab_import import plans_from_trace
from rearrival.search.capacity.evaluate import Workload
from rearrival.search.capacity.run import run_capacity
from rearrival.search.capacity.space import FleetAxes, VllmKnobs, space_for_vllm

TARGET_S = 60.0
RSS_TARGET_GIB = 2.0
FLEETS = 500
# The public TraceLab sample the repository ships (data/tracelab/README.md).
TRACE = Path(__file__).resolve().parents[1] / "data/tracelab/round_trace.example.jsonl"
KNOBS = VllmKnobs(
    block_sizes=(16,),
    num_blocks=(600, 1200, 2400, 4800, 9600),
    max_num_seqs=(4, 8, 16, 32, 64),
    token_budgets=(512, 1024, 2048, 4096, 8192),
    capture_sets=("none",),
)
AXES = FleetAxes((1, 2), ("round_robin", "session_affinity"))


def peak_gib(workers: int) -> tuple[float, float, float]:
    """This process's peak RSS, its largest finished worker's, and the bound on the two
    together with ``workers`` workers at once (Linux: ru_maxrss in KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return own, worker, own + max(1, workers) * worker


def cpu_s() -> float:
    """User + system seconds of this process and its finished workers."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + workers.ru_utime + workers.ru_stime


def pool_plan(trace: Path):
    from rearrival.model.plans.pool import join_pools

    result = plans_from_trace(trace, token_scale=0.15, prefixes=True)
    return join_pools([(str(trace), result.plan)], result.plan.meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sample", type=int, default=FLEETS, help="fleets searched (of 500)")
    parser.add_argument("--trace", type=Path, default=TRACE)
    args = parser.parse_args()
    pool = pool_plan(args.trace)
    workload = Workload(
        pool,
        3600.0,
        300.0,
        7,
        Slo(ttft_s=0.3, tpot_s=0.03, attainment=0.9),
        parse_step_cost("0.01,0.0002,0.00002"),
    )
    started, cpu_started = time.perf_counter(), cpu_s()
    space = space_for_vllm(KNOBS, AXES, pool)
    fleets = space.fleets
    assert len(fleets) == FLEETS, len(fleets)
    count = max(1, min(args.sample, FLEETS))
    sample = [fleets[round(i * (FLEETS - 1) / max(1, count - 1))] for i in range(count)]
    run = run_capacity(space, workload, tolerance=0.02, grid=6, workers=args.workers, fleets=sample)
    wall = time.perf_counter() - started
    cpu = cpu_s() - cpu_started
    sims = sum(len(c.points) for c in run.capacities)
    print(
        f"capacity search: {count} of {FLEETS} fleets searched, {sims} simulations of one "
        f"hour ({sims / count:.1f} per fleet), {wall:.1f} s wall and {cpu:.1f} s CPU on "
        f"{args.workers} workers; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores at the end"
    )
    label = "measured" if count == FLEETS else f"extrapolated from {count}"
    whole, whole_cpu = wall / count * FLEETS, cpu / count * FLEETS
    verdict = "meets" if whole < TARGET_S else "MISSES"
    print(
        f"  500 fleets: {whole:,.0f} s wall, {whole_cpu:,.0f} s CPU ({label}; "
        f"{whole_cpu / max(1, args.workers):,.0f} s on {args.workers} free cores); target < "
        f"{TARGET_S:.0f} s wall: {verdict}"
    )
    own, worker, bound = peak_gib(args.workers)
    verdict = "meets" if bound < RSS_TARGET_GIB else "MISSES"
    print(
        f"  peak memory: this process {own:.2f} GiB, largest worker {worker:.2f} GiB, at most "
        f"{bound:.2f} GiB together; target < {RSS_TARGET_GIB} GiB: {verdict}"
    )
    for c in run.capacities:
        print(
            f"  {c.fleet.configuration.id} x{c.fleet.replicas} {c.fleet.router}: goodput "
            f"{c.goodput_rate!r} sessions/s, {len(c.points)} simulations, monotone {c.monotone}"
        )


if __name__ == "__main__":
    main()
