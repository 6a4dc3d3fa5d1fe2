"""The profile file a study stage predicts with (predict, prereg, channels, fixed arrivals;
paper Section IV): the one its rule declared and passed as ``--profile``, never a path
the stage code knows by itself, so the DAG says which file each job reads.

The config's ``profile:`` decides whether a file is needed at all: ``published`` uses the
constants shipped with the package and takes none; ``calibrated`` or a path takes the file
the rule names (rules/common.smk: ``profile_input``). A stage run for the exploratory
second evaluation (``--exploratory``) takes the other profile instead
(``rearrival.config.calibration.exploratory_profile``): published, or the calibrated
file when the study used the published constants.

On backend vllm (docs/DESIGN.md §15) the profile is a vLLM profile file, always named by
``profile:`` (there are no published vLLM constants), and there is no second evaluation.
"""

from __future__ import annotations

from pathlib import Path

from rearrival.config.calibration import PUBLISHED, MeasurementSettings, exploratory_profile
from rearrival.config.study import StudyConfig
from rearrival.errors import StageError
from rearrival.model.cost.profile import Profile, load_profile_for_model
from rearrival.model.cost.vllm_profile import VllmProfile, load_vllm_profile
from rearrival.vocabulary import BACKEND_STAGES


def stage_profile_name(measurement: MeasurementSettings, exploratory: bool = False) -> str:
    """The ``profile:`` value a stage predicts with: the config's, or for the exploratory
    evaluation the other one."""
    if exploratory:
        return exploratory_profile(measurement.profile)
    return measurement.profile


def stage_profile_path(
    measurement: MeasurementSettings, given: Path | None, exploratory: bool = False
) -> Path | None:
    """The profile file a stage reads: ``given`` (its ``--profile``), None for the
    published constants; a file the config does not ask for, or a missing one, is refused."""
    name = stage_profile_name(measurement, exploratory)
    evaluation = "the exploratory evaluation uses" if exploratory else "says"
    if name == PUBLISHED:
        if given is not None:
            raise StageError(
                f"--profile {given}: {measurement.source} {evaluation} profile: published; "
                "drop --profile or set profile: to calibrated or the file"
            )
        return None
    if given is None:
        raise StageError(
            f"{measurement.source}: profile: {name} needs its file; pass "
            "--profile (the calibrate stage writes results/calibration/profile.yaml)"
        )
    return given


def substrate_of(cfg: StudyConfig) -> str:
    """The substrate of the study's backend (``BackendStages.substrate``)."""
    return BACKEND_STAGES[cfg.backend].substrate


def stage_profile(
    measurement: MeasurementSettings,
    given: Path | None,
    exploratory: bool = False,
    substrate: str = "rbln",
) -> Profile | VllmProfile:
    """The profile a stage predicts with, checked against the config's model; on the
    vLLM substrate the vLLM profile file ``given`` names."""
    if substrate == "vllm":
        if exploratory or given is None:
            raise StageError(
                f"{measurement.source}: backend vllm predicts and prices with the vLLM "
                "profile its profile: names (pass it as --profile); it has no "
                "exploratory second evaluation"
            )
        return load_vllm_profile(given)
    return load_profile_for_model(
        stage_profile_path(measurement, given, exploratory),
        measurement.model.name,
        measurement.model.architecture(),
    )
