"""The decide stage (rules/decide.smk, docs/DESIGN.md §9): a study's decision table from its
registration commit (design, criteria, predictions registered before the runs) and the
channels of its sealed runs.
"""

from __future__ import annotations

from pathlib import Path

from rearrival.atomic import atomic_write_text
from rearrival.config.study import StudyConfig
from rearrival.judge.decisions import decision_table
from rearrival.parquet import read_frame
from rearrival.prereg.ledger import require_sealed
from rearrival.prereg.registered import registration_for_decision


def decide(
    cfg: StudyConfig,
    study_name: str,
    *,
    channels_path: Path,
    predictions_path: Path,
    prereg_path: Path,
    repo_dir: Path,
    out: Path,
) -> None:
    """The study's decision table from its registration commit: the design, criteria
    and predictions registered before the runs, and the channels of the runs."""
    cfg.study(study_name)
    registration = registration_for_decision(repo_dir, study_name, prereg_path, predictions_path)
    channels = read_frame(channels_path, "channels")
    if "run_dir" in channels:
        require_sealed(
            repo_dir, study_name, sorted({Path(run_dir).parent for run_dir in channels["run_dir"]})
        )
    text, _ = decision_table(
        registration.study,
        registration.replicates,
        registration.study_seed,
        channels,
        registration.predictions,
        registration.criteria,
    )
    atomic_write_text(out, text)
