"""Predictor speed (SPEC section 14): event core vs step-by-step reference, and search cost.

1. Runs ``rearrival.sim.simulate`` (event core) and ``rearrival.sim_reference`` on the same
   paper-sized plans (N in {6, 8, 10}, generations 32-256, TraceLab tool waits) and
   configurations, asserts identical outputs (integers exactly, times to 1e-9 relative),
   and prints per-plan times and the speed-up (target >= 50x).
2. Times the configuration search's workload: every one of the 2,077 candidates
   (batch_size in {8,10,12,16}, buckets {1, ..., batch_size}, at most 6 in total) on 54
   plans (27 search + 27 evaluation), in one process, and projects it onto 2 cores
   (target: under 60 s). ``--candidates K`` times an evenly spaced subset instead.

Usage: ``python benchmarks/bench_sim.py [--candidates K] [--reference-plans M]``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import time

from rearrival.plangen import generate_plan
from rearrival.sim import SimConfig, simulate
from rearrival.sim_reference import simulate_reference

SEARCH_N = (6, 8, 10)
REPLICATES = (0, 1, 2)
BLOCKS = (0, 1, 2)
STUDY_SEEDS = {"search": 20260601, "evaluation": 20260602}
CORES = 2


def candidates(max_buckets: int = 6) -> list[SimConfig]:
    """SPEC 12 candidate set: 57 + 163 + 386 + 1,471 = 2,077 with at most 6 buckets."""
    configs = []
    for batch in (8, 10, 12, 16):
        between = range(2, batch)
        for k in range(max_buckets - 1):
            for middle in itertools.combinations(between, k):
                configs.append(SimConfig(buckets=(1, *middle, batch), batch_size=batch))
    return configs


def search_plans() -> list:
    """27 search + 27 evaluation plans: N x 3 replicates (seeds) x 3 blocks per study seed."""
    return [generate_plan(n, study_seed=seed, replicate=replicate, block=block)
            for seed in STUDY_SEEDS.values() for n in SEARCH_N
            for replicate in REPLICATES for block in BLOCKS]


def same(core, ref) -> bool:
    """Identical integers, times within 1e-9 relative (the event core's only freedom)."""
    def close(a, b) -> bool:
        if isinstance(a, float):
            return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return a == b

    cs, rs = core.summary(), ref.summary()
    if cs.keys() != rs.keys() or not all(close(cs[k], rs[k]) for k in cs):
        return False
    for a, b in zip(core.requests, ref.requests, strict=True):
        if not all(close(getattr(a, f), getattr(b, f)) for f in a.__slots__):
            return False
    return [(s.n, s.steps) for s in core.stretches] == [(s.n, s.steps) for s in ref.stretches]


def _timed(function, plan, config, repeats: int) -> float:
    """Seconds per call; CPU time, so other jobs on a shared machine distort it less."""
    start = time.process_time()
    for _ in range(repeats):
        function(plan, config)
    return (time.process_time() - start) / repeats


def bench_reference(plans: list, configs: list[SimConfig]) -> None:
    print("core vs reference (same plans, same configurations)")
    print(f"{'N':>3} {'plan':>5} {'config':<34} {'steps':>6} {'core_us':>9} {'ref_ms':>9} "
          f"{'speed-up':>9}")
    ratios, core_total, ref_total = [], 0.0, 0.0
    by_n: dict[int, list[float]] = {}
    for index, plan in enumerate(plans):
        for config in configs:
            core = simulate(plan, config)  # warm the per-configuration tables
            core_s = min(_timed(simulate, plan, config, repeats=20) for _ in range(3))
            ref_s = min(_timed(simulate_reference, plan, config, repeats=1) for _ in range(2))
            ref = simulate_reference(plan, config)
            if not same(core, ref):
                sys.exit(f"MISMATCH: plan {index} (N={plan.n}) config {config}")
            ratios.append(ref_s / core_s)
            core_total += core_s
            ref_total += ref_s
            by_n.setdefault(plan.n, []).append(core_s)
            label = (f"{','.join(map(str, config.buckets))}/S{config.slots}/"
                     f"{config.release[:3]}/{config.dummy_block}")
            print(f"{plan.n:>3} {index:>5} {label:<34} {core.decode_steps:>6} "
                  f"{core_s * 1e6:>9.1f} {ref_s * 1e3:>9.2f} {ref_s / core_s:>8.0f}x")
    print(f"all outputs identical; speed-up: total {ref_total / core_total:.0f}x, "
          f"median {statistics.median(ratios):.0f}x, min {min(ratios):.0f}x (target >= 50x)")
    for n, times in sorted(by_n.items()):
        print(f"  N={n}: mean core time per simulate() {statistics.mean(times) * 1e6:.1f} us")


def bench_search(plans: list, configs: list[SimConfig], total_candidates: int) -> None:
    start = time.process_time()
    for config in configs:
        for plan in plans:
            simulate(plan, config).device_s  # noqa: B018 - what the search reads
    elapsed = time.process_time() - start
    runs = len(configs) * len(plans)
    full = elapsed / runs * total_candidates * len(plans)
    print(f"search workload: {len(configs)} candidates x {len(plans)} plans = {runs} "
          f"simulations in {elapsed:.1f} s ({elapsed / runs * 1e6:.1f} us each, one process)")
    print(f"projected {total_candidates} x {len(plans)}: {full:.1f} s on one core, "
          f"{full / CORES:.1f} s on {CORES} cores (target < 60 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=0,
                        help="time this many evenly spaced candidates (0 = all 2,077)")
    parser.add_argument("--reference-plans", type=int, default=3,
                        help="plans per N checked against the reference")
    args = parser.parse_args()

    plans = search_plans()
    per_n = {n: [p for p in plans if p.n == n][:args.reference_plans] for n in SEARCH_N}
    reference_configs = [
        SimConfig(),
        SimConfig(buckets=(1, 4, 6, 8, 10, 16), batch_size=16),
        SimConfig(release="immediate", dummy_block="pre-evict"),
    ]
    bench_reference([p for n in SEARCH_N for p in per_n[n]], reference_configs)

    every = candidates()
    assert len(every) == 2077, len(every)
    chosen = every
    if 0 < args.candidates < len(every):
        stride = len(every) / args.candidates
        chosen = [every[int(i * stride)] for i in range(args.candidates)]
    bench_search(plans, chosen, len(every))


if __name__ == "__main__":
    main()
