"""Findings on the configuration search (paper Section V-A, Supplementary S8): the pick,
the top candidates, the dependence on the N set and on the score. Judged only when the run
searched the paper's candidate set, since picks from different sets are not comparable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rearrival.report.findings.base import (
    NOT_COMPARABLE,
    Evidence,
    Finding,
    Outcome,
    bind,
    fixed,
    missing,
    verdict,
)
from rearrival.report.paper_numbers import PaperNumber


def _why_not_comparable(ev: Evidence, numbers: dict[str, PaperNumber]) -> str | None:
    """Why this run's search cannot be set beside the paper's, or None when it searched
    the paper's candidate set."""
    if ev.search is None:
        return "this run has no search summary"
    searched = ev.search.get("candidates", {}).get("searched")
    paper = int(numbers["search_candidates"].value)
    if searched != paper:
        return (
            f"this run searched {searched} candidates, the paper {paper:,}; picks "
            "from different candidate sets are not comparable"
        )
    return None


SummaryJudge = Callable[[dict[str, Any], dict[str, PaperNumber]], Outcome]


def _on_paper_candidates(
    judge: SummaryJudge,
) -> Callable[[Evidence, dict[str, PaperNumber]], Outcome]:
    """``judge`` of the search summary, applied only when the run searched the paper's
    candidate set; otherwise "not comparable" with the reason."""

    def judged(ev: Evidence, numbers: dict[str, PaperNumber]) -> Outcome:
        why = _why_not_comparable(ev, numbers)
        return Outcome(NOT_COMPARABLE, "", why) if why else judge(ev.search, numbers)

    return judged


@_on_paper_candidates
def judge_search_pick(summary: dict[str, Any], numbers: dict[str, PaperNumber]) -> Outcome:
    pick = summary["selected"]["id"]
    ours = f"{pick}, evaluation ratio {fixed(summary.get('evaluation_score'))}"
    return verdict(pick == numbers["search_pick"].value, ours, "same pick", "a different pick")


@_on_paper_candidates
def judge_search_top(summary: dict[str, Any], numbers: dict[str, PaperNumber]) -> Outcome:
    size, batch = int(numbers["search_top_size"].value), int(numbers["search_top_batch"].value)
    sizes, spread = summary.get("top_batch_sizes", []), summary.get("top_score_spread_pp")
    top = len(summary.get("top", []))
    ours = f"top-{top} batch sizes {sizes}, spread {fixed(spread, 2)} pp"
    if top != size or spread is None:
        return Outcome(
            NOT_COMPARABLE, ours, f"this run lists the top {top}, the paper the top {size}"
        )
    ok = sizes == [batch] and spread / 100 <= numbers["search_top20_spread"].number
    return verdict(
        ok,
        ours,
        "the same batch size throughout, within the paper's spread",
        "other batch sizes in the top, or a wider spread",
    )


@_on_paper_candidates
def judge_search_n_sets(summary: dict[str, Any], numbers: dict[str, PaperNumber]) -> Outcome:
    restricted = summary.get("restricted", {})
    if "6,8" not in restricted or "8,10" not in restricted:
        return missing("restricted searches on N {6,8} and {8,10}")
    full = summary["selected"]["id"]
    a, b = restricted["6,8"], restricted["8,10"]
    ours = (
        f"{{6,8}} picks {a['selected']} (full pick ranks {a.get('full_pick_rank')}, "
        f"top-20 overlap {a.get('top_overlap_with_full')}); {{8,10}} picks {b['selected']}"
    )
    return verdict(
        a["selected"] != full and b["selected"] == full,
        ours,
        "leaving out N=10 changes the pick, leaving out N=6 does not",
        "the dependence on the N set differs",
    )


@_on_paper_candidates
def judge_mean_ratio(summary: dict[str, Any], numbers: dict[str, PaperNumber]) -> Outcome:
    changes = [bool(summary.get("mean_ratio_changes_selection"))] + [
        bool(p.get("mean_ratio_changes_selection")) for p in summary.get("restricted", {}).values()
    ]
    ours = f"changes the pick in {sum(changes)} of {len(changes)} N sets"
    return verdict(
        not any(changes), ours, "the pick never changes", "the pick changes for some N set"
    )


def findings(numbers: dict[str, PaperNumber]) -> tuple[Finding, ...]:
    """The findings of Section V-A and Supplementary S8."""
    return (
        Finding(
            "search_pick",
            "The search picks the paper's configuration",
            "V-A",
            ("search_candidates", "search_pick", "search_evaluation_score"),
            "same pick over the same candidate set",
            bind(judge_search_pick, numbers),
            search=True,
        ),
        Finding(
            "search_top",
            "The top candidates share one batch size and lie within a fraction of a point",
            "V-A",
            ("search_top_size", "search_top_batch", "search_top20_spread"),
            "every top candidate has the paper's batch size and the score spread is at "
            "most the paper's",
            bind(judge_search_top, numbers),
            search=True,
        ),
        Finding(
            "search_n_sets",
            "The pick depends on the N set: leaving out N=10 changes it, leaving out N=6 does not",
            "V-A, S8",
            (
                "search_restricted_68_pick",
                "search_restricted_68_rank",
                "search_restricted_68_overlap",
                "search_restricted_810_same",
            ),
            "pick({6,8}) != full pick and pick({8,10}) == full pick",
            bind(judge_search_n_sets, numbers),
            search=True,
        ),
        Finding(
            "search_mean_ratio",
            "Scoring by the mean of per-N ratios does not change the pick",
            "V-A, S8",
            ("search_mean_ratio_same",),
            "no N set's pick changes under the mean-of-ratios score",
            bind(judge_mean_ratio, numbers),
            search=True,
        ),
    )
