"""Benchmark of the full configuration search (SPEC 14: 2,077 candidates x 54 plans, < 60 s
on 2 cores).

Prints the wall time of each stage, candidate-plan evaluations per second, how many
simulations actually ran (the rest are exact re-uses, see rearrival.search.PlanScorer),
the raw simulator rate on a random sample (what the search would cost without re-use), a
check of re-used outcomes against direct simulation, and the paper's V-A numbers: the
selected configuration, its search and evaluation scores, the restricted-N top-20
overlaps and whether the mean-of-ratios score changes the pick (S8).

Usage: .venv/bin/python benchmarks/bench_search.py [--config F] [--workers 2] [--verify 500]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from rearrival.search import (
    SearchSettings,
    baseline_of,
    evaluate,
    make_plans,
    search_candidates,
    write_outputs,
)
from rearrival.sim import simulate
from rearrival.studies import load_study_config


def verify(results, cands, plans, count: int, seed: int = 0) -> tuple[int, float]:
    """Compare ``count`` random (candidate, plan) rows with direct simulation; also time it."""
    rng = random.Random(seed)
    rows = results.set_index(["candidate", "inputs", "plan"])
    spent = 0.0
    for _ in range(count):
        cand = rng.choice(cands)
        key, plan = rng.choice(plans)
        got = rows.loc[(cand.id, key.inputs, key.name)]
        start = time.perf_counter()
        res = simulate(plan, cand.sim_config())
        spent += time.perf_counter() - start
        if (got["device_s"], got["reuse_hits"]) != (res.device_s, res.reuse_hits):
            raise SystemExit(f"MISMATCH {cand.id} {key.relpath}: {got['device_s']} vs "
                             f"{res.device_s}")
    return count, count / spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=Path("config/config.yaml"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--verify", type=int, default=500,
                        help="random rows checked against direct simulation (0: skip)")
    args = parser.parse_args()

    t0 = time.perf_counter()
    cfg = load_study_config(args.config)
    settings = SearchSettings.from_config(cfg)
    plans = make_plans(cfg, settings)
    cands = search_candidates(settings)
    baseline = baseline_of(cfg)
    t1 = time.perf_counter()
    evaluated = cands if baseline in cands else [*cands, baseline]
    results, simulations = evaluate(evaluated, plans, args.workers)
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        summary = write_outputs(results, cands, baseline, settings, Path(tmp))
    t3 = time.perf_counter()

    pairs = len(evaluated) * len(plans)
    print(f"candidates {len(cands)} x plans {len(plans)} = {pairs:,} candidate-plan "
          f"evaluations, workers {args.workers}")
    print(f"  plans + candidates {t1 - t0:6.2f} s")
    print(f"  simulate           {t2 - t1:6.2f} s  ({pairs / (t2 - t1):,.0f} evaluations/s; "
          f"{simulations:,} simulations run, {1 - simulations / pairs:.1%} exact re-use)")
    print(f"  merge + write      {t3 - t2:6.2f} s")
    print(f"  TOTAL wall         {t3 - t0:6.2f} s")
    if args.verify:
        checked, rate = verify(results, evaluated, plans, args.verify)
        print(f"verified {checked} random rows against direct simulation: identical; raw "
              f"simulator {rate:,.0f} sims/s on one core -> {pairs / rate:,.0f} s for all "
              "pairs without re-use on one core")
    sel = summary["selected"]
    print(f"selected {sel['id']} (slots {sel['slots']}): search score {sel['search_score']:.4f}"
          f", evaluation score {sel['evaluation_score']:.4f}, mean-of-ratios "
          f"{sel['mean_ratio_score']:.4f}")
    top = summary["top"]
    print(f"top-{len(top)}: batch sizes {summary['top_batch_sizes']}, score spread "
          f"{summary['top_score_spread_pp']:.3f} pp")
    print(f"mean-of-ratios pick {summary['mean_ratio_selected']} (changes selection: "
          f"{summary['mean_ratio_changes_selection']})")
    for label, part in summary["restricted"].items():
        print(f"restricted N={{{label}}}: pick {part['selected']} ({part['selected_score']:.4f})"
              f", full pick ranks {part['full_pick_rank']}, top overlap "
              f"{part['top_overlap_with_full']}/{len(top)}, mean-of-ratios changes selection: "
              f"{part['mean_ratio_changes_selection']}")


if __name__ == "__main__":
    main()
