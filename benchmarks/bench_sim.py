"""Predictor speed (README "Speed"), figures 1 and 2 of `make bench`, as ratios in one run.

1. Single call: ``simulate(plan, SimConfig(...)).summary()`` against
   ``rearrival.model.simulator.rbln.reference`` on the mixed workload of issue 12: 45 plans, N in
   {3,4,5,6,7,8,10,12,16}, 5 plans each (TraceLab-mixture tool waits, the default plan
   generator), each on 5 configurations ({1,2,4,8}@8, {1,2,4,8,16}@16,
   {1,4,6,8,10,16}@16, {1,2,4,6,8}@8, {1,3,5,12}@12), all in one process. Each side
   runs the whole mix once as a warm-up, then 5 timed passes; the ratio is the median
   pass CPU time of the reference over that of the core (target >= 120x,
   about 100x the authors' own simulator, which runs 1.2x our reference).
2. Batch evaluation: every one of the paper's 2,077 search candidates on each plan of the
   mix in one compiled call per plan (``rearrival.model.simulator.rbln.core.run_batch``, no re-use),
   per simulation, against the reference on a random sample of the same (plan, candidate)
   pairs (target >= 600x).
3. Multi-round: simulations per second of ``simulate`` and the ratio to the reference on
   agent sessions of 8 rounds at N=16 (10 seeded plans: first segment U{800..1600}
   tokens, each later segment U{8..256}, generations U{32..256}, one TraceLab-mixture
   tool gap per call, session starts spread over 2 s), on the 5 configurations of 1.
4. With ``--authors-sim DIR`` (a checkout of the authors' simulator's ``src`` directory,
   the one holding ``continuum/``; not shipped here): ``simulate`` against the authors'
   ``continuum.sim.engine.simulate`` per call on the mix of 1 and on the plans of 3,
   after checking that both give the same summaries (their engine runs the base rules:
   deferred release, no dummy block). If their ``Session`` has no start field, both
   sides run the multi-round plans with every session starting at 0.

5. vLLM rule set (docs/DESIGN.md §15): ``simulate_vllm`` on the compiled core per call
   (which runs the plan twice: on the configured pool and on one that never evicts)
   against vLLM 0.32.0's own scheduler driven in virtual time by
   ``rearrival.model.simulator.vllm.oracle_driver`` (CPU seconds of the steps per case,
   measured inside the driver's own interpreter, vLLM's import and the scheduler's
   construction excluded), on the 8-round N=16 plans of 3 on three vLLM configurations
   (target >= 100x). Without the vLLM environment (``REARRIVAL_VLLM_PYTHON``, default
   ``.venv-vllm/bin/python``) only the predictor's side is timed.

Every core output is checked against the reference first (integers exactly, times to
1e-9 relative); batch outputs against single calls bit for bit. Timing on a shared
machine is noisy; only the ratios of one run mean something.

Usage: ``python benchmarks/bench_sim.py [--passes 5] [--reference-sample 150]
[--authors-sim DIR]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round
from rearrival.model.plans.plangen import generate_plan
from rearrival.model.plans.tools import default_tool_table
from rearrival.model.simulator.rbln.inputs import core_inputs
from rearrival.model.simulator.rbln.reference import simulate_reference
from rearrival.model.simulator.rbln.sim import SimConfig, compiled_core, simulate
from rearrival.model.simulator.vllm import oracle as vllm_oracle
from rearrival.model.simulator.vllm.reference import (
    simulate_reference as simulate_vllm_reference,
)
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.search.candidates import enumerate_candidates
from rearrival.search.evaluate import CandidateArrays
from rearrival.vllm_env import ENV_VLLM_PYTHON, vllm_python

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
MULTI_N = 16
MULTI_ROUNDS = 8
MULTI_PLANS = 10


def mix_plans() -> list:
    """45 plans: 5 per N from the default generator (TraceLab aggregate mixture waits)."""
    return [
        generate_plan(n, study_seed=STUDY_SEED, replicate=r)
        for n in MIX_N
        for r in range(PLANS_PER_N)
    ]


def multi_round_plans(spread_s: float = 2.0) -> list[Plan]:
    """Agent sessions of ``MULTI_ROUNDS`` rounds at N = ``MULTI_N`` (figure 3), seeded."""
    table = default_tool_table()
    plans = []
    for replicate in range(MULTI_PLANS):
        rng = random.Random(STUDY_SEED * 1000 + replicate)
        sessions = []
        for i in range(MULTI_N):
            rounds = []
            for k in range(MULTI_ROUNDS):
                new = rng.randint(800, 1600) if k == 0 else rng.randint(8, 256)
                gen = rng.randint(32, 256)
                draw = table.draw(rng)
                gap = 0.0 if k == MULTI_ROUNDS - 1 else round(draw.latency_s, 6)
                rounds.append(Round(new, gen, gap, "" if k == MULTI_ROUNDS - 1 else draw.tool))
            start = round(rng.uniform(0.0, spread_s), 6)
            sessions.append(MultiRoundSession(i, tuple(rounds), start))
        plans.append(Plan(tuple(sessions), PlanMeta(n=MULTI_N)))
    return plans


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
            result = simulate(plan, SimConfig.of(cands[index]))
            if (args[9][index, 0], args[10][index, 0]) != (result.device_s, result.reuse_hits):
                sys.exit(f"BATCH MISMATCH: N={plan.n} {cands[index].id}")
    times = []
    for _ in range(passes):
        start = time.process_time()
        for _, args in calls:
            core.run_batch(*args)
        times.append(time.process_time() - start)
    batch_s = statistics.median(times) / (len(cands) * len(plans))
    pairs = [(rng.choice(plans), SimConfig.of(rng.choice(cands))) for _ in range(sample)]
    start = time.process_time()
    for plan, config in pairs:
        simulate_reference(plan, config)
    ref_s = (time.process_time() - start) / sample
    return batch_s, ref_s, ref_s / batch_s


@dataclasses.dataclass
class AuthorsSummary:
    """The authors' result read the way ``summary()`` reads ours: cost, reuse, steps."""

    result: Any

    def summary(self) -> dict[str, Any]:
        r = self.result
        return {
            "device_s": r.busy_s,
            "interference_s": r.stall_s,
            "reuse_hits": r.reuse_hits,
            "histogram": r.pair_histogram(),
        }


