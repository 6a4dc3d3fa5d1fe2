"""The channels stage (rules/channels.smk, paper Section II-D): channel A and B for every
run of a study, from run records that match the ledger the seal stage committed. Run for
the exploratory second evaluation, channel A is priced with the other profile.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from rearrival.config.study import StudyConfig
from rearrival.judge.collect import collect_channels
from rearrival.prereg.ledger import require_sealed
from rearrival.workflow.profile import stage_profile, substrate_of


def channels(
    cfg: StudyConfig,
    study_name: str,
    replicate_dirs: list[Path],
    out: Path,
    *,
    repo_dir: Path,
    profile_path: Path | None = None,
    ledger_record: Path | None = None,
    exploratory: bool = False,
) -> pd.DataFrame:
    """The study's channel table, written to ``out``. Channel A prices steps with the
    profile the predictions used (``profile_path``: the config's ``profile:``, or the
    other one for the exploratory evaluation)."""
    cfg.study(study_name)
    require_sealed(repo_dir, study_name, replicate_dirs, ledger_record)
    profile = stage_profile(cfg.measurement, profile_path, exploratory, substrate_of(cfg))
    return collect_channels(replicate_dirs, out, profile)
