"""The decide stage (rules/decide.smk, docs/DESIGN.md §9): a study's decision table from its
registration commit (design, criteria, predictions registered before the runs) and the
channels of its sealed runs.

Run for the exploratory second evaluation (:func:`decide_exploratory`) it applies the
same rules to the other profile's predictions and channels with the study definition's
criteria (the workflow refuses a definition whose criteria differ from the registered
ones); that table is never registered and judges nothing the registered one judges.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rearrival.atomic import atomic_write_text
from rearrival.config.study import StudyConfig
from rearrival.judge.decisions import decision_table
from rearrival.parquet import read_frame
from rearrival.prereg.ledger import require_sealed
from rearrival.prereg.registered import registration_for_decision
from rearrival.vocabulary import BACKEND_STAGES


def _sealed_channels(
    repo_dir: Path, study_name: str, channels_path: Path, ledger_record: Path | None
) -> pd.DataFrame:
    """The channel table, its runs checked against the study's sealed ledger."""
    channels = read_frame(channels_path, "channels")
    if "run_dir" in channels:
        require_sealed(
            repo_dir,
            study_name,
            sorted({Path(run_dir).parent for run_dir in channels["run_dir"]}),
            ledger_record,
        )
    return channels


def decide(
    cfg: StudyConfig,
    study_name: str,
    *,
    channels_path: Path,
    predictions_path: Path,
    prereg_path: Path,
    repo_dir: Path,
    out: Path,
    ledger_record: Path | None = None,
) -> None:
    """The study's decision table from its registration commit: the design, criteria
    and predictions registered before the runs, and the channels of the runs, checked
    against the ledger the seal stage's record ``ledger_record`` names."""
    cfg.study(study_name)
    registration = registration_for_decision(repo_dir, study_name, prereg_path, predictions_path)
    channels = _sealed_channels(repo_dir, study_name, channels_path, ledger_record)
    text, _ = decision_table(
        registration.study,
        registration.replicates,
        registration.study_seed,
        channels,
        registration.predictions,
        registration.criteria,
        registration.rule_set,
    )
    atomic_write_text(out, text)


def decide_exploratory(
    cfg: StudyConfig,
    study_name: str,
    *,
    channels_path: Path,
    predictions_path: Path,
    repo_dir: Path,
    out: Path,
    ledger_record: Path | None = None,
) -> None:
    """The exploratory decision table: the study definition's design and criteria, the
    other profile's predictions and channels (results/exploratory/<profile>/)."""
    channels = _sealed_channels(repo_dir, study_name, channels_path, ledger_record)
    text, _ = decision_table(
        cfg.study(study_name),
        cfg.replicates,
        cfg.study_seed,
        channels,
        read_frame(predictions_path, "predict"),
        cfg.decision,
        BACKEND_STAGES[cfg.backend].prediction,
    )
    atomic_write_text(out, text)
