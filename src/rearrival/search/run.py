"""Configuration search over the compile-time candidates (docs/DESIGN.md §12, paper Section V-A).

The search predicts, with the base simulator (deferred release, no dummy-block rule), the
device time D of every candidate configuration on fixed input plans and ranks candidates by
``sum of candidate D / sum of baseline D`` over the search inputs (seconds summed first,
so N with larger cost weigh more). The pick is then scored on seed-separated evaluation
inputs that never influence selection, and the same ranking is repeated on restricted N
sets and with the mean of per-N ratios (Supplementary S8) to show how much the pick
depends on those choices.

This module runs the whole search in one process; ``rearrival search plans | shard |
merge`` split the same work into jobs (``inputs``, ``evaluate``, ``merge``, ``outputs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rearrival.config.search import SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.plans.plan import Plan
from rearrival.search.candidates import (
    baseline_of,
    search_candidates,
    settings_space,
)
from rearrival.search.caveats import ranking_caveats
from rearrival.search.evaluate import array_totals, per_n_device_s, pool_workers, score_plans
from rearrival.search.inputs import PlanKey, make_plans, write_plans
from rearrival.search.rank import ranking, set_scores
from rearrival.search.settings import override_settings
from rearrival.search.space import planned_footprint

if TYPE_CHECKING:  # the outputs (pyarrow) are imported by the search that writes them
    from rearrival.search.outputs import OutputPaths


def run_search(
    cfg: StudyConfig,
    paths: OutputPaths,
    plans_out: Path,
    workers: int = 2,
    profile: Profile | None = None,
    overrides: Mapping[str, Any] | None = None,
    study: str | None = None,
) -> dict[str, Any]:
    """The whole search in one process (plans, every candidate, merge): the input plans
    under ``plans_out`` and the same three files the sharded path writes, byte for byte.
    With ``study``, that study's own search over its workload."""
    from rearrival.search.outputs import write_ranked

    base = (
        SearchSettings.from_config(cfg) if study is None else SearchSettings.for_study(cfg, study)
    )
    settings = override_settings(base, **(overrides or {}))
    baseline = baseline_of(cfg, study)
    check_planned(settings, baseline, workers, profile)
    cands = search_candidates(settings, profile)
    evaluated = cands if baseline in cands else [*cands, baseline]
    plans = make_plans(cfg, settings)
    write_plans(plans, plans_out)
    outcomes, _ = score_plans(evaluated, plans, workers, profile)
    totals = array_totals(evaluated, plans, outcomes)
    return write_ranked(totals, cands, baseline, settings, paths, profile)


def check_planned(
    settings: SearchSettings, baseline: RblnConfiguration, workers: int, profile: Profile | None
) -> None:
    """Refuse a search whose space or estimated memory is over its bound before a
    candidate is enumerated or a plan drawn (``rearrival.search.space``); ``evaluate``
    checks again on the drawn plans."""
    space = settings_space(settings, profile or measured_profile())
    space.check_bound()
    widest = max((*space.searched_batch_sizes, baseline.batch_size))
    footprint = planned_footprint(space.searched + 1, widest, settings, 0)
    pooled = pool_workers(workers, footprint.plans, footprint.pairs)
    replace(footprint, workers=pooled).check()


class Pick(NamedTuple):
    """The search's pick, its score and what the ranking cannot tell (``caveats``)."""

    candidate: RblnConfiguration
    score: float
    caveats: list[dict[str, str]]


def select(
    cfg: StudyConfig,
    workers: int = 2,
    profile: Profile | None = None,
    settings: SearchSettings | None = None,
    plans: Sequence[tuple[PlanKey, Plan]] | None = None,
) -> Pick:
    """The search's pick and its score, from the search inputs alone (no files written);
    ``settings`` replaces the config's (e.g. another N set), ``plans`` the generated
    search inputs (plans a user brought, at the settings' N set). With no evaluation
    inputs to measure the noise, only exact ties are caveats."""
    settings = settings or SearchSettings.from_config(cfg)
    baseline = baseline_of(cfg)
    if plans is None:
        check_planned(settings, baseline, workers, profile)
    cands = search_candidates(settings, profile)
    evaluated = cands if baseline in cands else [*cands, baseline]
    if plans is None:
        plans = [(k, p) for k, p in make_plans(cfg, settings) if k.inputs == "search"]
    outcomes, _ = score_plans(evaluated, plans, workers, profile)
    totals = per_n_device_s(evaluated, plans, outcomes)
    scores = set_scores({c.id: totals[c.id] for c in cands}, totals[baseline.id], settings.n)
    order = ranking(scores, {c.id: c.tiebreak() for c in cands})
    caveats = ranking_caveats([scores[cid] for cid in order])
    return Pick(RblnConfiguration.from_id(order[0]), scores[order[0]], caveats)
