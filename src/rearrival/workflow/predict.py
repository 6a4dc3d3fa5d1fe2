"""The predict stage (rules/predict.smk, paper Section IV): simulator predictions for every
plan x condition x simulator variant, and the registered simulator's per-request records
and evictions. With the study's profile they are what the preregistration commits; with
the other profile (``exploratory``) they are the exploratory second evaluation's,
written under results/exploratory/ and never registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rearrival.config.study import StudyConfig, resolve_configurations
from rearrival.judge.predictions import StudyPredictions, predict_study
from rearrival.parquet import write_frame
from rearrival.workflow.plans import read_study_plan
from rearrival.workflow.profile import stage_profile, substrate_of


@dataclass(frozen=True)
class PredictionFiles:
    """Where the predict stage writes: the predictions table, the registered simulator's
    request records and its evictions (rules/predict.smk declares all three)."""

    predictions: Path
    requests: Path
    evictions: Path


def predict(
    cfg: StudyConfig,
    study_name: str,
    plans_dir: Path,
    out: PredictionFiles,
    selected_path: Path | None = None,
    profile_path: Path | None = None,
    exploratory: bool = False,
) -> StudyPredictions:
    """Simulator predictions for every plan x condition x simulator variant (paper IV),
    with the profile file ``profile_path`` the stage's profile asks for (None for the
    published constants), written to ``out``."""
    study = cfg.study(study_name)
    predictions = predict_study(
        cfg.replicates,
        study,
        lambda n, replicate: read_study_plan(plans_dir, n, replicate),
        resolve_configurations(cfg, study, selected_path),
        stage_profile(cfg.measurement, profile_path, exploratory, substrate_of(cfg)),
    )
    write_frame(predictions.summaries, out.predictions)
    write_frame(predictions.requests, out.requests)
    write_frame(predictions.evictions, out.evictions)
    return predictions
