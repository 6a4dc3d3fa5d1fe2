"""What a vLLM search writes (docs/DESIGN.md §15 "Search and advice"): the ranked scores
table, ``selected.json`` and ``summary.json`` at the paths the caller names (the RBLN
search's ``OutputPaths``), and the two result lines the command prints.

Scores are the RBLN search's (``rearrival.search.rank``): a configuration's device time
summed over the search inputs over the baseline's, the mean of per-N ratios beside it,
restricted N sets, and the same score on the held-out evaluation inputs. Beside them
each row carries what the pool did: the prefix-cache hit rate (prompt tokens served from
the cache at each request's first admission), its structural upper bound
(``prefix_bound``), the re-arrivals that lost part of their prefix, the prefill tokens
recomputed because the pool evicted, preemptions, and the KV memory with what it leaves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.config.search import SearchSettings
from rearrival.model.configuration import VllmConfiguration
from rearrival.model.cost.profile import GIB
from rearrival.model.cost.vllm_profile import VllmProfile
from rearrival.search.caveats import score_caveats
from rearrival.search.inputs import INPUT_SETS
from rearrival.search.rank import (
    compare_n_sets,
    mean_ratio_scores,
    n_label,
    per_n_totals,
    ranking,
    set_scores,
)
from rearrival.search.vllm.defaults import short_id
from rearrival.search.vllm.space import VllmSpace, block_budget

TIEBREAK = "the smaller pool, then fewer sequences, a smaller token budget, fewer capture sizes"
COUNTED = (
    "cached_tokens",
    "prompt_tokens",
    "cacheable_tokens",
    "recomputed_prefill_tokens",
    "preemptions",
    "re_arrivals_lost",
    "re_arrivals",
)


def memory_entry(cand: VllmConfiguration, profile: VllmProfile) -> dict[str, Any]:
    """The pool's KV memory and, with the profile's memory block, what the devices hold
    with it and what is left on each (``fits_memory`` None: no memory block)."""
    kv_gib = cand.num_blocks * profile.kv_bytes_per_block(cand.block_size) / GIB
    budget = block_budget(profile, cand.block_size)
    entry: dict[str, Any] = {"kv_gib": kv_gib, "fits_memory": None}
    if budget is not None:
        entry.update(
            kv_gib_per_device=kv_gib / budget.num_devices,
            memory_gib_per_device=budget.gib_per_device(cand.num_blocks),
            device_memory_gib=budget.per_device_gib,
            headroom_gib_per_device=budget.headroom_gib_per_device(cand.num_blocks),
            fits_memory=budget.fits(cand.num_blocks),
            blocks_in_memory=budget.max_slots(),
        )
    return entry


def knobs(cand: VllmConfiguration) -> dict[str, Any]:
    """A configuration as a scores row names it: its id and its knobs by vLLM's names."""
    return {
        "id": cand.id,
        "max_num_seqs": cand.batch_size,
        "num_blocks": cand.num_blocks,
        "block_size": cand.block_size,
        "max_num_batched_tokens": cand.max_num_batched_tokens,
        "capture_sizes": ",".join(map(str, cand.buckets)) or "none",
        "short_id": short_id(cand),
    }


def pool_totals(frame: pd.DataFrame) -> dict[str, dict[str, int]]:
    """Per configuration, the counted columns summed over ``frame``'s plans."""
    grouped = frame.groupby("candidate")[list(COUNTED)].sum()
    return {cid: {k: int(v) for k, v in row.items()} for cid, row in grouped.iterrows()}


def pool_columns(totals: dict[str, int], prefix: str) -> dict[str, Any]:
    """Hit rate, its upper bound and the losses, under ``prefix`` (search_, evaluation_)."""
    prompt = totals["prompt_tokens"]
    return {
        f"{prefix}hit_rate": totals["cached_tokens"] / prompt if prompt else 0.0,
        f"{prefix}upper_bound": totals["cacheable_tokens"] / prompt if prompt else 0.0,
        f"{prefix}re_arrivals_lost": totals["re_arrivals_lost"],
        f"{prefix}re_arrivals": totals["re_arrivals"],
        f"{prefix}recomputed_prefill_tokens": totals["recomputed_prefill_tokens"],
        f"{prefix}preemptions": totals["preemptions"],
    }


def capture_caveats(cands: Sequence[VllmConfiguration]) -> list[dict[str, str]]:
    """``eager_unpriced``: eager and CUDA-graph configurations searched side by side. The
    step cost prices a decode token alike whether its batch ran in a graph or eagerly
    (docs/DESIGN.md §15 rule 7), so here graphs only add padding and eager never loses;
    what graphs save per step is not in the model."""
    if not any(c.buckets for c in cands) or all(c.buckets for c in cands):
        return []
    return [
        {
            "code": "eager_unpriced",
            "message": "the search compares eager (capture sizes none) with CUDA-graph "
            "configurations, but the step cost prices a decode token the same either way, "
            "so graphs only add padding here and eager never loses; compare capture-size "
            "sets with each other, or calibrate eager and graphs separately",
        }
    ]


