"""What the search writes (paper V-A): the ranked scores table, ``selected.json`` (what
later studies compile) and ``summary.json``, each at a path the caller names.

The table is plain rows (``rank.ranked_rows``) written by pyarrow, so a search in one
process (``search.run``, ``search.plan_dir``) ranks from the simulator's arrays without
building the long results frame (one row per candidate and plan); the merge of shards
sums its frames (``rank.frame_totals``) and writes the same bytes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rearrival.atomic import atomic_write_json
from rearrival.config.search import SearchSettings
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.memory import device_memory
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.parquet import write_rows
from rearrival.search.candidates import (
    candidate_record,
    resource_costs,
    settings_space,
)
from rearrival.search.caveats import tie_caveats
from rearrival.search.rank import Totals, frame_totals, n_label, ranked_rows

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class OutputPaths:
    """The three files a finished search writes, each named by the caller so a workflow
    can declare exactly what the command touches (the CLI defaults them under ``--out``)."""

    scores: Path
    selected: Path
    summary: Path

    @classmethod
    def under(cls, out_dir: Path) -> OutputPaths:
        """The default names: DIR/scores.parquet, DIR/selected.json, DIR/summary.json."""
        return cls(out_dir / "scores.parquet", out_dir / "selected.json", out_dir / "summary.json")


def summarize(
    rows: Sequence[dict[str, Any]],
    comparison: dict[str, Any],
    settings: SearchSettings,
    profile: Profile | None = None,
    held_out: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``selected.json`` (what later studies compile) and ``summary.json`` (paper V-A),
    with what the ranking cannot tell (``rearrival.search.caveats``; ``held_out``: the
    evaluation inputs are not the search inputs again)."""
    profile = profile or measured_profile()
    best = rows[0]
    pick = RblnConfiguration.from_id(best["id"])
    selected = {
        **candidate_record(pick),
        "search_score": best["score"],
        "evaluation_score": best["evaluation_score"],
        "mean_ratio_score": best["mean_ratio_score"],
        **{f"ratio_n{n}": best[f"ratio_n{n}"] for n in settings.n},
        **resource_costs(pick, profile),
        "n_buckets": pick.n_buckets,
        "search_n": list(settings.n),
        "profile": profile.identity(),
    }
    space = settings_space(settings, profile)
    memory = device_memory(profile)
    top = rows[: settings.top]
    full = comparison[n_label(settings.n)]
    summary = {
        "profile": profile.identity(),
        "candidates": {
            "max_buckets": settings.max_buckets,
            "max_buckets_note": "counts every bucket including 1 and batch_size; the "
            "authors' script counted intermediates + 1, so their "
            "--max-buckets 5 is this 6",
            "enumerated": space.enumerated,
            "excluded_by_compile_budget": space.excluded_by_compile_budget,
            "compile_budget_s": profile.compile_budget_s,
            "excluded_by_memory": space.excluded_by_memory,
            "memory_filter": settings.memory_filter,
            "memory_gib_per_device": memory.per_device_gib,
            "max_slots_in_memory": memory.max_slots(),
            "searched": len(rows),
            "per_batch_size": {
                str(b): count
                for b, count in zip(space.batch_sizes, space.per_batch_size, strict=True)
            },
        },
        "inputs": {
            "n": list(settings.n),
            "seeds": settings.seeds,
            "blocks": settings.blocks,
            "search_plans": len(settings.n) * settings.seeds * settings.blocks,
            "evaluation_plans": len(settings.n) * settings.seeds * settings.blocks,
            **({"workload": settings.workload.as_dict()} if settings.workload else {}),
        },
        "selected": selected,
        "caveats": tie_caveats(rows, held_out),
        "evaluation_score": best["evaluation_score"],
        "top": [
            {"id": r["id"], "score": r["score"], "evaluation_score": r["evaluation_score"]}
            for r in top
        ],
        "top_batch_sizes": sorted({int(r["batch_size"]) for r in top}),
        "top_score_spread_pp": 100
        * (max(float(r["score"]) for r in top) - min(float(r["score"]) for r in top)),
        "mean_ratio_selected": full["mean_ratio_selected"],
        "mean_ratio_changes_selection": full["mean_ratio_changes_selection"],
        "restricted": {
            label: part for label, part in comparison.items() if label != n_label(settings.n)
        },
    }
    return selected, summary


def write_outputs(
    results: pd.DataFrame,
    cands: Sequence[RblnConfiguration],
    baseline: RblnConfiguration,
    settings: SearchSettings,
    paths: OutputPaths,
    profile: Profile | None = None,
) -> dict[str, Any]:
    """The merge of shards: check the results frame is complete, rank it and write the
    three files; returns the summary."""
    from rearrival.search.merge import check_complete

    check_complete(results, cands, baseline, settings)
    return write_ranked(frame_totals(results), cands, baseline, settings, paths, profile)


def write_ranked(
    totals: Totals,
    cands: Sequence[RblnConfiguration],
    baseline: RblnConfiguration,
    settings: SearchSettings,
    paths: OutputPaths,
    profile: Profile | None = None,
) -> dict[str, Any]:
    """Rank the candidates on their summed outcomes and write the three files; returns
    the summary."""
    rows, comparison = ranked_rows(totals, cands, baseline, settings, profile)
    selected, summary = summarize(rows, comparison, settings, profile)
    write_ranking(rows, selected, summary, paths)
    return summary


def write_ranking(
    rows: Sequence[dict[str, Any]],
    selected: dict[str, Any],
    summary: dict[str, Any],
    paths: OutputPaths,
) -> None:
    """The scores table, ``selected.json`` and ``summary.json``, each written atomically."""
    write_rows(rows, paths.scores)
    write_selection(selected, summary, paths)


def write_selection(selected: dict[str, Any], summary: dict[str, Any], paths: OutputPaths) -> None:
    """``selected.json`` and ``summary.json`` beside a scores table already written (a
    vLLM search writes its table as a frame)."""
    atomic_write_json(paths.selected, selected)
    atomic_write_json(paths.summary, summary)
