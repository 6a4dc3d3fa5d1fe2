"""A study's registration read back from git (docs/DESIGN.md §8): the design, criteria and
predictions of the registration commit, which decisions and the audit judge by.

``rearrival.prereg.registration`` writes registrations; this module reads one back and
refuses when the working copy disagrees with it, so an edit after measuring cannot
change what is judged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rearrival.config.decision import DecisionCriteria
from rearrival.config.study import Study
from rearrival.errors import StageError
from rearrival.model.cost.profile import Profile, measured_profile, profile_from_mapping
from rearrival.model.cost.vllm_profile import VllmProfile, vllm_profile_from_mapping
from rearrival.parquet import read_frame
from rearrival.prereg.registration import PROFILE_FILE, open_repo, registrations
from rearrival.vocabulary import PREDICTION


@dataclass(frozen=True)
class Registration:
    """A study as its registration commit holds it: what the study compares (design),
    the criteria and the predictions. Decisions are computed from this, never from the
    working files, so an edit after measuring cannot change what is judged."""

    commit: str
    study: Study
    replicates: int
    study_seed: int
    criteria: DecisionCriteria
    predictions: pd.DataFrame
    files: dict[str, bytes]
    # the constants the predictions (and channel A) were registered with: a vLLM
    # profile on backend vllm
    profile: Profile | VllmProfile
    rule_set: str = PREDICTION  # the predictor's rule set of the registered predictions


REGISTERED_FILES = ("design.json", "criteria.json", "predictions.json")


def registered_study(design: dict[str, Any], per_plan: list[dict[str, Any]]) -> Study:
    """The Study a design.json registered. Its configurations are a key-sorted JSON
    object, so their order (the first is the baseline) is read from the per-plan
    predictions, which list conditions in the study's order."""
    order = list(dict.fromkeys(row["configuration"] for row in per_plan))
    return Study(
        name=design["study"],
        kind=design["kind"],
        description=design["description"],
        n=tuple(design["n"]),
        configurations=tuple(order),
        variants=tuple(design["variants"]),
        seed_block=design["seed_block"],
        rule=design["rule"],
        amends=design["amends"],
        repeats=design["repeats"],
    )


def read_registration(repo: Any, study_name: str, commit: str) -> Registration:
    """The registration of ``study_name`` at ``commit`` read from git objects."""
    files = {}
    for name in REGISTERED_FILES:
        path = f"preregistration/{study_name}/{name}"
        try:
            files[name] = (repo.commit(commit).tree / path).data_stream.read()
        except KeyError:
            raise StageError(
                f"{path}: not in prereg commit {commit[:12]}; re-run the prereg stage"
            ) from None
    design = json.loads(files["design.json"])
    registered = json.loads(files["predictions.json"])
    per_plan = registered["per_plan"]
    rule_set = str(registered.get("simulator", PREDICTION)).split(" ")[0]
    predictions = pd.DataFrame(per_plan)
    predictions["simulator"] = rule_set
    criteria = DecisionCriteria.from_dict(
        json.loads(files["criteria.json"]),
        f"preregistration/{study_name}/criteria.json at {commit[:12]}",
    )
    return Registration(
        commit,
        registered_study(design, per_plan),
        design["replicates"],
        design["study_seed"],
        criteria,
        predictions,
        files,
        registered_profile(repo, study_name, commit),
        rule_set,
    )


def registered_profile(repo: Any, study_name: str, commit: str) -> Profile | VllmProfile:
    """The profile committed beside the predictions (a vLLM profile says ``substrate:
    vllm``); registrations made before profiles were committed used the shipped
    published constants."""
    path = f"preregistration/{study_name}/{PROFILE_FILE}"
    try:
        text = (repo.commit(commit).tree / path).data_stream.read()
    except KeyError:
        return measured_profile()
    tree = yaml.safe_load(text)
    if isinstance(tree, dict) and tree.get("substrate") == "vllm":
        return vllm_profile_from_mapping(tree, f"{path} at {commit[:12]}")
    return profile_from_mapping(tree, f"{path} at {commit[:12]}")


PER_PLAN_KEYS = ["n", "replicate", "configuration", "variant", "plan_sha256", "device_s"]


def prediction_difference(working: pd.DataFrame, registered: pd.DataFrame) -> str | None:
    """The first per-plan prediction (of the registered rule set, which ``registered``
    names in its ``simulator`` column) that differs from the registered one, as text;
    None when the working predictions are what was registered."""
    keys = PER_PLAN_KEYS[:4]
    rule_set = registered["simulator"].iloc[0] if len(registered) else PREDICTION
    mine = (
        working[working["simulator"] == rule_set][PER_PLAN_KEYS]
        .sort_values(keys)
        .reset_index(drop=True)
    )
    theirs = registered[PER_PLAN_KEYS].sort_values(keys).reset_index(drop=True)
    if len(mine) != len(theirs):
        return f"{len(mine)} per-plan predictions, {len(theirs)} registered"
    for ours, reg in zip(mine.itertuples(index=False), theirs.itertuples(index=False), strict=True):
        if tuple(ours) != tuple(reg):
            return (
                f"N={reg.n} replicate {reg.replicate} {reg.configuration}-{reg.variant}: "
                f"device_s {ours.device_s!r}, registered {reg.device_s!r}"
            )
    return None


def recorded_registration(repo_dir: Path, study_name: str, prereg_path: Path) -> str:
    """The registration commit the prereg stage's record names, refused unless it is a
    registration of the study on HEAD's history (stages that follow the prereg read it
    from their declared input, never from a path of their own)."""
    if not prereg_path.exists():
        raise StageError(f"{prereg_path}: no preregistration record; run the prereg stage")
    commit = json.loads(prereg_path.read_text())["commit"]
    if commit not in {c.hexsha for c in registrations(open_repo(repo_dir), study_name)}:
        raise StageError(
            f"{prereg_path}: commit {commit[:12]} is not a registration of study "
            f"{study_name} on HEAD's history; re-run the prereg stage"
        )
    return commit


def registration_for_decision(
    repo_dir: Path, study_name: str, prereg_path: Path, predictions_path: Path
) -> Registration:
    """The registration a decision uses, refusing when the working copy disagrees: the
    record must name a registration of the study on HEAD's history, the working
    preregistration files must be the committed ones, and the working predictions must
    be the registered predictions."""
    commit = recorded_registration(repo_dir, study_name, prereg_path)
    repo = open_repo(repo_dir)
    registration = read_registration(repo, study_name, commit)
    root = Path(repo.working_tree_dir)
    for name, data in registration.files.items():
        path = root / "preregistration" / study_name / name
        if not path.exists() or path.read_bytes() != data:
            raise StageError(
                f"preregistration/{study_name}/{name}: the working copy differs "
                f"from registration commit {commit[:12]}; decisions use what was "
                f"registered, so restore it (git checkout -- {path})"
            )
    difference = prediction_difference(
        read_frame(predictions_path, "predict"), registration.predictions
    )
    if difference is not None:
        raise StageError(
            f"{predictions_path}: differs from the predictions registered in "
            f"commit {commit[:12]} ({difference}); decisions use what was "
            "registered, so re-run the predict stage from the registered plans "
            "or restore the file"
        )
    return registration