class AuthorsSimulator:
    """The authors' simulator from a checkout of their ``src`` directory, called per plan
    and configuration with sessions and descriptors built beforehand (so a timed call is
    their ``simulate`` alone, plus reading the cost it reports)."""

    def __init__(self, directory: Path, profile: Profile) -> None:
        sys.path.insert(0, str(directory))
        self.engine = importlib.import_module("continuum.sim.engine")
        self.substrate = importlib.import_module("continuum.substrate.descriptor")
        self.agentic = importlib.import_module("continuum.workload.agentic")
        self.profile = profile
        session_fields = {f.name for f in dataclasses.fields(self.agentic.Session)}
        self.start_field = next(
            (name for name in ("session_start_s", "start_s") if name in session_fields), None
        )
        self._descriptors: dict[tuple[Any, ...], Any] = {}
        self._sessions: dict[int, tuple[Plan, list[Any]]] = {}

    def descriptor(self, config: SimConfig) -> Any:
        key = (config.buckets, config.slots)
        if key not in self._descriptors:
            sub, p = self.substrate, self.profile
            names = {f.name for f in dataclasses.fields(sub.SubstrateDescriptor)}
            values: dict[str, Any] = {
                "name": "rearrival-profile",
                "bucket_sizes": config.buckets,
                "step_cost_model": sub.StepCostModel(
                    fixed_s_by_bucket={b: p.bucket_cost_s(b) for b in config.buckets},
                    marginal_s_per_request=p.beta_s,
                    intercept_s=p.alpha_s,
                ),
                "outer_slot_count": config.slots,
                "outer_slot_tokens": p.slot_tokens,
                "inner_block_tokens": p.reuse_block_tokens,
                "inner_block_count": config.slots * p.slot_tokens // p.reuse_block_tokens,
                "outer_eviction_policy": "fifo",
                "inner_eviction_policy": "lru",
                "hit_formula": sub.HitFormula(block_tokens=p.reuse_block_tokens),
                "kv_pool_tokens": config.slots * p.slot_tokens,
                "prefill_cost_model": sub.PrefillCostModel(
                    chunk_tokens=p.prefill_chunk_tokens,
                    per_chunk_s=p.prefill_per_chunk_s,
                    drift_s_per_token=p.prefill_per_token_s,
                ),
                "release_rule": "deferred",
                "dummy_mode": "none",
            }
            values = {k: v for k, v in values.items() if k in names}
            source = sub.Provenance(layer="stack", origin="rearrival-bench", kind="derived")
            values["provenance"] = {k: source for k in values if k != "name"}
            self._descriptors[key] = sub.SubstrateDescriptor(**values)
        return self._descriptors[key]

    def sessions(self, plan: Plan) -> list[Any]:
        entry = self._sessions.get(id(plan))
        if entry is None or entry[0] is not plan:
            turn_fields = {f.name for f in dataclasses.fields(self.agentic.Turn)}
            out = []
            for s in plan.sessions:
                turns = []
                for k, r in enumerate(s.rounds):
                    kwargs = {
                        "index": k,
                        "new_segment_tokens": r.new_tokens,
                        "generation_tokens": r.gen_tokens,
                        "gap_after_s": r.gap_after_s,
                        "text_seed": 0,
                    }
                    turns.append(
                        self.agentic.Turn(**{k: v for k, v in kwargs.items() if k in turn_fields})
                    )
                extra = {self.start_field: s.start_s} if self.start_field else {}
                out.append(self.agentic.Session(f"s{s.session}", tuple(turns), **extra))
            entry = self._sessions[id(plan)] = (plan, out)
        return entry[1]

    def run(self, plan: Plan, config: SimConfig) -> Any:
        """Their ``SimResult`` for one plan on one configuration."""
        return self.engine.simulate(
            self.descriptor(config),
            self.sessions(plan),
            self.engine.SimConfig(max_running_requests=config.batch_size),
        )

    def call(self, plan: Plan, config: SimConfig) -> AuthorsSummary:
        """What a timed call does: their simulation and its summary, as ours in figure 1."""
        return AuthorsSummary(self.run(plan, config))

    def check(self, plans: list[Plan]) -> int:
        """Compared (plan, configuration) pairs; exits on the first differing summary."""
        for plan in plans:
            for buckets, batch in MIX_CONFIGS:
                config = SimConfig(buckets=buckets, batch_size=batch)
                ours, theirs = simulate(plan, config).summary(), self.run(plan, config)
                pairs = [
                    (ours["decode_steps"], len(theirs.decode_steps)),
                    (ours["reuse_hits"], theirs.reuse_hits),
                    (ours["re_arrivals"], theirs.resume_requests),
                    (ours["device_s"], theirs.busy_s),
                    (ours["interference_s"], theirs.stall_s),
                    (ours["makespan_s"], theirs.wall_clock_s),
                    (ours["histogram"], theirs.pair_histogram()),
                ]
                if not all(close(a, b) for a, b in pairs):
                    sys.exit(f"AUTHORS MISMATCH: N={plan.n} {buckets}@{batch}: {pairs}")
        return len(plans) * len(MIX_CONFIGS)

    def ratio(self, plans: list[Plan], passes: int) -> tuple[float, float, float]:
        """Median per-call seconds of ours and theirs on ``plans`` and their ratio."""
        mix_pass(simulate, plans)
        mix_pass(self.call, plans)
        ours, theirs = [], []
        for _ in range(passes):
            ours.append(mix_pass(simulate, plans, repeats=20))
            theirs.append(mix_pass(self.call, plans))
        calls = len(plans) * len(MIX_CONFIGS)
        core_s, their_s = statistics.median(ours) / calls, statistics.median(theirs) / calls
        return core_s, their_s, their_s / core_s


