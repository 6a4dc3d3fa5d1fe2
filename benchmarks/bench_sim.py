"""Predictor speed (SPEC section 14), figures 1 and 2 of `make bench`, as ratios in one run.

1. Single call: ``simulate(plan, SimConfig(...)).summary()`` against
   ``rearrival.model.sim_reference`` on the mixed workload of issue 12: 45 plans, N in
   {3,4,5,6,7,8,10,12,16}, 5 plans each (TraceLab-mixture tool waits, the default plan
   generator), each on 5 configurations ({1,2,4,8}@8, {1,2,4,8,16}@16,
   {1,4,6,8,10,16}@16, {1,2,4,6,8}@8, {1,3,5,12}@12), all in one process. Each side
   runs the whole mix once as a warm-up, then 5 timed passes; the ratio is the median
   pass CPU time of the reference over that of the core (target >= 120x,
   about 100x the authors' own simulator, which runs 1.2x our reference).
2. Batch evaluation: every one of the paper's 2,077 search candidates on each plan of the
   mix in one compiled call per plan (``rearrival.model.simcore.run_batch``, no re-use), per
   simulation, against the reference on a random sample of the same (plan, candidate)
   pairs (target >= 600x).

Every core output is checked against the reference first (integers exactly, times to
1e-9 relative); batch outputs against single calls bit for bit. Timing on a shared
machine is noisy; only the ratios of one run mean something.

Usage: ``python benchmarks/bench_sim.py [--passes 5] [--reference-sample 150]``.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time

import numpy as np

from rearrival.model.plangen import generate_plan
from rearrival.model.profile import measured_profile
from rearrival.model.sim import SimConfig, compiled_core, core_inputs, simulate
from rearrival.model.sim_reference import simulate_reference
from rearrival.search.scoring import CandidateArrays, enumerate_candidates

MIX_N = (3, 4, 5, 6, 7, 8, 10, 12, 16)
PLANS_PER_N = 5
MIX_CONFIGS = (
    ((1, 2, 4, 8), 8),
    ((1, 2, 4, 8, 16), 16),
    ((1, 4, 6, 8, 10, 16), 16),
    ((1, 2, 4, 6, 8), 8),
    ((1, 3, 5, 12), 12),
)
STUDY_SEED = 20261201
SINGLE_TARGET = 120
BATCH_TARGET = 600


def mix_plans() -> list:
    """45 plans: 5 per N from the default generator (TraceLab aggregate mixture waits)."""
    return [
        generate_plan(n, study_seed=STUDY_SEED, replicate=r)
        for n in MIX_N
        for r in range(PLANS_PER_N)
    ]


def close(a, b) -> bool:
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def check_mix(plans: list) -> None:
    for plan in plans:
        for buckets, batch in MIX_CONFIGS:
            config = SimConfig(buckets=buckets, batch_size=batch)
            core, ref = simulate(plan, config).summary(), simulate_reference(plan, config).summary()
            if not all(close(core[k], ref[k]) for k in core):
                sys.exit(f"MISMATCH: N={plan.n} {buckets}@{batch}")


def mix_pass(function, plans: list, repeats: int = 1) -> float:
    """CPU seconds per pass over the mix, the call exactly as a user writes it.

    CPU time of this process, not wall time: on a shared machine a short pass is
    otherwise dominated by whenever the scheduler runs someone else.
    """
    start = time.process_time()
    for _ in range(repeats):
        for plan in plans:
            for buckets, batch in MIX_CONFIGS:
                function(plan, SimConfig(buckets=buckets, batch_size=batch)).summary()
    return (time.process_time() - start) / repeats


def single_call(plans: list, passes: int) -> tuple[float, float, float]:
    """Median pass seconds of core and reference and their ratio (after one warm-up).

    A core pass repeats the mix 20 times so it lasts about as long as a reference pass.
    """
    mix_pass(simulate, plans)
    mix_pass(simulate_reference, plans)
    core, ref = [], []
    for _ in range(passes):  # interleaved, so load changes hit both sides alike
        core.append(mix_pass(simulate, plans, repeats=20))
        ref.append(mix_pass(simulate_reference, plans))
    core_s, ref_s = statistics.median(core), statistics.median(ref)
    return core_s, ref_s, ref_s / core_s


def batch_evaluation(plans: list, passes: int, sample: int) -> tuple[float, float, float]:
    """Per-simulation seconds of run_batch (2,077 candidates per plan) and of the
    reference on a random sample of the same pairs; checks a sample against simulate."""
    core = compiled_core()
    profile = measured_profile()
    cands = enumerate_candidates()
    arrays = CandidateArrays(cands, profile)
    calls = []
    for plan in plans:
        inputs = core_inputs(plan, profile)
        out_f = np.empty((len(cands), 5))
        out_i = np.empty((len(cands), 3), dtype=np.int64)
        calls.append(
            (
                plan,
                (
                    inputs.ints,
                    inputs.floats,
                    inputs.pair_reuse,
                    inputs.pair_cost,
                    arrays.steps,
                    arrays.batches,
                    arrays.slots,
                    True,
                    0,
                    out_f,
                    out_i,
                ),
            )
        )
    rng = random.Random(0)
    for plan, args in calls:  # warm-up and check
        core.run_batch(*args)
        for index in rng.sample(range(len(cands)), 3):
            result = simulate(plan, cands[index].sim_config())
            if (args[9][index, 0], args[10][index, 0]) != (result.device_s, result.reuse_hits):
                sys.exit(f"BATCH MISMATCH: N={plan.n} {cands[index].id}")
    times = []
    for _ in range(passes):
        start = time.process_time()
        for _, args in calls:
            core.run_batch(*args)
        times.append(time.process_time() - start)
    batch_s = statistics.median(times) / (len(cands) * len(plans))
    pairs = [(rng.choice(plans), rng.choice(cands).sim_config()) for _ in range(sample)]
    start = time.process_time()
    for plan, config in pairs:
        simulate_reference(plan, config)
    ref_s = (time.process_time() - start) / sample
    return batch_s, ref_s, ref_s / batch_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument(
        "--reference-sample",
        type=int,
        default=150,
        help="(plan, candidate) pairs the reference runs for figure 2",
    )
    args = parser.parse_args()

    plans = mix_plans()
    check_mix(plans)
    calls = len(plans) * len(MIX_CONFIGS)
    core_s, ref_s, ratio = single_call(plans, args.passes)
    print(
        f"[1] single call, mix of {len(plans)} plans x {len(MIX_CONFIGS)} configurations "
        f"({calls} calls/pass, median of {args.passes} passes after a warm-up):"
    )
    print(
        f"    simulate {core_s / calls * 1e6:8.1f} us/call   reference "
        f"{ref_s / calls * 1e6:8.1f} us/call   ratio {ratio:6.0f}x   "
        f"(target >= {SINGLE_TARGET}x): {'MET' if ratio >= SINGLE_TARGET else 'NOT MET'}"
    )
    by_n = {}
    for plan in plans:
        start = time.process_time()
        for _ in range(20):
            for buckets, batch in MIX_CONFIGS:
                simulate(plan, SimConfig(buckets=buckets, batch_size=batch)).summary()
        by_n.setdefault(plan.n, []).append((time.process_time() - start) / (20 * len(MIX_CONFIGS)))
    print(
        "    simulate us/call by N: "
        + ", ".join(f"N={n} {statistics.median(v) * 1e6:.1f}" for n, v in sorted(by_n.items()))
    )
    batch_s, bref_s, bratio = batch_evaluation(plans, args.passes, args.reference_sample)
    print(
        f"[2] batch evaluation, 2,077 candidates x {len(plans)} plans, one compiled call "
        f"per plan, no re-use:"
    )
    print(
        f"    run_batch {batch_s * 1e6:7.2f} us/simulation   reference {bref_s * 1e6:8.1f} "
        f"us/simulation   ratio {bratio:6.0f}x   (target >= {BATCH_TARGET}x): "
        f"{'MET' if bratio >= BATCH_TARGET else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()
