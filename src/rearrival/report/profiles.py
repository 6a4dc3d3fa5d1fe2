"""Which cost constants the report's numbers rest on (paper Sections II-B, IV).

A study predicts, prices channel A and searches with one profile, the config's
``profile:``: ``calibrated`` (measured on the configured backend by the calibration
stage, the paper's own method: its Table VII was measured on the stack it then
predicted), ``published`` (the paper's RBLN-CA25 constants shipped in
``rearrival/data``) or a profile file. The report names that profile and its sha256 at
the top and checks it against the sha256 every registration committed; it also judges
the findings a second time under the *other* profile (published when the study used a
calibrated or file profile, the calibrated one when it used the published constants),
so a verdict that rests on the constants is visible. That second evaluation is
exploratory and never registered: the predict, channels, decide and fixed-arrivals stages
run again with the other profile and write under results/exploratory/<profile>/
(rules/common.smk), and the report reads those files as it reads the study's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rearrival.config.calibration import CALIBRATED, PUBLISHED, exploratory_profile
from rearrival.config.study import StudyConfig
from rearrival.model.cost.profile import (
    DEFAULT_PROFILE,
    Profile,
    load_profile_for_model,
    profile_sha256,
)

# Where the calibration stage writes its profile, relative to the results tree.
CALIBRATED_IN_RESULTS = Path("calibration") / "profile.yaml"


@dataclass(frozen=True)
class ProfileChoice:
    """One profile by its config name, file and sha256 (None while the file is absent,
    e.g. a report rendered before the calibration stage finished)."""

    name: str
    path: Path | None  # None: the shipped published constants
    sha256: str | None

    def describe(self) -> str:
        if self.name == PUBLISHED:
            return f"published (the paper's RBLN-CA25 constants, rearrival/data/{DEFAULT_PROFILE})"
        if self.name == CALIBRATED:
            return (
                "calibrated (measured on this study's backend by the calibration stage, "
                f"results/{CALIBRATED_IN_RESULTS.as_posix()})"
            )
        return f"the profile file {self.path}"

    def load(self, cfg: StudyConfig) -> Profile:
        """The constants, checked against the configured model like the stages do."""
        model = cfg.measurement.model
        return load_profile_for_model(self.path, model.name, model.architecture())


def choice(name: str, results_root: Path) -> ProfileChoice:
    """The profile ``name`` (a ``profile:`` value) names, its calibrated file read from
    this results tree rather than from the working directory."""
    if name == PUBLISHED:
        return ProfileChoice(PUBLISHED, None, profile_sha256(None))
    path = results_root / CALIBRATED_IN_RESULTS if name == CALIBRATED else Path(name)
    return ProfileChoice(name, path, profile_sha256(path) if path.exists() else None)


def configured_choice(cfg: StudyConfig, results_root: Path) -> ProfileChoice:
    """The profile the study's predictions, channel A and search used (``profile:``)."""
    return choice(cfg.measurement.profile, results_root)


def other_choice(cfg: StudyConfig, results_root: Path) -> ProfileChoice | None:
    """The profile of the second, exploratory evaluation: the published constants, or
    when the study used them, this run's calibrated profile (None until it exists)."""
    other = choice(exploratory_profile(cfg.measurement.profile), results_root)
    return other if other.sha256 is not None else None


def name_of_sha(sha256: str | None, known: Iterable[ProfileChoice]) -> str:
    """The profile a registration's committed sha256 belongs to, by name."""
    if sha256 is None:
        return "not recorded"
    for known_choice in known:
        if known_choice.sha256 == sha256:
            return known_choice.name
    return "a profile not in this results tree"
