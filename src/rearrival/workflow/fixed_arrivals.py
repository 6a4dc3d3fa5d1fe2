"""The fixed-arrivals stage (rules/fixed_arrivals.smk; paper Section IV, Table XI): after a
validation study's runs, the fixed-arrival simulator on every baseline run's plan with its
observed re-arrival times, priced with the profile the study's predictions used (or the
other one for the exploratory evaluation). Computed after measurement, never registered.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rearrival.config.study import StudyConfig
from rearrival.errors import StageError
from rearrival.judge.fixed_arrivals import fixed_arrival_frame
from rearrival.parquet import read_frame, write_frame
from rearrival.prereg.ledger import require_sealed
from rearrival.workflow.plans import read_study_plan
from rearrival.workflow.profile import stage_profile


def fixed_arrivals(
    cfg: StudyConfig,
    study_name: str,
    replicate_dirs: list[Path],
    *,
    plans_dir: Path,
    channels_path: Path,
    repo_dir: Path,
    out: Path,
    profile_path: Path | None = None,
    ledger_record: Path | None = None,
    exploratory: bool = False,
) -> pd.DataFrame:
    """The study's fixed-arrival device times, written to ``out``. The runs are read from
    ``replicate_dirs`` only (the channel table must list no other), checked against the
    study's sealed ledger first."""
    study = cfg.study(study_name)
    require_sealed(repo_dir, study_name, replicate_dirs, ledger_record)
    channels = read_frame(channels_path, "channels")
    given = {Path(d) for d in replicate_dirs}
    others = sorted(
        {str(Path(r).parent) for r in channels.get("run_dir", [])} - set(map(str, given))
    )
    if others:
        raise StageError(
            f"{channels_path}: lists runs of {others[0]}, which is not among the replicate "
            "directories given; pass every run directory of the study"
        )
    frame = fixed_arrival_frame(
        study,
        channels,
        lambda n, replicate: read_study_plan(plans_dir, n, replicate),
        stage_profile(cfg.measurement, profile_path, exploratory),
    )
    write_frame(frame, out)
    return frame