def score_table(
    results: pd.DataFrame,
    cands: Sequence[VllmConfiguration],
    baseline: VllmConfiguration,
    settings: SearchSettings,
    profile: VllmProfile,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """One row per configuration, ranked, and the N-set comparison of the summary."""
    device = {x: per_n_totals(results[results["inputs"] == x]) for x in INPUT_SETS}
    counted = {x: pool_totals(results[results["inputs"] == x]) for x in INPUT_SETS}
    ids = [c.id for c in cands]
    tiebreak = {c.id: c.tiebreak() for c in cands}
    searched = {cid: device["search"][cid] for cid in ids}
    base = {x: device[x][baseline.id] for x in INPUT_SETS}
    comparison = compare_n_sets(
        searched, base["search"], tiebreak, settings.n, settings.restricted_n, settings.top
    )
    columns = {
        "score": set_scores(searched, base["search"], settings.n),
        "mean_ratio_score": mean_ratio_scores(searched, base["search"], settings.n),
        "evaluation_score": set_scores(
            {cid: device["evaluation"][cid] for cid in ids}, base["evaluation"], settings.n
        ),
    }
    for n in settings.n:
        columns[f"ratio_n{n}"] = set_scores(searched, base["search"], [n])
    ranks = {
        name: {cid: i + 1 for i, cid in enumerate(ranking(columns[score], tiebreak))}
        for name, score in (("rank", "score"), ("mean_ratio_rank", "mean_ratio_score"))
    }
    rows = []
    for cand in cands:
        row = knobs(cand)
        row.update({name: values[cand.id] for name, values in columns.items()})
        row.update({name: values[cand.id] for name, values in ranks.items()})
        for inputs in INPUT_SETS:
            per_n = device[inputs][cand.id]
            row[f"{inputs}_device_s"] = math.fsum(per_n[n] for n in sorted(per_n))
            row.update(pool_columns(counted[inputs][cand.id], f"{inputs}_"))
        row.update(memory_entry(cand, profile))
        rows.append(row)
    table = pd.DataFrame(rows).sort_values("rank", kind="stable").reset_index(drop=True)
    return table, comparison


def _plain(row: pd.Series) -> dict[str, Any]:
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in row.to_dict().items()}


def summarize(
    table: pd.DataFrame,
    comparison: dict[str, Any],
    settings: SearchSettings,
    space: VllmSpace,
    baseline: tuple[VllmConfiguration, str],
    profile: VllmProfile,
    inputs: dict[str, Any],
    held_out: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``selected.json`` and ``summary.json``; ``baseline`` is the configuration every
    score divides by and why it is that one."""
    best = _plain(table.iloc[0])
    pick = VllmConfiguration.from_id(best["id"])
    selected = {
        "substrate": "vllm",
        "id": pick.id,
        "short_id": short_id(pick),
        **pick.as_dict(),
        "search_score": best["score"],
        "evaluation_score": best["evaluation_score"],
        "mean_ratio_score": best["mean_ratio_score"],
        **{f"ratio_n{n}": best[f"ratio_n{n}"] for n in settings.n},
        **memory_entry(pick, profile),
        "search_n": list(settings.n),
        "profile": profile.identity(),
    }
    full = comparison[n_label(settings.n)]
    summary = {
        "substrate": "vllm",
        "profile": profile.identity(),
        "profile_note": profile.seconds_note(),
        "candidates": space.counts(),
        "inputs": inputs,
        "baseline": {"id": baseline[0].id, **baseline[0].as_dict(), "why": baseline[1]},
        "selected": selected,
        "evaluation_score": best["evaluation_score"],
        "top": [
            {"id": r.id, "score": r.score, "evaluation_score": r.evaluation_score}
            for r in table.head(settings.top).itertuples()
        ],
        "mean_ratio_selected": full["mean_ratio_selected"],
        "mean_ratio_changes_selection": full["mean_ratio_changes_selection"],
        "restricted": {k: v for k, v in comparison.items() if k != n_label(settings.n)},
        "caveats": score_caveats(
            table["score"].tolist(), best["evaluation_score"], held_out, TIEBREAK
        )
        + capture_caveats(space.candidates),
    }
    return selected, summary


def result_lines(out: Path, summary: dict[str, Any]) -> str:
    """What the search did, in two lines (the RBLN search's, for this substrate): how many
    configurations each filter removed (a token budget below max_num_seqs, a pool too
    small for the longest request, device memory), then the pick."""
    counts, selected = summary["candidates"], summary["selected"]
    memory = (
        f"{counts['excluded_by_memory']:,} over memory"
        if counts["memory_filter"]
        else "memory not checked"
    )
    return (
        f"{out}: searched {counts['searched']:,} of {counts['enumerated']:,} vLLM "
        f"configurations ({counts['excluded_by_budget']:,} budget < max_num_seqs, "
        f"{counts['excluded_by_pool_too_small']:,} pool too small, {memory})\n"
        f"selected {selected['short_id']}: search score {selected['search_score']:.4f}, "
        f"evaluation score {selected['evaluation_score']:.4f}"
    )
