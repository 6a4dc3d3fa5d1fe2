"""The vLLM search in one process (docs/DESIGN.md §15 "Search and advice"): the inputs
(generated as for the RBLN search, or a plans directory), the space on them, every
configuration scored exactly, and the three files of the RBLN search.

The baseline every score divides by is vLLM as it starts by default on the profile's
device (``defaults.baseline_configuration``) with the pool all memory holds, or the
configuration a user runs today (``--baseline ID``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.limits import MAX_KV_BLOCKS
from rearrival.model.configuration import ConfigurationError, VllmConfiguration
from rearrival.model.cost.vllm_profile import VllmProfile
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.vllm.inputs import vllm_inputs
from rearrival.model.simulator.vllm.sim import simulate_vllm
from rearrival.parquet import write_frame
from rearrival.search.caveats import no_overlap, spans_overlap
from rearrival.search.inputs import PlanKey, make_plans, write_plans
from rearrival.search.outputs import OutputPaths, write_selection
from rearrival.search.plan_dir import dir_inputs, dir_summary
from rearrival.search.settings import override_settings
from rearrival.search.vllm.defaults import (
    BLOCK_SIZE,
    GPU_BATCH_NOTE,
    baseline_configuration,
)
from rearrival.search.vllm.evaluate import evaluate
from rearrival.search.vllm.outputs import score_table, summarize
from rearrival.search.vllm.space import VllmAxes, VllmSpace, block_budget, build_space


class Inputs(NamedTuple):
    """The keyed plans, whether the evaluation inputs are held out, the settings (N set,
    restricted sets, top) and the summary's ``inputs`` entry."""

    plans: list[tuple[PlanKey, Plan]]
    held_out: bool
    settings: SearchSettings
    summary: dict[str, Any]

    def of(self, inputs: str) -> list[Plan]:
        return [plan for key, plan in self.plans if key.inputs == inputs]


def generated_inputs(cfg: StudyConfig, settings: SearchSettings, plans_out: Path | None) -> Inputs:
    """The search and evaluation plans the RBLN search would draw (written to
    ``plans_out`` when given)."""
    plans = make_plans(cfg, settings)
    if plans_out is not None:
        write_plans(plans, plans_out)
    summary = {
        "n": list(settings.n),
        "seeds": settings.seeds,
        "blocks": settings.blocks,
        "search_plans": sum(k.inputs == "search" for k, _ in plans),
        "evaluation_plans": sum(k.inputs == "evaluation" for k, _ in plans),
        **({"workload": settings.workload.as_dict()} if settings.workload else {}),
    }
    return Inputs(plans, True, settings, summary)


def directory_inputs(
    plans_dir: Path, settings: SearchSettings, overrides: Mapping[str, Any] | None
) -> Inputs:
    """A plans directory's inputs at their own N set (``rearrival.search.plan_dir``)."""
    keyed, held_out, n_set = dir_inputs(plans_dir, overrides)
    settings = override_settings(settings, n=n_set)
    return Inputs(keyed, held_out, settings, dir_summary(plans_dir, keyed, held_out, n_set))


def resolve_baseline(
    profile: VllmProfile, space: VllmSpace, plans: Sequence[Plan], given: str | None
) -> tuple[VllmConfiguration, str]:
    """The configuration every score divides by and why (module docstring); refused when
    its pool cannot hold the longest request of the inputs."""
    if given is not None:
        try:
            chosen = VllmConfiguration.from_id(given, name="baseline")
        except ConfigurationError as exc:
            raise SearchError(f"option --baseline: {exc}") from None
        why = f"--baseline {given}"
    else:
        block_size = BLOCK_SIZE[profile.device]
        budget = block_budget(profile, block_size)
        if budget is not None:
            blocks = budget.max_slots()
            pool = f"the pool all memory holds ({blocks:,} blocks of {block_size})"
        else:
            tokens = max(c.num_blocks * c.block_size for c in space.candidates)
            blocks = -(-tokens // block_size)
            pool = f"a pool as large as the largest searched ({blocks:,} blocks of {block_size})"
        chosen = baseline_configuration(profile, blocks)
        if chosen.num_blocks < blocks:
            ample = max(vllm_inputs(p, block_size).never_evicting_blocks() for p in plans)
            same = ", which never evicts on these inputs either" if ample <= MAX_KV_BLOCKS else ""
            pool += f", simulated at the bound of {MAX_KV_BLOCKS:,} blocks (rearrival.limits){same}"
        device = "the CPU build" if profile.device == "cpu" else f"a GPU ({GPU_BATCH_NOTE})"
        why = f"vLLM 0.32.0's defaults on {device}, with {pool}"
    need = 1 + max(vllm_inputs(p, chosen.block_size).blocks_needed() for p in plans)
    if chosen.num_blocks < need:
        raise SearchError(
            f"baseline {chosen.id} ({why}): its pool cannot hold the longest request of the "
            f"inputs ({need:,} blocks needed); give a larger pool with --baseline"
        )
    return chosen, why


def overlap_caveats(
    plans: Sequence[Plan], baseline: VllmConfiguration, profile: VllmProfile
) -> list[dict[str, str]]:
    """``no_overlap`` when no two sessions of any plan are ever in the system at once
    under the baseline (``rearrival.search.caveats``)."""
    for plan in plans:
        spans: dict[int, list[float]] = {}
        for r in simulate_vllm(plan, baseline, profile.step_cost).requests:
            span = spans.setdefault(r.session, [r.arrival_s, r.finish_s])
            span[0], span[1] = min(span[0], r.arrival_s), max(span[1], r.finish_s)
        if spans_overlap(spans.values()):
            return []
    return no_overlap(len(plans))


class Scored(NamedTuple):
    """Every configuration of the space scored on the inputs."""

    space: VllmSpace
    baseline: tuple[VllmConfiguration, str]  # the configuration and why it is the baseline
    table: pd.DataFrame  # ranked, one row per configuration (``outputs.score_table``)
    comparison: dict[str, Any]
    results: pd.DataFrame  # one row per (configuration, plan)
    simulations: int


def score_inputs(
    inputs: Inputs, axes: VllmAxes, profile: VllmProfile, baseline: str | None = None
) -> Scored:
    """The space on these inputs, the baseline, and every configuration scored exactly."""
    every = [plan for _, plan in inputs.plans]
    space = build_space(axes, profile, every, inputs.of("search"))
    base = resolve_baseline(profile, space, every, baseline)
    cands = list(space.candidates)
    evaluated = cands if base[0] in cands else [*cands, base[0]]
    results, simulations = evaluate(evaluated, inputs.plans, profile.step_cost)
    table, comparison = score_table(results, cands, base[0], inputs.settings, profile)
    return Scored(space, base, table, comparison, results, simulations)


def search_vllm(
    inputs: Inputs,
    axes: VllmAxes,
    profile: VllmProfile,
    paths: OutputPaths,
    baseline: str | None = None,
) -> dict[str, Any]:
    """Score every configuration of the space on the inputs; writes the three ``paths``
    (each atomically) and returns the summary."""
    scored = score_inputs(inputs, axes, profile, baseline)
    selected, summary = summarize(
        scored.table,
        scored.comparison,
        inputs.settings,
        scored.space,
        scored.baseline,
        profile,
        {**inputs.summary, "simulations": scored.simulations},
        inputs.held_out,
    )
    if summary["caveats"]:
        summary["caveats"] += overlap_caveats(inputs.of("search"), scored.baseline[0], profile)
    write_frame(scored.table, paths.scores)
    write_selection(selected, summary, paths)
    return summary
