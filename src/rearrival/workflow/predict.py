"""The predict stage (rules/predict.smk, paper Section IV): simulator predictions for every
plan x condition x simulator variant, and the replicate-summed predicted ratios the
preregistration commits to.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from rearrival.config.study import Configuration, StudyConfig, resolve_configurations
from rearrival.model.plans import Plan
from rearrival.model.profile import Profile
from rearrival.model.sim import PREDICTION, SIMULATORS, SimConfig, simulate
from rearrival.parquet import write_frame
from rearrival.workflow.plans import read_study_plan


def simulate_condition(
    plan: Plan,
    configuration: Configuration,
    variant: str,
    simulator: str,
    profile: Profile | None = None,
) -> dict[str, Any]:
    """One simulator summary for one plan under one condition."""
    release, dummy_block = SIMULATORS[simulator]
    config = SimConfig(
        buckets=configuration.buckets,
        batch_size=configuration.batch_size,
        slots=configuration.slots,
        release=release,
        dummy_block=dummy_block,
    )
    summary = simulate(plan.variant(variant), config, profile).summary()
    summary["histogram"] = json.dumps(summary["histogram"], sort_keys=True)
    return summary


def predict(
    cfg: StudyConfig, study_name: str, plans_dir: Path, out: Path, selected_path: Path | None = None
) -> pd.DataFrame:
    """Simulator predictions for every plan x condition x simulator variant (paper IV)."""
    study = cfg.study(study_name)
    configurations = resolve_configurations(cfg, study, selected_path)
    profile = cfg.measurement.prediction_profile()  # config `profile:`
    rows = []
    for n in study.n:
        for replicate in range(cfg.replicates):
            plan = read_study_plan(plans_dir, n, replicate)
            for condition in study.conditions():
                configuration = configurations[condition.configuration]
                for simulator in SIMULATORS:
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
    frame = pd.DataFrame(rows)
    write_frame(frame, out)
    return frame


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
