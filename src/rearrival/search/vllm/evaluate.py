"""Every vLLM configuration on every input plan with the exact predictor (docs/DESIGN.md
§15): ``simulate_vllm`` per distinct run, as one long results frame.

Exact re-use. On a plan of N sessions some configurations replay the same simulation
step for step, so one run stands in for all of them:

- ``max_num_seqs`` at or above N: at most N requests are ever in the system (a session
  has one request at a time), so the limit never binds; they run as ``min(S, N)``;
- capture sizes that pad every step's decode tokens alike (``padding_sizes``);
- pools at or above ``VllmInputs.never_evicting_blocks``: every request's blocks fit
  beside every other's, so no cached block is ever evicted, no admission waits for
  blocks and nothing is preempted; they run on that pool.

``tests/test_vllm_search.py`` checks every configuration's row against its own
``simulate_vllm`` call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import pandas as pd

from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmStepCost
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.result import VllmResult
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.progress import progress
from rearrival.search.inputs import PlanKey
from rearrival.search.space import plan_footprint
from rearrival.search.vllm.prefix_bound import prefix_bound

OUTCOME_COLUMNS = (
    "device_s",
    "makespan_s",
    "steps",
    "decode_tokens",
    "prefill_tokens",
    "cached_tokens",
    "preemptions",
    "re_arrivals_lost",
    "recomputed_prefill_tokens",
)
RESULT_COLUMNS = (
    "candidate",
    "inputs",
    "plan",
    "n",
    "plan_sha256",
    *OUTCOME_COLUMNS,
    "prompt_tokens",
    "cacheable_tokens",
    "re_arrivals",
)


class Outcome(NamedTuple):
    """The predictor's totals the search keeps per (configuration, plan)."""

    device_s: float
    makespan_s: float
    steps: int
    decode_tokens: int
    prefill_tokens: int
    cached_tokens: int
    preemptions: int
    re_arrivals_lost: int
    recomputed_prefill_tokens: int


def outcome(result: VllmResult) -> Outcome:
    """The totals of one simulation (``VllmResult.summary`` without the request rows)."""
    run = result.run
    return Outcome(
        run.device_s,
        run.makespan_s,
        run.total_steps,
        run.decode_tokens,
        run.prefill_tokens,
        sum(run.cached_tokens),
        sum(run.preemptions),
        result.re_arrivals_lost,
        run.prefill_tokens - result.never_evicted_prefill,
    )


def stand_in(cand: VllmConfiguration, n: int, never_evicting: int) -> VllmConfiguration:
    """The configuration whose simulation is ``cand``'s on a plan of ``n`` sessions whose
    pool never evicts at ``never_evicting`` blocks (module docstring)."""
    return replace(
        cand,
        batch_size=min(cand.batch_size, n),
        num_blocks=min(cand.num_blocks, never_evicting),
        name="",
    )


def run_key(cand: VllmConfiguration, n: int, never_evicting: int) -> tuple[Any, ...]:
    """Configurations with one key replay one simulation on such a plan."""
    return (
        cand.block_size,
        min(cand.num_blocks, never_evicting),
        min(cand.batch_size, n),
        cand.max_num_batched_tokens,
        padding_sizes(cand),
    )


def padding_sizes(cand: VllmConfiguration) -> tuple[int, ...]:
    """The capture sizes that can pad a step's decode tokens: those below the token
    budget and the first at or above it. A step's decode tokens can exceed
    ``max_num_seqs`` (a request resumed after preemption recomputes its tokens as
    generation tokens, docs/DESIGN.md §15 rule 7) but never the budget, so two sets
    with the same such sizes pad every step alike."""
    budget = cand.max_num_batched_tokens
    below = tuple(s for s in cand.buckets if s < budget)
    above = [s for s in cand.buckets if s >= budget][:1]
    return (*below, *above)


def device_s(plan: Plan, cand: VllmConfiguration, step_cost: VllmStepCost) -> float:
    """The predicted device time of one configuration on one plan (run as its stand-in)."""
    ample = vllm_inputs(plan, cand.block_size).never_evicting_blocks()
    return simulate_vllm(plan, stand_in(cand, plan.n, ample), step_cost).device_s


def score_plan(
    plan: Plan, cands: Sequence[VllmConfiguration], step_cost: VllmStepCost, source: str
) -> tuple[list[Outcome], int]:
    """Every configuration's outcome on one plan, and the simulations run for them."""
    ample = {
        bs: vllm_inputs(plan, bs).never_evicting_blocks() for bs in {c.block_size for c in cands}
    }
    runs: dict[tuple[Any, ...], Outcome] = {}
    out = []
    for cand in cands:
        key = run_key(cand, plan.n, ample[cand.block_size])
        if key not in runs:
            chosen = stand_in(cand, plan.n, ample[cand.block_size])
            runs[key] = outcome(simulate_vllm(plan, chosen, step_cost, source=source))
        out.append(runs[key])
    return out, len(runs)


def evaluate(
    cands: Sequence[VllmConfiguration],
    plans: Sequence[tuple[PlanKey, Plan]],
    step_cost: VllmStepCost,
) -> tuple[pd.DataFrame, int]:
    """Outcome of every configuration on every plan as a long frame (one row per
    (configuration, plan), in (candidate, inputs, n, plan) order) and the number of
    simulations run (the rest were exact re-uses). Its memory is estimated first
    (``rearrival.search.space.Footprint``) and refused over the bound; on a terminal a
    bar counts the plans."""
    widest = max((c.batch_size for c in cands), default=1)
    plan_footprint(len(cands), widest, [p for _, p in plans], 0).check()
    rows: list[dict[str, Any]] = []
    simulations = 0
    what = f"simulating {len(cands):,} vLLM configurations"
    for key, plan in progress(plans, len(plans), what, "plan"):
        outcomes, runs = score_plan(plan, cands, step_cost, f"{key.inputs}/{key.name}")
        simulations += runs
        bounds = {bs: prefix_bound(plan, bs) for bs in {c.block_size for c in cands}}
        sha = plan.sha256()
        re_arrivals = plan.requests - len(plan.sessions)
        for cand, result in zip(cands, outcomes, strict=True):
            bound = bounds[cand.block_size]
            rows.append(
                {
                    "candidate": cand.id,
                    "inputs": key.inputs,
                    "plan": key.name,
                    "n": plan.n,
                    "plan_sha256": sha,
                    **result._asdict(),
                    "prompt_tokens": bound.prompt_tokens,
                    "cacheable_tokens": bound.cacheable_tokens,
                    "re_arrivals": re_arrivals,
                }
            )
    frame = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    frame = frame.sort_values(["candidate", "inputs", "n", "plan"], kind="stable")
    return frame.reset_index(drop=True), simulations
