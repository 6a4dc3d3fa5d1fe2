"""Fleet speed (docs/DESIGN.md §16, issue 34), the fleet figure of `make bench`,
as ratios in one run.

One simulated hour of agent traffic on a 2-replica vLLM fleet behind ``session_affinity``:
session starts by a seeded Poisson process (one session per 8.5 s on average over 3,600
s, about 400 sessions), each session 2-8 rounds (about 2,000 requests; round 0 U{800..2400}
new tokens, each later round U{8..256}, generations U{16..144}, exponential tool gaps of
mean 2 s), on two replicas of 16 sequences x 640 blocks of 16 tokens with a 2,048-token
budget (tight enough that some re-arrivals lose their prefix during a tool wait) and the
illustrative step cost of ``bench_sim.py``'s vLLM figure: about 150,000 engine steps. The
plan is built here from a seeded numpy generator, so the figure stays put when the open
workloads (``rearrival plans open``) change; it has no shared prefix, so that the
single-engine fallback below can serve it too.

Timed, CPU seconds (``time.process_time``):

* ours: ``simulate_fleet(..., core="compiled")`` as a caller writes it (the plan's arrays,
  the compiled fleet ``rearrival.model.simulator.vllm.core``, the request records and
  the fleet's ``VllmResult``), median of ``--passes`` after one warm-up call;
* (a) the Python fleet, ``simulate_fleet(..., core="python")`` (the loop of
  ``rearrival.model.fleet.loop`` driving ``VllmFleetEngine`` replicas), one pass;
* (b) vLLM 0.32.0's own scheduler in virtual time, by
  ``rearrival.model.simulator.vllm.oracle_driver`` (CPU seconds of the steps inside the
  driver's interpreter; vLLM's import and the schedulers' construction excluded): R copies
  of vLLM's ``Scheduler`` behind the same router in docs/DESIGN.md §16's event order
  (``oracle.fleet_case``). Where the oracle has no fleet driver yet, the single-engine
  driver on each replica's share of the requests instead (``session_affinity`` keeps
  every round of a session on its round 0's replica and the plan has no renewal, so a
  replica serves exactly its sessions as one engine would), the two CPU times summed,
  and the printout says so.

Checked before any ratio is printed: the compiled fleet gives the Python fleet's records and
totals bit for bit; vLLM's schedulers give its records per request (replica, hit and
preemptions exact, times within 1e-9 relative; on the per-replica fallback each share on the
single engine first gives the fleet's records exactly). Peak memory is
``resource.getrusage``'s maximum resident set: this process after the compiled runs (imports
and numba included), then after the Python fleet, and the vLLM driver's. Without the vLLM
environment (``REARRIVAL_VLLM_PYTHON``, default ``.venv-vllm/bin/python``) only ours and (a)
are timed. Timing on a shared machine is noisy; only the ratios of one run mean something.

The RBLN row: the same hour on 2 replicas of the RBLN rule set the registered predictions
use (``PREDICTION``: deferred release, no dummy block) with buckets {1,2,4,8,16} at batch
16 and 16 slots, behind the same router, priced with the measured profile; the compiled
fleet (``rearrival.model.simulator.rbln.core.run_fleet``, median of ``--passes`` after a
warm-up) against the Python fleet (the loop driving ``RblnEngine`` replicas, one pass),
checked identical per request and in every total first.

Usage: ``python benchmarks/bench_fleet.py [--passes 5]``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import measured_profile
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.fleet.simulate import FleetResult, simulate_fleet
from rearrival.model.plans.plan import MultiRoundSession, Plan, PlanMeta, Round
from rearrival.model.simulator.rbln.config import SimConfig
from rearrival.model.simulator.vllm import oracle as vllm_oracle
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.vllm_env import ENV_VLLM_PYTHON, vllm_python
from rearrival.vocabulary import PREDICTION, RULE_SETS

SEED = 20261203
HORIZON_S = 3600.0
MEAN_INTERARRIVAL_S = 8.5  # about 420 sessions an hour
ROUNDS = (2, 8)
FIRST_NEW = (800, 2400)
LATER_NEW = (8, 256)
GEN = (16, 144)
MEAN_GAP_S = 2.0
REPLICAS = 2
ROUTER = "session_affinity"
CONFIGURATION = VllmConfiguration(
    (), 16, num_blocks=640, block_size=16, max_num_batched_tokens=2048
)
STEP_COST = VllmStepCost(0.004, 2e-4, 3e-5, 1e-8)  # bench_sim.py's VLLM_STEP_COST
TARGET = 500
RBLN_RELEASE, RBLN_DUMMY = RULE_SETS[PREDICTION]
RBLN_CONFIGURATION = SimConfig(
    buckets=(1, 2, 4, 8, 16),
    batch_size=16,
    slots=16,
    release=RBLN_RELEASE,
    dummy_block=RBLN_DUMMY,
)
FIELDS = ("cached_tokens", "preemptions", "arrival_s", "first_scheduled_s", "finish_s")


def agent_hour(seed: int = SEED) -> Plan:
    """One hour of open agent traffic (module docstring), the same plan for the same seed."""
    rng = np.random.default_rng(seed)
    sessions: list[MultiRoundSession] = []
    start = float(rng.exponential(MEAN_INTERARRIVAL_S))
    while start < HORIZON_S:
        k = int(rng.integers(ROUNDS[0], ROUNDS[1] + 1))
        rounds = []
        for j in range(k):
            low, high = FIRST_NEW if j == 0 else LATER_NEW
            new = int(rng.integers(low, high + 1))
            gen = int(rng.integers(GEN[0], GEN[1] + 1))
            gap = 0.0 if j == k - 1 else round(float(rng.exponential(MEAN_GAP_S)), 6)
            rounds.append(Round(new, gen, gap))
        sessions.append(MultiRoundSession(len(sessions), tuple(rounds), round(start, 6)))
        start += float(rng.exponential(MEAN_INTERARRIVAL_S))
    return Plan(tuple(sessions), PlanMeta(n=len(sessions), seed=seed))


def cpu(call: Callable[[], Any]) -> tuple[float, Any]:
    began = time.process_time()
    out = call()
    return time.process_time() - began, out


def peak_mib(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux: KiB


def shares(plan: Plan, fleet: FleetResult) -> list[tuple[Plan, list[int]]]:
    """Each replica's sessions as a plan of their own, and the fleet's request indices of
    its requests in that plan's (session, round) order."""
    placed: list[list[MultiRoundSession]] = [[] for _ in range(REPLICAS)]
    rids: list[list[int]] = [[] for _ in range(REPLICAS)]
    rid = 0
    for session in plan.sessions:
        replicas = {fleet.requests[rid + k].replica for k in range(len(session.rounds))}
        if len(replicas) != 1:
            sys.exit(f"session {session.session} spans replicas {sorted(replicas)}")
        q = replicas.pop()
        placed[q].append(MultiRoundSession(len(placed[q]), session.rounds, session.start_s))
        rids[q].extend(range(rid, rid + len(session.rounds)))
        rid += len(session.rounds)
    return [(Plan(tuple(p)), r) for p, r in zip(placed, rids, strict=True)]


