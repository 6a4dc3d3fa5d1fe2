"""The profile a verb run by hand predicts with (``simulate``, ``search``, ``advise``, and
what ``version`` reports): one rule a user can predict, said in one line on stderr.

1. ``--profile published | calibrated | PATH``, when given;
2. else the config's ``profile:`` (config/config.yaml unless ``--config``): ``published``
   is the shipped constants, a path is that file, and ``calibrated`` is this checkout's
   calibration (results/calibration/profile.yaml, written by the workflow's calibration
   stage or ``rearrival calibrate --out``) when it has one, else the published constants;
3. with no config file at all (``simulate`` run outside a checkout), the published
   constants.

Inside the workflow a stage is given its profile file by its rule and a missing one is an
error (``rearrival.workflow.profile``); the fallback in 2 is only for verbs run by hand, so
a fresh clone can follow the README before any calibration has run. The line goes to
stderr, so ``--json`` output stays machine-readable; the search and advise outputs record
the profile's name and sha256 as well (``Profile.identity``). A verb prints the line once
its work is done, so a refusal is still the one line of its error.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rearrival.config.calibration import MeasurementSettings
    from rearrival.model.cost.profile import Profile
    from rearrival.model.cost.vllm_profile import VllmProfile

PROFILE_HELP = (
    "Cost constants to predict with: published, calibrated (this checkout's "
    "results/calibration/profile.yaml) or a profile YAML; default: the config's profile:, "
    "where calibrated falls back to published when this checkout has no calibration."
)


@dataclass(frozen=True)
class ProfileChoice:
    """The profile a verb uses and why, in the words of the line it prints."""

    profile: Profile
    why: str
    stage: bool = False  # a workflow stage's profile: its log needs no line about it

    def line(self) -> str:
        return f"rearrival: profile: {self.profile.description()}: {self.why}"

    def announce(self) -> None:
        """Print the line on stderr; verbs do so once their work is done, so a refusal
        stays the one line it is."""
        if not self.stage:
            typer.echo(self.line(), err=True)


def choose_profile(measurement: MeasurementSettings, given: str | None) -> ProfileChoice:
    """The rule above for a loaded config (``measurement.source`` names the file)."""
    from rearrival.config.calibration import CALIBRATED, CALIBRATED_PROFILE, PUBLISHED

    if given is not None:
        choice, why = given, f"--profile {given}"
    else:
        choice = measurement.profile
        why = f"{measurement.source} says profile: {choice}"
    if choice == CALIBRATED and not CALIBRATED_PROFILE.is_file():
        choice = PUBLISHED
        why = (
            f"{why}, but this checkout has no {CALIBRATED_PROFILE} (the workflow's "
            f"calibration stage or `rearrival calibrate --out {CALIBRATED_PROFILE}` writes it)"
        )
    return ProfileChoice(replace(measurement, profile=choice).prediction_profile(), why)


def profile_for_config(config: Path, given: str | None, config_given: bool) -> ProfileChoice:
    """The rule for a verb that reads the config only for its ``profile:`` and ``model:``
    (``simulate``, ``version``): no config file where the default points means the
    published constants; a ``--config`` that cannot be read is an error. The file is read
    by the one reader (rearrival.config.study), so a bad key is the same line as from
    every other verb; only the sections the profile needs are typed."""
    from rearrival.config.calibration import (
        MeasurementSettings,
        measurement_settings_from_mapping,
    )
    from rearrival.config.study import read_study_definition

    if not config.is_file() and not config_given:
        if given is None:
            from rearrival.model.cost.profile import measured_profile

            return ProfileChoice(measured_profile(), f"no {config} in this directory")
        return choose_profile(MeasurementSettings(source=f"no {config} here"), given)
    raw = read_study_definition(config)
    return choose_profile(measurement_settings_from_mapping(raw, str(config)), given)


def announce_vllm_profile(profile: VllmProfile, path: Path | None) -> None:
    """The vLLM profile line every ``--substrate vllm`` verb prints on stderr once its
    work is done (``--profile PATH`` or the shipped one), with what its seconds are."""
    why = f"--profile {path}" if path is not None else "the shipped vLLM profile"
    typer.echo(f"rearrival: profile: {profile.description()}: {why}", err=True)
    typer.echo(f"rearrival: note: {profile.seconds_note()}", err=True)