def multi_round_figure(passes: int) -> None:
    plans = multi_round_plans()
    check_mix(plans)
    calls = len(plans) * len(MIX_CONFIGS)
    core_s, ref_s, ratio = single_call(plans, passes)
    print(
        f"[3] multi-round: {MULTI_PLANS} plans of N={MULTI_N} sessions x {MULTI_ROUNDS} rounds "
        f"(starts over 2 s) x {len(MIX_CONFIGS)} configurations:"
    )
    print(
        f"    simulate {calls / core_s:8.0f} sims/s ({core_s / calls * 1e6:7.1f} us/call)   "
        f"reference {calls / ref_s:6.0f} sims/s   ratio {ratio:6.0f}x"
    )


def authors_figure(directory: Path, mix: list[Plan], passes: int) -> None:
    authors = AuthorsSimulator(directory, measured_profile())
    spread = 2.0 if authors.start_field else 0.0
    multi = multi_round_plans(spread)
    checked = authors.check(mix) + authors.check(multi)
    starts = "starts over 2 s" if spread else "their Session has no start: all start at 0"
    print(f"[4] against the authors' simulator ({directory}), {checked} summaries identical:")
    for label, plans in (("two-round mix", mix), (f"8-round N=16 ({starts})", multi)):
        core_s, their_s, ratio = authors.ratio(plans, passes)
        print(
            f"    {label}: simulate {core_s * 1e6:7.1f} us/call   authors "
            f"{their_s * 1e6:9.1f} us/call   ratio {ratio:6.0f}x (target >= 100x): "
            f"{'MET' if ratio >= 100 else 'NOT MET'}"
        )


