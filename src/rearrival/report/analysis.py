"""Post-measurement simulator comparisons (paper Section IV, Table XI; Supplementary S9),
read from what the stages wrote; nothing is simulated here.

These are never preregistered predictions; they ask how much of the simulator's accuracy
comes from which of its parts.

* Fixed-arrival simulator (Table XI): the fixed-arrivals stage
  (``rearrival.judge.fixed_arrivals``) pins each session's re-arrival at the send time
  observed in the BASELINE run of the same replicate and simulates every configuration
  with those times; a comparison's ratio is the replicate sum of the changed
  configuration's device time over the baseline's, like every ratio in the paper.
* Dummy-block and stack-rule simulators (S9) are already in the predictions table
  (simulator ``dummy`` and ``stack``); their replicate-summed ratios and errors are
  computed here the same way as the base simulator's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rearrival.errors import RearrivalError
from rearrival.judge.decisions import predicted_ratio
from rearrival.report.table_model import cell_number


@dataclass(frozen=True)
class FixedArrivalRatio:
    """Replicate-summed fixed-arrival prediction of one comparison."""

    ratio: float
    replicates: tuple[int, ...]
    baseline_run_ids: tuple[str, ...]


def fixed_arrival_ratio(
    fixed: pd.DataFrame, n: int, reference: str, changed: str, variant: str
) -> FixedArrivalRatio | None:
    """sum_k D_fixed(changed, k) / sum_k D_fixed(reference, k) over the replicates k whose
    baseline run gave the pinned arrivals; None when no replicate has both."""
    rows = fixed[(fixed["n"] == n) & (fixed["variant"] == variant)]
    by_replicate = {
        name: dict(zip(part["replicate"], part["device_s"], strict=True))
        for name, part in rows.groupby("configuration")
    }
    numerator, denominator = by_replicate.get(changed, {}), by_replicate.get(reference, {})
    replicates = tuple(sorted(set(numerator) & set(denominator)))
    if not replicates:
        return None
    arrivals = dict(zip(rows["replicate"], rows["arrivals_from"], strict=True))
    return FixedArrivalRatio(
        math.fsum(numerator[k] for k in replicates) / math.fsum(denominator[k] for k in replicates),
        tuple(int(k) for k in replicates),
        tuple(arrivals[k] for k in replicates),
    )


def fixed_arrival_rows(
    *, decisions: pd.DataFrame, fixed: pd.DataFrame | None
) -> list[dict[str, Any]]:
    """Table XI rows for one validation study: observed ratio, full and fixed-arrival
    predictions, their errors (e = R_obs - R_pred) and which is closer.

    ``fixed`` is the fixed-arrivals stage's table for the study (None: not produced).
    Rows whose decision has no observed ratio (a withheld comparison with missing runs),
    or whose configurations have no fixed-arrival prediction, are reported with the
    reason.
    """
    rows = []
    for decision in decisions.to_dict("records"):
        row = {
            "study": decision["study"],
            "n": int(decision["n"]),
            "comparison": decision["comparison"],
            "variant": decision["variant"],
            "ratio_obs_a": cell_number(decision.get("ratio_obs_a")),
            "ratio_pred_full": cell_number(decision.get("ratio_pred")),
            "run_ids": decision.get("run_ids") or "",
        }
        row["error_full"] = _difference(row["ratio_obs_a"], row["ratio_pred_full"])
        ratio = None
        if row["ratio_obs_a"] is not None and fixed is not None:
            ratio = fixed_arrival_ratio(
                fixed, row["n"], decision["reference"], decision["changed"], row["variant"]
            )
        if ratio is None:
            rows.append(
                row
                | {
                    "note": "not computed: comparison has no observed ratio or "
                    "its configuration is unknown"
                }
            )
            continue
        row["ratio_pred_fixed"] = ratio.ratio
        row["error_fixed"] = row["ratio_obs_a"] - ratio.ratio
        row["closer"] = closer(row["error_full"], row["error_fixed"])
        row["arrivals_from"] = " ".join(ratio.baseline_run_ids)
        rows.append(row)
    return rows


def closer(error_full: float | None, error_other: float | None, other: str = "fixed") -> str:
    """Which simulator's absolute error is smaller ('tie' when equal)."""
    if error_full is None or error_other is None:
        return ""
    if abs(error_full) < abs(error_other):
        return "full"
    if abs(error_other) < abs(error_full):
        return other
    return "tie"


def simulator_error_rows(
    *, decisions: pd.DataFrame, predictions: pd.DataFrame, simulators: Sequence[str]
) -> list[dict[str, Any]]:
    """S9: each simulator variant's replicate-summed predicted ratio and its error
    against the observed channel-A ratio, per comparison."""
    rows = []
    for decision in decisions.to_dict("records"):
        observed = cell_number(decision.get("ratio_obs_a"))
        row = {
            "study": decision["study"],
            "n": int(decision["n"]),
            "comparison": decision["comparison"],
            "ratio_obs_a": observed,
            "run_ids": decision.get("run_ids") or "",
        }
        for simulator in simulators:
            try:
                predicted = predicted_ratio(
                    predictions,
                    int(decision["n"]),
                    decision["reference"],
                    decision["changed"],
                    decision["variant"],
                    simulator=simulator,
                )
            except RearrivalError:
                predicted = None  # that simulator's predictions do not cover every replicate
            row[f"ratio_{simulator}"] = predicted
            row[f"error_{simulator}"] = _difference(observed, predicted)
        for simulator in simulators[1:]:
            row[f"closer_{simulator}"] = closer(
                row[f"error_{simulators[0]}"], row[f"error_{simulator}"], simulator
            )
        rows.append(row)
    return rows


def predicted_reuse(
    predictions: pd.DataFrame, n: int, configuration: str, variant: str, simulator: str
) -> tuple[int, int] | None:
    """Replicate-summed (reuse hits, re-arrivals) one simulator predicts for a condition."""
    chosen = predictions[
        (predictions["n"] == n)
        & (predictions["configuration"] == configuration)
        & (predictions["variant"] == variant)
        & (predictions["simulator"] == simulator)
    ]
    if chosen.empty:
        return None
    return int(chosen["reuse_hits"].sum()), int(chosen["re_arrivals"].sum())


def _difference(observed: float | None, predicted: float | None) -> float | None:
    return None if observed is None or predicted is None else observed - predicted
