"""What the search writes (paper V-A): the ranked scores table, ``selected.json`` (what
later studies compile) and ``summary.json``, each at a path the caller names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.atomic import atomic_write_json
from rearrival.config.search import SearchSettings
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.memory import device_memory
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.parquet import write_frame
from rearrival.search.candidates import (
    candidate_record,
    resource_costs,
    settings_space,
)
from rearrival.search.caveats import tie_caveats
from rearrival.search.merge import check_complete
from rearrival.search.rank import n_label, score_table


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


def _row_dict(table: pd.DataFrame, cid: str) -> dict[str, Any]:
    row = table[table["id"] == cid].iloc[0].to_dict()
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}


def summarize(
    table: pd.DataFrame,
    comparison: dict[str, Any],
    settings: SearchSettings,
    profile: Profile | None = None,
    held_out: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``selected.json`` (what later studies compile) and ``summary.json`` (paper V-A),
    with what the ranking cannot tell (``rearrival.search.caveats``; ``held_out``: the
    evaluation inputs are not the search inputs again)."""
    profile = profile or measured_profile()
    best = _row_dict(table, table.iloc[0]["id"])
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
    top = table.head(settings.top)
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
            "searched": len(table),
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
        "caveats": tie_caveats(table, held_out),
        "evaluation_score": best["evaluation_score"],
        "top": [
            {"id": r.id, "score": r.score, "evaluation_score": r.evaluation_score}
            for r in top.itertuples()
        ],
        "top_batch_sizes": sorted({int(b) for b in top["batch_size"]}),
        "top_score_spread_pp": 100 * (float(top["score"].max()) - float(top["score"].min())),
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
    """Check the results are complete, rank them and write the three files; returns the
    summary."""
    check_complete(results, cands, baseline, settings)
    table, comparison = score_table(results, cands, baseline, settings, profile)
    selected, summary = summarize(table, comparison, settings, profile)
    write_ranking(table, selected, summary, paths)
    return summary


def write_ranking(
    table: pd.DataFrame, selected: dict[str, Any], summary: dict[str, Any], paths: OutputPaths
) -> None:
    """The scores table, ``selected.json`` and ``summary.json``, each written atomically."""
    write_frame(table, paths.scores)
    atomic_write_json(paths.selected, selected)
    atomic_write_json(paths.summary, summary)
