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

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rearrival.config.search import SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile
from rearrival.search.candidates import baseline_of, search_candidates
from rearrival.search.evaluate import evaluate
from rearrival.search.inputs import make_plans, write_plans
from rearrival.search.outputs import OutputPaths, write_outputs
from rearrival.search.rank import per_n_totals, ranking, set_scores
from rearrival.search.settings import override_settings


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
    base = (
        SearchSettings.from_config(cfg) if study is None else SearchSettings.for_study(cfg, study)
    )
    settings = override_settings(base, **(overrides or {}))
    cands = search_candidates(settings, profile)
    plans = make_plans(cfg, settings)
    write_plans(plans, plans_out)
    baseline = baseline_of(cfg, study)
    evaluated = cands if baseline in cands else [*cands, baseline]
    results, _ = evaluate(evaluated, plans, workers, profile)
    return write_outputs(results, cands, baseline, settings, paths, profile)


def select(
    cfg: StudyConfig,
    workers: int = 2,
    profile: Profile | None = None,
    settings: SearchSettings | None = None,
) -> tuple[RblnConfiguration, float]:
    """The search's pick and its score, from the search inputs alone (no files written);
    ``settings`` replaces the config's (e.g. another N set)."""
    settings = settings or SearchSettings.from_config(cfg)
    plans = [(k, p) for k, p in make_plans(cfg, settings) if k.inputs == "search"]
    cands = search_candidates(settings, profile)
    baseline = baseline_of(cfg)
    results, _ = evaluate(
        cands if baseline in cands else [*cands, baseline], plans, workers, profile
    )
    totals = per_n_totals(results)
    scores = set_scores({c.id: totals[c.id] for c in cands}, totals[baseline.id], settings.n)
    best = ranking(scores, {c.id: c.tiebreak() for c in cands})[0]
    return RblnConfiguration.from_id(best), scores[best]
