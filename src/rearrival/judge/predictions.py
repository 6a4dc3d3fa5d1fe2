"""What the simulator predicts for a study (paper Section IV): one summary per plan x
condition x simulator variant (``rearrival.model.simulator.sim.RULE_SETS``).

The predict stage writes this table with the study's profile and the preregistration
commits its base-simulator rows; the report recomputes it with the other profile for the
scorecard's exploratory second evaluation. It sits in the judge layer, beside the
decisions that read it, so the workflow and the report share one implementation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pandas as pd

from rearrival.config.study import Study
from rearrival.model.configuration import RblnConfiguration
from rearrival.model.cost.profile import Profile
from rearrival.model.plans.plan import Plan
from rearrival.model.simulator.sim import simulate
from rearrival.vocabulary import PREDICTION, RULE_SETS


def simulate_condition(
    plan: Plan,
    configuration: RblnConfiguration,
    variant: str,
    simulator: str,
    profile: Profile | None = None,
) -> dict[str, Any]:
    """One simulator summary for one plan under one condition (``simulator`` one of
    ``RULE_SETS``)."""
    config = configuration.sim_config(simulator)
    summary = simulate(plan.variant(variant), config, profile).summary()
    summary["histogram"] = json.dumps(summary["histogram"], sort_keys=True)
    return summary


def prediction_frame(
    replicates: int,
    study: Study,
    plan_for: Callable[[int, int], Plan],
    configurations: dict[str, RblnConfiguration],
    profile: Profile,
) -> pd.DataFrame:
    """The predictions table of one study under ``profile``, ``plan_for(n, replicate)``
    giving each plan: the predict stage's with the configured profile, and the report's
    exploratory second evaluation with the other profile (``rearrival.report.recompute``),
    so both come from the same code."""
    rows = []
    for n in study.n:
        for replicate in range(replicates):
            plan = plan_for(n, replicate)
            for condition in study.conditions():
                configuration = configurations[condition.configuration]
                for simulator in RULE_SETS:
                    summary = simulate_condition(
                        plan, configuration, condition.variant, simulator, profile
                    )
                    rows.append(
                        {
                            "study": study.name,
                            "n": n,
                            "replicate": replicate,
                            "configuration": condition.configuration,
                            "config_label": configuration.label(),
                            "variant": condition.variant,
                            "simulator": simulator,
                            "plan_sha256": plan.sha256(),
                            **summary,
                        }
                    )
    return pd.DataFrame(rows)


def predicted_ratios(
    predictions: pd.DataFrame, baseline: str, simulator: str = PREDICTION
) -> pd.DataFrame:
    """Replicate-summed predicted device time per condition and its ratio to the baseline
    configuration under the same variant (sums first, never means of ratios)."""
    chosen = predictions[predictions["simulator"] == simulator]
    sums = (
        chosen.groupby(["n", "configuration", "variant"], sort=True)
        .agg(
            device_s=("device_s", "sum"),
            decode_s=("decode_s", "sum"),
            prefill_s=("prefill_s", "sum"),
            reuse_hits=("reuse_hits", "sum"),
            re_arrivals=("re_arrivals", "sum"),
            computed_prefill_tokens=("computed_prefill_tokens", "sum"),
        )
        .reset_index()
    )
    base = sums[sums["configuration"] == baseline].set_index(["n", "variant"])["device_s"]
    keys = list(zip(sums["n"], sums["variant"], strict=True))
    sums["ratio_pred"] = [d / base.loc[k] for d, k in zip(sums["device_s"], keys, strict=True)]
    return sums
