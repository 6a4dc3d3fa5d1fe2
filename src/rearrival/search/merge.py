"""Merging shard files into one results frame (paper V-A).

Work is split by candidates (``shard``: ``candidates[K::S]``, round robin so every shard
gets a share of every batch size) and merged into one ranking whose bytes do not depend
on the shard count: rows are sorted and every sum is ``math.fsum`` (exactly rounded, so
independent of order).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from rearrival.config.search import SearchError, SearchSettings
from rearrival.model.configuration import RblnConfiguration
from rearrival.search.evaluate import RESULT_COLUMNS, sort_results
from rearrival.search.inputs import plan_keys


def combine_shards(frames: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    """One row per (candidate, plan); rows repeated across shards (the baseline) must agree."""
    for source, frame in frames:
        missing = set(RESULT_COLUMNS) - set(frame.columns)
        if missing:
            raise SearchError(
                f"{source}: not a search shard (missing columns "
                f"{', '.join(sorted(missing))}); re-run `rearrival search shard`"
            )
    merged = pd.concat([f[list(RESULT_COLUMNS)] for _, f in frames], ignore_index=True)
    merged = merged.drop_duplicates()
    clash = merged.duplicated(["candidate", "inputs", "plan"], keep=False)
    if clash.any():
        row = merged[clash].iloc[0]
        raise SearchError(
            f"shards disagree on candidate {row['candidate']} plan "
            f"{row['inputs']}/{row['plan']}; re-run every shard on one plans "
            "directory"
        )
    shas = merged.groupby(["inputs", "plan"])["plan_sha256"].nunique()
    if (shas > 1).any():
        inputs, plan = shas[shas > 1].index[0]
        raise SearchError(
            f"shards used different plans for {inputs}/{plan}; re-run every "
            "shard on one plans directory"
        )
    return sort_results(merged)


def check_complete(
    results: pd.DataFrame,
    cands: Sequence[RblnConfiguration],
    baseline: RblnConfiguration,
    settings: SearchSettings,
) -> None:
    expected_plans = {(k.inputs, k.name) for k in plan_keys(settings)}
    have = results.groupby("candidate")[["inputs", "plan"]]
    counts = have.size()
    for cand in [baseline, *cands]:
        if cand.id not in counts.index:
            raise SearchError(
                f"no shard holds candidate {cand.id}; merge every shard file "
                f"(0..{settings.shards - 1}) written with this config"
            )
        if counts[cand.id] != len(expected_plans):
            raise SearchError(
                f"candidate {cand.id} has {counts[cand.id]} of "
                f"{len(expected_plans)} plans; re-run its shard"
            )
    pairs = results[["inputs", "plan"]].drop_duplicates()
    present = set(zip(pairs["inputs"].tolist(), pairs["plan"].tolist(), strict=True))
    if present != expected_plans:
        odd = sorted(present ^ expected_plans)[0]
        raise SearchError(
            f"shard plans do not match the config (e.g. {odd[0]}/{odd[1]}); "
            "re-run `rearrival search plans` and every shard"
        )
