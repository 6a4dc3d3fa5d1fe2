"""The predict stage (rules/predict.smk, paper Section IV): simulator predictions for every
plan x condition x simulator variant, and the replicate-summed predicted ratios the
preregistration commits to.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rearrival.config.study import StudyConfig, resolve_configurations
from rearrival.judge.predictions import prediction_frame
from rearrival.model.sim import PREDICTION
from rearrival.parquet import write_frame
from rearrival.workflow.plans import read_study_plan


def predict(
    cfg: StudyConfig, study_name: str, plans_dir: Path, out: Path, selected_path: Path | None = None
) -> pd.DataFrame:
    """Simulator predictions for every plan x condition x simulator variant (paper IV),
    with the config's ``profile:``, written to ``out``."""
    study = cfg.study(study_name)
    frame = prediction_frame(
        cfg.replicates,
        study,
        lambda n, replicate: read_study_plan(plans_dir, n, replicate),
        resolve_configurations(cfg, study, selected_path),
        cfg.measurement.prediction_profile(),
    )
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
