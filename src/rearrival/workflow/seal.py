"""The seal stage (rules/seal.smk, docs/DESIGN.md §8): the sha256 of every run record file
of a study committed to git after its runs, and published when ``witness:`` is set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rearrival.config.study import StudyConfig
from rearrival.prereg.ledger import seal as seal_records
from rearrival.prereg.registered import recorded_registration
from rearrival.prereg.registration import Signing, open_repo
from rearrival.prereg.witness import publish


def seal(
    cfg: StudyConfig | None,
    study_name: str,
    replicate_dirs: list[Path],
    out: Path,
    *,
    repo_dir: Path,
    prereg_path: Path | None = None,
) -> dict[str, Any]:
    """Seal the study's run records (``out``: the record naming the ledger commit), with
    the config's ``signing:`` key; with ``witness:`` set, publish the commits. With
    ``prereg_path`` its record must name a registration of the study on HEAD's history."""
    if prereg_path is not None:
        recorded_registration(repo_dir, study_name, prereg_path)
    signing = Signing.from_key(cfg.signing_key) if cfg is not None else None
    record = seal_records(repo_dir, study_name, replicate_dirs, out, signing=signing)
    if cfg is not None and cfg.witness:
        publish(open_repo(repo_dir), cfg.witness, study_name)
    return record