# Three pools for the 8-round N=16 plans (longest request about 5,400 tokens): tight
# (evicting and preempting), roomy, and large blocks. Illustrative step cost: no
# calibrated vLLM profile ships yet.
VLLM_CONFIGS = (
    VllmConfiguration((), 16, num_blocks=1024, block_size=16, max_num_batched_tokens=2048),
    VllmConfiguration((), 16, num_blocks=4096, block_size=16, max_num_batched_tokens=2048),
    VllmConfiguration(
        (1, 2, 4, 8, 16), 16, num_blocks=160, block_size=128, max_num_batched_tokens=4096
    ),
)
VLLM_STEP_COST = VllmStepCost(0.004, 2e-4, 3e-5, 1e-8)
VLLM_TARGET = 100


def vllm_figure(passes: int) -> None:
    plans = multi_round_plans()
    pairs = [(plan, config) for plan in plans for config in VLLM_CONFIGS]
    for plan, config in pairs:
        compiled = simulate_vllm(plan, config, VLLM_STEP_COST, core="compiled")
        reference = simulate_vllm_reference(plan, config, VLLM_STEP_COST)
        if compiled.summary() != reference.summary() or compiled.requests != reference.requests:
            sys.exit(f"MISMATCH (vllm): N={plan.n} {config.id}")
    ours = []
    for plan, config in pairs:
        times = []
        for _ in range(passes):
            start = time.process_time()
            simulate_vllm(plan, config, VLLM_STEP_COST, core="compiled").summary()
            times.append(time.process_time() - start)
        ours.append(statistics.median(times))
    preempted = sum(
        simulate_vllm(p, c, VLLM_STEP_COST, core="compiled").summary()["preemptions"] > 0
        for p, c in pairs
    )
    print(
        f"[5] vLLM rule set: {len(plans)} plans of N={MULTI_N} x {MULTI_ROUNDS} rounds x "
        f"{len(VLLM_CONFIGS)} configurations ({preempted} of {len(pairs)} with preemptions), "
        "compiled core identical to the reference:"
    )
    core_s = sum(ours) / len(ours)
    if not vllm_oracle.available():
        print(
            f"    simulate_vllm {core_s * 1e6:8.1f} us/call; vLLM's scheduler not timed: no "
            f"vLLM environment at {vllm_python()} "
            f"(set {ENV_VLLM_PYTHON})"
        )
        return
    answers = vllm_oracle.run_oracle(
        [vllm_oracle.case(str(i), p, c, VLLM_STEP_COST) for i, (p, c) in enumerate(pairs)]
    )
    for (plan, config), answer in zip(pairs, answers["results"], strict=True):
        result = simulate_vllm(plan, config, VLLM_STEP_COST, core="compiled")
        if vllm_oracle.differences(result, answer):
            sys.exit(f"MISMATCH against vLLM: N={plan.n} {config.id}")
    theirs_s = sum(r["run_cpu_s"] for r in answers["results"]) / len(pairs)
    setup_s = sum(r["setup_s"] for r in answers["results"]) / len(pairs)
    ratio = theirs_s / core_s
    print(
        f"    simulate_vllm {core_s * 1e6:8.1f} us/call   vLLM {answers['vllm_version']} "
        f"scheduler {theirs_s * 1e6:10.1f} us/call (plus {setup_s * 1e3:.1f} ms to build it)"
        f"   ratio {ratio:6.0f}x (target >= {VLLM_TARGET}x): "
        f"{'MET' if ratio >= VLLM_TARGET else 'NOT MET'}; all {len(pairs)} identical to vLLM"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument(
        "--reference-sample",
        type=int,
        default=150,
        help="(plan, candidate) pairs the reference runs for figure 2",
    )
    parser.add_argument(
        "--authors-sim",
        type=Path,
        default=None,
        help="checkout of the authors' simulator's src directory (holding continuum/)",
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
    multi_round_figure(args.passes)
    vllm_figure(args.passes)
    if args.authors_sim is not None:
        authors_figure(args.authors_sim, plans, args.passes)


if __name__ == "__main__":
    main()
