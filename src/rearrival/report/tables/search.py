"""The search's table (docs/DESIGN.md §13; paper supplementary S8): the configuration the
preregistered score selects against the mean-of-ratios score, on the full and the
restricted N sets, then the top candidates of the full search. Simulator predictions
only, read from results/search/.
"""

from __future__ import annotations

from rearrival.report.results import Results
from rearrival.report.table_model import Column, Part, Table


def table_s8(res: Results) -> Table:
    notes: list[str] = []
    summary = res.search_summary()
    scores = res.search_scores()
    sets, top = [], []
    source = "results/search/summary.json"
    if summary is None:
        notes.append(
            "Search not produced: results/search/summary.json is absent (run "
            "snakemake results/search/summary.json)."
        )
    else:
        selected = summary.get("selected", {})
        full_label = ",".join(map(str, sorted(summary.get("inputs", {}).get("n", []))))
        entries = {
            full_label: {
                "selected": selected.get("id"),
                "selected_score": selected.get("search_score"),
                "mean_ratio_selected": summary.get("mean_ratio_selected"),
                "mean_ratio_changes_selection": summary.get("mean_ratio_changes_selection"),
                "top_overlap_with_full": None,
                "full_pick_rank": 1,
            }
        }
        entries |= summary.get("restricted", {})
        for label, entry in entries.items():
            sets.append(
                {
                    "n_set": label,
                    "selected": entry.get("selected"),
                    "selected_score": entry.get("selected_score"),
                    "mean_ratio_selected": entry.get("mean_ratio_selected"),
                    "changes": "yes" if entry.get("mean_ratio_changes_selection") else "no",
                    "full_pick_rank": entry.get("full_pick_rank"),
                    "top_overlap": entry.get("top_overlap_with_full"),
                    "source": source,
                    "run_ids": "",
                }
            )
        notes.append(
            f"Evaluation score of the pick on seed-separated inputs: "
            f"{summary.get('evaluation_score', float('nan')):.4f} (simulator "
            f"prediction, not a measurement)."
        )
        cands = summary.get("candidates", {})
        if "excluded_by_memory" in cands:
            notes.append(
                f"Candidates: {cands.get('enumerated')} enumerated, "
                f"{cands.get('excluded_by_compile_budget')} removed by the compile "
                f"budget ({cands.get('compile_budget_s')} s), "
                f"{cands.get('excluded_by_memory')} by device memory (KV slots + "
                f"weights over {cands.get('memory_gib_per_device')} GiB per device; "
                f"at most {cands.get('max_slots_in_memory')} slots fit"
                f"{'' if cands.get('memory_filter') else '; filter off'}), "
                f"{cands.get('searched')} searched."
            )
    if scores is not None:
        count = res.cfg.search.top
        for row in scores.head(count).to_dict("records"):
            top.append(
                {
                    "rank": row["rank"],
                    "id": row["id"],
                    "batch_size": row["batch_size"],
                    "score": row["score"],
                    "mean_ratio_score": row["mean_ratio_score"],
                    "mean_ratio_rank": row.get("mean_ratio_rank"),
                    "evaluation_score": row["evaluation_score"],
                    "source": "results/search/scores.parquet",
                    "run_ids": "",
                }
            )
    return Table(
        "S8",
        "Search score variants",
        "Selection by the preregistered score (candidate seconds summed over the "
        "inputs / baseline seconds) and by the mean of per-N ratios, on the full and "
        "the restricted N sets; then the top candidates of the full search. "
        "Simulator predictions only (base simulator): no run ids.",
        (
            Part(
                "selection by N set and score",
                (
                    Column("n_set", "N set"),
                    Column("selected", "pick (sum of seconds)"),
                    Column("selected_score", "score", "f4"),
                    Column("mean_ratio_selected", "pick (mean of ratios)"),
                    Column("changes", "mean of ratios changes pick"),
                    Column("full_pick_rank", "rank of full-search pick", "int"),
                    Column("top_overlap", "top overlap with full", "int"),
                ),
                tuple(sets),
            ),
            Part(
                "top candidates (full N set)",
                (
                    Column("rank", "rank", "int"),
                    Column("id", "candidate"),
                    Column("batch_size", "batch", "int"),
                    Column("score", "score", "f4"),
                    Column("mean_ratio_score", "mean-of-ratios score", "f4"),
                    Column("mean_ratio_rank", "mean-of-ratios rank", "int"),
                    Column("evaluation_score", "evaluation score", "f4"),
                ),
                tuple(top),
            ),
        ),
        tuple(notes),
        "simulator",
    )
