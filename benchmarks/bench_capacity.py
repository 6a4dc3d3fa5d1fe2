"""Capacity search speed (README "Capacity for an agent fleet", "Speed"), part of
`make bench`.

500 fleet configurations: 125 vLLM configurations (5 KV pools x 5 max_num_seqs x 5 token
budgets) x 2 fleet sizes x 2 routers, each by bisection on the rate (tolerance 0.02, a
6-rate grid) over one simulated hour of open traffic (horizon 3,600 s, warm-up 300 s) from
the shipped TraceLab sample at --token-scale 0.15, SLO ttft 0.3 s, tpot 0.03 s, 90 %.
Target: under 60 s wall on 2 cores (``--workers 2``), peak memory under 2 GiB (this process
and its workers, ru_maxrss).

With ``--sample K`` only K of the 500 fleets (evenly spaced in the space's order) are
searched and the wall time for all 500 is extrapolated from them, printed as such: the
Python fleet takes seconds per simulated hour, so the whole space is hours of work until
the compiled fleet core lands; ``--sample 500`` runs it all.

Usage: .venv/bin/python benchmarks/bench_capacity.py [--workers 2] [--sample 4]
"""

from __future__ import annotations

import argparse
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
# The TraceLab sample is not part of the repository: it sits in ../shared beside it.
TRACE = Path(__file__).resolve().parents[2] / "shared/data/tracelab/round_trace.example.jsonl"
KNOBS = VllmKnobs(
    block_sizes=(16,),
    num_blocks=(600, 1200, 2400, 4800, 9600),
    max_num_seqs=(4, 8, 16, 32, 64),
    token_budgets=(512, 1024, 2048, 4096, 8192),
    capture_sets=("none",),
)
AXES = FleetAxes((1, 2), ("round_robin", "session_affinity"))


def peak_gib() -> float:
    """Peak RSS of this process plus its largest finished worker (Linux: KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + workers) / 2**20


def pool_plan(trace: Path):
    from rearrival.model.plans.pool import join_pools

    result = plans_from_trace(trace, token_scale=0.15, prefixes=True)
    return join_pools([(str(trace), result.plan)], result.plan.meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sample", type=int, default=4, help="fleets searched (of 500)")
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
    started = time.perf_counter()
    space = space_for_vllm(KNOBS, AXES, pool)
    fleets = space.fleets
    assert len(fleets) == FLEETS, len(fleets)
    count = max(1, min(args.sample, FLEETS))
    sample = [fleets[round(i * (FLEETS - 1) / max(1, count - 1))] for i in range(count)]
    run = run_capacity(space, workload, tolerance=0.02, grid=6, workers=args.workers, fleets=sample)
    wall = time.perf_counter() - started
    sims = sum(len(c.points) for c in run.capacities)
    hours = wall / count * FLEETS
    print(
        f"capacity search: {count} of {FLEETS} fleets searched, {sims} simulations of one "
        f"hour ({sims / count:.1f} per fleet), {wall:.1f} s wall on {args.workers} workers "
        f"({wall / sims * args.workers:.2f} s per simulation per worker)"
    )
    label = "measured" if count == FLEETS else f"extrapolated from {count}"
    verdict = "meets" if hours < TARGET_S else "MISSES"
    print(f"  500 fleets: {hours:,.0f} s wall ({label}); target < {TARGET_S:.0f} s: {verdict}")
    rss = peak_gib()
    verdict = "meets" if rss < RSS_TARGET_GIB else "MISSES"
    print(
        f"  peak memory {rss:.2f} GiB (process + workers); target < {RSS_TARGET_GIB} GiB: {verdict}"
    )
    for c in run.capacities:
        print(
            f"  {c.fleet.configuration.id} x{c.fleet.replicas} {c.fleet.router}: goodput "
            f"{c.goodput_rate!r} sessions/s, {len(c.points)} simulations, monotone {c.monotone}"
        )


if __name__ == "__main__":
    main()
