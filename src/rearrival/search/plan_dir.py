"""The configuration search (paper V-A) over any directory of plans.

``rearrival search --plans DIR`` ranks the same candidates as the generated search, on
plans a user brought: imported from a trace (``rearrival plans from-trace``), written by
``rearrival search plans``, or made by hand, two-round or multi-round. When ``DIR`` has
``search/`` and ``evaluation/`` subdirectories they are the search and the held-out
evaluation inputs, as in the generated search; otherwise every plan under ``DIR`` is a
search input and is scored again as the evaluation input, which the summary marks as
not held out. The N set is the plans' own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rearrival.config.search import SearchError, SearchSettings
from rearrival.config.study import StudyConfig
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.model.plans.plan import Plan
from rearrival.search.candidates import baseline_of, search_candidates
from rearrival.search.caveats import overlap_caveat
from rearrival.search.evaluate import array_totals, score_plans
from rearrival.search.inputs import PlanKey
from rearrival.search.outputs import OutputPaths, summarize, write_ranking
from rearrival.search.plan_files import keyed_plans
from rearrival.search.rank import ranked_rows
from rearrival.search.settings import override_settings


def search_plan_dir(
    cfg: StudyConfig,
    plans_dir: Path,
    paths: OutputPaths,
    workers: int = 2,
    profile: Profile | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score every candidate on the directory's plans; writes the three ``paths`` (each
    atomically) and returns the summary."""
    profile = profile or measured_profile()
    keyed, held_out, n_set = dir_inputs(plans_dir, overrides, profile.slot_tokens)
    changes = {k: v for k, v in (overrides or {}).items() if k != "n"}
    settings = override_settings(SearchSettings.from_config(cfg), **changes, n=n_set)
    cands = search_candidates(settings, profile)
    if not cands:
        raise SearchError(
            "no candidate is left after the compile-budget and memory filters; allow "
            "smaller batch sizes (--batch-sizes) or fewer buckets (--max-buckets)"
        )
    baseline = baseline_of(cfg)
    evaluated = cands if baseline in cands else [*cands, baseline]
    outcomes, _ = score_plans(evaluated, keyed, workers, profile)
    totals = array_totals(evaluated, keyed, outcomes)
    rows, comparison = ranked_rows(totals, cands, baseline, settings, profile)
    selected, summary = summarize(rows, comparison, settings, profile, held_out)
    if summary["caveats"]:
        searched = [plan for key, plan in keyed if key.inputs == "search"]
        summary["caveats"] += overlap_caveat(searched, baseline, profile)
    summary["inputs"] = dir_summary(plans_dir, keyed, held_out, n_set)
    write_ranking(rows, selected, summary, paths)
    return summary


def dir_inputs(
    plans_dir: Path, overrides: Mapping[str, Any] | None, max_seq_len: int | None = None
) -> tuple[list[tuple[PlanKey, Plan]], bool, tuple[int, ...]]:
    """The directory's keyed plans, whether evaluation is held out, and their N set
    (``--n`` must agree with it; search/ and evaluation/ must hold the same N)."""
    keyed, held_out = keyed_plans(plans_dir, max_seq_len)
    n_set = tuple(sorted({key.n for key, _ in keyed}))
    search_n = tuple(sorted({key.n for key, _ in keyed if key.inputs == "search"}))
    if held_out and search_n != n_set:
        raise SearchError(
            f"{plans_dir}: search/ holds N {','.join(map(str, search_n))} but evaluation/ "
            f"holds N {','.join(map(str, n_set))}; give both the same N set"
        )
    asked = (overrides or {}).get("n")
    if asked is not None and tuple(sorted(asked)) != n_set:
        raise SearchError(
            f"option --n {','.join(map(str, asked))}: the plans under {plans_dir} are at N "
            f"{','.join(map(str, n_set))}; omit --n (the plans set it)"
        )
    return keyed, held_out, n_set


def dir_summary(
    plans_dir: Path, keyed: list[tuple[PlanKey, Plan]], held_out: bool, n_set: tuple[int, ...]
) -> dict[str, Any]:
    """The summary's ``inputs`` entry for a search over a plans directory."""
    searched = sum(key.inputs == "search" for key, _ in keyed)
    return {
        "plans_dir": str(plans_dir),
        "n": list(n_set),
        "search_plans": searched,
        "evaluation_plans": len(keyed) - searched,
        "evaluation_held_out": held_out,
        "note": "search/ and evaluation/ subdirectories"
        if held_out
        else "every plan is a search input and is scored again as the evaluation input: "
        "the evaluation score is not held out",
        "multi_round_plans": sum(plan.multi_round for _, plan in keyed),
    }
