"""The predict stage (rules/predict.smk, paper Section IV): simulator predictions for every
plan x condition x simulator variant, and the replicate-summed predicted ratios the
preregistration commits to.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rearrival.config.study import StudyConfig, resolve_configurations
from rearrival.judge.predictions import prediction_frame
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
