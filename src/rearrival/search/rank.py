"""Scores and ranking of the search (paper V-A, Supplementary S8): summed-seconds ratios
to the baseline, the mean of per-N ratios, restricted N sets, and the ranked table.

Every sum is ``math.fsum`` (exactly rounded, so independent of order), so the ranking's
bytes do not depend on how the rows were sharded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rearrival.config.search import SearchSettings
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile, measured_profile
from rearrival.search.candidates import resource_costs
from rearrival.search.evaluate import SUMMED_COLUMNS, sort_results
from rearrival.search.inputs import INPUT_SETS

if TYPE_CHECKING:  # pandas is imported where a table is built: the advice ranks without one
    import pandas as pd


def n_label(n_set: Iterable[int]) -> str:
    return ",".join(map(str, sorted(n_set)))


def set_scores(
    totals: Mapping[str, Mapping[int, float]], baseline: Mapping[int, float], n_set: Iterable[int]
) -> dict[str, float]:
    """Sum of candidate D over the N set / same sum for the baseline (paper V-A)."""
    ns = sorted(n_set)
    denominator = math.fsum(baseline[n] for n in ns)
    return {cid: math.fsum(t[n] for n in ns) / denominator for cid, t in totals.items()}


def mean_ratio_scores(
    totals: Mapping[str, Mapping[int, float]], baseline: Mapping[int, float], n_set: Iterable[int]
) -> dict[str, float]:
    """Mean over N of per-N ratios: the alternative score of Supplementary S8."""
    ns = sorted(n_set)
    return {cid: math.fsum(t[n] / baseline[n] for n in ns) / len(ns) for cid, t in totals.items()}


def ranking(scores: Mapping[str, float], tiebreak: Mapping[str, tuple[Any, ...]]) -> list[str]:
    """RblnConfiguration ids best first: lower score, then ``RblnConfiguration.tiebreak``."""
    return sorted(scores, key=lambda cid: (scores[cid], tiebreak[cid]))


def compare_n_sets(
    totals: Mapping[str, Mapping[int, float]],
    baseline: Mapping[int, float],
    tiebreak: Mapping[str, tuple[Any, ...]],
    full_n: Sequence[int],
    restricted: Sequence[Sequence[int]],
    top: int,
) -> dict[str, Any]:
    """Selection on the full N set and each restricted set, by summed-seconds score and by
    the mean of per-N ratios (paper V-A: the pick depended on N; S8: the score did not)."""
    full_order = ranking(set_scores(totals, baseline, full_n), tiebreak)
    full_top = full_order[:top]
    report: dict[str, Any] = {}
    for n_set in [list(full_n), *map(list, restricted)]:
        scores = set_scores(totals, baseline, n_set)
        order = ranking(scores, tiebreak)
        mean_order = ranking(mean_ratio_scores(totals, baseline, n_set), tiebreak)
        shared = [cid for cid in order[:top] if cid in set(full_top)]
        report[n_label(n_set)] = {
            "n": sorted(n_set),
            "selected": order[0],
            "selected_score": scores[order[0]],
            "top": [{"id": cid, "score": scores[cid]} for cid in order[:top]],
            "top_overlap_with_full": len(shared),
            "shared_with_full_top": shared,
            "full_pick_rank": order.index(full_order[0]) + 1,
            "mean_ratio_selected": mean_order[0],
            "mean_ratio_changes_selection": mean_order[0] != order[0],
        }
    return report


def _group_totals(
    frame: pd.DataFrame, mask: Any, columns: Sequence[str]
) -> dict[str, dict[str, dict[int, float]]]:
    """Per column, per candidate, per N: exactly rounded sum over the rows in ``mask``.

    ``frame`` is in ``sort_results`` order, so the rows of one (candidate, n) are one
    contiguous run and runs come in (candidate, n) order; the run boundaries are found
    once for all columns, on integer codes (string columns are slow to walk row by row).
    """
    import pandas as pd

    codes, names = pd.factorize(frame["candidate"])
    codes, ns = codes[mask], frame["n"].to_numpy()[mask]
    change = np.ones(len(codes), dtype=bool)
    change[1:] = (codes[1:] != codes[:-1]) | (ns[1:] != ns[:-1])
    starts = np.flatnonzero(change).tolist()
    bounds = list(zip(starts, [*starts[1:], len(codes)], strict=True))
    names = [str(name) for name in names]
    labels = [
        (names[code], n)
        for code, n in zip(codes[starts].tolist(), ns[starts].tolist(), strict=True)
    ]
    out: dict[str, dict[str, dict[int, float]]] = {}
    for column in columns:
        values = frame[column].to_numpy()[mask].tolist()
        totals: dict[str, dict[int, float]] = {}
        for (cid, n), (start, stop) in zip(labels, bounds, strict=True):
            totals.setdefault(cid, {})[n] = math.fsum(values[start:stop])
        out[column] = totals
    return out


def per_n_totals(frame: pd.DataFrame, column: str = "device_s") -> dict[str, dict[int, float]]:
    """Per candidate, per N: exactly rounded sum of ``column`` over that N's plans."""
    if len(frame) == 0:
        return {}
    frame = sort_results(frame) if not _is_sorted(frame) else frame
    return _group_totals(frame, np.ones(len(frame), dtype=bool), [column])[column]