def vllm_side(plan: Plan, fleet: FleetResult) -> tuple[float, float, str, str] | None:
    """vLLM's schedulers on the fleet, checked against ours: their CPU seconds, build
    seconds, vLLM's version and how they were driven; None without vLLM."""
    if not vllm_oracle.available():
        return None
    if not hasattr(vllm_oracle, "fleet_case"):
        return vllm_per_replica(plan, fleet)
    case = vllm_oracle.fleet_case("hour", plan, CONFIGURATION, STEP_COST, REPLICAS, ROUTER)
    answers = vllm_oracle.run_oracle([case])
    answer = answers["results"][0]
    if found := vllm_oracle.fleet_differences(fleet, answer):
        sys.exit(f"MISMATCH against vLLM's fleet: {found[:3]}")
    how = f"{REPLICAS} Schedulers behind {ROUTER}"
    return answer["run_cpu_s"], answer["setup_s"], answers["vllm_version"], how


def vllm_per_replica(plan: Plan, fleet: FleetResult) -> tuple[float, float, str, str]:
    """The fallback without the oracle's fleet driver (module docstring)."""
    parts = shares(plan, fleet)
    cases = [
        vllm_oracle.case(f"replica-{q}", share, CONFIGURATION, STEP_COST)
        for q, (share, _) in enumerate(parts)
    ]
    answers = vllm_oracle.run_oracle(cases)
    for q, ((share, rids), answer) in enumerate(zip(parts, answers["results"], strict=True)):
        single = simulate_vllm(share, CONFIGURATION, STEP_COST, core="compiled")
        for record, rid in zip(single.requests, rids, strict=True):
            ours = fleet.requests[rid]
            if any(getattr(record, f) != getattr(ours, f) for f in FIELDS):
                sys.exit(f"MISMATCH: replica {q} single engine != fleet at request {rid}")
        if found := vllm_oracle.differences(single, answer):
            sys.exit(f"MISMATCH against vLLM on replica {q}: {found[:3]}")
    run_s = sum(r["run_cpu_s"] for r in answers["results"])
    setup_s = sum(r["setup_s"] for r in answers["results"])
    how = f"{REPLICAS} x the single-engine driver on each replica's share: no fleet driver"
    return run_s, setup_s, answers["vllm_version"], how


