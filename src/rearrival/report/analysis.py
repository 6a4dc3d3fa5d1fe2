"""Post-measurement simulator comparisons (paper Section IV, Table XI; Supplementary S9).

These run after the measurements and are never preregistered predictions; they ask how
much of the simulator's accuracy comes from which of its parts.

* Fixed-arrival simulator (Table XI). The full simulator recomputes every re-arrival
  time from the completion times of the configuration it simulates (the feedback path
  of Section III-D). The fixed-arrival variant instead pins each session's re-arrival
  at the send time observed in the BASELINE run of the same replicate
  (``SimConfig.fixed_arrivals``; as in the authors' simulator, the pinned time is the
  arrival and the waiting queue is kept in (arrival, session, round) order, see
  ``rearrival.model.simulator.sim``). Both the baseline and the changed configuration are
  simulated with those pinned times, so the ratio compares like with like; ratios are
  replicate sums, like every ratio in the paper.
* Dummy-block and stack-rule simulators (S9) are already in the predictions table
  (simulator ``dummy`` and ``stack``); their replicate-summed ratios and errors are
  computed here the same way as the base simulator's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rearrival.config.study import Configuration
from rearrival.errors import RearrivalError
from rearrival.judge.decisions import predicted_ratio
from rearrival.measure.records.contract import ROUND_COLUMN
from rearrival.model.cost.profile import Profile
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.sim import SimConfig, simulate
from rearrival.report.table_model import cell_number


class AnalysisError(RearrivalError):
    """A run record or plan the comparison cannot use; names the file and the fix."""


def observed_rearrivals(requests: pd.DataFrame, sessions: int, where: str) -> list[float]:
    """Per session (index order), the observed send time of its re-arrival (turn 1)."""
    followups = requests[requests[ROUND_COLUMN] == 1].set_index("session")["send_s"]
    missing = [s for s in range(sessions) if s not in followups.index]
    if missing:
        raise AnalysisError(
            f"{where}: requests.parquet has no re-arrival (turn 1) for "
            f"session {missing[0]}; the baseline run is incomplete, re-run it"
        )
    return [float(followups.loc[s]) for s in range(sessions)]


def fixed_arrival_device_s(
    plan: Plan,
    configuration: Configuration,
    variant: str,
    arrivals: Sequence[float],
    profile: Profile | None = None,
) -> float:
    """Predicted device time D of one plan with re-arrivals pinned to ``arrivals``
    (base rules: deferred release, no dummy block), priced with ``profile`` (the one
    the full predictions used; None: the published constants)."""
    config = SimConfig(
        buckets=configuration.buckets,
        batch_size=configuration.batch_size,
        slots=configuration.slots,
        release="deferred",
        dummy_block="off",
        fixed_arrivals=list(arrivals),
    )
    return simulate(plan.variant(variant), config, profile).device_s


@dataclass(frozen=True)
class FixedArrivalRatio:
    """Replicate-summed fixed-arrival prediction of one comparison."""

    ratio: float
    replicates: tuple[int, ...]
    baseline_run_ids: tuple[str, ...]


def fixed_arrival_ratio(
    *,
    plans: dict[int, Plan],
    baseline_requests: dict[int, pd.DataFrame],
    baseline_run_ids: dict[int, str],
    baseline: Configuration,
    changed: Configuration,
    variant: str,
    profile: Profile | None = None,
) -> FixedArrivalRatio:
    """sum_k D_fixed(changed, k) / sum_k D_fixed(baseline, k) over the replicates k that
    have both a plan and an observed baseline run."""
    replicates = tuple(sorted(set(plans) & set(baseline_requests)))
    if not replicates:
        raise AnalysisError(
            "fixed-arrival comparison: no replicate has both a plan and a "
            "complete baseline run; run the study first"
        )
    numerator, denominator = [], []
    for k in replicates:
        plan = plans[k]
        arrivals = observed_rearrivals(
            baseline_requests[k], plan.n, f"baseline run {baseline_run_ids[k]}"
        )
        numerator.append(fixed_arrival_device_s(plan, changed, variant, arrivals, profile))
        denominator.append(fixed_arrival_device_s(plan, baseline, variant, arrivals, profile))
    return FixedArrivalRatio(
        math.fsum(numerator) / math.fsum(denominator),
        replicates,
        tuple(baseline_run_ids[k] for k in replicates),
    )


def fixed_arrival_rows(
    *,
    decisions: pd.DataFrame,
    channels: pd.DataFrame,
    plan_for: Callable[[int, int], Plan | None],
    read_requests: Callable[[str], pd.DataFrame],
    configuration_for: Callable[[str], Configuration | None],
    profile: Profile | None = None,
) -> list[dict[str, Any]]:
    """Table XI rows for one validation study: observed ratio, full and fixed-arrival
    predictions, their errors (e = R_obs - R_pred) and which is closer.

    ``plan_for(n, replicate)`` gives the study's plan, ``read_requests(run_dir)`` a run's
    requests table, ``configuration_for(name)`` a configuration as the runs recorded it;
    ``profile`` is the one the full predictions used, so the two differ only in arrivals.
    Rows whose decision has no observed ratio (a withheld comparison with missing runs)
    are reported with the reason and no fixed-arrival prediction.
    """
    rows = []
    complete = channels[channels["status"] == "complete"]
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
        baseline = configuration_for(decision["reference"])
        changed = configuration_for(decision["changed"])
        if row["ratio_obs_a"] is None or baseline is None or changed is None:
            rows.append(
                row
                | {
                    "note": "not computed: comparison has no observed ratio or "
                    "its configuration is unknown"
                }
            )
            continue
        base_runs = complete[
            (complete["n"] == row["n"])
            & (complete["configuration"] == decision["reference"])
            & (complete["variant"] == decision["variant"])
        ]
        plans, requests, run_ids = {}, {}, {}
        for run in base_runs.to_dict("records"):
            k = int(run["replicate"])
            plan = plan_for(row["n"], k)
            if plan is not None:
                plans[k], requests[k] = plan, read_requests(run["run_dir"])
                run_ids[k] = run["run_id"]
        fixed = fixed_arrival_ratio(
            plans=plans,
            baseline_requests=requests,
            baseline_run_ids=run_ids,
            baseline=baseline,
            changed=changed,
            variant=decision["variant"],
            profile=profile,
        )
        row["ratio_pred_fixed"] = fixed.ratio
        row["error_fixed"] = row["ratio_obs_a"] - fixed.ratio
        row["closer"] = closer(row["error_full"], row["error_fixed"])
        row["arrivals_from"] = " ".join(fixed.baseline_run_ids)
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