def _is_sorted(frame: pd.DataFrame) -> bool:
    """True when the rows are in ``sort_results`` order (as evaluate and merge leave them)."""
    import pandas as pd

    keys = frame[["candidate", "inputs", "n", "plan"]]
    return pd.MultiIndex.from_frame(keys).is_monotonic_increasing


def _sum(totals: Mapping[int, float]) -> float:
    return math.fsum(totals[n] for n in sorted(totals))


# per inputs ("search", "evaluation"), per summed column, per candidate id, per N: the
# exactly rounded sum over that N's plans (``frame_totals`` on a results frame,
# ``evaluate.array_totals`` on score_plans' arrays: the same numbers, math.fsum being exact)
Totals = dict[str, dict[str, dict[str, dict[int, float]]]]
SUMMED = tuple(SUMMED_COLUMNS)


def frame_totals(results: pd.DataFrame) -> Totals:
    """``Totals`` of a long results frame (the sharded search merges one)."""
    if not _is_sorted(results):
        results = sort_results(results)
    return {
        inputs: _group_totals(results, (results["inputs"] == inputs).to_numpy(dtype=bool), SUMMED)
        for inputs in INPUT_SETS
    }


def score_table(
    results: pd.DataFrame,
    cands: Sequence[RblnConfiguration],
    baseline: RblnConfiguration,
    settings: SearchSettings,
    profile: Profile | None = None,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``ranked_rows`` of a results frame, as a frame (one row per candidate, ranked)."""
    import pandas as pd

    rows, comparison = ranked_rows(frame_totals(results), cands, baseline, settings, profile)
    return pd.DataFrame(rows), comparison


def ranked_rows(
    per_inputs: Totals,
    cands: Sequence[RblnConfiguration],
    baseline: RblnConfiguration,
    settings: SearchSettings,
    profile: Profile | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One row per candidate, best first (the scores table), plus the N-set comparison
    used by the summary; plain Python values, which ``parquet.write_rows`` writes as they
    are (no frame)."""
    profile = profile or measured_profile()
    device = {inputs: per_inputs[inputs]["device_s"] for inputs in INPUT_SETS}
    parts = {col: {inputs: per_inputs[inputs][col] for inputs in INPUT_SETS} for col in SUMMED[1:]}
    base = {inputs: device[inputs][baseline.id] for inputs in INPUT_SETS}
    ids = [c.id for c in cands]
    tiebreak = {c.id: c.tiebreak() for c in cands}
    search_totals = {cid: device["search"][cid] for cid in ids}
    comparison = compare_n_sets(
        search_totals, base["search"], tiebreak, settings.n, settings.restricted_n, settings.top
    )
    columns: dict[str, dict[str, float]] = {
        "score": set_scores(search_totals, base["search"], settings.n),
        "mean_ratio_score": mean_ratio_scores(search_totals, base["search"], settings.n),
        "evaluation_score": set_scores(
            {cid: device["evaluation"][cid] for cid in ids}, base["evaluation"], settings.n
        ),
    }
    for n in settings.n:
        columns[f"ratio_n{n}"] = set_scores(search_totals, base["search"], [n])
    rank_of = {"rank": "score", "mean_ratio_rank": "mean_ratio_score"}
    for n_set in settings.restricted_n:
        suffix = "_".join(map(str, n_set))
        columns[f"score_n{suffix}"] = set_scores(search_totals, base["search"], n_set)
        rank_of[f"rank_n{suffix}"] = f"score_n{suffix}"
    ranks = {
        name: {cid: i + 1 for i, cid in enumerate(ranking(columns[score], tiebreak))}
        for name, score in rank_of.items()
    }
    rows = []
    for cand in cands:
        cid = cand.id
        row: dict[str, Any] = {
            "id": cid,
            "batch_size": cand.batch_size,
            "slots": cand.slots,
            "buckets": ",".join(map(str, cand.buckets)),
            "n_buckets": cand.n_buckets,
        }
        row.update({name: values[cid] for name, values in columns.items()})
        row.update({name: values[cid] for name, values in ranks.items()})
        for inputs in INPUT_SETS:
            row[f"{inputs}_decode_ratio"] = _sum(parts["decode_s"][inputs][cid]) / _sum(
                parts["decode_s"][inputs][baseline.id]
            )
            row[f"{inputs}_prefill_ratio"] = _sum(parts["prefill_s"][inputs][cid]) / _sum(
                parts["prefill_s"][inputs][baseline.id]
            )
            row[f"{inputs}_reuse_hits"] = int(_sum(parts["reuse_hits"][inputs][cid]))
            row[f"{inputs}_re_arrivals"] = int(_sum(parts["re_arrivals"][inputs][cid]))
        row.update(resource_costs(cand, profile))
        rows.append(row)
    return sorted(rows, key=lambda r: r["rank"]), comparison