def rbln_figure(plan: Plan, passes: int) -> None:
    """The RBLN row (module docstring): compiled fleet against the Python fleet."""
    profile = measured_profile()

    def run(core: str) -> FleetResult:
        return simulate_fleet(plan, RBLN_CONFIGURATION, profile, REPLICAS, ROUTER, core=core)

    fleet = run("compiled")  # the warm-up: loads the compiled fleet from its on-disk cache
    core_s = statistics.median(cpu(lambda: run("compiled"))[0] for _ in range(passes))
    python_s, python = cpu(lambda: run("python"))
    identical = (
        python.requests == fleet.requests
        and python.replica_device_s == fleet.replica_device_s
        and python.prediction.summary() == fleet.prediction.summary()
    )
    if not identical:
        sys.exit("MISMATCH: the compiled RBLN fleet differs from the Python fleet")
    summary = fleet.prediction.summary()
    print(
        f"[fleet, RBLN] the same hour on {REPLICAS} RBLN replicas ({PREDICTION} rules, "
        f"{ROUTER}): {len(fleet.requests)} requests, {summary['decode_steps']} decode steps, "
        f"{summary['reuse_hits']} of {summary['re_arrivals']} re-arrivals hit; compiled "
        "fleet identical per request to the Python fleet:"
    )
    print(
        f"    compiled fleet {core_s * 1e3:8.1f} ms/hour (median of {passes})   "
        f"Python fleet {python_s:7.2f} s   ratio {python_s / core_s:6.0f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()

    plan = agent_hour()

    def ours() -> FleetResult:
        return simulate_fleet(plan, CONFIGURATION, STEP_COST, REPLICAS, ROUTER, core="compiled")

    fleet = ours()  # the warm-up: loads the compiled fleet from its on-disk cache
    core_s = statistics.median(cpu(ours)[0] for _ in range(args.passes))
    peak_ours = peak_mib()
    python_s, python = cpu(
        lambda: simulate_fleet(plan, CONFIGURATION, STEP_COST, REPLICAS, ROUTER, core="python")
    )
    peak_python = peak_mib()
    identical = (
        python.requests == fleet.requests
        and python.replica_device_s == fleet.replica_device_s
        and python.prediction.summary() == fleet.prediction.summary()
    )
    if not identical:
        sys.exit("MISMATCH: the compiled fleet differs from the Python fleet")
    summary = fleet.prediction.summary()
    print(
        f"[fleet] one simulated hour of agent traffic on {REPLICAS} vLLM replicas "
        f"({ROUTER}): {len(plan.sessions)} sessions, {len(fleet.requests)} requests, "
        f"{summary['steps']} engine steps, {summary['preemptions']} preemptions, "
        f"{summary['re_arrivals_lost']} re-arrivals lost their prefix; compiled fleet "
        "identical per request to the Python fleet:"
    )
    print(
        f"    compiled fleet {core_s * 1e3:8.1f} ms/hour (median of {args.passes})   "
        f"Python fleet {python_s:7.2f} s   ratio {python_s / core_s:6.0f}x"
    )
    theirs = vllm_side(plan, fleet)
    if theirs is None:
        print(
            f"    vLLM's scheduler not timed: no vLLM environment at {vllm_python()} "
            f"(set {ENV_VLLM_PYTHON})"
        )
    else:
        run_s, setup_s, version, how = theirs
        ratio = run_s / core_s
        print(
            f"    vLLM {version} scheduler {run_s:7.2f} s ({how}; plus {setup_s:.2f} s to "
            f"build them)   ratio {ratio:6.0f}x (target >= {TARGET}x): "
            f"{'MET' if ratio >= TARGET else 'NOT MET'}; identical per request to vLLM"
        )
    driver = "" if theirs is None else f", vLLM driver {peak_mib(resource.RUSAGE_CHILDREN):.0f}"
    print(
        f"    peak memory (max RSS, MiB): this process after the compiled fleet "
        f"{peak_ours:.0f}, after the Python fleet {peak_python:.0f}{driver}"
    )
    rbln_figure(plan, args.passes)


if __name__ == "__main__":
    main()
